//! The collector's guarantees, each pinned by the defect it fixed: per-lane GPU order
//! whatever the submission order, no head-of-line blocking, exact times after idle streams,
//! bounded references under lane churn, no event queries, panic safety, reports that survive
//! errors, and reading shared between concurrent collectors.

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::{ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{
    location, Backend, BackendError, CollectError, Collected, DynamicLocation, Error, Lane, RecordError,
    TracingContext,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

const MS: i64 = 1_000_000;

fn context(sim: &SimBackend, initial: u32, max: u32) -> (MemorySink, TracingContext<SimBackend>) {
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone())
        .capacity(initial, max)
        .batch(4)
        .sink(sink.clone())
        .build()
        .unwrap();
    (sink, ctx)
}

fn names(zones: &[Zone]) -> Vec<String> {
    zones.iter().map(|z| z.location.name().to_owned()).collect()
}

/// Records (does not submit) one zone named `name` around a kernel of `ns` on `stream`.
fn record(
    ctx: &TracingContext<SimBackend>,
    sim: &SimBackend,
    stream: &SimStream,
    name: &str,
    ns: i64,
) -> gpu_event_pool::EventList<SimBackend> {
    let mut list = ctx.list();
    list.zone_begin(stream, DynamicLocation::new(name)).unwrap();
    sim.launch(stream, ns);
    list.zone_end(stream).unwrap();
    list
}

fn assert_accounted<B: Backend>(ctx: &TracingContext<B>) {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.free, "free counter matches the freelist");
}

/// Every pair of zones on a lane is disjoint or nested.
fn assert_nested(zones: &[Zone]) {
    let mut by_lane: HashMap<Lane, Vec<(i64, i64)>> = HashMap::new();
    for z in zones {
        assert!(z.gpu_end_ns >= z.gpu_begin_ns, "{z:?}");
        by_lane.entry(z.lane).or_default().push((z.gpu_begin_ns, z.gpu_end_ns));
    }
    for (lane, spans) in &mut by_lane {
        spans.sort_by_key(|&(b, e)| (b, std::cmp::Reverse(e)));
        let mut open: Vec<(i64, i64)> = Vec::new();
        for &(b, e) in spans.iter() {
            while open.last().is_some_and(|&(_, oe)| oe <= b) {
                open.pop();
            }
            if let Some(&(ob, oe)) = open.last() {
                assert!(e <= oe, "{lane:?}: ({b}, {e}) crosses ({ob}, {oe})");
            }
            open.push((b, e));
        }
    }
}

// ---- Order per lane ----

#[test]
fn lists_of_one_stream_reach_the_sinks_in_gpu_order_whatever_the_submission_order() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 8, 64);
    let first = record(&ctx, &sim, &stream, "first", 100);
    let second = record(&ctx, &sim, &stream, "second", 100);
    ctx.submit(second).unwrap();
    sim.advance(1_000);
    let Collected::Done(report) = ctx.collect().unwrap() else { panic!("no other collector") };
    assert_eq!((report.lists, report.pending_lists), (0, 1), "second waits for first, still recording");
    ctx.submit(first).unwrap();
    ctx.collect().unwrap();
    let zones = sink.zones();
    assert_eq!(names(&zones), ["first", "second"]);
    assert!(zones[0].gpu_end_ns <= zones[1].gpu_begin_ns, "{zones:?}");
    assert_accounted(&ctx);
}

#[test]
fn a_list_dropped_unsubmitted_does_not_hold_back_its_stream() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 8, 64);
    let dropped = record(&ctx, &sim, &stream, "dropped", 100);
    let kept = record(&ctx, &sim, &stream, "kept", 100);
    ctx.submit(kept).unwrap();
    drop(dropped);
    assert_eq!(
        (ctx.stats().owned, ctx.stats().submitted),
        (0, 2),
        "a dropped list returns every slot at once"
    );
    sim.advance(1_000);
    ctx.collect().unwrap();
    assert_eq!(names(&sink.zones()), ["kept"]);
    let stats = ctx.stats();
    assert_eq!((stats.submitted, stats.lists_discarded, stats.lists_submitted), (0, 1, 1));
    assert_accounted(&ctx);
}

#[test]
fn flush_keeps_a_list_waiting_for_an_earlier_list_still_recording_and_emits_it_later() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 8, 64);
    let early = record(&ctx, &sim, &stream, "early", 100);
    ctx.submit(record(&ctx, &sim, &stream, "late", 100)).unwrap();
    let report = ctx.flush().unwrap();
    assert_eq!((report.lists, report.pending_lists), (0, 1));
    assert!(sink.zones().is_empty());
    ctx.submit(early).unwrap();
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["early", "late"]);
    assert_accounted(&ctx);
}

