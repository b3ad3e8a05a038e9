//! Several GPUs from one process (simulated): a tracing context per device, the same threads
//! recording on all of them, interleaved, one collector thread serving every context, and one
//! Chrome trace with a process per device. `tests/cuda_devices.rs` is the same on real GPUs.

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Backend, Collected, DynamicLocation, EventList, Lane, TracingContext};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// (Fewer under Miri, where each device's collector thread takes a minute or more.)
const DEVICES: usize = if cfg!(miri) { 2 } else { 3 };
const THREADS: usize = if cfg!(miri) { 2 } else { 4 };
/// Command buffers each thread records on each device.
const LISTS: usize = if cfg!(miri) { 4 } else { 40 };
/// Dispatch zones per command buffer, inside one command-buffer zone.
const DISPATCHES: usize = 4;
const ZONES_PER_DEVICE: usize = THREADS * LISTS * (DISPATCHES + 1);

/// One simulated GPU: its context, its zones, and one stream per recording thread.
struct Device {
    sim: SimBackend,
    ctx: TracingContext<SimBackend>,
    memory: MemorySink,
    streams: Vec<SimStream>,
}

impl Device {
    fn open(index: usize, trace: &ChromeTrace) -> Self {
        let sim = SimBackend::realtime();
        let memory = MemorySink::new();
        let ctx = TracingContext::builder(sim.clone())
            .name(format!("gpu {index}"))
            .sink(memory.clone())
            .sink(trace.sink())
            .build()
            .unwrap();
        let streams: Vec<SimStream> = (0..THREADS).map(|_| sim.stream()).collect();
        for (thread, stream) in streams.iter().enumerate() {
            ctx.name_stream(stream, format!("thread {thread}"));
        }
        Self { sim, ctx, memory, streams }
    }

    fn lane(&self, thread: usize) -> Lane {
        Lane::Stream(self.sim.stream_key(&self.streams[thread]))
    }
}

/// One recording thread: command buffer `i` is open on every device at once, its dispatches
/// recorded device after device, then all of them submitted.
fn record_on_every_device(devices: &[Device], thread: usize) {
    for i in 0..LISTS {
        let mut lists: Vec<EventList<SimBackend>> = devices
            .iter()
            .map(|device| {
                let mut list = device.ctx.list();
                list.zone_begin(&device.streams[thread], DynamicLocation::new(format!("command buffer {i}")))
                    .unwrap();
                list
            })
            .collect();
        for k in 0..DISPATCHES {
            for (device, list) in devices.iter().zip(&mut lists) {
                let stream = &device.streams[thread];
                if k == 0 {
                    list.zone_begin(stream, location!("dispatch")).unwrap();
                } else {
                    list.zone_next(stream, location!("dispatch")).unwrap();
                }
                device.sim.launch(stream, 2_000);
            }
        }
        for (device, mut list) in devices.iter().zip(lists) {
            let stream = &device.streams[thread];
            list.zone_end(stream).unwrap();
            list.zone_end(stream).unwrap();
            device.ctx.submit(list).unwrap();
        }
    }
}

