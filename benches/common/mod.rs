//! What the benchmarks share: the baselines, a backend that costs nothing, JSON results,
//! criterion settings, and a common face over our context and the seed's port.
#![allow(dead_code)]

pub mod null_backend;
pub mod results;
pub mod seed_port;

use criterion::Criterion;
use gpu_event_pool::{Backend, Collected, SourceLocation, TracingContext};
use seed_port::{SeedContext, SeedList};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Thread counts every multi-threaded benchmark runs at (above the core count they show
/// oversubscription).
pub const THREADS: [usize; 5] = [1, 2, 4, 8, 16];

/// Where criterion writes its reports: `$CRITERION_HOME`, else `<target>/criterion`.
pub fn criterion_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(dir);
    }
    // Benchmarks run in their package's folder (benches/): the default is the workspace's.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")), PathBuf::from);
    target.join("criterion")
}

/// Criterion settings shared by every benchmark (command-line flags override them):
/// short warm-up and measurement so that the whole set fits a few minutes.
pub fn criterion() -> Criterion {
    Criterion::default()
        .output_directory(&criterion_dir())
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .nresamples(10_000)
        .configure_from_args()
}

/// Whether the executable was asked to benchmark (`cargo bench` passes `--bench`); without
/// it (`cargo test --benches`) criterion only checks that each benchmark runs once.
pub fn benchmarking() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Reads criterion's typical time per iteration (the regression slope when it sampled
/// linearly, else the mean), in nanoseconds, for `group/function/parameter`, if that
/// benchmark ran after `since`.
pub fn criterion_estimate_ns(group: &str, function: &str, parameter: &str, since: SystemTime) -> Option<f64> {
    let path = criterion_dir().join(group).join(function).join(parameter).join("new").join("estimates.json");
    let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
    if modified < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    let point = |key: &str| json.get(key)?.get("point_estimate")?.as_f64();
    point("slope").or_else(|| point("mean"))
}

/// Runs `work(thread_index)` on `threads` scoped threads released together by a barrier.
/// Returns the wall time from the first thread's start to the last thread's end, and the
/// distinct CPUs the threads ended on.
///
/// Each thread reads the clock itself: with as many threads as cores or more, the thread
/// that released them may only run again after some have finished, so its clock would
/// start late.
pub fn timed_threads(threads: usize, work: impl Fn(usize) + Sync) -> (Duration, Vec<u32>) {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant, Option<u32>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    work(t);
                    (start, Instant::now(), results::current_cpu())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    });
    let mut cpus: Vec<u32> = spans.iter().filter_map(|s| s.2).collect();
    cpus.sort_unstable();
    cpus.dedup();
    (span(spans.iter().map(|s| (s.0, s.1))), cpus)
}

/// The time from the earliest start to the latest end of some `(start, end)` pairs.
pub fn span(pairs: impl Iterator<Item = (Instant, Instant)>) -> Duration {
    let (first, last) = pairs.fold((None::<Instant>, None::<Instant>), |(a, b), (s, e)| {
        (Some(a.map_or(s, |a| a.min(s))), Some(b.map_or(e, |b| b.max(e))))
    });
    match (first, last) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    }
}