#[test]
fn a_list_that_spans_streams_is_ordered_on_the_stream_of_its_first_event() {
    let sim = SimBackend::manual();
    let (a, b) = (sim.stream(), sim.stream());
    let (sink, ctx) = context(&sim, 8, 64);
    // `spanning` begins on a, so it takes its place on a: before `on_a`.
    let mut spanning = ctx.list();
    spanning.zone_begin(&a, location!("on a")).unwrap();
    sim.launch(&a, 100);
    spanning.zone_next(&b, location!("on b")).unwrap();
    sim.launch(&b, 100);
    spanning.zone_end(&b).unwrap();
    let on_a = record(&ctx, &sim, &a, "after, on a", 100);
    ctx.submit(on_a).unwrap();
    sim.advance(1_000);
    ctx.collect().unwrap();
    assert!(sink.zones().is_empty(), "the list on a waits for the spanning list, which began on a first");
    ctx.submit(spanning).unwrap();
    ctx.collect().unwrap();
    let zones = sink.zones();
    assert_eq!(names(&zones), ["on a", "on b", "after, on a"]);
    assert_eq!(
        (zones[0].lane, zones[1].lane),
        (Lane::Stream(sim_key(&sim, &a)), Lane::Stream(sim_key(&sim, &b)))
    );
    assert_accounted(&ctx);
}

fn sim_key(sim: &SimBackend, stream: &SimStream) -> u64 {
    sim.stream_key(stream)
}

/// The demo's workload, deterministic: "threads" record command buffers of adjacent dispatch
/// zones on shared streams (one list per stream at a time, as a runtime's queue does), the
/// GPU runs far behind (tens of ms, where an `f32` of milliseconds has a nanosecond step),
/// and lists are submitted in a shuffled order, collects interleaved. Every zone must nest on
/// its stream, durations must be exact, and no list may need the order guard.
#[test]
fn the_demo_workload_on_the_manual_clock_nests_exactly_with_shuffled_submission() {
    let sim = SimBackend::manual();
    let streams: Vec<SimStream> = (0..3).map(|_| sim.stream()).collect();
    let (sink, ctx) = context(&sim, 64, 16384);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut recorded: Vec<gpu_event_pool::EventList<SimBackend>> = Vec::new();
    let mut truth: HashMap<u64, Vec<i64>> = HashMap::new();
    let lists = if cfg!(miri) { 30 } else { 300 };
    for i in 0..lists {
        let stream = &streams[(i % 3) as usize];
        let mut list = ctx.list();
        list.zone_begin(stream, location!("command buffer")).unwrap();
        let mut durations = Vec::new();
        for d in 0..8 {
            let step = if d == 0 {
                list.zone_begin(stream, location!("dispatch"))
            } else {
                list.zone_next(stream, location!("dispatch"))
            };
            step.unwrap();
            let ns = 50_000 + next(400_000) as i64;
            sim.launch(stream, ns);
            durations.push(ns);
        }
        list.zone_end(stream).unwrap();
        list.zone_end(stream).unwrap();
        truth.insert(list.id(), durations);
        recorded.push(list);
        // Submit a random earlier list now and then: out of order, from "other threads".
        while recorded.len() > 4 || (!recorded.is_empty() && next(3) == 0) {
            let pick = next(recorded.len() as u64) as usize;
            ctx.submit(recorded.swap_remove(pick)).unwrap();
        }
        sim.advance(300_000 + next(200_000) as i64);
        if next(2) == 0 {
            ctx.collect().unwrap();
        }
    }
    for list in recorded.drain(..) {
        ctx.submit(list).unwrap();
    }
    let backlog = streams.iter().map(|s| sim.pending_ns(s)).max().unwrap();
    assert!(cfg!(miri) || backlog > 20 * MS, "the GPU runs far behind the host: {backlog} ns");
    while ctx.stats().submitted > 0 {
        sim.advance(MS);
        ctx.collect().unwrap();
    }
    let zones = sink.zones();
    assert_eq!(zones.len(), lists as usize * 9);
    assert_nested(&zones);
    for (id, batch) in sink.batches() {
        let got: Vec<i64> =
            batch.iter().filter(|z| z.depth == 1).map(|z| z.gpu_end_ns - z.gpu_begin_ns).collect();
        assert_eq!(got, truth[&id], "list {id}: durations are exact");
    }
    assert_eq!(ctx.stats().lists_shifted, 0, "exact placement never needs the order guard");
    assert_accounted(&ctx);
}

// ---- No head-of-line blocking ----

#[test]
fn a_one_second_kernel_on_one_stream_does_not_hold_back_a_hundred_lists_on_another() {
    let sim = SimBackend::manual();
    let (slow, fast) = (sim.stream(), sim.stream());
    let (sink, ctx) = context(&sim, 64, 16384);
    ctx.submit(record(&ctx, &sim, &slow, "one second", 1_000 * MS)).unwrap();
    let quick = if cfg!(miri) { 10 } else { 100 };
    for _ in 0..quick {
        ctx.submit(record(&ctx, &sim, &fast, "quick", 10_000)).unwrap();
        sim.advance(20_000);
        ctx.collect().unwrap();
    }
    assert_eq!(sink.zones().len(), quick, "every finished list on the fast stream is collected");
    assert_eq!(ctx.stats().capacity, 64, "the pool never grew");
    assert_eq!(ctx.stats().submitted, 2, "only the slow list waits");
    sim.advance(1_000 * MS);
    ctx.collect().unwrap();
    assert_eq!(sink.zones().len(), quick + 1);
    assert_accounted(&ctx);
}

// ---- Time ----

