//! What outside testers fed the crate that it should have refused (issue 26, items 11 to 13):
//! configurations that cannot work, a backend that panics where the crate did not catch it,
//! and GPU times that cannot be true. Each test failed before its fix (the commit that added
//! it says how).

use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{
    location, Backend, BackendError, ConfigError, Elapsed, Error, Lane, RecordError, Stats, TimeError,
    TracingContext,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a [`Faulty`] backend does besides simulating.
#[derive(Default)]
struct Faults {
    /// `host_now_ns` panics while set.
    host_clock_panics: AtomicBool,
    /// `create_event` panics while set.
    creation_panics: AtomicBool,
    /// An `elapsed_ms` reading of exactly the first value is reported as the second.
    reading: Mutex<Option<(f32, f32)>>,
}

impl Faults {
    /// From now on, an `elapsed_ms` reading of a distance of `ns` is reported as `ms`.
    fn misread(&self, ns: i64, ms: f32) {
        *self.reading.lock().unwrap() = Some((ms_of(ns), ms));
    }
}

/// Sets a fault's flag until dropped (also when the test unwinds: a context dropped then
/// must not meet the fault again).
struct Armed<'a>(&'a AtomicBool);

impl<'a> Armed<'a> {
    fn new(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::Relaxed);
        Self(flag)
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The simulation's `f32` millisecond reading of a distance of `ns`.
fn ms_of(ns: i64) -> f32 {
    (ns as f64 / 1e6) as f32
}

/// The simulated GPU with [`Faults`].
#[derive(Clone)]
struct Faulty {
    sim: SimBackend,
    faults: Arc<Faults>,
}

impl Backend for Faulty {
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "faulty"
    }
    fn create_event(&self) -> Result<SimEvent, BackendError> {
        if self.faults.creation_panics.load(Ordering::Relaxed) {
            panic!("injected create_event panic");
        }
        self.sim.create_event()
    }
    fn create_stream(&self) -> Result<SimStream, BackendError> {
        self.sim.create_stream()
    }
    fn stream_key(&self, stream: &SimStream) -> u64 {
        self.sim.stream_key(stream)
    }
    fn graph_key(&self, graph: &SimGraph) -> u64 {
        self.sim.graph_key(graph)
    }
    fn record(&self, event: &SimEvent, stream: &SimStream) -> Result<(), BackendError> {
        self.sim.record(event, stream)
    }
    fn add_graph_record_node(
        &self,
        event: &SimEvent,
        graph: &SimGraph,
        dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        self.sim.add_graph_record_node(event, graph, dependencies)
    }
    fn is_complete(&self, event: &SimEvent) -> Result<bool, BackendError> {
        self.sim.is_complete(event)
    }
    fn wait(&self, event: &SimEvent) -> Result<(), BackendError> {
        self.sim.wait(event)
    }
    fn elapsed_ms(&self, start: &SimEvent, end: &SimEvent) -> Result<Option<f32>, BackendError> {
        let read = self.sim.elapsed_ms(start, end)?;
        Ok(match *self.faults.reading.lock().unwrap() {
            Some((real, reported)) if read == Some(real) => Some(reported),
            _ => read,
        })
    }
    fn host_now_ns(&self) -> i64 {
        if self.faults.host_clock_panics.load(Ordering::Relaxed) {
            panic!("injected host clock panic");
        }
        self.sim.host_now_ns()
    }
}

/// A context on a faulty manual simulation, a pool of `initial` slots growing to `max`.
fn faulty(initial: u32, max: u32) -> (Arc<Faults>, SimBackend, MemorySink, TracingContext<Faulty>) {
    let sim = SimBackend::manual();
    let faults = Arc::new(Faults::default());
    let sink = MemorySink::new();
    let backend = Faulty { sim: sim.clone(), faults: faults.clone() };
    let ctx = TracingContext::builder(backend).capacity(initial, max).sink(sink.clone()).build().unwrap();
    (faults, sim, sink, ctx)
}

fn assert_accounted<B: Backend>(ctx: &TracingContext<B>) -> Stats {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.free, "free counter matches the freelist");
    stats
}

fn names(zones: &[Zone]) -> Vec<&str> {
    zones.iter().map(|z| z.location.name()).collect()
}

/// Records one zone named "good" around a kernel of 1,000 ns on `stream`, and submits it.
fn good_list<B: Backend<Stream = SimStream>>(ctx: &TracingContext<B>, sim: &SimBackend, stream: &SimStream) {
    let mut list = ctx.list();
    list.zone_begin(stream, location!("good")).unwrap();
    sim.launch(stream, 1_000);
    list.zone_end(stream).unwrap();
    ctx.submit(list).unwrap();
}