/// One face over our [`TracingContext`] and the seed's [`SeedContext`], so that the
/// end-to-end benchmarks drive both with the same code.
pub trait Tracer: Sync {
    /// The backend's stream.
    type Stream;
    /// A command buffer's list of events.
    type List: Send;
    /// Name in reports.
    fn name(&self) -> &'static str;
    /// A new stream for a recording thread.
    fn stream(&self) -> Self::Stream;
    /// A new, empty list.
    fn list(&self) -> Self::List;
    /// Begins a zone; false if it was dropped.
    fn begin(&self, list: &mut Self::List, stream: &Self::Stream, location: &'static SourceLocation) -> bool;
    /// Ends the innermost zone and begins the next one; false if dropped.
    fn next(&self, list: &mut Self::List, stream: &Self::Stream, location: &'static SourceLocation) -> bool;
    /// Ends the innermost zone; false if dropped.
    fn end(&self, list: &mut Self::List, stream: &Self::Stream) -> bool;
    /// Submits a list.
    fn submit(&self, list: Self::List);
    /// Throws a recorded list away without submitting it (its events go back to the pool).
    fn discard(&self, list: Self::List);
    /// Collects what the design collects in one call; returns how many events or zones.
    fn collect(&self) -> usize;
    /// Collects everything submitted so far, waiting for the GPU.
    fn flush(&self);
    /// Zones dropped so far (exhaustion, errors).
    fn dropped(&self) -> usize;
    /// Lists submitted and not yet collected (approximate while others run).
    fn lists_in_flight(&self) -> usize;
    /// Our statistics (None for the seed).
    fn stats(&self) -> Option<gpu_event_pool::Stats> {
        None
    }
}

/// Our context.
#[derive(Debug)]
pub struct Ours<B: Backend> {
    /// The context.
    pub ctx: TracingContext<B>,
    /// Each recorder also calls `collect()` right after each submit (the reads are shared).
    pub collect_after_submit: bool,
}

impl<B: Backend> Tracer for Ours<B> {
    type Stream = B::Stream;
    type List = gpu_event_pool::EventList<B>;

    fn name(&self) -> &'static str {
        if self.collect_after_submit {
            "ours_sharing"
        } else {
            "ours"
        }
    }
    fn stream(&self) -> B::Stream {
        self.ctx.backend().create_stream().expect("stream")
    }
    fn list(&self) -> Self::List {
        self.ctx.list()
    }
    fn begin(&self, list: &mut Self::List, stream: &B::Stream, location: &'static SourceLocation) -> bool {
        list.zone_begin(stream, location).is_ok()
    }
    fn next(&self, list: &mut Self::List, stream: &B::Stream, location: &'static SourceLocation) -> bool {
        list.zone_next(stream, location).is_ok()
    }
    fn end(&self, list: &mut Self::List, stream: &B::Stream) -> bool {
        list.zone_end(stream).is_ok()
    }
    fn submit(&self, list: Self::List) {
        // A refused list is dropped, which releases its slots and counts it as discarded.
        let _ = self.ctx.submit(list);
        if self.collect_after_submit {
            let _ = self.ctx.collect();
        }
    }
    fn discard(&self, list: Self::List) {
        drop(list);
    }
    fn collect(&self) -> usize {
        match self.ctx.collect() {
            Ok(Collected::Done(report)) => report.zones,
            Ok(Collected::Busy) | Err(_) => 0,
        }
    }
    fn flush(&self) {
        let _ = self.ctx.flush();
    }
    fn dropped(&self) -> usize {
        self.ctx.stats().dropped_zones
    }
    fn lists_in_flight(&self) -> usize {
        let stats = self.ctx.stats();
        stats.lists_submitted.saturating_sub(stats.lists_collected)
    }
    fn stats(&self) -> Option<gpu_event_pool::Stats> {
        Some(self.ctx.stats())
    }
}

/// The seed's port, plus what the seed's users do around it: a command buffer is destroyed
/// (its events freed) only after it has been collected, so submitted lists wait here until
/// the next collect.
#[derive(Debug)]
pub struct Seed<B: Backend> {
    /// The context.
    pub ctx: SeedContext<B>,
    to_free: Mutex<Vec<SeedList>>,
    dropped: AtomicUsize,
    in_flight: AtomicUsize,
}

impl<B: Backend> Seed<B> {
    /// Wraps a seed context.
    pub fn new(ctx: SeedContext<B>) -> Self {
        Self {
            ctx,
            to_free: Mutex::new(Vec::new()),
            dropped: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn count(&self, recorded: Result<u32, seed_port::SeedError>) -> bool {
        let ok = recorded.is_ok();
        if !ok {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

impl<B: Backend> Tracer for Seed<B>
where
    B::Stream: Sync,
{
    type Stream = B::Stream;
    type List = SeedList;

    fn name(&self) -> &'static str {
        "seed_port"
    }
    fn stream(&self) -> B::Stream {
        self.ctx.backend().create_stream().expect("stream")
    }
    fn list(&self) -> SeedList {
        self.ctx.list()
    }
    fn begin(&self, list: &mut SeedList, stream: &B::Stream, _location: &'static SourceLocation) -> bool {
        self.count(self.ctx.zone_begin(list, stream))
    }
    fn next(&self, list: &mut SeedList, stream: &B::Stream, _location: &'static SourceLocation) -> bool {
        // The seed has no shared event between adjacent zones: an end and a begin.
        let ended = self.count(self.ctx.zone_end(list, stream));
        self.count(self.ctx.zone_begin(list, stream)) && ended
    }
    fn end(&self, list: &mut SeedList, stream: &B::Stream) -> bool {
        self.count(self.ctx.zone_end(list, stream))
    }
    fn submit(&self, list: SeedList) {
        self.ctx.submit(&list);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.to_free.lock().unwrap_or_else(|p| p.into_inner()).push(list);
    }
    fn discard(&self, list: SeedList) {
        // A command buffer destroyed unsubmitted: the seed's free reports its events with
        // timestamp 0 and returns them, under the lock.
        self.ctx.free(list);
    }
    fn collect(&self) -> usize {
        // Every list taken here was submitted before it was pushed, so this collect reads
        // it: freeing it afterwards is what the seed's users do.
        let lists = std::mem::take(&mut *self.to_free.lock().unwrap_or_else(|p| p.into_inner()));
        let events = self.ctx.collect(|_, _| {});
        for list in lists {
            self.ctx.free(list);
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        events
    }
    fn flush(&self) {
        self.collect();
    }
    fn dropped(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }
    fn lists_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}