/// A stream idle for ten minutes while the context is collected every 7 ms: its next zone is
/// measured from a fresh anchor, not from its own old last event.
#[test]
fn a_stream_reused_after_ten_idle_minutes_is_timed_exactly() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 8, 64);
    ctx.submit(record(&ctx, &sim, &stream, "before", 10_000)).unwrap();
    // Miri runs this about 10^4 times slower: a shorter idle there (still far beyond 16 ms).
    let idle_until = sim.now() + if cfg!(miri) { 100 * MS } else { 10 * 60_000 * MS };
    while sim.now() < idle_until {
        sim.advance(7 * MS);
        ctx.collect().unwrap();
    }
    let begin = sim.now();
    ctx.submit(record(&ctx, &sim, &stream, "after", 10_000)).unwrap();
    sim.advance(MS);
    ctx.collect().unwrap();
    let zone = sink.zones().into_iter().find(|z| z.location.name() == "after").unwrap();
    let base = sink.info().unwrap().base;
    assert_eq!(zone.gpu_end_ns - zone.gpu_begin_ns, 10_000, "a 10 µs zone stays 10 µs");
    assert_eq!(zone.gpu_begin_ns - base.gpu_ns, begin, "its start is exact");
    assert_eq!(ctx.stats().submitted, 0, "no event is held");
}

/// A list with a step over 16 ms inside it ends off its true time by the step's rounding
/// (16,000,001 ns reads as 16,000,002 in `f32` milliseconds); the next list on its stream,
/// placed exactly from a newer anchor, begins where it truly ended: 1 ns before its placed
/// end. That is rounding, not two lists recorded at once: the order guard moves the later
/// list by the nanosecond, and no `ConcurrentLists` error is reported.
#[test]
fn a_list_after_one_with_a_rounded_step_is_moved_not_reported_as_concurrent() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 8, 64);
    let first = record(&ctx, &sim, &stream, "16 ms and 1 ns", 16 * MS + 1);
    let second = record(&ctx, &sim, &stream, "next", 10_000);
    ctx.submit(first).unwrap();
    // Collected every millisecond: anchors a few ms apart, each placed exactly from the one
    // before (no drift), and the second list placed exactly from one within 16 ms of it.
    for _ in 0..20 {
        sim.advance(MS);
        ctx.collect().unwrap();
    }
    ctx.submit(second).unwrap();
    sim.advance(MS);
    ctx.collect().expect("rounding is not reported as lists recorded at once");
    let zones = sink.zones();
    assert_eq!(names(&zones), ["16 ms and 1 ns", "next"]);
    assert_eq!(zones[0].gpu_end_ns, zones[1].gpu_begin_ns, "the later list moved to touch the earlier");
    assert_eq!(zones[1].gpu_end_ns - zones[1].gpu_begin_ns, 10_000, "moved whole: its duration exact");
    let stats = ctx.stats();
    assert_eq!((stats.lists_shifted, stats.concurrent_lists), (1, 0), "{stats:?}");
    assert_accounted(&ctx);
}

/// Over an hour of simulated time, collected every 1 to 3 ms: lists every ~1 s and every 10
/// min start within 1 µs of the truth (exactly, here) and keep exact durations.
#[test]
fn starts_stay_within_a_microsecond_over_an_hour() {
    // Miri runs about 10^4 times slower: a few milliseconds there, the same cadence.
    starts_within_a_microsecond(if cfg!(miri) { 0 } else { 1 });
}

/// The same over ten simulated hours: minutes in a debug build, so not in the quick start's
/// `cargo test`; CI runs it in release (`cargo test --release --test collector -- --ignored`).
#[test]
#[ignore = "ten simulated hours: CI runs it in release"]
fn starts_stay_within_a_microsecond_over_ten_hours() {
    starts_within_a_microsecond(10);
}

fn starts_within_a_microsecond(hours: i64) {
    let sim = SimBackend::manual();
    let (often, rarely) = (sim.stream(), sim.stream());
    let (sink, ctx) = context(&sim, 8, 64);
    let mut truth = Vec::new();
    let (mut next_often, mut next_rarely) = (0, 0);
    let mut i = 0i64;
    while sim.now() < hours * 3_600_000 * MS + 2 * MS {
        let now = sim.now();
        if now >= next_often {
            truth.push((now, 12_345));
            ctx.submit(record(&ctx, &sim, &often, "often", 12_345)).unwrap();
            next_often = now + 1_000 * MS + (i * 7_919) % MS;
        }
        if now >= next_rarely {
            truth.push((now, 54_321));
            ctx.submit(record(&ctx, &sim, &rarely, "rarely", 54_321)).unwrap();
            next_rarely = now + 600_000 * MS;
        }
        sim.advance(MS + (i * 104_729) % (2 * MS));
        ctx.collect().unwrap();
        i += 1;
    }
    ctx.flush().unwrap();
    let base = sink.info().unwrap().base.gpu_ns;
    let mut got: Vec<(i64, i64)> =
        sink.zones().iter().map(|z| (z.gpu_begin_ns - base, z.gpu_end_ns - z.gpu_begin_ns)).collect();
    got.sort_unstable();
    truth.sort_unstable();
    assert_eq!(got.len(), truth.len());
    let worst = got.iter().zip(&truth).map(|(g, t)| (g.0 - t.0).abs()).max().unwrap();
    eprintln!("{} lists over {hours} h: worst start error {worst} ns", got.len());
    assert!(worst <= 1_000, "worst start error {worst} ns");
    assert!(got.iter().zip(&truth).all(|(g, t)| g.1 == t.1), "durations are exact");
}

