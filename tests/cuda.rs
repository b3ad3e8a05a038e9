//! The CUDA backend on a real GPU: real kernels of known duration (the embedded `%globaltimer`
//! spin kernel), timed through the pool, checked against what they must measure.
//!
//! Without a CUDA driver or device every test prints `SKIPPED: no CUDA device (...)` to
//! stderr and returns. Set `GPU_EVENT_POOL_REQUIRE_CUDA=1` to make that a failure instead (on
//! the GPU machine, so that a broken driver cannot pass as a skip).

mod cuda_common;
use cuda_common::{assert_measures, assert_no_slot_leaked, duration};
use gpu_event_pool::backend::cuda::{CudaBackend, GraphExec, GraphLaunch, SpinKernel};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::ErrorKind;
use gpu_event_pool::{
    location, Backend, CollectError, Collected, Config, DynamicLocation, Error, Lane, RecordError,
    TracingContext,
};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

struct Gpu {
    cuda: CudaBackend,
    spin: SpinKernel,
}

/// The GPU, or `None` (after saying so on stderr) when this machine has none.
fn gpu(test: &str) -> Option<Gpu> {
    match CudaBackend::new(0) {
        Ok(cuda) => {
            let spin = SpinKernel::load(&cuda).expect("load the spin kernel");
            Some(Gpu { cuda, spin })
        }
        Err(e) if e.kind() == Some(ErrorKind::NoDevice) => {
            assert!(
                std::env::var_os("GPU_EVENT_POOL_REQUIRE_CUDA").is_none(),
                "GPU_EVENT_POOL_REQUIRE_CUDA is set, but there is no CUDA device: {e}"
            );
            // Straight to stderr, past the test harness's output capture: a skip must show.
            let _ = writeln!(std::io::stderr(), "SKIPPED: no CUDA device ({e}): {test}");
            None
        }
        Err(e) => panic!("the CUDA driver is present but unusable: {e}"),
    }
}

impl Gpu {
    fn context(&self, config: Config) -> (TracingContext<CudaBackend>, MemorySink) {
        let sink = MemorySink::new();
        let ctx =
            TracingContext::builder(self.cuda.clone()).config(config).sink(sink.clone()).build().unwrap();
        (ctx, sink)
    }

    /// A stream, already running a spin of `head_start_ns`: the host queues what follows
    /// faster than the GPU runs it, so no host-side gap ends up inside a zone.
    fn busy_stream(&self, head_start_ns: u64) -> Arc<cudarc::driver::CudaStream> {
        let stream = self.cuda.new_stream().unwrap();
        self.spin.launch(&stream, head_start_ns).unwrap();
        stream
    }
}

fn config(initial: u32, max: u32, batch: u32) -> Config {
    let mut config = Config::default();
    (config.initial_capacity, config.max_capacity, config.batch) = (initial, max, batch);
    config
}

#[test]
fn kernels_of_known_duration_are_measured_within_5_percent() {
    let Some(gpu) = gpu("kernels_of_known_duration_are_measured_within_5_percent") else { return };
    let (ctx, sink) = gpu.context(Config::default());
    let stream = gpu.busy_stream(2 * MS);
    let durations = [500 * US, 2 * MS, 10 * MS];
    for &ns in &durations {
        let mut list = ctx.list();
        list.zone_begin(&stream, DynamicLocation::new(format!("spin {ns} ns"))).unwrap();
        gpu.spin.launch(&stream, ns).unwrap();
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
    }
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(zones.len(), durations.len());
    for (zone, &ns) in zones.iter().zip(&durations) {
        assert_measures(zone, ns);
        assert_eq!(zone.lane, Lane::Stream(gpu.cuda.stream_key(&stream)));
    }
    assert!(zones.windows(2).all(|w| w[0].gpu_end_ns <= w[1].gpu_begin_ns), "in stream order");
    assert_no_slot_leaked(&ctx);
}

