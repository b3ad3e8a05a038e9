//! CUDA events and CUPTI on a real GPU, through one API: the same application code
//! (tests/one_api/mod.rs) on `CudaBackend` and on `CuptiBackend`, then what only CUPTI does:
//! kernels as zones nested in the application's, graph replays, losses counted, work that
//! makes no record or runs outside any zone (docs/cupti.md). Spin kernels of known duration
//! (the CUDA backend's `%globaltimer` spin kernel).
//!
//! Without a CUDA device, or without libcupti, every test prints `SKIPPED: ...` to stderr and
//! returns. Set `GPU_EVENT_POOL_REQUIRE_CUDA=1` to make that a failure instead.
//!
//! CUPTI is process-wide: the tests take turns (`cupti_common::gpu`), and run in their own
//! process (not beside tests/cupti.rs, which reads CUPTI's own clock).

use cudarc::driver::sys::CUgraphInstantiate_flags;
use cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
use cudarc::driver::CudaStream;
use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
use gpu_event_pool::backend::cupti::{ClockSource, CuptiBackend, CuptiConfig, CuptiError, TracerConfig};
use gpu_event_pool::backend::Timing;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Backend, Lane, TracingContext};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

mod cupti_common;
mod one_api;
mod trace_check;
use cupti_common::{assert_spun, gpu, US};
use one_api::{one_api, Gpu};

/// A GPU as the one-API body drives it: a backend, and the spin kernel.
struct Spin<'g, B> {
    backend: B,
    cuda: CudaBackend,
    spin: &'g SpinKernel,
}

impl<B: Backend<Stream = Arc<CudaStream>> + Clone + Sync> Gpu for Spin<'_, B> {
    type B = B;
    fn backend(&self) -> B {
        self.backend.clone()
    }
    fn stream(&self) -> Arc<CudaStream> {
        self.cuda.new_stream().unwrap()
    }
    fn kernel(&self, stream: &Arc<CudaStream>, ns: i64) {
        self.spin.launch(stream, ns as u64).unwrap();
    }
    fn synchronize(&self, stream: &Arc<CudaStream>) {
        stream.synchronize().unwrap();
    }
}

#[test]
fn the_same_code_runs_on_cuda_events_and_on_cupti() {
    let Some(gpu) = gpu("the_same_code_runs_on_cuda_events_and_on_cupti") else { return };
    let events = Spin { backend: gpu.cuda.clone(), cuda: gpu.cuda.clone(), spin: &gpu.spin };
    let ran = one_api(&events);
    assert!(ran.zones.iter().all(|z| z.location.name() != "spin_ns"), "events time only the zones");
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let work = Spin { backend: cupti, cuda: gpu.cuda.clone(), spin: &gpu.spin };
    let ran = one_api(&work);
    let kernels: Vec<&Zone> = ran.zones.iter().filter(|z| z.location.name() == "spin_ns").collect();
    assert_eq!(
        kernels.len(),
        2 * one_api::THREADS * one_api::FRAMES as usize,
        "every kernel, inside its pass"
    );
    assert!(kernels.iter().all(|k| k.depth == 2));
}