/// Nothing collected for an hour: CUDA's `f32` milliseconds cannot carry an hour to the
/// nanosecond. The documented bound (docs/design.md, section 7) is half an `f32` step of the
/// distance, at most 2^-24 of it plus 1 ns: 214,577 ns for one hour. Durations inside the
/// list stay exact.
#[test]
fn an_hour_without_collect_is_off_by_at_most_the_documented_bound() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 8, 64);
    let hour = 3_600_000 * MS + 123_457;
    sim.advance(hour);
    ctx.submit(record(&ctx, &sim, &stream, "after an hour", 10_000)).unwrap();
    sim.advance(MS);
    ctx.collect().unwrap();
    let zone = &sink.zones()[0];
    let error = (zone.gpu_begin_ns - sink.info().unwrap().base.gpu_ns - hour).abs();
    let bound = (hour >> 24) + 1;
    eprintln!("after an hour without collect: start off by {error} ns (bound {bound} ns)");
    assert!(error <= bound, "error {error} ns above the bound {bound} ns");
    assert_eq!(zone.gpu_end_ns - zone.gpu_begin_ns, 10_000);
}

// ---- Bounded references ----

#[test]
fn a_new_stream_per_frame_never_exhausts_a_small_pool() {
    let sim = SimBackend::manual();
    let (sink, ctx) = context(&sim, 16, 16);
    let frames = if cfg!(miri) { 20 } else { 200 };
    for frame in 0..frames {
        let stream = sim.stream();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("frame")).unwrap_or_else(|e| panic!("frame {frame}: {e}"));
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap_or_else(|e| panic!("frame {frame}: {e}"));
        ctx.submit(list).unwrap();
        sim.advance(16 * MS);
        ctx.collect().unwrap();
        assert_eq!(ctx.stats().submitted, 0, "frame {frame}: nothing stays pinned");
    }
    assert_eq!(sink.zones().len(), frames);
    assert_eq!(ctx.stats().dropped_zones, 0);
}

#[test]
fn a_new_graph_per_step_never_exhausts_a_small_pool() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 16, 16);
    let steps = if cfg!(miri) { 20 } else { 100 };
    for step in 0..steps {
        let graph = sim.graph();
        let mut list = ctx.list();
        list.graph_zone_begin(&graph, &[], location!("step")).unwrap_or_else(|e| panic!("step {step}: {e}"));
        sim.add_kernel_node(&graph, 1_000);
        list.graph_zone_end(&graph, &[]).unwrap();
        sim.launch_graph(&graph, &stream);
        ctx.submit(list).unwrap();
        sim.advance(MS);
        ctx.collect().unwrap();
    }
    assert_eq!(sink.zones().len(), steps);
    assert_eq!(ctx.stats().submitted, 0);
}

// ---- Safe during graph capture: no query, no synchronize ----

/// The `Backend` items a test backend over the simulated GPU (its field `sim`) takes
/// unchanged: the types, events, streams, keys, graph nodes and the host clock.
macro_rules! sim_backend_basics {
    () => {
        type Event = <SimBackend as Backend>::Event;
        type Stream = SimStream;
        type Graph = <SimBackend as Backend>::Graph;
        type GraphNode = <SimBackend as Backend>::GraphNode;
        fn create_event(&self) -> Result<Self::Event, BackendError> {
            self.sim.create_event()
        }
        fn create_stream(&self) -> Result<SimStream, BackendError> {
            self.sim.create_stream()
        }
        fn stream_key(&self, stream: &SimStream) -> u64 {
            self.sim.stream_key(stream)
        }
        fn graph_key(&self, graph: &Self::Graph) -> u64 {
            self.sim.graph_key(graph)
        }
        fn add_graph_record_node(
            &self,
            event: &Self::Event,
            graph: &Self::Graph,
            dependencies: &[Self::GraphNode],
        ) -> Result<Self::GraphNode, BackendError> {
            self.sim.add_graph_record_node(event, graph, dependencies)
        }
        fn host_now_ns(&self) -> i64 {
            self.sim.host_now_ns()
        }
    };
}

/// The simulated GPU, but a query or a wait during `collect` fails the test (`cuEventQuery`
/// and `cuEventSynchronize` can invalidate another thread's stream capture), and the next
/// time read can be held up ([`Gate`]).
#[derive(Clone)]
struct NoQueries {
    sim: SimBackend,
    collecting: Arc<AtomicBool>,
    gate: Arc<Mutex<Option<Gate>>>,
}

impl NoQueries {
    fn new(sim: &SimBackend) -> Self {
        Self { sim: sim.clone(), collecting: Arc::new(AtomicBool::new(false)), gate: Arc::default() }
    }
}

