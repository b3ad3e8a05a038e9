//! Two CUDA devices from one process: a tracing context per device, the same threads
//! recording on streams of both, interleaved, one collector thread serving both contexts,
//! and every thread's current CUDA context left as it was.
//!
//! Each test needs two devices. Without a CUDA driver or device, or with only one device, it
//! prints `SKIPPED: ...` to stderr and returns. `GPU_EVENT_POOL_REQUIRE_CUDA` makes a skip a
//! failure, as in `tests/cuda.rs`: set to any value, a missing driver or device fails; set to
//! `2` (or more), fewer than two devices fails too (`1` still skips then, saying so).

mod cuda_common;
use cuda_common::{assert_measures, assert_no_slot_leaked, duration};
use cudarc::driver::result::ctx::get_current;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};
use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::ErrorKind;
use gpu_event_pool::{
    location, Backend, Collected, Config, DynamicLocation, EventList, Lane, TracingContext,
};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// How many devices `GPU_EVENT_POOL_REQUIRE_CUDA` requires: unset 0, a number that number,
/// any other value 1 (as `tests/cuda.rs` reads it: CUDA required).
fn required_devices() -> usize {
    match std::env::var("GPU_EVENT_POOL_REQUIRE_CUDA") {
        Err(_) => 0,
        Ok(value) => value.trim().parse().unwrap_or(1),
    }
}

/// Says why a test does not run, straight to stderr (past the harness's capture), or fails
/// if `GPU_EVENT_POOL_REQUIRE_CUDA` requires what is missing.
fn skip(test: &str, required: usize, why: &str) -> Option<[Gpu; 2]> {
    assert!(
        required_devices() < required,
        "GPU_EVENT_POOL_REQUIRE_CUDA={} makes this a failure: {why}",
        std::env::var("GPU_EVENT_POOL_REQUIRE_CUDA").unwrap_or_default()
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}: {test}");
    None
}

/// One device: its backend (a primary context) and the spin kernel loaded in it.
struct Gpu {
    cuda: CudaBackend,
    spin: SpinKernel,
}

impl Gpu {
    fn new(cuda: CudaBackend) -> Self {
        let spin = SpinKernel::load(&cuda).expect("load the spin kernel");
        Self { cuda, spin }
    }

    fn context(&self, config: Config) -> (TracingContext<CudaBackend>, MemorySink) {
        let sink = MemorySink::new();
        let ordinal = self.cuda.context().ordinal();
        let ctx = TracingContext::builder(self.cuda.clone())
            .config(config)
            .name(format!("gpu {ordinal}"))
            .sink(sink.clone())
            .build()
            .unwrap();
        (ctx, sink)
    }

    /// A stream already running a spin of `head_start_ns`: the host queues what follows
    /// faster than the GPU runs it, so no host-side gap ends up inside a zone.
    fn busy_stream(&self, head_start_ns: u64) -> Arc<CudaStream> {
        let stream = self.cuda.new_stream().unwrap();
        self.spin.launch(&stream, head_start_ns).unwrap();
        stream
    }

    fn lane(&self, stream: &Arc<CudaStream>) -> Lane {
        Lane::Stream(self.cuda.stream_key(stream))
    }
}

/// Devices 0 and 1, or `None` (after saying why) when this machine does not have two.
fn two_gpus(test: &str) -> Option<[Gpu; 2]> {
    let first = match CudaBackend::new(0) {
        Ok(cuda) => cuda,
        Err(e) if e.kind() == Some(ErrorKind::NoDevice) => {
            return skip(test, 1, &format!("no CUDA device ({e})"))
        }
        Err(e) => panic!("the CUDA driver is present but unusable: {e}"),
    };
    // The driver is loaded (`CudaBackend::new` checked), so cudarc can count the devices.
    let devices = CudaContext::device_count().expect("cuDeviceGetCount");
    if devices < 2 {
        return skip(test, 2, &format!("needs two CUDA devices, this machine has {devices}"));
    }
    let second = CudaBackend::new(1).unwrap_or_else(|e| panic!("CUDA device 1: {e}"));
    Some([Gpu::new(first), Gpu::new(second)])
}

/// The thread's current context (null: none).
fn current() -> sys::CUcontext {
    get_current().expect("cuCtxGetCurrent").unwrap_or(std::ptr::null_mut())
}

/// The dispatch kernels of every command buffer, in order: known durations, each long
/// enough that the GPU's few microseconds between kernels stay well inside 5%.
const DISPATCH_NS: [u64; 3] = [500 * US, MS, 2 * MS];

