//! `phases`: where the time goes end to end (issue 19, "profile first"). On the no-cost
//! backend ([`NullBackend`]), N recording threads record lists of 64 zones (a coarse zone
//! around 63 `zone_next` dispatches, 66 events, as in `benches/record.rs`) while one
//! collector thread drains them; each variant removes one suspect:
//!
//! | variant | recorders | collector | sink |
//! |---|---|---|---|
//! | `e2e_memory` | record + submit | `collect` loop | `MemorySink` (cleared by the collector after each collect) |
//! | `e2e_nop` | record + submit | `collect` loop | a sink whose `zones` returns `Ok` at once |
//! | `e2e_none` | record + submit | `collect` loop | none (what `benches/record.rs` measures) |
//! | `e2e_memory_clocked`, `e2e_nop_clocked` | record + submit | `collect` loop | as above, on [`ClockedNull`]: times advance as the host's clock does |
//! | `e2e_nop_collectors2`, `e2e_nop_collectors4` | record + submit | 2 or 4 threads, each a `collect` loop (the first to see every recorder done flushes): whether collectors scale; `coll`, `busy` and `ccpu` sum over them | a sink whose `zones` returns `Ok` at once |
//! | `e2e_nop_batch192` | record + submit | waits (sleeping) until 192 lists are in flight, then collects them in one call: a read phase that builds 1.3 MB of zones before the emitter takes them | a sink that does nothing |
//! | `e2e_chrome` | record + submit | `collect` loop | `ChromeTraceSink` on a `BufWriter` over `std::io::sink()` |
//! | `submit_release` | record + submit | `collect` loop, but every list's read fails at its first `elapsed` (a backend whose reads error), so the emitter only walks the list's records, clears them and releases its slots: no time reads, no zone building, no placing, no sink | none |
//! | `record_only` | record, lists dropped unsubmitted (one CAS returns the slots) | none | none |
//! | `record_private` | the same, but each thread records into a context of its own: no state shared between threads at all, so its scaling from 1 to N threads is this machine's ceiling for this code (cores, hyperthreads, clock) | none | none |
//!
//! and, on one thread with no context at all:
//!
//! | variant | what |
//! |---|---|
//! | `serial_batch4`, `serial_batch32`, `serial_batch256` | one thread records N lists, then collects them in one `collect` call (nop sink), and again: the collector's cost per zone against how many lists one read phase takes (N x 8.4 KB of slots read, N x 6.7 KB of zones built); `coll` is the `collect` calls alone, `ns/zone` record + collect |
//! | `sink_chrome_direct` | `ChromeTraceSink::zones` fed batches of 64 zones (a `BufWriter` over `std::io::sink()`) |
//! | `sink_memory_direct` | `MemorySink::zones` fed the same batches (cleared every 256 batches) |
//! | `json_serde_event` | per zone, what the Chrome sink's serde path does: `ts`/`dur` formatted as `RawValue`s and `serde_json::to_string` of an equivalent struct (`args` flattened) |
//! | `json_serde_noflatten` | the same without `#[serde(flatten)]` on `args` |
//! | `json_write_fmt` | the same event text written by hand (`write!` into one reused `String`), no serde |
//!
//! Figures per run (one context per run, after a short warm-up run on it):
//!
//! - `zones/s`: zones emitted (recorded for `submit_release`, `record_only` and `record_private`) per second
//!   of wall time, from the first recorder's start until the collector's final flush ends;
//!   `ns/zone` is its inverse.
//! - `rec`: recording ns per zone per thread: the time each recorder spent inside its
//!   record + submit calls (backpressure waits excluded) over its zones, averaged over
//!   threads. Above the core count it includes time descheduled.
//! - `coll`: the collector thread's time inside `collect` and the final `flush`, per zone.
//! - `emit`: `Stats::emitter_ns / zones_emitted`: the serial part (placing, ordering, sinks,
//!   release). `read` = `coll - emit`: the read phase (taking lists, time reads, building
//!   zones).
//! - `busy`: the collector's time in `collect` over the wall time: near 100%, the collector
//!   is the ceiling. `cpu`: the collector thread's CPU time over the wall time, and `ccpu`
//!   its CPU time per zone (on a shared machine the wall-clock columns include time spent
//!   waiting for a core; these do not). `bp`: backpressure waits (a recorder found 256 lists
//!   in flight and yielded) per list recorded. `l/c`: lists per `collect` call that
//!   collected any.
//!
//! Environment: `BENCH_PHASES_SECONDS` (measured seconds per run, default 1; the warm-up is
//! a quarter of it), `BENCH_PHASES_THREADS` (default `1,2,4,8,16`), `BENCH_PHASES_VARIANTS`
//! (comma-separated names to run, default all), `BENCH_PHASES_JSONL` (where the JSON lines
//! go, default `$BENCH_RESULTS_DIR/phases.jsonl`, else `<target>/bench-results/...`; one
//! object per run, appended), `BENCH_MACHINE` (a label in each line). Without `--bench`
//! (`cargo test -p gpu-event-pool-benches --benches`) it runs a few milliseconds of each variant and writes nothing.
//!
//! The in-flight bound is the bench's own (one shared counter of lists submitted, one of
//! lists collected), not `Stats`: a `stats()` per list would add its own shared reads to
//! recording.