/// The next time read, held up: its thread says so on `reading`, then waits for `go` (at most
/// 10 s, so that a test that fails does not hang).
struct Gate {
    reading: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
}

impl Backend for NoQueries {
    sim_backend_basics!();
    fn name(&self) -> &'static str {
        "no-queries"
    }
    fn record(&self, event: &Self::Event, stream: &SimStream) -> Result<(), BackendError> {
        self.sim.record(event, stream)
    }
    fn is_complete(&self, event: &Self::Event) -> Result<bool, BackendError> {
        assert!(!self.collecting.load(Ordering::Relaxed), "collect queried an event");
        self.sim.is_complete(event)
    }
    fn wait(&self, event: &Self::Event) -> Result<(), BackendError> {
        assert!(!self.collecting.load(Ordering::Relaxed), "collect waited on an event");
        self.sim.wait(event)
    }
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<Option<f32>, BackendError> {
        let gate = self.gate.lock().unwrap().take();
        if let Some(gate) = gate {
            gate.reading.send(()).unwrap();
            let _ = gate.go.recv_timeout(std::time::Duration::from_secs(10));
        }
        self.sim.elapsed_ms(start, end)
    }
}

#[test]
fn collect_never_queries_or_waits_on_an_event() {
    let sim = SimBackend::manual();
    let gpu = NoQueries::new(&sim);
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(gpu.clone()).sink(sink.clone()).build().unwrap();
    let stream = sim.stream();
    gpu.collecting.store(true, Ordering::Relaxed);
    for i in 0..20 {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("z")).unwrap();
        sim.launch(&stream, 3 * MS);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(if i % 2 == 0 { MS } else { 7 * MS });
        ctx.collect().unwrap();
    }
    gpu.collecting.store(false, Ordering::Relaxed);
    ctx.flush().unwrap();
    assert_eq!(sink.zones().len(), 20);
}

// ---- Retiring events (`Backend::retire`: Vulkan resets its queries there) ----

/// The simulated GPU with [`Backend::RETIRES`]: an event recorded again before it was retired
/// (or retired without a record since) fails the test; retires are counted, and so are those
/// of events the simulated GPU had not reached (`early`: on Vulkan, a reset of a query that a
/// pending command buffer will still write).
#[derive(Clone)]
struct Retiring {
    sim: SimBackend,
    /// Events (by address) recorded and not retired since.
    written: Arc<Mutex<std::collections::HashSet<usize>>>,
    retired: Arc<std::sync::atomic::AtomicUsize>,
    early: Arc<std::sync::atomic::AtomicUsize>,
}

impl Retiring {
    fn on(sim: &SimBackend) -> Self {
        Self { sim: sim.clone(), written: Arc::default(), retired: Arc::default(), early: Arc::default() }
    }
}

fn address<T>(event: &T) -> usize {
    event as *const T as usize
}

impl Backend for Retiring {
    sim_backend_basics!();
    const RETIRES: bool = true;
    fn name(&self) -> &'static str {
        "retiring"
    }
    fn record(&self, event: &Self::Event, stream: &SimStream) -> Result<(), BackendError> {
        assert!(
            self.written.lock().unwrap().insert(address(event)),
            "an event recorded again before it was retired"
        );
        self.sim.record(event, stream)
    }
    fn record_anchor(&self, event: &Self::Event, stream: &SimStream) -> Result<Option<i64>, BackendError> {
        // The collector's own anchors, recorded again and again: never retired (a backend
        // resets them here itself).
        self.sim.record_anchor(event, stream)
    }
    fn is_complete(&self, event: &Self::Event) -> Result<bool, BackendError> {
        self.sim.is_complete(event)
    }
    fn wait(&self, event: &Self::Event) -> Result<(), BackendError> {
        self.sim.wait(event)
    }
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<Option<f32>, BackendError> {
        self.sim.elapsed_ms(start, end)
    }
    fn retire(&self, event: &Self::Event) {
        assert!(
            self.written.lock().unwrap().remove(&address(event)),
            "an event retired that was not recorded"
        );
        if !self.sim.is_complete(event).unwrap() {
            self.early.fetch_add(1, Ordering::Relaxed);
        }
        self.retired.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn every_collected_event_is_retired_once_before_its_slot_is_recorded_again() {
    let sim = SimBackend::manual();
    let gpu = Retiring::on(&sim);
    let sink = MemorySink::new();
    // Four slots for lists of three events: every slot is reused many times.
    let ctx = TracingContext::builder(gpu.clone()).capacity(4, 4).sink(sink.clone()).build().unwrap();
    let stream = sim.stream();
    let mut events = 0;
    for i in 0..40 {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("a")).unwrap();
        sim.launch(&stream, MS);
        list.zone_next(&stream, location!("b")).unwrap();
        sim.launch(&stream, MS);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        events += 3;
        sim.advance(2 * MS);
        if i % 3 == 0 {
            ctx.collect().unwrap();
        } else {
            ctx.flush().unwrap();
        }
    }
    ctx.flush().unwrap();
    assert_eq!(sink.zones().len(), 80);
    assert_eq!(ctx.stats().capacity, 4, "the slots were reused");
    assert_eq!(gpu.retired.load(Ordering::Relaxed), events, "each event of each collected list retired once");
    assert!(gpu.written.lock().unwrap().is_empty(), "an event left unretired");
    assert_eq!(gpu.early.load(Ordering::Relaxed), 0, "an event retired before the GPU passed it");
}