// ---- 11: configurations that cannot work -------------------------------------------------

#[test]
fn a_pool_too_small_for_one_zone_is_refused_naming_the_least_that_works() {
    let sim = SimBackend::manual();
    let error = TracingContext::builder(sim.clone())
        .capacity(1, 1)
        .build()
        .expect_err("a pool of 1 slot cannot record a zone: its begin and the slot kept for its end");
    assert!(matches!(error, Error::Config(ConfigError::TooSmall { max: 1, least: 2 })), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("max capacity 1") && message.contains("at least 2"), "{message}");

    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).capacity(1, 2).build().expect("2 slots are enough");
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("one zone")).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
}

#[test]
fn a_batch_above_a_sixteenth_of_the_pool_is_cut_so_that_sixteen_lists_record_at_once() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).capacity(64, 256).batch(1 << 20).build().unwrap();
    let lists: Vec<_> = (0..16)
        .map(|i| {
            let mut list = ctx.list();
            let begun = list.zone_begin(&stream, location!("open"));
            assert_eq!(begun, Ok(()), "list {i} of 16");
            list
        })
        .collect();
    assert_eq!(ctx.config().batch, 16, "the batch used: 256 / 16");
    assert_eq!(ctx.stats().owned, 256, "each list holds one batch");
    drop(lists);
    assert_accounted(&ctx);
}

// ---- 12: panics that escaped or leaked ---------------------------------------------------

/// Begins a zone in `list` while the host clock panics; checks the call failed with the
/// panic as its error, and closes the zone.
fn begin_while_the_host_clock_panics(
    faults: &Faults,
    list: &mut gpu_event_pool::EventList<Faulty>,
    stream: &SimStream,
) {
    let armed = Armed::new(&faults.host_clock_panics);
    let begun = list.zone_begin(stream, location!("lost"));
    drop(armed);
    match begun {
        Err(RecordError::Backend(e)) => {
            assert_eq!(e.call, "Backend::host_now_ns");
            assert_eq!(e.code, "panicked: injected host clock panic");
        }
        other => panic!("expected the caught panic as the error, got {other:?}"),
    }
    list.zone_end(stream).unwrap();
}

#[test]
fn a_host_clock_that_panics_at_a_lists_first_record_fails_the_begin_and_leaks_no_slot() {
    let (faults, sim, sink, ctx) = faulty(8, 8);
    let stream = sim.stream();
    let mut list = ctx.list();
    begin_while_the_host_clock_panics(&faults, &mut list, &stream);
    drop(list);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.owned, stats.free, stats.dropped_zones), (0, 8, 1));

    // The lane was not left locked, and its next list takes place 0.
    good_list(&ctx, &sim, &stream);
    sim.advance(10_000);
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["good"]);
}

#[test]
fn a_host_clock_that_panics_while_launches_are_recorded_fails_the_begin_and_leaks_no_slot() {
    let (faults, sim, sink, ctx) = faulty(8, 8);
    ctx.set_record_launches(true);
    let stream = sim.stream();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("outer")).unwrap();
    begin_while_the_host_clock_panics(&faults, &mut list, &stream);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(10_000);
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["outer"]);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.owned, stats.free, stats.dropped_zones), (0, 8, 1));
}

#[test]
fn a_backend_that_panics_creating_events_while_the_pool_grows_fails_the_begin_and_the_pool_grows_later() {
    let (faults, sim, sink, ctx) = faulty(2, 64);
    // One list at a time on a stream: the second list, open beside the first, has its own.
    let (stream, other) = (sim.stream(), sim.stream());
    let mut first = ctx.list();
    first.zone_begin(&stream, location!("first")).unwrap();
    assert_eq!(ctx.stats().free, 0, "the first list holds the whole first page");

    // Armed before the list is made: a list reserves its first zone's slots when it is made
    // (and leaves a failure there for its first begin to meet).
    let armed = Armed::new(&faults.creation_panics);
    let mut second = ctx.list();
    let begun = second.zone_begin(&other, location!("lost"));
    drop(armed);
    match begun {
        Err(RecordError::Backend(e)) => {
            assert_eq!(e.call, "Backend::create_event");
            assert_eq!(e.code, "panicked: injected create_event panic");
        }
        other => panic!("expected the caught panic as the error, got {other:?}"),
    }
    second.zone_end(&other).unwrap();
    assert_eq!(ctx.stats().capacity, 2, "the page that failed was not added");

    second.zone_begin(&other, location!("second")).unwrap();
    sim.launch(&other, 1_000);
    second.zone_end(&other).unwrap();
    first.zone_end(&stream).unwrap();
    ctx.submit(first).unwrap();
    ctx.submit(second).unwrap();
    sim.advance(10_000);
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["first", "second"]);
    let stats = assert_accounted(&ctx);
    assert!(stats.capacity > 2, "the pool grew once the backend stopped panicking: {stats:?}");
    assert_eq!(stats.dropped_zones, 1);
}