#[test]
fn backend_reports_not_ready_without_blocking_and_names_driver_errors() {
    let Some(gpu) = gpu("backend_reports_not_ready_without_blocking_and_names_driver_errors") else { return };
    let cuda = &gpu.cuda;
    let stream = cuda.new_stream().unwrap();
    let (before, after, never) =
        (cuda.create_event().unwrap(), cuda.create_event().unwrap(), cuda.create_event().unwrap());
    cuda.record(&before, &stream).unwrap();
    gpu.spin.launch(&stream, 100 * MS).unwrap();
    cuda.record(&after, &stream).unwrap();
    let start = Instant::now();
    assert!(!cuda.is_complete(&after).unwrap(), "the kernel is still running");
    assert_eq!(cuda.elapsed_ms(&before, &after).unwrap(), None, "CUDA_ERROR_NOT_READY is None");
    assert!(start.elapsed() < Duration::from_millis(20), "neither call waited: {:?}", start.elapsed());
    cuda.wait(&after).unwrap();
    assert!(cuda.is_complete(&after).unwrap());
    let ms = cuda.elapsed_ms(&before, &after).unwrap().expect("both complete");
    assert!((100.0..105.0).contains(&ms), "{ms} ms");

    let e = cuda.elapsed_ms(&before, &never).unwrap_err();
    assert_eq!((e.call, e.code.as_str()), ("cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE"), "{e}");
}

#[test]
fn collect_never_waits_for_a_running_kernel() {
    let Some(gpu) = gpu("collect_never_waits_for_a_running_kernel") else { return };
    let (ctx, sink) = gpu.context(Config::default());
    let stream = gpu.cuda.new_stream().unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("long kernel")).unwrap();
    gpu.spin.launch(&stream, 200 * MS).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();

    let start = Instant::now();
    let Collected::Done(report) = ctx.collect().unwrap() else { panic!("no other collector") };
    assert!(start.elapsed() < Duration::from_millis(20), "collect waited: {:?}", start.elapsed());
    assert_eq!((report.lists, report.pending_lists), (0, 1));
    assert!(sink.zones().is_empty());

    let report = ctx.flush().unwrap();
    assert_eq!((report.lists, report.zones, report.pending_lists), (1, 1, 0));
    assert_measures(&sink.zones()[0], 200 * MS);
    assert_no_slot_leaked(&ctx);
}

#[test]
fn nested_and_zone_next_zones_add_up() {
    let Some(gpu) = gpu("nested_and_zone_next_zones_add_up") else { return };
    let (ctx, sink) = gpu.context(Config::default());
    let stream = gpu.busy_stream(2 * MS);
    let parts = [("a", MS), ("b", 2 * MS), ("c", MS)];
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("outer")).unwrap();
    for (i, &(name, ns)) in parts.iter().enumerate() {
        if i == 0 {
            list.zone_begin(&stream, DynamicLocation::new(name)).unwrap();
        } else {
            list.zone_next(&stream, DynamicLocation::new(name)).unwrap();
        }
        gpu.spin.launch(&stream, ns).unwrap();
    }
    list.zone_end(&stream).unwrap();
    gpu.spin.launch(&stream, MS).unwrap();
    list.zone_end(&stream).unwrap();
    // outer begin, a, b, c, end of c, end of outer: 4 zones in 6 events (the seed takes 8).
    assert_eq!(list.event_count(), 6);
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();

    let zones = sink.zones();
    let names: Vec<&str> = zones.iter().map(|z| z.location.name()).collect();
    assert_eq!(names, ["outer", "a", "b", "c"]);
    let (outer, inner) = (&zones[0], &zones[1..]);
    assert_eq!(outer.depth, 0);
    for (zone, &(_, ns)) in inner.iter().zip(&parts) {
        assert_eq!(zone.depth, 1);
        assert_measures(zone, ns);
    }
    for pair in inner.windows(2) {
        assert_eq!(pair[0].gpu_end_ns, pair[1].gpu_begin_ns, "zone_next shares one event");
    }
    let sum: i64 = inner.iter().map(duration).sum();
    assert_eq!(sum, inner[2].gpu_end_ns - inner[0].gpu_begin_ns);
    assert!(outer.gpu_begin_ns <= inner[0].gpu_begin_ns);
    assert!(outer.gpu_end_ns >= inner[2].gpu_end_ns + MS as i64 - 1_000, "outer covers the last kernel");
    assert_measures(outer, 5 * MS);
    assert_no_slot_leaked(&ctx);
}