/// Lists with a zone on a stream the GPU is done with and one on a stream still running,
/// whose read fails: their events are retired only once the GPU has passed them (before,
/// every event of a failed list was retired at once, the running stream's too), and their
/// slots then come back.
#[test]
fn a_failed_lists_events_are_retired_only_once_the_gpu_has_passed_them() {
    // (20 under Miri: each failed read costs it a third of a second.)
    const LISTS: usize = if cfg!(miri) { 20 } else { 100 };
    let sim = SimBackend::manual();
    let gpu = Retiring::on(&sim);
    let ctx = TracingContext::builder(gpu.clone()).build().unwrap();
    let (done, running) = (sim.stream(), sim.stream());
    for _ in 0..LISTS {
        let mut list = ctx.list();
        list.zone_begin(&done, location!("done")).unwrap();
        sim.launch(&done, MS);
        list.zone_end(&done).unwrap();
        list.zone_begin(&running, location!("running")).unwrap();
        sim.launch(&running, 10 * MS);
        list.zone_end(&running).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(2 * MS);
        sim.fail_elapsed(1);
        assert!(ctx.collect().is_err(), "the list's read fails");
    }
    assert_eq!(gpu.early.load(Ordering::Relaxed), 0, "an event retired before the GPU passed it");
    assert_eq!(ctx.stats().lists_failed, LISTS);
    sim.advance(2_000 * MS);
    ctx.flush().unwrap();
    assert_eq!(gpu.retired.load(Ordering::Relaxed), 4 * LISTS, "every event retired once passed");
    assert_eq!(gpu.early.load(Ordering::Relaxed), 0);
    let stats = ctx.stats();
    assert_eq!((stats.submitted, stats.owned, stats.unaccounted()), (0, 0, 0), "{stats:?}");
}

// ---- Panic safety and reports ----

/// A sink that panics on its first batch.
struct PanicsOnce(bool);

impl Sink for PanicsOnce {
    fn zones(&mut self, _: &ContextInfo, _: ZoneBatch<'_>) -> std::io::Result<()> {
        if !self.0 {
            self.0 = true;
            panic!("sink bug");
        }
        Ok(())
    }
}

#[test]
fn a_panicking_sink_loses_no_slot_and_no_later_list_and_is_reported() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let memory = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone())
        .capacity(8, 64)
        .sink(PanicsOnce(false))
        .sink(memory.clone())
        .build()
        .unwrap();
    ctx.submit(record(&ctx, &sim, &stream, "a", 100)).unwrap();
    ctx.submit(record(&ctx, &sim, &stream, "b", 100)).unwrap();
    sim.advance(1_000);
    let err: CollectError = ctx.collect().unwrap_err();
    assert!(matches!(err.error, Error::SinkPanicked(ref m) if m.contains("sink bug")), "{err:?}");
    assert_eq!((err.report.lists, err.report.zones), (2, 2), "both lists were collected");
    assert_eq!(names(&memory.zones()), ["a", "b"], "the other sink got every batch");
    let stats = ctx.stats();
    assert_eq!((stats.submitted, stats.lists_collected, stats.sink_failures), (0, 2, 1));
    assert_accounted(&ctx);
    ctx.flush().unwrap();
}

#[test]
fn a_collect_that_fails_still_reports_what_it_collected() {
    let sim = SimBackend::manual();
    let (a, b) = (sim.stream(), sim.stream());
    let (sink, ctx) = context(&sim, 8, 64);
    ctx.submit(record(&ctx, &sim, &a, "fine", 100)).unwrap();
    ctx.submit(record(&ctx, &sim, &b, "unlucky", 100)).unwrap();
    ctx.submit(record(&ctx, &sim, &a, "fine too", 100)).unwrap();
    sim.advance(1_000);
    sim.fail_elapsed(1);
    let err = ctx.collect().unwrap_err();
    assert!(matches!(err.error, Error::Backend(ref e) if e.code == "injected failure"), "{err:?}");
    assert_eq!(
        (err.report.lists, err.report.failed_lists, err.report.zones, err.report.errors),
        (3, 1, 2, 1)
    );
    assert_eq!(sink.zones().len(), 2);
    assert_accounted(&ctx);
}

// ---- Parallel reads ----