/// The one collector thread: collects every context in turn until recording is over and
/// every device's lists are collected. Returns how many lists it collected from each device.
fn collect_every_device(devices: &[Device], recording: &AtomicBool) -> Vec<usize> {
    let deadline = Instant::now() + Duration::from_secs(if cfg!(miri) { 600 } else { 30 });
    let mut collected = vec![0; devices.len()];
    loop {
        let done = !recording.load(Ordering::Acquire);
        for (device, lists) in devices.iter().zip(&mut collected) {
            if let Collected::Done(report) = device.ctx.collect().unwrap() {
                *lists += report.lists;
            }
        }
        if done && collected.iter().all(|&lists| lists == THREADS * LISTS) {
            return collected;
        }
        assert!(Instant::now() < deadline, "the collector thread collected only {collected:?} lists");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn depth0_names(zones: &[Zone], lane: Lane) -> Vec<String> {
    zones.iter().filter(|z| z.lane == lane && z.depth == 0).map(|z| z.location.name().to_owned()).collect()
}

#[test]
fn threads_record_on_every_device_and_one_collector_thread_serves_them_all() {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-devices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    let devices: Vec<Device> = (0..DEVICES).map(|index| Device::open(index, &trace)).collect();

    let recording = AtomicBool::new(true);
    let collected = std::thread::scope(|s| {
        let collector = s.spawn(|| collect_every_device(&devices, &recording));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn({
                    let devices = &devices;
                    move || record_on_every_device(devices, t)
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        recording.store(false, Ordering::Release);
        collector.join().unwrap()
    });
    assert_eq!(collected, vec![THREADS * LISTS; DEVICES], "the collector thread collected every list");

    let expected_order: Vec<String> = (0..LISTS).map(|i| format!("command buffer {i}")).collect();
    for (index, device) in devices.iter().enumerate() {
        let zones = device.memory.zones();
        assert_eq!(zones.len(), ZONES_PER_DEVICE, "gpu {index}: no zone lost");
        for thread in 0..THREADS {
            let lane = device.lane(thread);
            assert_eq!(
                depth0_names(&zones, lane),
                expected_order,
                "gpu {index}, thread {thread}: stream order"
            );
            let on_lane: Vec<&Zone> = zones.iter().filter(|z| z.lane == lane).collect();
            assert_eq!(on_lane.len(), LISTS * (DISPATCHES + 1));
            let dispatches: Vec<&&Zone> = on_lane.iter().filter(|z| z.depth == 1).collect();
            assert!(
                dispatches.windows(2).all(|w| w[0].gpu_end_ns <= w[1].gpu_begin_ns),
                "gpu {index}, thread {thread}: dispatches in GPU order, none overlapping"
            );
        }
        let stats = device.ctx.stats();
        assert_eq!((stats.zones_emitted, stats.dropped_zones, stats.lists_failed), (ZONES_PER_DEVICE, 0, 0));
        assert_eq!((stats.owned, stats.submitted), (0, 0), "gpu {index}: {stats:?}");
        assert_eq!(stats.unaccounted(), 0, "gpu {index}: {stats:?}");
        assert_eq!(device.ctx.free_slots_walked(), stats.capacity, "gpu {index}: every slot free again");
    }

    let ids: Vec<u32> = devices.iter().map(|d| d.ctx.info().id).collect();
    drop(devices);
    drop(trace);
    let events: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let pids: BTreeSet<u64> = events.iter().map(|e| e["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids, ids.iter().map(|&id| u64::from(id)).collect(), "one process per device, nothing else");
    for (index, id) in ids.iter().enumerate() {
        let of = |e: &&Value| e["pid"] == *id;
        let names: Vec<&Value> = events
            .iter()
            .filter(of)
            .filter(|e| e["name"] == "process_name")
            .map(|e| &e["args"]["name"])
            .collect();
        assert_eq!(names, [&Value::from(format!("gpu {index} (sim)"))]);
        assert_eq!(events.iter().filter(of).filter(|e| e["ph"] == "X").count(), ZONES_PER_DEVICE);
        let tracks: BTreeSet<String> = events
            .iter()
            .filter(of)
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            tracks,
            (0..THREADS).map(|t| format!("thread {t}")).collect(),
            "gpu {index}: a track per stream"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

mod collector_thread {
    use super::*;
    use gpu_event_pool::sink::{ContextInfo, Sink, ZoneBatch};
    use gpu_event_pool::CollectorThread;
    use std::sync::Arc;

    /// Waits for `done` (up to 10 s; 600 under Miri).
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(if cfg!(miri) { 600 } else { 10 });
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn one_collector_thread_collects_every_device_without_anyone_calling_collect() {
        let trace = ChromeTrace::new(std::io::sink());
        let devices: Vec<Device> = (0..DEVICES).map(|index| Device::open(index, &trace)).collect();
        let collector = CollectorThread::spawn(Duration::from_millis(1)).unwrap();
        for device in &devices {
            collector.add(&device.ctx);
        }
        assert_eq!(collector.contexts(), DEVICES);
        std::thread::scope(|s| {
            for thread in 0..THREADS {
                let devices = &devices;
                s.spawn(move || record_on_every_device(devices, thread));
            }
        });
        // Nobody else collects: the thread must collect every list of every device.
        for device in &devices {
            eventually("the collector thread to collect every list", || {
                let stats = device.ctx.stats();
                stats.lists_collected == THREADS * LISTS && stats.zones_emitted >= ZONES_PER_DEVICE
            });
        }
        assert!(format!("{collector:?}").contains(&format!("contexts: {DEVICES}")), "{collector:?}");
        // Stopped, so that the statistics are quiet (exact).
        drop(collector);
        for device in &devices {
            let stats = device.ctx.stats();
            assert_eq!(stats.zones_emitted, ZONES_PER_DEVICE, "nothing lost");
            assert_eq!((stats.dropped_zones, stats.unaccounted()), (0, 0));
            for thread in 0..THREADS {
                let zones = device.memory.zones();
                let names = depth0_names(&zones, device.lane(thread));
                let expected: Vec<String> = (0..LISTS).map(|i| format!("command buffer {i}")).collect();
                assert_eq!(names, expected, "each stream's command buffers in order");
            }
        }
    }

    /// A sink that says when it is dropped (with the last of its context).
    struct DropFlag(Arc<AtomicBool>);
    impl Sink for DropFlag {
        fn zones(&mut self, _context: &ContextInfo, _batch: ZoneBatch<'_>) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_collector_thread_never_keeps_a_context_alive_and_serves_the_rest() {
        let collector = CollectorThread::spawn(Duration::from_millis(1)).unwrap();
        let gone = Arc::new(AtomicBool::new(false));
        let first_gpu = SimBackend::realtime();
        let first = TracingContext::builder(first_gpu).sink(DropFlag(Arc::clone(&gone))).build().unwrap();
        let second_gpu = SimBackend::realtime();
        let zones = MemorySink::new();
        let second = TracingContext::builder(second_gpu.clone()).sink(zones.clone()).build().unwrap();
        collector.add(&first);
        collector.add(&second);
        std::thread::sleep(Duration::from_millis(5));

        drop(first);
        assert_eq!(collector.contexts(), 1, "a context whose last handle is gone is no longer served");
        eventually("the dropped context to be destroyed while the collector thread runs", || {
            gone.load(Ordering::SeqCst)
        });

        // The other context is still collected by the thread.
        let stream = second_gpu.stream();
        let mut list = second.list();
        {
            let _zone = list.zone(&stream, location!("after"));
            second_gpu.launch(&stream, 10_000);
        }
        second.submit(list).unwrap();
        eventually("the remaining context's zone", || !zones.zones().is_empty());
        assert_eq!(zones.zones()[0].location.name(), "after");

        drop(collector);
        assert_eq!(second.stats().unaccounted(), 0);
    }
}