mod common;

use common::null_backend::{NullBackend, NullEvent, NullGraph, NullStream};
use common::results::{cores_available, machine, results_dir};
use crossbeam_utils::CachePadded;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::{
    location, Backend, BackendError, Collected, Elapsed, Lane, SourceLocation, TracingContext, Verbosity,
};
use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::value::RawValue;
use std::fmt::Write as _;
use std::io::{BufWriter, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const ZONES_PER_LIST: usize = 64;
/// Pool size: far more than the lists in flight.
const CAPACITY: u32 = 64 * 1024;
/// Lists submitted and not yet collected above which recorders wait (as in `record`).
const MAX_LISTS_IN_FLIGHT: u64 = 256;

static COARSE: &SourceLocation = location!("command buffer", Verbosity::Coarse);
static DISPATCH: &SourceLocation = location!("dispatch");

const E2E: [&str; 12] = [
    "e2e_memory",
    "e2e_nop",
    "e2e_nop_collectors2",
    "e2e_nop_collectors4",
    "e2e_none",
    "e2e_chrome",
    "e2e_memory_clocked",
    "e2e_nop_clocked",
    "e2e_nop_batch192",
    "submit_release",
    "record_only",
    "record_private",
];
const SINGLE: [&str; 8] = [
    "serial_batch4",
    "serial_batch32",
    "serial_batch256",
    "sink_chrome_direct",
    "sink_memory_direct",
    "json_serde_event",
    "json_serde_noflatten",
    "json_write_fmt",
];

/// A sink that takes every batch and does nothing with it.
struct NopSink;

impl Sink for NopSink {
    fn zones(&mut self, _context: &ContextInfo, _batch: ZoneBatch<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`NullBackend`], except that every time read fails once `fail_reads` is set (after the
/// context is built: its base calibration reads a time). Each list then fails at its first
/// read, and the emitter only clears its records and releases its slots.
#[derive(Debug, Clone, Default)]
struct FailingReads {
    null: NullBackend,
    fail_reads: std::sync::Arc<AtomicBool>,
}

impl Backend for FailingReads {
    type Event = NullEvent;
    type Stream = NullStream;
    type Graph = NullGraph;
    type GraphNode = ();

    fn name(&self) -> &'static str {
        "null (failing reads)"
    }
    fn create_event(&self) -> Result<NullEvent, BackendError> {
        self.null.create_event()
    }
    fn create_stream(&self) -> Result<NullStream, BackendError> {
        self.null.create_stream()
    }
    fn stream_key(&self, stream: &NullStream) -> u64 {
        self.null.stream_key(stream)
    }
    fn graph_key(&self, graph: &NullGraph) -> u64 {
        self.null.graph_key(graph)
    }
    fn record(&self, event: &NullEvent, stream: &NullStream) -> Result<(), BackendError> {
        self.null.record(event, stream)
    }
    fn add_graph_record_node(
        &self,
        event: &NullEvent,
        graph: &NullGraph,
        deps: &[()],
    ) -> Result<(), BackendError> {
        self.null.add_graph_record_node(event, graph, deps)
    }
    fn is_complete(&self, event: &NullEvent) -> Result<bool, BackendError> {
        self.null.is_complete(event)
    }
    fn wait(&self, event: &NullEvent) -> Result<(), BackendError> {
        self.null.wait(event)
    }
    fn elapsed_ms(&self, start: &NullEvent, end: &NullEvent) -> Result<Option<f32>, BackendError> {
        if self.fail_reads.load(Ordering::Relaxed) {
            return Err(BackendError::new("elapsed", "reads off (phases bench: release only)"));
        }
        self.null.elapsed_ms(start, end)
    }
    fn host_now_ns(&self) -> i64 {
        self.null.host_now_ns()
    }
}

/// The no-cost backend with a clock: each event keeps the host time it was recorded at, and
/// a time read is the exact difference ([`Elapsed::from_ns`]), as on a GPU whose clock runs
/// at the host's pace. On [`NullBackend`] every time read is 0: the GPU clock never advances
/// while the host's does, so every calibration anchor is a new offset estimate and the
/// collector re-plans its GPU-to-host mapping at each one (a piece per anchor, every 5 ms,
/// kept up to 4096), which a real GPU does not make it do. Recording pays one host clock
/// read per event more than on [`NullBackend`].
#[derive(Debug, Clone, Default)]
struct ClockedNull {
    null: NullBackend,
}

/// An event of [`ClockedNull`]: the host time it was recorded at.
#[derive(Debug, Default)]
struct ClockedEvent(std::sync::atomic::AtomicI64);

impl Backend for ClockedNull {
    type Event = ClockedEvent;
    type Stream = NullStream;
    type Graph = NullGraph;
    type GraphNode = ();

    fn name(&self) -> &'static str {
        "null (clocked)"
    }
    fn create_event(&self) -> Result<ClockedEvent, BackendError> {
        Ok(ClockedEvent::default())
    }
    fn create_stream(&self) -> Result<NullStream, BackendError> {
        self.null.create_stream()
    }
    fn stream_key(&self, stream: &NullStream) -> u64 {
        self.null.stream_key(stream)
    }
    fn graph_key(&self, graph: &NullGraph) -> u64 {
        self.null.graph_key(graph)
    }
    fn record(&self, event: &ClockedEvent, _stream: &NullStream) -> Result<(), BackendError> {
        // Relaxed: the collector reads it after the list's Release hand-off.
        event.0.store(self.null.host_now_ns(), Ordering::Relaxed);
        Ok(())
    }
    fn add_graph_record_node(
        &self,
        event: &ClockedEvent,
        _graph: &NullGraph,
        _deps: &[()],
    ) -> Result<(), BackendError> {
        event.0.store(self.null.host_now_ns(), Ordering::Relaxed);
        Ok(())
    }
    fn is_complete(&self, _event: &ClockedEvent) -> Result<bool, BackendError> {
        Ok(true)
    }
    fn wait(&self, _event: &ClockedEvent) -> Result<(), BackendError> {
        Ok(())
    }
    fn elapsed_ms(&self, start: &ClockedEvent, end: &ClockedEvent) -> Result<Option<f32>, BackendError> {
        Ok(self.elapsed(start, end)?.map(|e| e.ns as f32 / 1e6))
    }
    fn elapsed(&self, start: &ClockedEvent, end: &ClockedEvent) -> Result<Option<Elapsed>, BackendError> {
        Ok(Some(Elapsed::from_ns(end.0.load(Ordering::Relaxed) - start.0.load(Ordering::Relaxed))))
    }
    fn host_now_ns(&self) -> i64 {
        self.null.host_now_ns()
    }
}

/// Records one list of 64 zones and submits it (or drops it unsubmitted).
fn record_list<B: Backend>(ctx: &TracingContext<B>, stream: &B::Stream, submit: bool) {
    let mut list = ctx.list();
    let _ = list.zone_begin(stream, COARSE);
    let _ = list.zone_begin(stream, DISPATCH);
    for _ in 1..ZONES_PER_LIST - 1 {
        let _ = list.zone_next(stream, DISPATCH);
    }
    let _ = list.zone_end(stream);
    let _ = list.zone_end(stream);
    if submit {
        // A refused list is dropped, which releases its slots.
        let _ = ctx.submit(list);
    } else {
        drop(list);
    }
}

/// The calling thread's CPU time so far, in nanoseconds (`/proc/thread-self/schedstat`,
/// Linux; 0 elsewhere). Read at a thread's start and end only (a few µs per read): on a
/// shared machine, wall-clock figures include time the thread waited for a core; CPU time
/// does not.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What one recorder did.
struct Recorder {
    start: Instant,
    end: Instant,
    lists: u64,
    busy: Duration,
    waits: u64,
    cpu_ns: u64,
}

/// What the collector did.
#[derive(Default)]
struct Collector {
    end: Option<Instant>,
    collect: Duration,
    clear: Duration,
    cpu_ns: u64,
    /// Collect calls that collected something, and the lists they collected.
    collects: u64,
    lists: u64,
}

/// One run's figures.
#[derive(Debug, Clone, Default, Serialize)]
struct Row {
    variant: String,
    threads: usize,
    /// Collector threads (1 but for the `_collectors` variants; 0 where none collects).
    collectors: usize,
    seconds: f64,
    zones: u64,
    zones_per_sec: f64,
    ns_per_zone: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    recording_ns_per_zone_per_thread: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    collector_ns_per_zone: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    emitter_ns_per_zone: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reader_ns_per_zone: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    collector_busy: Option<f64>,
    /// The collector thread's CPU time per zone (all of it: collect, polling, clearing).
    #[serde(skip_serializing_if = "Option::is_none")]
    collector_cpu_ns_per_zone: Option<f64>,
    /// The collector thread's CPU time over the wall time (below 1: it waited for a core,
    /// or idled).
    #[serde(skip_serializing_if = "Option::is_none")]
    collector_cpu_share: Option<f64>,
    /// The recorders' CPU time per zone per thread (record, submit and backpressure waits).
    #[serde(skip_serializing_if = "Option::is_none")]
    recording_cpu_ns_per_zone_per_thread: Option<f64>,
    /// Single-thread variants: the thread's CPU time per zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_ns_per_zone: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_clear_ns_per_zone: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backpressure_waits_per_list: Option<f64>,
    /// Lists per `collect` call that collected any (before the final flush): how many lists
    /// (64 zones, 6.7 KB of `Zone`s each) one read phase builds before the emitter takes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    lists_per_collect: Option<f64>,
    dropped_zones: usize,
}

/// What the recorders do with their lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recording {
    /// Submit them, for the collector.
    Submit,
    /// Drop them unsubmitted; no collector.
    Drop,
    /// Drop them unsubmitted, each recorder into a context of its own (made like `ctx`, on a
    /// clone of its backend); no collector.
    DropPrivate,
}