#[test]
fn concurrent_collectors_share_the_reading_and_emit_every_list_once() {
    let sim = SimBackend::manual();
    let streams: Vec<SimStream> = (0..8).map(|_| sim.stream()).collect();
    let (sink, ctx) = context(&sim, 64, 1 << 16);
    const LISTS: usize = if cfg!(miri) { 8 } else { 400 };
    let read = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for (t, stream) in streams.iter().enumerate() {
            let (ctx, sim, read) = (&ctx, &sim, &read);
            s.spawn(move || {
                for i in 0..LISTS / 8 {
                    let mut list = ctx.list();
                    list.zone_begin(stream, DynamicLocation::new(format!("{t}:{i}"))).unwrap();
                    sim.launch(stream, 100);
                    list.zone_end(stream).unwrap();
                    ctx.submit(list).unwrap();
                    sim.advance(50);
                    match ctx.collect() {
                        Ok(Collected::Done(r)) => read.fetch_add(r.read_lists, Ordering::Relaxed),
                        Ok(Collected::Busy) => 0,
                        Err(e) => panic!("{e}"),
                    };
                }
            });
        }
    });
    sim.advance(MS);
    let report = ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(zones.len(), LISTS);
    let mut seen: Vec<&str> = zones.iter().map(|z| z.location.name()).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), LISTS, "no list emitted twice");
    for t in 0..8 {
        let order: Vec<usize> = zones
            .iter()
            .filter_map(|z| z.location.name().strip_prefix(&format!("{t}:")).map(|i| i.parse().unwrap()))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "stream {t} in order: {order:?}");
    }
    assert!(read.load(Ordering::Relaxed) + report.read_lists <= LISTS);
    assert_accounted(&ctx);
}

#[test]
fn a_collector_that_comes_while_another_reads_a_backlog_reads_part_of_it() {
    let sim = SimBackend::manual();
    let gpu = NoQueries::new(&sim);
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(gpu.clone()).sink(sink.clone()).build().unwrap();
    let streams: Vec<SimStream> = (0..8).map(|_| sim.stream()).collect();
    for (i, stream) in streams.iter().enumerate() {
        let mut list = ctx.list();
        list.zone_begin(stream, DynamicLocation::new(format!("{i}"))).unwrap();
        sim.launch(stream, 100);
        list.zone_end(stream).unwrap();
        ctx.submit(list).unwrap();
    }
    sim.advance(MS);
    let (reading, first_read) = mpsc::channel();
    let (go, wait) = mpsc::channel();
    *gpu.gate.lock().unwrap() = Some(Gate { reading, go: wait });
    let read_by = |outcome: Result<Collected, CollectError>| match outcome.unwrap() {
        Collected::Done(report) => report.read_lists,
        Collected::Busy => 0,
    };
    let (first, second) = std::thread::scope(|s| {
        // The first collector takes all 8 lists and is held up in its first read...
        let first = s.spawn(|| read_by(ctx.collect()));
        first_read.recv().unwrap();
        // ...while a second one comes: it reads what the first has not claimed yet.
        let second = read_by(ctx.collect());
        go.send(()).unwrap();
        (first.join().unwrap(), second)
    });
    assert!(second > 0, "the second collector read none of the backlog (first: {first})");
    assert_eq!(first + second, 8, "each list read once");
    ctx.flush().unwrap();
    let mut seen = names(&sink.zones());
    seen.sort_unstable();
    assert_eq!(seen, ["0", "1", "2", "3", "4", "5", "6", "7"], "every list emitted once");
    assert_accounted(&ctx);
}

// ---- The context's own collector thread ----

#[test]
fn collect_every_collects_without_the_application_and_stops_with_the_last_handle() {
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone())
        .collect_every(std::time::Duration::from_millis(1))
        .sink(sink.clone())
        .build()
        .unwrap();
    ctx.submit(record(&ctx, &sim, &stream, "by the thread", 1_000)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sink.zones().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(names(&sink.zones()), ["by the thread"], "collected with no collect() call");
    let flushes = sink.flushes();
    drop(ctx);
    assert_eq!(sink.flushes(), flushes + 1, "the last handle stops the thread and flushes");
}

#[test]
fn exhaustion_is_still_a_clear_error_with_the_new_collector() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (_sink, ctx) = context(&sim, 2, 2);
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("a")).unwrap();
    list.zone_end(&stream).unwrap();
    assert_eq!(list.zone_begin(&stream, location!("b")), Err(RecordError::PoolExhausted { capacity: 2 }));
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_accounted(&ctx);
}

/// A pool exhausted by lists the GPU has already run (submitted, not collected yet: the
/// application collects rarely, or a collector thread falls behind) does not cost zones: the
/// recording thread collects them, their slots come back, and its zone is recorded.
#[test]
fn a_recording_thread_that_finds_the_pool_exhausted_collects_rather_than_drops() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, ctx) = context(&sim, 8, 8);
    for k in 0..4 {
        ctx.submit(record(&ctx, &sim, &stream, &format!("done {k}"), 1_000)).unwrap();
    }
    sim.advance(10_000);
    let stats = ctx.stats();
    assert_eq!((stats.submitted, stats.free), (8, 0), "every slot in lists not collected yet");
    ctx.submit(record(&ctx, &sim, &stream, "after", 1_000)).unwrap();
    sim.advance(10_000);
    ctx.flush().unwrap();
    assert_accounted(&ctx);
    let stats = ctx.stats();
    assert_eq!(stats.dropped_zones, 0, "{stats:?}");
    assert_eq!(names(&sink.zones()), ["done 0", "done 1", "done 2", "done 3", "after"]);
}