#[test]
fn kernels_on_two_devices_recorded_by_the_same_threads_are_measured_within_5_percent() {
    let test = "kernels_on_two_devices_recorded_by_the_same_threads_are_measured_within_5_percent";
    let Some(gpus) = two_gpus(test) else { return };
    const THREADS: usize = 2;
    const LISTS: usize = 8;
    let contexts: Vec<(TracingContext<CudaBackend>, MemorySink)> =
        gpus.iter().map(|gpu| gpu.context(Config::default())).collect();
    // streams[device][thread]
    let streams: Vec<Vec<Arc<CudaStream>>> =
        gpus.iter().map(|gpu| (0..THREADS).map(|_| gpu.busy_stream(5 * MS)).collect()).collect();

    let recording = AtomicBool::new(true);
    let collected = std::thread::scope(|s| {
        // One collector thread for both contexts, until everything is collected.
        let collector = s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut collected = [0; 2];
            loop {
                let done = !recording.load(Ordering::Acquire);
                for ((ctx, _), lists) in contexts.iter().zip(&mut collected) {
                    if let Collected::Done(report) = ctx.collect().unwrap() {
                        *lists += report.lists;
                    }
                }
                if done && collected == [THREADS * LISTS; 2] {
                    return collected;
                }
                assert!(Instant::now() < deadline, "the collector thread collected only {collected:?} lists");
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (gpus, contexts, streams) = (&gpus, &contexts, &streams);
                s.spawn(move || record_on_both_devices(gpus, contexts, streams, thread, LISTS))
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        recording.store(false, Ordering::Release);
        collector.join().unwrap()
    });
    assert_eq!(collected, [THREADS * LISTS; 2], "the collector thread collected every list of both devices");

    for (d, (ctx, sink)) in contexts.iter().enumerate() {
        let zones = sink.zones();
        assert_eq!(zones.len(), THREADS * LISTS * (DISPATCH_NS.len() + 1), "gpu {d}: no zone lost");
        for stream in &streams[d] {
            let lane = gpus[d].lane(stream);
            let command_buffers: Vec<&str> =
                zones.iter().filter(|z| z.lane == lane && z.depth == 0).map(|z| z.location.name()).collect();
            let expected: Vec<String> = (0..LISTS).map(|i| format!("command buffer {i}")).collect();
            assert_eq!(command_buffers, expected, "gpu {d}, {lane:?}: in stream order");
            let dispatches: Vec<&Zone> = zones.iter().filter(|z| z.lane == lane && z.depth == 1).collect();
            assert_eq!(dispatches.len(), LISTS * DISPATCH_NS.len());
            assert!(dispatches.windows(2).all(|w| w[0].gpu_end_ns <= w[1].gpu_begin_ns), "in stream order");
            for (zone, &ns) in dispatches.iter().zip(DISPATCH_NS.iter().cycle()) {
                assert_measures(zone, ns);
            }
            let over: Vec<i64> = dispatches
                .iter()
                .zip(DISPATCH_NS.iter().cycle())
                .map(|(z, &ns)| duration(z) - ns as i64)
                .collect();
            let _ = writeln!(
                std::io::stderr(),
                "gpu {d}, {lane:?}: dispatches measured {} to {} ns over their kernels",
                over.iter().min().unwrap(),
                over.iter().max().unwrap()
            );
        }
        let stats = ctx.stats();
        assert_eq!((stats.dropped_zones, stats.lists_failed), (0, 0), "gpu {d}: {stats:?}");
        assert_no_slot_leaked(ctx);
    }
}

/// One recording thread's work: command buffer `i` open on both devices at once (on the
/// thread's stream of each), its dispatches recorded device after device, then both submitted.
fn record_on_both_devices(
    gpus: &[Gpu; 2],
    contexts: &[(TracingContext<CudaBackend>, MemorySink)],
    streams: &[Vec<Arc<CudaStream>>],
    thread: usize,
    lists: usize,
) {
    for i in 0..lists {
        let mut open: Vec<EventList<CudaBackend>> = (0..2)
            .map(|d| {
                let mut list = contexts[d].0.list();
                list.zone_begin(&streams[d][thread], DynamicLocation::new(format!("command buffer {i}")))
                    .unwrap();
                list
            })
            .collect();
        for (k, &ns) in DISPATCH_NS.iter().enumerate() {
            for (d, list) in open.iter_mut().enumerate() {
                let stream = &streams[d][thread];
                if k == 0 {
                    list.zone_begin(stream, location!("dispatch")).unwrap();
                } else {
                    list.zone_next(stream, location!("dispatch")).unwrap();
                }
                gpus[d].spin.launch(stream, ns).unwrap();
            }
        }
        for (d, mut list) in open.into_iter().enumerate() {
            list.zone_end(&streams[d][thread]).unwrap();
            list.zone_end(&streams[d][thread]).unwrap();
            contexts[d].0.submit(list).unwrap();
        }
    }
}

/// What a recording thread has current before it touches the tracer.
#[derive(Debug, Clone, Copy)]
enum Before {
    /// Another library's context: a context of its own on device 1 (`cuCtxCreate`).
    OtherContext,
    /// No context at all (a fresh thread).
    Nothing,
    /// Device 0's primary context, while it also records on device 1.
    FirstDevice,
}

/// Threads that have another context current, or none, or one device's context, record on
/// both devices (opening a backend, making a stream, recording, launching, submitting,
/// collecting, flushing): after every call the thread's own current context is back.
#[test]
fn recording_on_two_devices_leaves_each_threads_current_context_as_it_was() {
    let Some(gpus) = two_gpus("recording_on_two_devices_leaves_each_threads_current_context_as_it_was")
    else {
        return;
    };
    const ZONES: usize = 3;
    let contexts: Vec<(TracingContext<CudaBackend>, MemorySink)> =
        gpus.iter().map(|gpu| gpu.context(Config::default())).collect();
    let befores = [Before::OtherContext, Before::Nothing, Before::FirstDevice];
    // A cudarc stream's drop binds its context: these are made and dropped on this thread.
    let streams: Vec<[Arc<CudaStream>; 2]> = befores
        .iter()
        .map(|_| [gpus[0].cuda.new_stream().unwrap(), gpus[1].cuda.new_stream().unwrap()])
        .collect();
    std::thread::scope(|s| {
        for (before, streams) in befores.into_iter().zip(&streams) {
            let (gpus, contexts) = (&gpus, &contexts);
            s.spawn(move || {
                let mut other = std::ptr::null_mut();
                match before {
                    Before::OtherContext => {
                        let mut device = 0;
                        // Safety: valid out-pointers; `cuCtxCreate` makes the new context
                        // current on this thread.
                        unsafe {
                            assert_eq!(sys::cuDeviceGet(&mut device, 1), sys::CUresult::CUDA_SUCCESS);
                            assert_eq!(
                                sys::cuCtxCreate_v2(&mut other, 0, device),
                                sys::CUresult::CUDA_SUCCESS
                            );
                        }
                    }
                    Before::Nothing => {}
                    Before::FirstDevice => gpus[0].cuda.context().bind_to_thread().unwrap(),
                }
                let own = current();
                match before {
                    Before::OtherContext => assert_eq!(own, other),
                    Before::Nothing => assert!(own.is_null(), "a fresh thread has no context current"),
                    Before::FirstDevice => assert_eq!(own, gpus[0].cuda.context().cu_ctx()),
                }
                let unchanged = |call: &str| {
                    assert_eq!(current(), own, "{before:?}: {call} changed the thread's current context");
                };
                // Both dropped after the last check: cudarc's drops bind their context.
                let opened = CudaBackend::new(1).unwrap();
                unchanged("CudaBackend::new(1)");
                let made = gpus[1].cuda.new_stream().unwrap();
                unchanged("new_stream on device 1");
                for d in 0..2 {
                    // A head start: the host queues the zones below faster than the GPU runs them.
                    gpus[d].spin.launch(&streams[d], 2 * MS).unwrap();
                    unchanged("SpinKernel::launch");
                }
                for _ in 0..ZONES {
                    for d in 0..2 {
                        let (ctx, stream) = (&contexts[d].0, &streams[d]);
                        let mut list = ctx.list();
                        list.zone_begin(stream, DynamicLocation::new(format!("{before:?}"))).unwrap();
                        unchanged("zone_begin");
                        gpus[d].spin.launch(stream, MS).unwrap();
                        unchanged("SpinKernel::launch");
                        list.zone_end(stream).unwrap();
                        unchanged("zone_end");
                        ctx.submit(list).unwrap();
                        ctx.collect().unwrap();
                        unchanged("collect");
                    }
                }
                for (ctx, _) in contexts {
                    ctx.flush().unwrap();
                    unchanged("flush");
                }
                drop((opened, made));
                if !other.is_null() {
                    // Safety: created above, destroyed once; nothing of the tracer lives in it.
                    assert_eq!(unsafe { sys::cuCtxDestroy_v2(other) }, sys::CUresult::CUDA_SUCCESS);
                }
            });
        }
    });
    for (d, (ctx, sink)) in contexts.iter().enumerate() {
        ctx.flush().unwrap();
        let zones = sink.zones();
        assert_eq!(zones.len(), befores.len() * ZONES, "gpu {d}: no zone lost");
        for (before, streams) in befores.iter().zip(&streams) {
            let lane = gpus[d].lane(&streams[d]);
            let on_lane: Vec<&Zone> = zones.iter().filter(|z| z.lane == lane).collect();
            assert_eq!(on_lane.len(), ZONES, "gpu {d}: {before:?}'s stream");
            assert!(on_lane.iter().all(|z| z.location.name() == format!("{before:?}")));
            assert!(on_lane.windows(2).all(|w| w[0].gpu_end_ns <= w[1].gpu_begin_ns), "in stream order");
            for zone in on_lane {
                assert_measures(zone, MS);
            }
        }
        assert_no_slot_leaked(ctx);
    }
}