/// `threads` recorders record for `seconds` while (when they submit) `collectors` collector
/// threads drain (the first to see every recorder done flushes); returns the run's figures.
fn run<B: Backend + Clone>(
    ctx: &TracingContext<B>,
    threads: usize,
    seconds: f64,
    recording: Recording,
    memory: Option<&MemorySink>,
    min_batch: u64,
    collectors: usize,
) -> Row {
    let submit = recording == Recording::Submit;
    let record_only = !submit;
    let barrier = Barrier::new(threads + 1 + collectors);
    let flushing = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    let submitted = CachePadded::new(AtomicU64::new(0));
    let collected = CachePadded::new(AtomicU64::new(0));
    let before = ctx.stats();
    let (recorders, collector) = std::thread::scope(|s| {
        let recorders: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, stop, finished, submitted, collected) =
                    (&barrier, &stop, &finished, &submitted, &collected);
                std::thread::Builder::new()
                    .name(format!("recorder {t}"))
                    .spawn_scoped(s, move || {
                        let own = (recording == Recording::DropPrivate).then(|| {
                            TracingContext::builder(ctx.backend().clone())
                                .capacity(1024, CAPACITY)
                                .batch(16)
                                .build()
                                .expect("context")
                        });
                        let ctx = own.as_ref().unwrap_or(ctx);
                        let stream = ctx.backend().create_stream().expect("stream");
                        barrier.wait();
                        let cpu = thread_cpu_ns();
                        let start = Instant::now();
                        let (mut lists, mut busy, mut waits) = (0, Duration::ZERO, 0);
                        'record: while !stop.load(Ordering::Relaxed) {
                            // Read collected first: submitted only grows, so the difference
                            // is at most the true number in flight.
                            while submit
                                && submitted
                                    .load(Ordering::Relaxed)
                                    .saturating_sub(collected.load(Ordering::Relaxed))
                                    >= MAX_LISTS_IN_FLIGHT
                            {
                                waits += 1;
                                if stop.load(Ordering::Relaxed) {
                                    break 'record;
                                }
                                std::thread::yield_now();
                            }
                            let at = Instant::now();
                            record_list(ctx, &stream, submit);
                            busy += at.elapsed();
                            if submit {
                                submitted.fetch_add(1, Ordering::Relaxed);
                            }
                            lists += 1;
                        }
                        let end = Instant::now();
                        let cpu_ns = thread_cpu_ns().saturating_sub(cpu);
                        // Release: this recorder's submissions happen-before the collector
                        // sees the count.
                        finished.fetch_add(1, Ordering::Release);
                        Recorder { start, end, lists, busy, waits, cpu_ns }
                    })
                    .expect("spawn recorder")
            })
            .collect();
        let collector = |c: usize| {
            let (barrier, finished, submitted, collected, flushing) =
                (&barrier, &finished, &submitted, &collected, &flushing);
            std::thread::Builder::new()
                .name(format!("collector {c}"))
                .spawn_scoped(s, move || {
                    let mut out = Collector::default();
                    barrier.wait();
                    if record_only {
                        return out;
                    }
                    let cpu = thread_cpu_ns();
                    loop {
                        let all_done = finished.load(Ordering::Acquire) == threads;
                        if all_done {
                            if flushing.swap(true, Ordering::Relaxed) {
                                break;
                            }
                            let at = Instant::now();
                            let _ = ctx.flush();
                            let end = Instant::now();
                            out.collect += end - at;
                            out.end = Some(end);
                            break;
                        }
                        if min_batch > 0
                            && submitted
                                .load(Ordering::Relaxed)
                                .saturating_sub(collected.load(Ordering::Relaxed))
                                < min_batch
                        {
                            // Sleeping, not yielding: the thread's CPU time stays collection's.
                            std::thread::sleep(Duration::from_micros(20));
                            continue;
                        }
                        let at = Instant::now();
                        let lists = match ctx.collect() {
                            Ok(Collected::Done(report)) => report.lists,
                            Ok(Collected::Busy) => 0,
                            Err(e) => e.report.lists,
                        };
                        out.collect += at.elapsed();
                        collected.fetch_add(lists as u64, Ordering::Relaxed);
                        if lists > 0 {
                            out.collects += 1;
                            out.lists += lists as u64;
                        }
                        if let Some(memory) = memory {
                            let at = Instant::now();
                            memory.clear();
                            out.clear += at.elapsed();
                        }
                        if lists == 0 {
                            std::thread::yield_now();
                        }
                    }
                    if let Some(memory) = memory {
                        let at = Instant::now();
                        memory.clear();
                        out.clear += at.elapsed();
                    }
                    out.cpu_ns = thread_cpu_ns().saturating_sub(cpu);
                    out
                })
                .expect("spawn collector")
        };
        let collectors: Vec<_> = (0..collectors).map(collector).collect();
        barrier.wait();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        let recorders: Vec<Recorder> = recorders.into_iter().map(|r| r.join().expect("recorder")).collect();
        let collector = collectors.into_iter().map(|c| c.join().expect("collector")).fold(
            Collector::default(),
            |all, one| Collector {
                end: all.end.max(one.end),
                collect: all.collect + one.collect,
                clear: all.clear + one.clear,
                cpu_ns: all.cpu_ns + one.cpu_ns,
                collects: all.collects + one.collects,
                lists: all.lists + one.lists,
            },
        );
        (recorders, collector)
    });
    let after = ctx.stats();
    let first = recorders.iter().map(|r| r.start).min().expect("a recorder");
    let last = collector.end.unwrap_or_else(|| recorders.iter().map(|r| r.end).max().expect("a recorder"));
    let wall = last.saturating_duration_since(first).as_secs_f64();
    let lists: u64 = recorders.iter().map(|r| r.lists).sum();
    let emitted = (after.zones_emitted - before.zones_emitted) as u64;
    // Zones the pipeline carried: emitted, or recorded where nothing is emitted by design.
    let zones = if emitted > 0 { emitted } else { lists * ZONES_PER_LIST as u64 };
    let per_zone = |ns: f64| ns / zones.max(1) as f64;
    let rec = recorders
        .iter()
        .map(|r| r.busy.as_nanos() as f64 / (r.lists.max(1) * ZONES_PER_LIST as u64) as f64)
        .sum::<f64>()
        / threads as f64;
    let rec_cpu = recorders
        .iter()
        .map(|r| r.cpu_ns as f64 / (r.lists.max(1) * ZONES_PER_LIST as u64) as f64)
        .sum::<f64>()
        / threads as f64;
    let mut row = Row {
        threads,
        seconds: wall,
        zones,
        zones_per_sec: zones as f64 / wall,
        ns_per_zone: wall * 1e9 / zones.max(1) as f64,
        recording_ns_per_zone_per_thread: Some(rec),
        recording_cpu_ns_per_zone_per_thread: Some(rec_cpu),
        collectors: if record_only { 0 } else { collectors },
        dropped_zones: after.dropped_zones - before.dropped_zones,
        ..Row::default()
    };
    if !record_only {
        let collect = collector.collect.as_nanos() as f64;
        let emitter = (after.emitter_ns - before.emitter_ns) as f64;
        row.collector_ns_per_zone = Some(per_zone(collect));
        row.emitter_ns_per_zone = Some(per_zone(emitter));
        row.reader_ns_per_zone = Some(per_zone(collect - emitter));
        row.collector_busy = Some(collect / (wall * 1e9));
        row.collector_cpu_ns_per_zone = Some(per_zone(collector.cpu_ns as f64));
        row.collector_cpu_share = Some(collector.cpu_ns as f64 / (wall * 1e9));
        row.backpressure_waits_per_list =
            Some(recorders.iter().map(|r| r.waits).sum::<u64>() as f64 / lists.max(1) as f64);
        row.lists_per_collect = Some(collector.lists as f64 / collector.collects.max(1) as f64);
        if memory.is_some() {
            row.memory_clear_ns_per_zone = Some(per_zone(collector.clear.as_nanos() as f64));
        }
    }
    row
}