/// When the lists holding every slot have not run yet, collecting frees nothing: the zone
/// is dropped and counted, as before, after a bounded number of collects.
#[test]
fn a_pool_exhausted_by_work_the_gpu_has_not_run_still_drops_the_zone() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (_sink, ctx) = context(&sim, 4, 4);
    ctx.submit(record(&ctx, &sim, &stream, "running", 1_000_000)).unwrap();
    ctx.submit(record(&ctx, &sim, &stream, "queued", 1_000_000)).unwrap();
    let mut list = ctx.list();
    assert_eq!(list.zone_begin(&stream, location!("late")), Err(RecordError::PoolExhausted { capacity: 4 }));
    drop(list);
    sim.advance(3_000_000);
    ctx.flush().unwrap();
    assert_accounted(&ctx);
    assert_eq!(ctx.stats().dropped_zones, 1);
}

/// Threads at the pool's maximum while the GPU keeps up (work is complete as soon as it is
/// recorded) and no one else collects: each exhausted thread collects, and tries again while
/// lists come back, so none drops a zone however the threads interleave. A zone may be
/// dropped only when every slot in use sits where no collect can reach it (docs/design.md
/// section 5, "The relief"): in lists being recorded (here at most 4 zones, 8 events and a
/// batch of 2 spare each) or in the magazines of threads that have not called since the pool
/// ran out (at most `M` = max / 16, at most 128, each). So the worlds here, from 2 to 24
/// threads, each have a maximum above what their threads can hold that way, and below what
/// their lists submit (every world runs into the maximum many times over).
#[test]
fn threads_at_the_pools_maximum_drop_nothing_while_the_gpu_keeps_up() {
    const LISTS: usize = if cfg!(miri) { 10 } else { 300 };
    const ZONES: usize = 4;
    let worlds: &[(usize, u32)] =
        if cfg!(miri) { &[(2, 32)] } else { &[(2, 32), (5, 128), (16, 4096), (24, 4096)] };
    for &(threads, max) in worlds {
        let max_slots = max as usize;
        let magazine = (max_slots / 16).clamp(2, 128);
        assert!(threads * (magazine + 2 * ZONES + 2) < max_slots, "a world whose threads can hold the pool");
        assert!(threads * LISTS * 2 * ZONES > 4 * max_slots, "a world that does not reach the maximum");
        let sim = SimBackend::manual();
        let ctx = TracingContext::builder(sim.clone()).capacity(8, max).batch(2).build().unwrap();
        std::thread::scope(|s| {
            for _ in 0..threads {
                let (ctx, stream) = (&ctx, sim.stream());
                s.spawn(move || {
                    for _ in 0..LISTS {
                        let mut list = ctx.list();
                        for _ in 0..ZONES {
                            list.zone_begin(&stream, location!("zone")).unwrap_or_else(|e| {
                                panic!("{threads} threads, at most {max}: {e}: {:?}", ctx.stats())
                            });
                            list.zone_end(&stream).unwrap();
                        }
                        ctx.submit(list).unwrap();
                    }
                });
            }
        });
        ctx.flush().unwrap();
        assert_accounted(&ctx);
        let stats = ctx.stats();
        assert_eq!(stats.capacity, max_slots, "{threads} threads: the maximum was reached");
        assert_eq!((stats.dropped_zones, stats.zones_emitted), (0, threads * LISTS * ZONES), "{stats:?}");
    }
}

/// A flush first collects what is complete beside the other collectors, and keeps them out
/// only for what is left: fifty finished lists are emitted while the flush still waits for a
/// fifty-first that runs for two seconds (before, the flush read all fifty-one, waited, and
/// emitted them together, every other collector turned away meanwhile).
#[test]
#[cfg_attr(miri, ignore = "the simulated GPU runs in real time here: Miri's clock is not the host's")]
fn a_flush_emits_what_is_complete_before_it_waits_for_the_rest() {
    let sim = SimBackend::realtime();
    let (short, long) = (sim.stream(), sim.stream());
    let ctx = TracingContext::builder(sim.clone()).build().unwrap();
    for _ in 0..50 {
        let mut list = ctx.list();
        list.zone_begin(&short, location!("short")).unwrap();
        sim.launch(&short, 1_000);
        list.zone_end(&short).unwrap();
        ctx.submit(list).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut list = ctx.list();
    list.zone_begin(&long, location!("long")).unwrap();
    let launched = std::time::Instant::now();
    sim.launch(&long, 2_000 * MS);
    list.zone_end(&long).unwrap();
    ctx.submit(list).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let flush = {
        let (ctx, done) = (ctx.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let report = ctx.flush();
            done.store(true, Ordering::SeqCst);
            report
        })
    };
    let seen = loop {
        let collected = ctx.stats().lists_collected;
        if collected >= 50 || done.load(Ordering::SeqCst) {
            break collected;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert_eq!(seen, 50, "the finished lists are emitted while the flush waits for the long one");
    let waited = launched.elapsed();
    assert!(waited < std::time::Duration::from_millis(1_900), "too slow to tell: {waited:?}");
    assert!(!done.load(Ordering::SeqCst), "the flush still waits for the long list");
    let report = flush.join().unwrap().unwrap();
    assert_eq!((report.lists, report.pending_lists), (51, 0), "{report:?}");
    assert_eq!(ctx.stats().lists_collected, 51);
}