/// A graph `zone "first" -> spin first_ns -> zone_next "second" -> spin second_ns -> end`,
/// instantiated. The list is returned unsubmitted.
fn graph_with_zones(
    gpu: &Gpu,
    ctx: &TracingContext<CudaBackend>,
    first_ns: u64,
    second_ns: u64,
) -> (GraphExec, gpu_event_pool::EventList<CudaBackend>, u64) {
    let graph = gpu.cuda.new_graph().unwrap();
    let mut list = ctx.list();
    let begin = list.graph_zone_begin(&graph, &[], location!("first")).unwrap().unwrap();
    let k1 = gpu.spin.add_to_graph(&graph, &[begin], first_ns).unwrap();
    let next = list.graph_zone_next(&graph, &[k1], location!("second")).unwrap().unwrap();
    let k2 = gpu.spin.add_to_graph(&graph, &[next], second_ns).unwrap();
    list.graph_zone_end(&graph, &[k2]).unwrap().unwrap();
    let exec = graph.instantiate().unwrap();
    (exec, list, gpu.cuda.graph_key(&graph))
}

#[test]
fn graph_zones_time_the_graph_launch() {
    let Some(gpu) = gpu("graph_zones_time_the_graph_launch") else { return };
    let (ctx, sink) = gpu.context(Config::default());
    let stream = gpu.busy_stream(2 * MS);
    let (mut exec, list, key) = graph_with_zones(&gpu, &ctx, MS, 2 * MS);
    assert_eq!(list.event_count(), 3);
    assert_eq!(exec.launch(&stream).unwrap(), GraphLaunch::Timed);
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();

    let zones = sink.zones();
    assert_eq!(zones.len(), 2);
    assert_measures(&zones[0], MS);
    assert_measures(&zones[1], 2 * MS);
    assert_eq!(zones[0].gpu_end_ns, zones[1].gpu_begin_ns);
    assert!(zones.iter().all(|z| z.lane == Lane::Graph(key)));
    assert_no_slot_leaked(&ctx);
}

#[test]
fn graph_relaunches_are_untimed_and_never_touch_reused_events() {
    let Some(gpu) = gpu("graph_relaunches_are_untimed_and_never_touch_reused_events") else { return };
    // Eight slots in all: the graph's three events are certainly reused below.
    let (ctx, sink) = gpu.context(config(8, 8, 2));
    let stream = gpu.busy_stream(2 * MS);
    let (mut exec, graph_list, _) = graph_with_zones(&gpu, &ctx, MS, MS);
    let launches: Vec<GraphLaunch> = (0..3).map(|_| exec.launch(&stream).unwrap()).collect();
    assert_eq!(launches, [GraphLaunch::Timed, GraphLaunch::Untimed, GraphLaunch::Untimed]);
    let mut marker = ctx.list();
    marker.zone_begin(&stream, location!("after three launches")).unwrap();
    marker.zone_end(&stream).unwrap();
    ctx.submit(graph_list).unwrap();
    ctx.submit(marker).unwrap();
    ctx.flush().unwrap();

    let zones = sink.zones();
    assert_eq!(zones.len(), 3, "one launch timed, not three");
    assert_measures(&zones[0], MS);
    assert_measures(&zones[1], MS);
    let gap = zones[2].gpu_begin_ns - zones[1].gpu_end_ns;
    assert!(gap >= 4 * MS as i64 - 10_000, "the zones are the first launch's: {gap} ns before the marker");
    assert_no_slot_leaked(&ctx);

    // Every slot, the graph's among them, now times stream work while the graph runs again.
    sink.clear();
    let other = gpu.busy_stream(2 * MS);
    let mut lists = Vec::new();
    for _ in 0..4 {
        let mut list = ctx.list();
        list.zone_begin(&other, location!("reused slot")).unwrap();
        assert_eq!(exec.launch(&stream).unwrap(), GraphLaunch::Untimed);
        gpu.spin.launch(&other, 500 * US).unwrap();
        list.zone_end(&other).unwrap();
        lists.push(list);
    }
    assert_eq!(ctx.stats().free, 0, "all eight slots in use");
    for list in lists {
        ctx.submit(list).unwrap();
    }
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(zones.len(), 4);
    for zone in &zones {
        assert_measures(zone, 500 * US);
    }
    assert_eq!(exec.launches(), 7);
    assert_no_slot_leaked(&ctx);
}