#[test]
fn a_backend_that_panics_creating_the_first_page_fails_build() {
    let faults = Arc::new(Faults::default());
    faults.creation_panics.store(true, Ordering::Relaxed);
    let backend = Faulty { sim: SimBackend::manual(), faults };
    match TracingContext::builder(backend).build() {
        Err(Error::Backend(e)) => {
            assert_eq!(e.call, "Backend::create_event");
            assert_eq!(e.code, "panicked: injected create_event panic");
        }
        other => panic!("expected the caught panic as the error, got {:?}", other.map(|_| ())),
    }
}

// ---- 13: times that cannot be true -------------------------------------------------------

/// Flushes, expecting it to fail one list; returns the error.
fn flush_failing_one_list<B: Backend>(ctx: &TracingContext<B>) -> Error {
    let failed = ctx.flush().expect_err("the list with impossible times fails");
    assert_eq!(failed.report.failed_lists, 1, "{failed:?}");
    let stats = assert_accounted(ctx);
    assert_eq!(stats.lists_failed, 1, "{stats:?}");
    failed.error
}

#[test]
fn a_zone_ended_on_another_stream_before_it_began_fails_its_list() {
    let (_, sim, sink, ctx) = faulty(8, 64);
    let (a, b) = (sim.stream(), sim.stream());
    let mut list = ctx.list();
    sim.launch(&a, 5_000);
    list.zone_begin(&a, location!("crosses")).unwrap();
    list.zone_end(&b).unwrap(); // b is idle: it reaches its end 5,000 ns before a reaches the begin
    ctx.submit(list).unwrap();
    good_list(&ctx, &sim, &a);
    sim.advance(20_000);
    let error = flush_failing_one_list(&ctx);
    let message = error.to_string();
    match error {
        Error::Time(TimeError::EndsBeforeBegin { begin_lane, end_lane, by_ns: 5_000, .. }) => {
            assert_eq!(begin_lane, Lane::Stream(ctx.backend().stream_key(&a)));
            assert_eq!(end_lane, Lane::Stream(ctx.backend().stream_key(&b)));
        }
        other => panic!("expected the zone's end before its begin, got {other:?}"),
    }
    assert!(message.contains("zone crosses at tests/bad_input.rs:"), "{message}");
    assert!(message.contains("ends 5000 ns before it begins"), "{message}");
    assert_eq!(names(&sink.zones()), ["good"], "the later list is still collected");
    assert_eq!(ctx.stats().dropped_zones, 1);
}

#[test]
fn a_list_on_two_streams_may_step_back_in_time_between_them() {
    let (_, sim, sink, ctx) = faulty(8, 64);
    let (a, b) = (sim.stream(), sim.stream());
    let mut list = ctx.list();
    sim.launch(&a, 5_000);
    list.zone_begin(&a, location!("on a")).unwrap();
    sim.launch(&a, 1_000);
    list.zone_end(&a).unwrap();
    // b is idle: its zone runs 6,000 ns before a's ends, 5,000 ns before a's begins.
    list.zone_begin(&b, location!("on b")).unwrap();
    sim.launch(&b, 1_000);
    list.zone_end(&b).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(20_000);
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(names(&zones), ["on a", "on b"]);
    assert_eq!(zones[1].gpu_begin_ns - zones[0].gpu_begin_ns, -5_000);
    assert!(zones.iter().all(|z| z.gpu_end_ns - z.gpu_begin_ns == 1_000), "{zones:?}");
}

