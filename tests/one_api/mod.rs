//! One body of application code for every source: the same lists, guards, frames and sinks on
//! the simulated GPU (events and activity records: tests/sources.rs, in CI), CUDA events and
//! CUPTI (tests/cupti_source.rs, on a GPU), with only the backend changed. What it checks is
//! what a runtime relies on whatever times its zones: nesting, stream order, frames and
//! their statistics, each list's results, one host clock, launch arrows.
#![allow(dead_code)]

use super::trace_check::{check_flows, check_nesting, SharedWriter};
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::frames::FrameStats;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::results::ResultsSink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Backend, Lane, TracingContext};
use std::collections::BTreeMap;

/// A GPU as the body drives it.
pub trait Gpu: Sync {
    type B: Backend + Clone;
    fn backend(&self) -> Self::B;
    fn stream(&self) -> <Self::B as Backend>::Stream;
    /// Queues work of about `ns` nanoseconds on `stream`.
    fn kernel(&self, stream: &<Self::B as Backend>::Stream, ns: i64);
    /// Waits until everything queued on `stream` has run.
    fn synchronize(&self, stream: &<Self::B as Backend>::Stream);
}

pub const THREADS: usize = 4;
pub const FRAMES: u64 = 6;
const USER_ZONES: [&str; 3] = ["command buffer", "first pass", "second pass"];
const FIRST_NS: i64 = 20_000;
const SECOND_NS: i64 = 30_000;

/// What the body found, for a caller that checks more (CUDA's and CUPTI's own shapes).
pub struct Ran {
    pub zones: Vec<Zone>,
    pub context: String,
}