#[test]
fn kernels_come_out_in_stream_order_nested_in_their_zones_on_the_host_clock() {
    let Some(gpu) = gpu("kernels_come_out_in_stream_order_nested_in_their_zones_on_the_host_clock") else {
        return;
    };
    const LISTS: usize = 40;
    let memory = MemorySink::new();
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let _ = writeln!(std::io::stderr(), "clock: {:?}", cupti.clock_source());
    let ctx = TracingContext::builder(cupti)
        .name("test")
        .record_launches(true)
        .sink(memory.clone())
        .build()
        .unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    let mut collected_before_flush = 0;
    let first_begin = ctx.backend().host_now_ns();
    for list_number in 0..LISTS {
        let mut list = ctx.list();
        {
            let mut outer = list.zone(&stream, location!("list"));
            {
                let _pass = outer.zone(&stream, location!("pass"));
                gpu.spin.launch(&stream, 20 * US).unwrap();
                gpu.spin.launch(&stream, 30 * US).unwrap();
            }
            gpu.spin.launch(&stream, 10 * US).unwrap();
        }
        ctx.submit(list).unwrap();
        if list_number == LISTS / 2 {
            // Without a flush: collect alone brings finished lists out.
            stream.synchronize().unwrap();
            for _ in 0..100 {
                if let gpu_event_pool::Collected::Done(report) = ctx.collect().unwrap() {
                    collected_before_flush += report.lists;
                }
                if collected_before_flush > 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    stream.synchronize().unwrap();
    let last_end = ctx.backend().host_now_ns();
    ctx.flush().unwrap();
    let stats = ctx.stats();
    let _ = writeln!(std::io::stderr(), "{stats:?}; {collected_before_flush} lists collected before flush");
    assert!(collected_before_flush > 0, "collect emits finished lists without a flush");
    assert_eq!((stats.zones_emitted, stats.activity.activities), (5 * LISTS, 3 * LISTS), "{stats:?}");
    assert_eq!(stats.activity.losses, Default::default(), "{stats:?}");
    assert_eq!((stats.activity.empty_zones, stats.activity.lists_partial, stats.activity.late), (0, 0, 0));
    let batches = memory.batches();
    assert_eq!(batches.len(), LISTS);
    let mut previous_end = i64::MIN;
    for (_, zones) in &batches {
        let shape: Vec<(&str, u32)> = zones.iter().map(|z| (z.location.name(), z.depth)).collect();
        assert_eq!(
            shape,
            [("list", 0), ("pass", 1), ("spin_ns", 2), ("spin_ns", 2), ("spin_ns", 1)],
            "one list's zones in begin order, kernels inside their zones"
        );
        let (list, pass, k20, k30, k10) = (&zones[0], &zones[1], &zones[2], &zones[3], &zones[4]);
        assert_spun(k20, 20 * US);
        assert_spun(k30, 30 * US);
        assert_spun(k10, 10 * US);
        // CUPTI places its records on the host clock itself: no bound the crate can give.
        assert!(zones.iter().all(|z| z.host_begin_bound_ns == u64::MAX && z.host_end_bound_ns == u64::MAX));
        assert_eq!((pass.gpu_begin_ns, pass.gpu_end_ns), (k20.gpu_begin_ns, k30.gpu_end_ns));
        assert_eq!((list.gpu_begin_ns, list.gpu_end_ns), (k20.gpu_begin_ns, k10.gpu_end_ns));
        assert!(k20.gpu_end_ns <= k30.gpu_begin_ns && k30.gpu_end_ns <= k10.gpu_begin_ns, "stream order");
        assert!(previous_end <= list.gpu_begin_ns, "lists in stream order");
        previous_end = list.gpu_end_ns;
        // One host clock: a zone's work starts after the host began it, ends before the
        // host saw the stream done.
        let launch = list.launch.expect("a zone carries its launch");
        assert!(launch.host_begin_ns <= list.host_begin_ns, "GPU work after its launch: {list:?}");
        assert!(first_begin <= launch.host_begin_ns && list.host_end_ns <= last_end, "{list:?}");
        assert!(zones.iter().all(|z| z.lane == zones[0].lane && matches!(z.lane, Lane::Stream(_))));
        assert_eq!(list.host_begin_ns - list.gpu_begin_ns, ctx.info().base.host_ns);
    }
}

#[test]
fn a_launch_in_no_zone_is_still_timed() {
    let Some(gpu) = gpu("a_launch_in_no_zone_is_still_timed") else { return };
    let memory = MemorySink::new();
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let clock = cupti.clock_source();
    let ctx = TracingContext::builder(cupti).sink(memory.clone()).build().unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    let before = ctx.backend().host_now_ns();
    for _ in 0..10 {
        gpu.spin.launch(&stream, 40 * US).unwrap();
    }
    stream.synchronize().unwrap();
    let after = ctx.backend().host_now_ns();
    ctx.flush().unwrap();
    let zones = memory.zones();
    assert_eq!(zones.len(), 10);
    for z in &zones {
        assert_eq!((z.location.name(), z.depth, z.launch), ("spin_ns", 0, None));
        assert_spun(z, 40 * US);
        assert!(
            before <= z.host_begin_ns && z.host_end_ns <= after,
            "on the host clock: {z:?} in {before}..{after}"
        );
    }
    if clock != Some(ClockSource::Callback) {
        let _ = writeln!(std::io::stderr(), "note: CUPTI's clock is mapped by offset");
    }
}

#[test]
fn a_graph_replayed_100_times_gives_100_timed_replays() {
    let Some(gpu) = gpu("a_graph_replayed_100_times_gives_100_timed_replays") else { return };
    const REPLAYS: usize = 100;
    let stream = gpu.cuda.new_stream().unwrap();
    stream.begin_capture(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    gpu.spin.launch(&stream, 10 * US).unwrap();
    gpu.spin.launch(&stream, 20 * US).unwrap();
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
    let memory = MemorySink::new();
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let ctx = TracingContext::builder(cupti).sink(memory.clone()).build().unwrap();
    for _ in 0..REPLAYS {
        let mut list = ctx.list();
        {
            let _replay = list.zone(&stream, location!("replay"));
            graph.launch().unwrap();
        }
        ctx.submit(list).unwrap();
    }
    stream.synchronize().unwrap();
    ctx.flush().unwrap();
    let batches = memory.batches();
    assert_eq!(batches.len(), REPLAYS, "{:?}", ctx.stats());
    let arg = |z: &Zone, key: &str| {
        z.location.args().iter().find(|(k, _)| k == key).map(|(_, v)| format!("{v:?}")).unwrap_or_default()
    };
    let mut nodes = std::collections::BTreeSet::new();
    for (_, zones) in &batches {
        let shape: Vec<(&str, u32)> = zones.iter().map(|z| (z.location.name(), z.depth)).collect();
        assert_eq!(shape, [("replay", 0), ("spin_ns", 1), ("spin_ns", 1)]);
        assert_spun(&zones[1], 10 * US);
        assert_spun(&zones[2], 20 * US);
        for k in &zones[1..] {
            assert!(!arg(k, "graph").is_empty(), "a graph's kernel names its graph: {k:?}");
            nodes.insert(arg(k, "graph_node"));
        }
        assert_eq!(arg(&zones[1], "graph"), arg(&zones[2], "graph"));
    }
    assert_eq!(nodes.len(), 2, "two nodes, the same on every replay: {nodes:?}");
}

/// A host function (no record), a device-to-device copy (a record) and a graph with no
/// kernel, copy or memset node (a launch with no record), each inside a zone: nothing waits
/// past the hold limit, every kernel is a zone.
#[test]
fn launches_that_make_no_record_hold_nothing_past_the_hold_limit() {
    let Some(gpu) = gpu("launches_that_make_no_record_hold_nothing_past_the_hold_limit") else { return };
    use cudarc::driver::sys;
    let hold = Duration::from_millis(200);
    // The buffers first, before CUPTI records: their zeroing memsets are work in no zone.
    let stream = gpu.cuda.new_stream().unwrap();
    let src = stream.alloc_zeros::<u8>(1 << 20).unwrap();
    let mut dst = stream.alloc_zeros::<u8>(1 << 20).unwrap();
    stream.synchronize().unwrap();
    let memory = MemorySink::new();
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let ctx = TracingContext::builder(cupti).hold_limit(hold).sink(memory.clone()).build().unwrap();
    unsafe extern "C" fn nothing(_: *mut std::ffi::c_void) {}
    // An empty graph: one launch, no work record.
    let mut empty = std::ptr::null_mut();
    let mut exec = std::ptr::null_mut();
    // Safety: valid out-pointers; a graph with one empty node, instantiated and launched on a
    // live stream of the current context, destroyed after the stream is synchronized.
    unsafe {
        let _ = gpu.cuda.new_stream().unwrap(); // makes the context current on this thread
        assert_eq!(sys::cuGraphCreate(&mut empty, 0), sys::CUresult::CUDA_SUCCESS);
        let mut node = std::ptr::null_mut();
        assert_eq!(
            sys::cuGraphAddEmptyNode(&mut node, empty, std::ptr::null(), 0),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuGraphInstantiateWithFlags(&mut exec, empty, 0), sys::CUresult::CUDA_SUCCESS);
    }
    let started = std::time::Instant::now();
    for _ in 0..20 {
        let mut list = ctx.list();
        {
            let _zone = list.zone(&stream, location!("mixed"));
            gpu.spin.launch(&stream, 10 * US).unwrap();
            // Safety: a plain function with no state, on a live stream.
            let launched =
                unsafe { sys::cuLaunchHostFunc(stream.cu_stream(), Some(nothing), std::ptr::null_mut()) };
            assert_eq!(launched, sys::CUresult::CUDA_SUCCESS);
            stream.memcpy_dtod(&src, &mut dst).unwrap();
            // Safety: the instantiated empty graph, on a live stream.
            assert_eq!(unsafe { sys::cuGraphLaunch(exec, stream.cu_stream()) }, sys::CUresult::CUDA_SUCCESS);
        }
        ctx.submit(list).unwrap();
    }
    stream.synchronize().unwrap();
    ctx.flush().unwrap();
    let waited = started.elapsed();
    // Safety: nothing uses the graph any more (the stream is synchronized).
    unsafe {
        sys::cuGraphExecDestroy(exec);
        sys::cuGraphDestroy(empty);
    }
    let stats = ctx.stats();
    let _ = writeln!(std::io::stderr(), "{stats:?}, flushed after {waited:?}");
    let batches = memory.batches();
    assert_eq!(batches.len(), 20, "{stats:?}");
    for (_, zones) in &batches {
        let names: Vec<&str> = zones.iter().map(|z| z.location.name()).collect();
        assert_eq!(names, ["mixed", "spin_ns", "memcpy"], "{zones:?}");
    }
    // The host function makes no record and is not linked; the empty graph's launch is, and
    // each list waits for it once, within the hold limit.
    assert!(waited < hold * 20 + Duration::from_secs(2), "waited {waited:?}");
}

#[test]
fn records_lost_under_a_tiny_buffer_are_counted() {
    let Some(gpu) = gpu("records_lost_under_a_tiny_buffer_are_counted") else { return };
    const LAUNCHES: usize = 20_000;
    let config = CuptiConfig {
        buffers: TracerConfig { buffer_size: 16 << 10, buffer_count: 1 },
        ..CuptiConfig::default()
    };
    let ctx = TracingContext::builder(CuptiBackend::with_config(gpu.cuda.clone(), config).unwrap())
        .build()
        .unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    for _ in 0..LAUNCHES {
        gpu.spin.launch(&stream, US).unwrap();
    }
    stream.synchronize().unwrap();
    ctx.flush().unwrap();
    let stats = ctx.stats();
    let _ = writeln!(std::io::stderr(), "{stats:?}");
    let (activities, losses) = (stats.activity.activities, stats.activity.losses);
    // Losses show: refused buffer requests, and CUPTI's own count of dropped records as it
    // reports it (with each buffer it completes: a lower bound).
    assert!(losses.buffers_refused > 0 && activities < LAUNCHES, "{stats:?}");
    assert!(
        activities as u64 + losses.records_dropped + losses.records_incomplete <= LAUNCHES as u64,
        "{stats:?}"
    );
}

#[test]
fn a_second_backend_gets_a_clear_error() {
    let Some(gpu) = gpu("a_second_backend_gets_a_clear_error") else { return };
    let first = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let ctx = TracingContext::builder(first.clone()).build().unwrap();
    let split = TracingContext::builder(first.clone()).build().unwrap_err();
    assert!(split.to_string().contains("a second context on one CuptiBackend"), "{split}");
    drop(ctx);
    let second = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap_err();
    assert_eq!(second, CuptiError::AlreadyStarted);
    assert!(second.to_string().contains("already running"), "{second}");
    drop(first);
    drop(CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap());
}

#[test]
fn graph_zones_say_cupti_does_not_record_them() {
    let Some(gpu) = gpu("graph_zones_say_cupti_does_not_record_them") else { return };
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let graph = cupti.cuda().new_graph().unwrap();
    let ctx = TracingContext::builder(cupti).build().unwrap();
    let mut list = ctx.list();
    let error = list.graph_zone_begin(&graph, &[], location!("node")).unwrap_err();
    assert!(matches!(error, gpu_event_pool::RecordError::Unsupported { backend: "cupti", .. }), "{error}");
    assert_eq!(list.open_zones(), 1, "still balanced");
    assert!(list.graph_zone_end(&graph, &[]).is_ok() || list.open_zones() == 0);
}

/// Another CUPTI client in the process, as Nsight Systems or PyTorch's Kineto is: subscribed
/// to CUPTI itself, unsubscribed when dropped.
struct OtherSubscriber(cudarc::cupti::sys::CUpti_SubscriberHandle);

impl OtherSubscriber {
    fn subscribe() -> Self {
        let mut handle = std::ptr::null_mut();
        // Safety: `handle` is a valid out-pointer; no callback, no user data.
        unsafe { cudarc::cupti::result::subscribe(&mut handle, None, std::ptr::null_mut()) }
            .expect("the other tool subscribes to CUPTI");
        Self(handle)
    }
}

impl Drop for OtherSubscriber {
    fn drop(&mut self) {
        // Safety: the handle came from `cuptiSubscribe` above.
        let _ = unsafe { cudarc::cupti::result::unsubscribe(self.0) };
    }
}

/// Under another CUPTI subscriber, CUPTI takes no second one: the backend says so in a typed
/// error that names the fall-back, and with `fall_back_to_events` it times zones with CUDA
/// events, which `Stats` says.
#[test]
fn under_another_cupti_subscriber_the_backend_says_so_or_falls_back_to_cuda_events() {
    let Some(gpu) = gpu("under_another_cupti_subscriber_the_backend_says_so_or_falls_back_to_cuda_events")
    else {
        return;
    };
    let other = OtherSubscriber::subscribe();
    let error = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap_err();
    assert!(matches!(error, CuptiError::OtherSubscriber { .. }), "{error}");
    assert!(error.to_string().contains("fall_back_to_events"), "{error}");
    let config = CuptiConfig { fall_back_to_events: true, ..CuptiConfig::default() };
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), config).unwrap();
    assert_eq!((cupti.timing(), cupti.clock_source()), (Timing::Events, None));
    let memory = MemorySink::new();
    let ctx = TracingContext::builder(cupti).sink(memory.clone()).build().unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("under another tool")).unwrap();
    gpu.spin.launch(&stream, 40 * US).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    stream.synchronize().unwrap();
    ctx.flush().unwrap();
    let zones = memory.zones();
    assert_eq!(zones.len(), 1, "the zone, timed by its events (a kernel is no zone of its own then)");
    // Timed by its events, the zone holds the kernel's launch too (under another tool's
    // callbacks, tens of µs on an H100): at least the spin, and bounded as an event's zone is.
    let ns = zones[0].duration_ns();
    assert!(ns + 2 * US >= 40 * US && ns <= 1_040 * US, "under another tool took {ns} ns, spin 40 µs");
    assert!(zones[0].host_begin_bound_ns < 1_000 * US, "{:?}", zones[0]);
    let stats = ctx.stats();
    assert_eq!((stats.backend, stats.timing), ("cupti", Timing::Events), "{stats:?}");
    drop(ctx);
    drop(other);
}