/// One e2e variant at `threads`: a new context, a warm-up run, then the measured run.
fn e2e(variant: &str, threads: usize, seconds: f64) -> Row {
    fn builder<B: Backend>(backend: B) -> gpu_event_pool::Builder<B> {
        TracingContext::builder(backend).capacity(1024, CAPACITY).batch(16)
    }
    let warm_up = (seconds / 4.0).max(0.01);
    let measure = |ctx: &dyn Fn(f64) -> Row| {
        ctx(warm_up);
        ctx(seconds)
    };
    let mut row = match variant {
        "e2e_memory" => {
            let memory = MemorySink::new();
            let ctx = builder(NullBackend::default()).sink(memory.clone()).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Submit, Some(&memory), 0, 1))
        }
        "e2e_nop" => {
            let ctx = builder(NullBackend::default()).sink(NopSink).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Submit, None, 0, 1))
        }
        "e2e_none" => {
            let ctx = builder(NullBackend::default()).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Submit, None, 0, 1))
        }
        "e2e_memory_clocked" => {
            let memory = MemorySink::new();
            let ctx = builder(ClockedNull::default()).sink(memory.clone()).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Submit, Some(&memory), 0, 1))
        }
        "e2e_nop_clocked" => {
            let ctx = builder(ClockedNull::default()).sink(NopSink).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Submit, None, 0, 1))
        }
        "e2e_nop_collectors2" | "e2e_nop_collectors4" => {
            let collectors = if variant.ends_with('4') { 4 } else { 2 };
            let ctx = builder(NullBackend::default()).sink(NopSink).build().expect("context");
            let mut row = measure(&|s| run(&ctx, threads, s, Recording::Submit, None, 0, collectors));
            row.collectors = collectors;
            row
        }
        "e2e_nop_batch192" => {
            let ctx = builder(NullBackend::default()).sink(NopSink).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Submit, None, 192, 1))
        }
        "e2e_chrome" => {
            let sink = ChromeTrace::new(BufWriter::new(std::io::sink())).sink();
            let ctx = builder(NullBackend::default()).sink(sink).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Submit, None, 0, 1))
        }
        "submit_release" => {
            let backend = FailingReads::default();
            // No anchor is due during the run (its read would fail too).
            let ctx = builder(backend.clone())
                .anchor_interval(Duration::from_secs(3600))
                .on_error(|_, _| {})
                .build()
                .expect("context");
            backend.fail_reads.store(true, Ordering::Relaxed);
            let mut row = measure(&|s| run(&ctx, threads, s, Recording::Submit, None, 0, 1));
            // Every zone is dropped by design (its list's read failed).
            row.dropped_zones = 0;
            row
        }
        "record_only" => {
            let ctx = builder(NullBackend::default()).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::Drop, None, 0, 1))
        }
        "record_private" => {
            let ctx = builder(NullBackend::default()).build().expect("context");
            measure(&|s| run(&ctx, threads, s, Recording::DropPrivate, None, 0, 1))
        }
        other => panic!("unknown variant {other}"),
    };
    row.variant = variant.to_owned();
    row
}