/// Records `FRAMES` frames; in each, `THREADS` threads record one command buffer each on a
/// stream of their own (a first and a second pass, each around one kernel), submit it and
/// collect; then checks every zone.
pub fn one_api<G: Gpu>(gpu: &G) -> Ran
where
    <G::B as Backend>::Stream: Sync,
{
    let memory = MemorySink::new();
    let (results, delivered) = ResultsSink::channel();
    let frames = FrameStats::new(FRAMES as usize).keep_zones(FRAMES as usize, 4096);
    let (chrome_out, chrome_bytes) = SharedWriter::new();
    let trace = ChromeTrace::new(chrome_out);
    let backend = gpu.backend();
    let ctx: TracingContext<G::B> = TracingContext::builder(backend.clone())
        .name("one api")
        .record_launches(true)
        .sink(memory.clone())
        .sink(results)
        .sink(frames.sink())
        .sink(trace.sink())
        .build()
        .expect("a context");
    drop(trace);
    let streams: Vec<_> = (0..THREADS).map(|_| gpu.stream()).collect();
    let before = ctx.backend().host_now_ns();
    let mut ids = Vec::new();
    for frame in 0..FRAMES {
        ctx.frame(frame);
        let lists: Vec<u64> = std::thread::scope(|s| {
            let (ctx, gpu) = (&ctx, gpu);
            let handles: Vec<_> = streams
                .iter()
                .map(|stream| {
                    s.spawn(move || {
                        let mut list = ctx.list();
                        {
                            let mut buffer = list.zone(stream, location!("command buffer"));
                            let mut pass = buffer.zone(stream, location!("first pass"));
                            gpu.kernel(stream, FIRST_NS);
                            pass.next(location!("second pass"));
                            gpu.kernel(stream, SECOND_NS);
                        }
                        let id = list.id();
                        ctx.submit(list).unwrap();
                        ctx.collect().unwrap();
                        id
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        ids.extend(lists);
    }
    for stream in &streams {
        gpu.synchronize(stream);
    }
    let after = ctx.backend().host_now_ns();
    ctx.flush().unwrap();
    let stats = ctx.stats();
    let context = ctx.info().name.clone();
    drop(ctx);

    let zones = memory.zones();
    let user: Vec<&Zone> = zones.iter().filter(|z| USER_ZONES.contains(&z.location.name())).collect();
    assert_eq!(stats.dropped_zones, 0, "{stats:?}");
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!(user.len(), 3 * THREADS * FRAMES as usize, "every zone comes out once: {stats:?}");

    // Results: each list comes back once, its zones nested as recorded.
    let mut returned: Vec<u64> = Vec::new();
    for list in delivered.try_iter() {
        returned.push(list.list_id);
        let tree = list.tree();
        let names: Vec<(&str, Vec<&str>)> = tree
            .iter()
            .map(|node| {
                (node.zone.location.name(), node.children.iter().map(|c| c.zone.location.name()).collect())
            })
            .collect();
        assert_eq!(names, [("command buffer", vec!["first pass", "second pass"])], "list {}", list.list_id);
        assert!(list.frame.is_some_and(|f| f < FRAMES));
    }
    returned.sort_unstable();
    ids.sort_unstable();
    assert_eq!(returned, ids, "every list's results, once");

    // Nesting, and the work inside: on the host clock and the GPU's alike.
    let mut per_stream: BTreeMap<Lane, Vec<&Zone>> = BTreeMap::new();
    for z in &user {
        // One host clock: every zone between the host's reads before and after.
        assert!(before <= z.host_begin_ns && z.host_end_ns <= after, "{z:?} not in {before}..{after}");
        // Launch arrows: the host asked before the GPU began.
        let launch = z.launch.expect("record_launches: every zone keeps its launch");
        assert!(launch.host_begin_ns <= z.host_begin_ns, "{z:?}");
        per_stream.entry(z.lane).or_default().push(z);
    }
    assert_eq!(per_stream.len(), THREADS, "one lane per stream");
    for zones in per_stream.values_mut() {
        zones.sort_by_key(|z| (z.host_begin_ns, z.depth));
        for buffer in zones.chunks(3) {
            let [cb, first, second] = buffer else { panic!("{buffer:?}") };
            assert_eq!(
                [cb.location.name(), first.location.name(), second.location.name()],
                USER_ZONES,
                "stream order, parents first"
            );
            assert_eq!((cb.depth, first.depth, second.depth), (0, 1, 1));
            assert!(cb.host_begin_ns <= first.host_begin_ns && first.host_end_ns <= second.host_begin_ns);
            assert!(second.host_end_ns <= cb.host_end_ns, "{buffer:?}");
            assert!(first.duration_ns() as i64 >= FIRST_NS * 9 / 10, "{first:?}");
            assert!(second.duration_ns() as i64 >= SECOND_NS * 9 / 10, "{second:?}");
            assert_eq!(first.frame, cb.frame);
        }
        for pair in zones.chunks(3).collect::<Vec<_>>().windows(2) {
            assert!(pair[0][0].host_end_ns <= pair[1][0].host_begin_ns, "lists of a stream in GPU order");
        }
    }

    // Statistics over frames: every frame kept, each with its command buffers.
    let summary = frames.frames();
    assert_eq!(summary.len(), FRAMES as usize, "{summary:?}");
    for frame in 0..FRAMES {
        let kept = frames.frame(frame).expect("a kept frame");
        let roots: Vec<&str> = kept.tree().iter().map(|n| n.zone.location.name()).collect();
        assert_eq!(roots, vec!["command buffer"; THREADS], "frame {frame}");
    }
    let second = frames.zone("second pass").expect("second pass statistics");
    assert_eq!(second.count, THREADS as u64 * FRAMES);
    assert!(second.p50_ns as i64 >= SECOND_NS * 9 / 10, "{second:?}");

    // The Chrome trace: nested tracks, an arrow from every zone's launch to the zone.
    let bytes = chrome_bytes.lock().unwrap().clone();
    let events: Vec<serde_json::Value> = serde_json::from_slice(&bytes).expect("a JSON trace");
    check_nesting(&events);
    assert_eq!(check_flows(&events), user.len(), "one arrow per zone");
    Ran { zones, context }
}