#[test]
fn gpu_time_going_back_on_one_stream_fails_its_list() {
    let (faults, sim, sink, ctx) = faulty(8, 64);
    let a = sim.stream();
    let mut list = ctx.list();
    list.zone_begin(&a, location!("outer")).unwrap();
    sim.launch(&a, 1_000);
    list.zone_begin(&a, location!("inner")).unwrap();
    sim.launch(&a, 1_000);
    list.zone_end(&a).unwrap();
    sim.launch(&a, 7_777);
    list.zone_end(&a).unwrap();
    ctx.submit(list).unwrap();
    good_list(&ctx, &sim, &a);
    sim.advance(20_000);
    // The outer zone's end read 1,000 ns after the inner zone's begin and before its end:
    // each zone is long enough, but the stream went back from the inner end to the outer.
    faults.misread(7_777, ms_of(-1_000));
    let error = flush_failing_one_list(&ctx);
    let message = error.to_string();
    let lane = Lane::Stream(ctx.backend().stream_key(&a));
    assert!(
        matches!(error, Error::Time(TimeError::WentBack { lane: l, event: 3, by_ns: 1_000, .. }) if l == lane),
        "{error:?}"
    );
    assert!(message.contains("goes back 1000 ns"), "{message}");
    assert_eq!(names(&sink.zones()), ["good"]);
    assert_eq!(ctx.stats().dropped_zones, 2);
}

#[test]
fn a_begin_may_come_before_the_end_recorded_just_before_it_on_its_stream() {
    let (faults, sim, sink, ctx) = faulty(8, 64);
    let a = sim.stream();
    let mut list = ctx.list();
    list.zone_begin(&a, location!("first")).unwrap();
    sim.launch(&a, 1_000);
    list.zone_end(&a).unwrap();
    sim.launch(&a, 7_777);
    list.zone_begin(&a, location!("second")).unwrap();
    sim.launch(&a, 1_000);
    list.zone_end(&a).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(20_000);
    // As a Vulkan begin, written at the top of the pipe, may be: 500 ns before the end
    // recorded before it. The second zone's end is still after every earlier event.
    faults.misread(7_777, ms_of(-500));
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(names(&zones), ["first", "second"]);
    assert_eq!(zones[1].gpu_begin_ns - zones[0].gpu_end_ns, -500);
}

#[test]
fn an_elapsed_reading_beyond_i64_nanoseconds_fails_its_list() {
    let (faults, sim, sink, ctx) = faulty(8, 64);
    let a = sim.stream();
    let mut list = ctx.list();
    list.zone_begin(&a, location!("huge")).unwrap();
    sim.launch(&a, 7_777);
    list.zone_end(&a).unwrap();
    ctx.submit(list).unwrap();
    // On a stream of its own: no read of the good list (placing it against the anchor at 0
    // included) is 7 777 ns.
    good_list(&ctx, &sim, &sim.stream());
    sim.advance(20_000);
    faults.misread(7_777, f32::MAX);
    let error = flush_failing_one_list(&ctx);
    match error {
        Error::Backend(e) => {
            assert_eq!(e.call, "Backend::elapsed_ms");
            assert_eq!(e.code, format!("{} ms is out of range", f32::MAX));
        }
        other => panic!("expected the reading refused, got {other:?}"),
    }
    assert_eq!(names(&sink.zones()), ["good"]);
    assert_eq!(ctx.stats().dropped_zones, 1);
}

#[test]
fn steps_that_sum_beyond_i64_nanoseconds_fail_their_list() {
    let (faults, sim, sink, ctx) = faulty(8, 64);
    let a = sim.stream();
    let mut list = ctx.list();
    list.zone_begin(&a, location!("first")).unwrap();
    sim.launch(&a, 7_777);
    list.zone_next(&a, location!("second")).unwrap();
    sim.launch(&a, 7_777);
    list.zone_end(&a).unwrap();
    ctx.submit(list).unwrap();
    good_list(&ctx, &sim, &a);
    sim.advance(40_000);
    // 5e12 ms is 5e18 ns: each step fits in an i64, their sum does not.
    faults.misread(7_777, 5e12);
    let error = flush_failing_one_list(&ctx);
    let message = error.to_string();
    assert!(matches!(error, Error::Time(TimeError::OutOfRange { event: 2, .. })), "{error:?}");
    assert!(message.contains("out of range"), "{message}");
    assert_eq!(names(&sink.zones()), ["good"]);
    assert_eq!(ctx.stats().dropped_zones, 2);
}

#[test]
fn a_millisecond_reading_converts_only_when_its_nanoseconds_fit_in_an_i64() {
    assert_eq!(Elapsed::from_ms(1.5), Some(Elapsed { ns: 1_500_000, exact: false }));
    assert_eq!(Elapsed::from_ms(-0.25), Some(Elapsed { ns: -250_000, exact: false }));
    // i64 nanoseconds reach 9.22e12 ms either way.
    assert!(Elapsed::from_ms(9.2e12).is_some());
    assert!(Elapsed::from_ms(-9.2e12).is_some());
    for refused in [9.3e12, -9.3e12, f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        assert_eq!(Elapsed::from_ms(refused), None, "{refused}");
    }
}
