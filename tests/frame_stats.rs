//! `FrameStats` against a brute-force computation (every duration kept and sorted), the window
//! kept exactly, and its memory measured under a million zones (a counting allocator, per
//! thread).

use gpu_event_pool::sink::frames::{FrameStats, DEFAULT_TREE_FRAMES};
use gpu_event_pool::sink::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::{location, DynamicLocation, Lane, SourceLocation, TracingContext};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Counts the bytes live on each thread (a thread's own allocations and frees).
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

// Safety: every call is forwarded to `System` unchanged; the count is a thread-local `Cell`
// without a destructor, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.with(|l| l.set(l.get() + layout.size() as isize));
        // Safety: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.with(|l| l.set(l.get() - layout.size() as isize));
        // Safety: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.with(|l| l.set(l.get() + new_size as isize - layout.size() as isize));
        // Safety: as `GlobalAlloc::realloc` requires, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE.with(Cell::get)
}

fn info() -> ContextInfo {
    ContextInfo {
        id: 1,
        name: "test".to_owned(),
        backend: "sim",
        base: Calibration { gpu_ns: 0, host_ns: 0 },
        host_clock_origin: None,
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Log-uniform over [1 ns, 2^30 ns], with repeated values mixed in.
    fn duration(&mut self) -> i64 {
        match self.below(4) {
            0 => [0, 1, 63, 64, 1_000][self.below(5) as usize],
            _ => {
                let bits = 1 + self.below(30);
                ((1u64 << bits) + self.below(1u64 << bits)) as i64
            }
        }
    }
}

fn zone(name: &Arc<DynamicLocation>, frame: u64, begin: i64, duration: i64) -> Zone {
    Zone::new(Arc::clone(name), Lane::Stream(1), 0, begin, begin + duration).with_frame(frame)
}

/// The nearest-rank percentile of sorted `durations`.
fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[test]
fn figures_match_a_brute_force_computation_over_exactly_the_newest_n_frames() {
    let seeds: u64 = if cfg!(miri) { 3 } else { 60 };
    for seed in 1..=seeds {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let n = 1 + rng.below(40) as usize;
        let names: Vec<Arc<DynamicLocation>> =
            (0..3).map(|i| Arc::new(DynamicLocation::new(format!("pass {i}")))).collect();
        let stats = FrameStats::new(n);
        let mut sink = stats.sink();
        // The brute force: the window's rule on a set of ids, and every duration kept.
        let mut kept: BTreeSet<u64> = BTreeSet::new();
        let mut durations: Vec<(u64, usize, u64)> = Vec::new();
        let mut late = 0;
        let mut current = 0u64;
        for batch in 0..(n as u64 * 3 + rng.below(50)) {
            current += rng.below(3);
            // Mostly the current frame; sometimes a list of an older one, collected late.
            let frame = current.saturating_sub(if rng.below(4) == 0 { rng.below(8) } else { 0 });
            let mut zones = Vec::new();
            for _ in 0..1 + rng.below(12) {
                let name = rng.below(3) as usize;
                let d = rng.duration();
                zones.push(zone(&names[name], frame, 0, d));
            }
            sink.zones(&info(), ZoneBatch { list_id: batch, zones: &zones }).unwrap();
            if !kept.contains(&frame) {
                if kept.len() == n && frame < *kept.first().unwrap() {
                    late += zones.len() as u64;
                    continue;
                }
                kept.insert(frame);
                if kept.len() > n {
                    let oldest = kept.pop_first().unwrap();
                    durations.retain(|&(f, _, _)| f != oldest);
                }
            }
            for (z, _) in zones.iter().zip(0..) {
                let name = names.iter().position(|l| l.name == z.location.name()).unwrap();
                durations.push((frame, name, z.duration_ns()));
            }
        }
        assert_eq!(stats.frames().iter().map(|f| f.id).collect::<BTreeSet<_>>(), kept, "seed {seed}");
        assert!(stats.frames().len() <= n);
        assert_eq!(stats.skipped().late, late, "seed {seed}");
        let summary = stats.summary();
        for (index, location) in names.iter().enumerate() {
            let mut mine: Vec<u64> = durations.iter().filter(|d| d.1 == index).map(|d| d.2).collect();
            let Some(got) = summary.iter().find(|z| z.name == location.name) else {
                assert!(mine.is_empty(), "seed {seed}: {} missing", location.name);
                continue;
            };
            mine.sort_unstable();
            let frames: BTreeSet<u64> = durations.iter().filter(|d| d.1 == index).map(|d| d.0).collect();
            let mean = mine.iter().map(|&d| d as f64).sum::<f64>() / mine.len() as f64;
            assert_eq!((got.count, got.frames), (mine.len() as u64, frames.len()), "seed {seed}");
            assert_eq!((got.min_ns, got.max_ns), (mine[0], *mine.last().unwrap()), "seed {seed}");
            assert!(
                (got.mean_ns - mean).abs() <= mean * 1e-12,
                "seed {seed}: mean {} vs {mean}",
                got.mean_ns
            );
            for (p, reported) in [(0.5, got.p50_ns), (0.99, got.p99_ns)] {
                let exact = nearest_rank(&mine, p);
                assert!(
                    reported.abs_diff(exact) <= exact / 64,
                    "seed {seed}: p{p} {reported} vs exact {exact}"
                );
            }
            for p in [0.0, 0.01, 0.25, 0.9, 0.999, 1.0] {
                let exact = nearest_rank(&mine, p);
                let reported = stats.percentile(&location.name, p).unwrap();
                assert!(
                    reported.abs_diff(exact) <= exact / 64,
                    "seed {seed}: p{p} {reported} vs exact {exact}"
                );
            }
        }
    }
}

#[test]
fn the_newest_frames_keep_their_zones_as_a_tree_up_to_the_cap() {
    static FRAME: &SourceLocation = location!("frame");
    static PASS: &SourceLocation = location!("pass");
    let stats = FrameStats::new(10).keep_zones(2, 5);
    let mut sink = stats.sink();
    for frame in 0..4u64 {
        for list in 0..2 {
            let zones = [
                Zone::new(FRAME, Lane::Stream(list), 0, 0, 100).with_frame(frame),
                Zone::new(PASS, Lane::Stream(list), 1, 10, 20).with_frame(frame),
                Zone::new(PASS, Lane::Stream(list), 1, 30, 40).with_frame(frame),
            ];
            sink.zones(&info(), ZoneBatch { list_id: frame * 2 + list, zones: &zones }).unwrap();
        }
    }
    assert!(stats.frame(1).is_none(), "older than the newest two");
    let newest = stats.frame(3).unwrap();
    assert_eq!((newest.zones.len(), newest.truncated), (5, 1));
    let tree = newest.tree();
    let shape: Vec<(&str, usize)> = tree.iter().map(|n| (n.zone.location.name(), n.children.len())).collect();
    assert_eq!(shape, [("frame", 2), ("frame", 1)]);
    assert_eq!(
        stats.frames().iter().map(|f| (f.id, f.zones)).collect::<Vec<_>>(),
        [(0, 6), (1, 6), (2, 6), (3, 6)]
    );
    assert_eq!(DEFAULT_TREE_FRAMES, 2);
}

#[test]
fn zones_without_a_frame_and_names_past_the_limit_are_counted_apart() {
    let stats = FrameStats::new(4).max_names(2);
    let mut sink = stats.sink();
    let names: Vec<Arc<DynamicLocation>> =
        (0..3).map(|i| Arc::new(DynamicLocation::new(format!("n{i}")))).collect();
    let zones: Vec<Zone> = names.iter().map(|n| zone(n, 1, 0, 10)).collect();
    sink.zones(&info(), ZoneBatch { list_id: 1, zones: &zones }).unwrap();
    let unframed = Zone::new(Arc::clone(&names[0]), Lane::Stream(1), 0, 0, 10);
    sink.zones(&info(), ZoneBatch { list_id: 2, zones: &[unframed] }).unwrap();
    let skipped = stats.skipped();
    assert_eq!((skipped.unframed, skipped.untracked, skipped.late), (1, 1, 0));
    assert_eq!(stats.summary().iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ["n0", "n1"]);
    assert_eq!(stats.frames()[0].zones, 3, "the untracked zone is still one of its frame's");
}

#[test]
#[cfg_attr(miri, ignore = "a million zones")]
fn memory_stays_bounded_under_a_million_zones() {
    const FRAMES_KEPT: usize = 300;
    const NAMES: usize = 20;
    const ZONES_PER_FRAME: usize = 500;
    let names: Vec<Arc<DynamicLocation>> =
        (0..NAMES).map(|i| Arc::new(DynamicLocation::new(format!("kernel {i}")))).collect();
    let mut rng = Rng(42);
    let mut batch = Vec::with_capacity(ZONES_PER_FRAME);
    let before = live_bytes();
    let stats = FrameStats::new(FRAMES_KEPT);
    let mut sink = stats.sink();
    let mut feed = |frames: std::ops::Range<u64>, batch: &mut Vec<Zone>| {
        for frame in frames {
            batch.clear();
            for i in 0..ZONES_PER_FRAME {
                // 100 ns to 10 ms: 17 powers of two, each name's durations spread over all.
                let d = 100 + rng.below(10_000_000) as i64 / (1 + rng.below(1000) as i64);
                batch.push(zone(&names[i % NAMES], frame, 0, d));
            }
            sink.zones(&info(), ZoneBatch { list_id: frame, zones: batch }).unwrap();
        }
    };
    feed(0..1000, &mut batch); // 5 x 10^5 zones: the window has been full for 700 frames
    let at_half = live_bytes() - before;
    feed(1000..2000, &mut batch); // 10^6 zones in all
    let at_1m = live_bytes() - before;
    eprintln!("FrameStats({FRAMES_KEPT}) live bytes: {at_half} after 5 x 10^5 zones, {at_1m} after 10^6");
    assert_eq!(stats.summary().iter().map(|z| z.count).sum::<u64>(), (FRAMES_KEPT * ZONES_PER_FRAME) as u64);
    // The bound of docs/design.md, section 12, for these figures: per name 60 blocks of 256
    // bytes; per frame and name at most one 8-byte pair per duration (25 here), twice over for
    // a vector's spare capacity, and its entry; the newest two frames' zones.
    let per_frame_name = 2 * 8 * (ZONES_PER_FRAME / NAMES) + 128;
    let bound = NAMES * (60 * (256 + 8) + 256)
        + FRAMES_KEPT * (256 + NAMES * per_frame_name)
        + 2 * DEFAULT_TREE_FRAMES * ZONES_PER_FRAME * std::mem::size_of::<Zone>();
    assert!((at_1m as usize) < bound, "{at_1m} bytes live, bound {bound}");
    // Twice the zones, not twice the memory: 1000 more frames came and went.
    assert!(at_1m < at_half + at_half / 20, "{at_half} -> {at_1m}");
}

#[test]
fn several_contexts_feed_one_window_matched_by_frame_id() {
    let stats = FrameStats::new(8);
    let gpus: Vec<_> = (0..2).map(|_| gpu_event_pool::sim::SimBackend::manual()).collect();
    let contexts: Vec<_> = gpus
        .iter()
        .map(|gpu| TracingContext::builder(gpu.clone()).sink(stats.sink()).build().unwrap())
        .collect();
    for step in 0..3 {
        for (ctx, gpu) in contexts.iter().zip(&gpus) {
            ctx.frame(step);
            let stream = gpu.stream();
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("step")).unwrap();
            gpu.launch(&stream, 1_000 * (step as i64 + 1));
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
            ctx.flush().unwrap();
        }
    }
    let frames: Vec<(u64, u64)> = stats.frames().iter().map(|f| (f.id, f.zones)).collect();
    assert_eq!(frames, [(0, 2), (1, 2), (2, 2)]);
    let step = stats.zone("step").unwrap();
    assert_eq!((step.count, step.min_ns, step.max_ns, step.mean_ns), (6, 1_000, 3_000, 2_000.0));
    let totals: BTreeMap<u64, usize> = stats.frames().iter().map(|f| (f.id, f.zones as usize)).collect();
    assert_eq!(totals.values().sum::<usize>(), 6);
}