/// A list's zones as the collector hands them to a sink: a coarse zone around 63 adjacent
/// 1 µs dispatches, on one stream.
fn batch_zones() -> Vec<Zone> {
    let lane = Lane::Stream(7);
    let n = ZONES_PER_LIST as i64 - 1;
    let mut zones = vec![Zone::new(COARSE, lane, 0, 0, n * 1000)];
    zones.extend((0..n).map(|i| Zone::new(DISPATCH, lane, 1, i * 1000, (i + 1) * 1000)));
    zones
}

/// Moves a batch one list later (so that every batch comes after the one before on its lane).
fn advance(zones: &mut [Zone]) {
    let step = ZONES_PER_LIST as i64 * 1000;
    for z in zones {
        z.gpu_begin_ns += step;
        z.gpu_end_ns += step;
        z.host_begin_ns += step;
        z.host_end_ns += step;
    }
}

/// Runs `batch` (one list's worth of work, 64 zones) for `seconds`; wall and CPU ns per
/// zone, and the zones.
fn per_zone(seconds: f64, mut batch: impl FnMut(u64)) -> (f64, f64, u64) {
    let deadline = Duration::from_secs_f64(seconds);
    for i in 0..64 {
        batch(i);
    }
    let cpu = thread_cpu_ns();
    let start = Instant::now();
    let mut batches = 0;
    loop {
        for _ in 0..64 {
            batch(batches);
            batches += 1;
        }
        if start.elapsed() >= deadline {
            break;
        }
    }
    let wall = start.elapsed().as_nanos() as f64;
    let cpu = thread_cpu_ns().saturating_sub(cpu) as f64;
    let zones = batches * ZONES_PER_LIST as u64;
    (wall / zones as f64, cpu / zones as f64, zones)
}