#[test]
fn a_graph_list_collected_before_its_launch_fails_alone() {
    let Some(gpu) = gpu("a_graph_list_collected_before_its_launch_fails_alone") else { return };
    let (ctx, sink) = gpu.context(Config::default());
    let stream = gpu.busy_stream(MS);
    let one_zone = |name: &'static str| {
        let mut list = ctx.list();
        list.zone_begin(&stream, DynamicLocation::new(name)).unwrap();
        gpu.spin.launch(&stream, MS).unwrap();
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
    };
    one_zone("before");
    let (mut exec, graph_list, _) = graph_with_zones(&gpu, &ctx, MS, MS);
    ctx.submit(graph_list).unwrap();
    one_zone("after");

    match ctx.flush() {
        Err(CollectError { error: Error::Backend(e), .. }) => {
            assert_eq!(e.kind(), Some(ErrorKind::GraphNotLaunched), "{e}")
        }
        other => panic!("expected GRAPH_NOT_LAUNCHED, got {other:?}"),
    }
    let names: Vec<String> = sink.zones().iter().map(|z| z.location.name().to_owned()).collect();
    assert_eq!(names, ["before", "after"], "the lists around it are collected");
    for zone in sink.zones() {
        assert_measures(&zone, MS);
    }
    let stats = ctx.stats();
    assert_eq!((stats.lists_failed, stats.dropped_zones), (1, 2), "{stats:?}");
    assert_eq!(exec.launch(&stream).unwrap(), GraphLaunch::Untimed, "its zones were abandoned");
    assert_no_slot_leaked(&ctx);
}

#[test]
fn zone_nodes_cannot_be_added_after_instantiation() {
    let Some(gpu) = gpu("zone_nodes_cannot_be_added_after_instantiation") else { return };
    let (ctx, _sink) = gpu.context(Config::default());
    let graph = gpu.cuda.new_graph().unwrap();
    let kernel = gpu.spin.add_to_graph(&graph, &[], MS).unwrap();
    let _exec = graph.instantiate().unwrap();
    let mut list = ctx.list();
    match list.graph_zone_begin(&graph, &[kernel], location!("too late")) {
        Err(RecordError::Backend(e)) => {
            assert_eq!(e.kind(), Some(ErrorKind::GraphAlreadyInstantiated), "{e}")
        }
        other => panic!("expected GRAPH_ALREADY_INSTANTIATED, got {other:?}"),
    }
    assert_eq!(list.graph_zone_end(&graph, &[kernel]).unwrap(), None, "the dropped zone closes");
    assert_eq!(list.event_count(), 0);
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(ctx.stats().dropped_zones, 1);
    assert_no_slot_leaked(&ctx);
}