#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    pid: u32,
    tid: u32,
    ts: Box<RawValue>,
    dur: Box<RawValue>,
    args: Args<'a>,
}

#[derive(Serialize)]
struct Args<'a> {
    file: &'a str,
    line: u32,
    function: &'a str,
    list: u64,
    depth: u32,
    gpu_begin_ns: i64,
    gpu_end_ns: i64,
    #[serde(flatten)]
    zone_args: NoArgs,
}

#[derive(Serialize)]
struct EventNoFlatten<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    pid: u32,
    tid: u32,
    ts: Box<RawValue>,
    dur: Box<RawValue>,
    args: ArgsNoFlatten<'a>,
}

#[derive(Serialize)]
struct ArgsNoFlatten<'a> {
    file: &'a str,
    line: u32,
    function: &'a str,
    list: u64,
    depth: u32,
    gpu_begin_ns: i64,
    gpu_end_ns: i64,
}

/// A static location's (empty) arguments, serialized as the sink's `ZoneArgs` is: a map.
struct NoArgs;

impl Serialize for NoArgs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_map(Some(0))?.end()
    }
}

/// Nanoseconds as microseconds with exactly three decimals (the sink's `micros`).
fn micros(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
}

fn raw(ns: i64) -> Box<RawValue> {
    RawValue::from_string(micros(ns)).expect("a number")
}

/// One thread records `batch` lists, then collects them in one call, and again, for
/// `seconds`.
fn serial_batch(variant: &str, batch: usize, seconds: f64) -> Row {
    let ctx = TracingContext::builder(NullBackend::default())
        .capacity(1024, CAPACITY)
        .batch(16)
        .sink(NopSink)
        .build()
        .expect("context");
    let stream = ctx.backend().create_stream().expect("stream");
    let round = |collect: &mut Duration| {
        for _ in 0..batch {
            record_list(&ctx, &stream, true);
        }
        let at = Instant::now();
        let _ = ctx.collect();
        *collect += at.elapsed();
    };
    let mut warm = Duration::ZERO;
    for _ in 0..4 {
        round(&mut warm);
    }
    let before = ctx.stats();
    let (mut collect, mut rounds) = (Duration::ZERO, 0u64);
    let cpu = thread_cpu_ns();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds || rounds == 0 {
        round(&mut collect);
        rounds += 1;
    }
    let wall = start.elapsed().as_nanos() as f64;
    let cpu = thread_cpu_ns().saturating_sub(cpu) as f64;
    let after = ctx.stats();
    let zones = (after.zones_emitted - before.zones_emitted) as u64;
    let per_zone = |ns: f64| ns / zones.max(1) as f64;
    let emitter = (after.emitter_ns - before.emitter_ns) as f64;
    Row {
        variant: variant.to_owned(),
        threads: 1,
        seconds: wall / 1e9,
        zones,
        zones_per_sec: zones as f64 * 1e9 / wall,
        ns_per_zone: per_zone(wall),
        cpu_ns_per_zone: Some(per_zone(cpu)),
        collector_ns_per_zone: Some(per_zone(collect.as_nanos() as f64)),
        emitter_ns_per_zone: Some(per_zone(emitter)),
        reader_ns_per_zone: Some(per_zone(collect.as_nanos() as f64 - emitter)),
        dropped_zones: after.dropped_zones - before.dropped_zones,
        ..Row::default()
    }
}

/// One single-thread variant.
fn single(variant: &str, seconds: f64) -> Row {
    match variant {
        "serial_batch4" => return serial_batch(variant, 4, seconds),
        "serial_batch32" => return serial_batch(variant, 32, seconds),
        "serial_batch256" => return serial_batch(variant, 256, seconds),
        _ => {}
    }
    let info = ContextInfo {
        id: 1,
        name: "gpu".to_owned(),
        backend: "null",
        base: Calibration { gpu_ns: 0, host_ns: 0 },
        host_clock_origin: None,
    };
    let mut zones = batch_zones();
    let (ns, cpu, count) = match variant {
        "sink_chrome_direct" => {
            let mut sink = ChromeTrace::new(BufWriter::new(std::io::sink())).sink();
            sink.open(&info).expect("open");
            per_zone(seconds, |list_id| {
                advance(&mut zones);
                sink.zones(&info, ZoneBatch { list_id, zones: &zones }).expect("zones");
            })
        }
        "sink_memory_direct" => {
            let mut sink = MemorySink::new();
            sink.open(&info).expect("open");
            per_zone(seconds, |list_id| {
                advance(&mut zones);
                Sink::zones(&mut sink, &info, ZoneBatch { list_id, zones: &zones }).expect("zones");
                if list_id % 256 == 255 {
                    sink.clear();
                }
            })
        }
        "json_serde_event" => {
            let mut out = BufWriter::new(std::io::sink());
            per_zone(seconds, |list| {
                advance(&mut zones);
                for z in &zones {
                    let l = &z.location;
                    let event = Event {
                        name: l.name(),
                        cat: "gpu",
                        ph: "X",
                        pid: 1,
                        tid: 1,
                        ts: raw(z.host_begin_ns),
                        dur: raw(z.host_end_ns - z.host_begin_ns),
                        args: Args {
                            file: l.file(),
                            line: l.line(),
                            function: l.function(),
                            list,
                            depth: z.depth,
                            gpu_begin_ns: z.gpu_begin_ns,
                            gpu_end_ns: z.gpu_end_ns,
                            zone_args: NoArgs,
                        },
                    };
                    let text = serde_json::to_string(&event).expect("json");
                    out.write_all(b",\n").and_then(|()| out.write_all(text.as_bytes())).expect("write");
                }
            })
        }
        "json_serde_noflatten" => {
            let mut out = BufWriter::new(std::io::sink());
            per_zone(seconds, |list| {
                advance(&mut zones);
                for z in &zones {
                    let l = &z.location;
                    let event = EventNoFlatten {
                        name: l.name(),
                        cat: "gpu",
                        ph: "X",
                        pid: 1,
                        tid: 1,
                        ts: raw(z.host_begin_ns),
                        dur: raw(z.host_end_ns - z.host_begin_ns),
                        args: ArgsNoFlatten {
                            file: l.file(),
                            line: l.line(),
                            function: l.function(),
                            list,
                            depth: z.depth,
                            gpu_begin_ns: z.gpu_begin_ns,
                            gpu_end_ns: z.gpu_end_ns,
                        },
                    };
                    let text = serde_json::to_string(&event).expect("json");
                    out.write_all(b",\n").and_then(|()| out.write_all(text.as_bytes())).expect("write");
                }
            })
        }
        "json_write_fmt" => {
            let mut out = BufWriter::new(std::io::sink());
            let mut text = String::with_capacity(512);
            per_zone(seconds, |list| {
                advance(&mut zones);
                for z in &zones {
                    let l = &z.location;
                    text.clear();
                    let (ts, dur) = (z.host_begin_ns, z.host_end_ns - z.host_begin_ns);
                    // Names and paths of static locations need no escaping here; a real
                    // writer would escape (serde_json's `format_escaped_str` does).
                    let _ = write!(
                        text,
                        ",\n{{\"name\":\"{}\",\"cat\":\"gpu\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":{}.{:03},\"dur\":{}.{:03},\"args\":{{\"file\":\"{}\",\"line\":{},\"function\":\"{}\",\"list\":{},\"depth\":{},\"gpu_begin_ns\":{},\"gpu_end_ns\":{}}}}}",
                        l.name(),
                        ts / 1000,
                        ts % 1000,
                        dur / 1000,
                        dur % 1000,
                        l.file(),
                        l.line(),
                        l.function(),
                        list,
                        z.depth,
                        z.gpu_begin_ns,
                        z.gpu_end_ns
                    );
                    out.write_all(text.as_bytes()).expect("write");
                }
            })
        }
        other => panic!("unknown variant {other}"),
    };
    Row {
        variant: variant.to_owned(),
        threads: 1,
        seconds,
        zones: count,
        zones_per_sec: 1e9 / ns,
        ns_per_zone: ns,
        cpu_ns_per_zone: Some(cpu),
        ..Row::default()
    }
}