#[test]
fn four_threads_record_on_four_streams_while_a_collector_runs() {
    let Some(gpu) = gpu("four_threads_record_on_four_streams_while_a_collector_runs") else { return };
    const THREADS: usize = 4;
    const LISTS: usize = 40;
    const KERNELS: usize = 8;
    const KERNEL_NS: u64 = 200 * US;
    let (ctx, sink) = gpu.context(config(16, 4096, 16));
    let streams: Vec<_> = (0..THREADS).map(|_| gpu.busy_stream(5 * MS)).collect();
    let recording = AtomicBool::new(true);
    let collects = std::thread::scope(|s| {
        let collector = s.spawn(|| {
            let mut done = 0;
            while recording.load(Ordering::Acquire) {
                if let Collected::Done(report) = ctx.collect().unwrap() {
                    done += report.lists;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            done
        });
        let workers: Vec<_> = streams
            .iter()
            .map(|stream| {
                let (ctx, spin) = (ctx.clone(), &gpu.spin);
                s.spawn(move || {
                    for _ in 0..LISTS {
                        let mut list = ctx.list();
                        list.zone_begin(stream, location!("command buffer")).unwrap();
                        list.zone_begin(stream, location!("dispatch")).unwrap();
                        for k in 0..KERNELS {
                            if k > 0 {
                                list.zone_next(stream, location!("dispatch")).unwrap();
                            }
                            spin.launch(stream, KERNEL_NS).unwrap();
                        }
                        list.zone_end(stream).unwrap();
                        list.zone_end(stream).unwrap();
                        ctx.submit(list).unwrap();
                        // Recording paced at one list per millisecond (about 40 ms in all),
                        // longer than the stream's 5 ms head start plus a list's 1.6 ms of
                        // kernels: lists complete, and are collected, while threads record.
                        // Unpaced, recording outran the GPU on the H200 host and the
                        // collector found no list complete before recording ended.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        recording.store(false, Ordering::Release);
        collector.join().unwrap()
    });
    let report = ctx.flush().unwrap();
    assert_eq!(collects + report.lists, THREADS * LISTS);
    assert!(collects > 0, "the collector ran while threads recorded");

    let zones = sink.zones();
    assert_eq!(zones.len(), THREADS * LISTS * (KERNELS + 1));
    for stream in &streams {
        let lane = Lane::Stream(gpu.cuda.stream_key(stream));
        let dispatches: Vec<&Zone> = zones.iter().filter(|z| z.lane == lane && z.depth == 1).collect();
        assert_eq!(dispatches.len(), LISTS * KERNELS);
        assert!(dispatches.windows(2).all(|w| w[0].gpu_end_ns <= w[1].gpu_begin_ns), "in stream order");
        // With five streams busy at once (four, and the collector's anchors) a single
        // dispatch can pick up a few microseconds of scheduling between two kernels; each
        // command buffer's dispatches together must still measure within 5%.
        for zone in &dispatches {
            let ns = duration(zone);
            assert!(
                (KERNEL_NS as i64 - 1_000..KERNEL_NS as i64 * 3 / 2).contains(&ns),
                "dispatch of {ns} ns"
            );
        }
        for command_buffer in dispatches.chunks(KERNELS) {
            let total: i64 = command_buffer.iter().map(|z| duration(z)).sum();
            let expected = (KERNELS as u64 * KERNEL_NS) as i64;
            assert!(
                (expected - 1_000..=expected + expected / 20).contains(&total),
                "{KERNELS} dispatches of {KERNEL_NS} ns measured {total} ns together"
            );
        }
        let mut sorted: Vec<i64> = dispatches.iter().map(|z| duration(z)).collect();
        sorted.sort_unstable();
        let _ = writeln!(
            std::io::stderr(),
            "dispatch zones on {lane:?}: min {} ns, median {} ns, max {} ns",
            sorted[0],
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1]
        );
    }
    let stats = ctx.stats();
    assert_eq!((stats.dropped_zones, stats.lists_failed), (0, 0), "{stats:?}");
    assert_no_slot_leaked(&ctx);
}

#[test]
fn exhaustion_drops_zones_and_recovers_with_real_events() {
    let Some(gpu) = gpu("exhaustion_drops_zones_and_recovers_with_real_events") else { return };
    let (ctx, sink) = gpu.context(config(4, 8, 4));
    let stream = gpu.busy_stream(2 * MS);
    let mut list = ctx.list();
    let mut exhausted = 0;
    for _ in 0..6 {
        match list.zone_begin(&stream, location!("zone")) {
            Ok(()) => {}
            Err(RecordError::PoolExhausted { capacity: 8 }) => exhausted += 1,
            Err(e) => panic!("{e}"),
        }
        gpu.spin.launch(&stream, 100 * US).unwrap();
        list.zone_end(&stream).unwrap();
    }
    assert_eq!(exhausted, 2, "eight slots hold four zones of two events");
    let stats = ctx.stats();
    assert_eq!((stats.capacity, stats.free, stats.dropped_zones), (8, 0, 2), "{stats:?}");
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(sink.zones().len(), 4);
    for zone in sink.zones() {
        assert_measures(&zone, 100 * US);
    }
    assert_no_slot_leaked(&ctx);

    // Recovered: the same slots time new work, and a dropped list gives its slots back.
    sink.clear();
    let mut abandoned = ctx.list();
    abandoned.zone_begin(&stream, location!("never submitted")).unwrap();
    abandoned.zone_end(&stream).unwrap();
    drop(abandoned);
    // Queued behind 2 ms of work, as above: a zone times its kernel, not the host's launch
    // latency after an idle stream (measured at 15.8 µs once on the H200).
    gpu.spin.launch(&stream, 2 * MS).unwrap();
    let mut list = ctx.list();
    for _ in 0..4 {
        list.zone_begin(&stream, location!("after recovery")).unwrap();
        gpu.spin.launch(&stream, 300 * US).unwrap();
        list.zone_end(&stream).unwrap();
    }
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(sink.zones().len(), 4);
    for zone in sink.zones() {
        assert_measures(&zone, 300 * US);
    }
    assert_eq!(ctx.stats().dropped_zones, 2);
    assert_no_slot_leaked(&ctx);
}

#[test]
fn calibration_pairs_follow_the_host_clock() {
    let Some(gpu) = gpu("calibration_pairs_follow_the_host_clock") else { return };
    let mut config = Config::default();
    config.anchor_interval = Duration::from_millis(1);
    let (ctx, sink) = gpu.context(config);
    let stream = gpu.cuda.new_stream().unwrap();
    let mut spans = Vec::new();
    for _ in 0..20 {
        let host_before = gpu.cuda.host_now_ns();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("calibrated")).unwrap();
        gpu.spin.launch(&stream, 2 * MS).unwrap();
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        ctx.flush().unwrap();
        spans.push((host_before, gpu.cuda.host_now_ns()));
    }
    let calibrations = sink.calibrations();
    assert!(calibrations.len() >= 20, "a new anchor at least every flush: {}", calibrations.len());
    assert!(calibrations.windows(2).all(|w| w[0].gpu_ns < w[1].gpu_ns && w[0].host_ns < w[1].host_ns));
    let offsets: Vec<i64> = calibrations.iter().map(|c| c.host_ns - c.gpu_ns).collect();
    let spread = offsets.iter().max().unwrap() - offsets.iter().min().unwrap();
    assert!(spread < 200_000, "host - GPU offsets spread over {spread} ns");
    for (zone, (host_before, host_after)) in sink.zones().iter().zip(spans) {
        assert!(
            zone.host_begin_ns >= host_before - 200_000 && zone.host_end_ns <= host_after + 200_000,
            "zone on the host clock [{}, {}] outside its host span [{host_before}, {host_after}]",
            zone.host_begin_ns,
            zone.host_end_ns
        );
    }
    assert_no_slot_leaked(&ctx);
}

/// Runs `during` on this thread while another thread holds a global-mode stream capture
/// (PyTorch's default mode: any thread's unsafe call invalidates it), and returns how that
/// capture ended.
fn capture_result_around(gpu: &Gpu, during: impl FnOnce()) -> cudarc::driver::sys::CUresult {
    use cudarc::driver::sys;
    let (capturing_tx, capturing_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let capturer = s.spawn(move || {
            gpu.cuda.context().bind_to_thread().unwrap();
            let stream = gpu.cuda.new_stream().unwrap();
            // Safety: a live stream of the current context.
            let begun = unsafe {
                sys::cuStreamBeginCapture_v2(
                    stream.cu_stream(),
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
                )
            };
            assert_eq!(begun, sys::CUresult::CUDA_SUCCESS);
            gpu.spin.launch(&stream, MS).unwrap();
            capturing_tx.send(()).unwrap();
            done_rx.recv().unwrap();
            let mut graph = std::ptr::null_mut();
            // Safety: the stream is capturing; `graph` is a valid out-pointer.
            let ended = unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut graph) };
            if !graph.is_null() {
                // Safety: the graph the capture made, destroyed once.
                unsafe { sys::cuGraphDestroy(graph) };
            }
            ended
        });
        capturing_rx.recv().unwrap();
        during();
        done_tx.send(()).unwrap();
        capturer.join().unwrap()
    })
}

/// Collecting, recording and flushing beside another thread's global-mode capture leave that
/// capture valid: the collector tests completion with `cuEventElapsedTime` (never
/// `cuEventQuery` or `cuEventSynchronize`). The control shows the harness sees the hazard: one
/// `cuEventQuery` in the same window invalidates the capture.
#[test]
fn collecting_beside_a_global_mode_capture_leaves_the_capture_valid() {
    use cudarc::driver::sys;
    let Some(gpu) = gpu("collecting_beside_a_global_mode_capture_leaves_the_capture_valid") else { return };
    let (ctx, sink) = gpu.context(config(64, 4096, 16));
    let (slow, quick) = (gpu.cuda.new_stream().unwrap(), gpu.cuda.new_stream().unwrap());
    let record = |stream: &Arc<cudarc::driver::CudaStream>, ns: u64| {
        let mut list = ctx.list();
        list.zone_begin(stream, location!("kernel")).unwrap();
        gpu.spin.launch(stream, ns).unwrap();
        list.zone_end(stream).unwrap();
        ctx.submit(list).unwrap();
    };
    record(&slow, 60 * MS);
    record(&quick, 100 * US);
    let ended = capture_result_around(&gpu, || {
        let start = Instant::now();
        let mut collects = 0;
        while start.elapsed() < Duration::from_millis(30) {
            record(&quick, 100 * US);
            ctx.collect().unwrap();
            collects += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(ctx.stats().submitted > 0, "the slow list was still running: reads saw NOT_READY");
        ctx.flush().unwrap();
        let _ = writeln!(std::io::stderr(), "{collects} collects and a flush during the capture");
    });
    assert_eq!(ended, sys::CUresult::CUDA_SUCCESS, "the other thread's capture survived");
    assert_eq!(sink.zones().len(), ctx.stats().zones_emitted);
    assert_no_slot_leaked(&ctx);

    let event = gpu.cuda.create_event().unwrap();
    gpu.cuda.record(&event, &slow).unwrap();
    let control = capture_result_around(&gpu, || {
        gpu.cuda.context().bind_to_thread().unwrap();
        // Safety: a live event of the current context.
        let queried = unsafe { sys::cuEventQuery(event.raw()) };
        let _ = writeln!(std::io::stderr(), "control: cuEventQuery during the capture returned {queried:?}");
    });
    assert_eq!(
        control,
        sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        "control: a query during a global capture invalidates it (the hazard the collector avoids)"
    );
}

/// A thread that has another context current (another library's, here a second context on
/// the same device) opens a backend, records, collects and flushes through it: after every
/// call its own context is current again.
#[test]
fn calls_leave_the_threads_current_context_as_they_found_it() {
    use cudarc::driver::sys;
    let Some(gpu) = gpu("calls_leave_the_threads_current_context_as_they_found_it") else { return };
    let current = || {
        let mut ctx = std::ptr::null_mut();
        // Safety: a valid out-pointer.
        assert_eq!(unsafe { sys::cuCtxGetCurrent(&mut ctx) }, sys::CUresult::CUDA_SUCCESS);
        ctx
    };
    let (ctx, sink) = gpu.context(config(4, 64, 4));
    let stream = gpu.cuda.new_stream().unwrap();
    let mut device = 0;
    let mut other = std::ptr::null_mut();
    // Safety: valid out-pointers; `cuCtxCreate` makes the new context current on this thread.
    unsafe {
        assert_eq!(sys::cuDeviceGet(&mut device, 0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuCtxCreate_v2(&mut other, 0, device), sys::CUresult::CUDA_SUCCESS);
    }
    assert_eq!(current(), other);
    // Opening a backend (cudarc's `CudaContext::new` binds the primary context it retains).
    let _another = CudaBackend::new(0).unwrap();
    assert_eq!(current(), other, "CudaBackend::new");
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("beside another context")).unwrap();
    assert_eq!(current(), other, "record");
    gpu.spin.launch(&stream, 100 * US).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.collect().unwrap();
    assert_eq!(current(), other, "collect");
    ctx.flush().unwrap();
    assert_eq!(current(), other, "flush");
    // Kept alive: dropping a cudarc `CudaStream` binds its context (cudarc's own drop).
    let _stream = gpu.cuda.new_stream().unwrap();
    assert_eq!(current(), other, "new_stream");
    assert_eq!(sink.zones().len(), 1);
    assert_measures(&sink.zones()[0], 100 * US);
    // Safety: created above, destroyed once; nothing of ours lives in it.
    assert_eq!(unsafe { sys::cuCtxDestroy_v2(other) }, sys::CUresult::CUDA_SUCCESS);
    assert_no_slot_leaked(&ctx);
}