fn env_list(name: &str) -> Option<Vec<String>> {
    let value = std::env::var(name).ok()?;
    Some(value.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
}

fn opt(v: Option<f64>, width: usize, decimals: usize) -> String {
    match v {
        Some(v) => format!("{v:>width$.decimals$}"),
        None => format!("{:>width$}", "-"),
    }
}

fn print_row(row: &Row) {
    if let Some(cpu) = row.cpu_ns_per_zone {
        println!(
            "{:<21} {:>3} {:>9.2} {:>8.1} {:>8.1} {:>9.2} {} {} {}",
            row.variant,
            row.threads,
            row.zones_per_sec / 1e6,
            row.ns_per_zone,
            cpu,
            1e3 / cpu,
            opt(row.collector_ns_per_zone, 6, 1),
            opt(row.emitter_ns_per_zone, 6, 1),
            opt(row.reader_ns_per_zone, 6, 1),
        );
        return;
    }
    println!(
        "{:<18} {:>3} {:>8.2} {:>7.1} {} {} {} {} {} {} {} {} {} {} {:>6}",
        row.variant,
        row.threads,
        row.zones_per_sec / 1e6,
        row.ns_per_zone,
        opt(row.recording_ns_per_zone_per_thread, 6, 1),
        opt(row.collector_ns_per_zone, 6, 1),
        opt(row.emitter_ns_per_zone, 6, 1),
        opt(row.reader_ns_per_zone, 6, 1),
        opt(row.collector_cpu_ns_per_zone, 6, 1),
        opt(row.collector_busy.map(|b| b * 100.0), 5, 0),
        opt(row.collector_cpu_share.map(|b| b * 100.0), 5, 0),
        opt(row.backpressure_waits_per_list, 5, 2),
        opt(row.lists_per_collect, 5, 1),
        opt(row.memory_clear_ns_per_zone, 5, 1),
        row.dropped_zones,
    );
}

fn main() {
    let benchmarking = common::benchmarking();
    let seconds: f64 = std::env::var("BENCH_PHASES_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if benchmarking { 1.0 } else { 0.005 });
    let threads: Vec<usize> = env_list("BENCH_PHASES_THREADS")
        .map(|l| l.iter().map(|t| t.parse().expect("BENCH_PHASES_THREADS: numbers")).collect())
        .unwrap_or_else(|| if benchmarking { common::THREADS.to_vec() } else { vec![1, 2] });
    let wanted = env_list("BENCH_PHASES_VARIANTS");
    let runs = |name: &str| wanted.as_ref().is_none_or(|w| w.iter().any(|v| v == name));
    if let Some(w) = &wanted {
        for v in w {
            assert!(E2E.contains(&v.as_str()) || SINGLE.contains(&v.as_str()), "unknown variant {v}");
        }
    }
    let machine = machine();
    println!(
        "phases: {} s per run, {} cores available ({}), lists of {ZONES_PER_LIST} zones, no-cost backend, one collector thread",
        seconds, cores_available(), machine.cpu_model
    );
    println!("Mz/s: million zones/s end to end; ns/z: its inverse; rec: recording ns/zone per thread (in record+submit);");
    println!("coll = emit + read: collector ns/zone in collect (wall); ccpu: collector thread CPU ns/zone (all of it);");
    println!("busy%: time in collect / wall; cpu%: collector CPU / wall; bp: backpressure waits per list;");
    println!("l/c: lists per collect call that collected any; clear: MemorySink::clear ns/zone");
    let e2e_header = || {
        println!(
            "{:<18} {:>3} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6}",
            "variant",
            "thr",
            "Mz/s",
            "ns/z",
            "rec",
            "coll",
            "emit",
            "read",
            "ccpu",
            "busy%",
            "cpu%",
            "bp",
            "l/c",
            "clear",
            "drop"
        )
    };
    let single_header = || {
        println!(
            "{:<21} {:>3} {:>9} {:>8} {:>8} {:>9} {:>6} {:>6} {:>6}",
            "one thread", "thr", "Mzones/s", "ns/zone", "cpu ns/z", "Mz/s(cpu)", "coll", "emit", "read"
        )
    };
    let mut rows = Vec::new();
    if E2E.iter().any(|v| runs(v)) {
        e2e_header();
    }
    for variant in E2E.iter().filter(|v| runs(v)) {
        for &t in &threads {
            let row = e2e(variant, t, seconds);
            print_row(&row);
            rows.push(row);
        }
    }
    if SINGLE.iter().any(|v| runs(v)) {
        single_header();
    }
    for variant in SINGLE.iter().filter(|v| runs(v)) {
        let row = single(variant, seconds);
        print_row(&row);
        rows.push(row);
    }
    if !benchmarking {
        return;
    }
    let path = std::env::var_os("BENCH_PHASES_JSONL")
        .map_or_else(|| results_dir().join("phases.jsonl"), std::path::PathBuf::from);
    let unix_time =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let written = (|| -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        for row in &rows {
            let mut line = serde_json::to_value(row).map_err(std::io::Error::other)?;
            line["bench"] = "phases".into();
            line["commit"] = env!("BENCH_BUILD_COMMIT").into();
            line["unix_time"] = unix_time.into();
            line["machine"] = serde_json::to_value(&machine).map_err(std::io::Error::other)?;
            writeln!(file, "{line}")?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => eprintln!("phases results (JSON lines, appended): {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}
