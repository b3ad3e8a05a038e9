//! The Tracy sink's message sequence, checked through its seam ([`TracyApi`]): a recorder takes
//! the messages, and a model of Tracy's server replays them with the server's own rules (query
//! ids must be free when used and resolved by a time; one zone stack per context; a time more
//! than 2^31 below the last is a timer wrap; calibrated placement of GPU times). The model shows
//! what a capture would: each context is one lane of Tracy's GPU timeline.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::{ChromeTrace, ChromeTraceSink};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::tracy::{
    TracyApi, TracyContextIds, TracyGpuKind, TracySink, DEFAULT_MAX_STREAM_LANES, MAX_CONTEXTS,
};
use gpu_event_pool::sink::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{location, Config, DynamicLocation, Lane, Location, SourceLocation, TracingContext};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod trace_check;

/// One message to Tracy, with Tracy's CPU clock when it was emitted (`cpu`).
#[derive(Debug, Clone, PartialEq)]
enum Msg {
    NewContext { context: u8, kind: TracyGpuKind, gpu: i64, cpu: i64 },
    Name { context: u8, name: String },
    Calibrate { context: u8, gpu: i64, cpu_delta: i64, cpu: i64 },
    Begin { context: u8, name: String, dynamic: bool, query: u16 },
    End { context: u8, query: u16 },
    Time { context: u8, query: u16, gpu: i64 },
    Plot { name: String, value: f64, cpu: i64 },
    FrameMark { name: String, cpu: i64 },
    Message { text: String },
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Records every message; Tracy's CPU clock is `clock`.
#[derive(Clone)]
struct Recorder {
    log: Arc<Mutex<Vec<Msg>>>,
    ids: Arc<TracyContextIds>,
    registrations: Arc<AtomicUsize>,
    clock: Clock,
}

impl Recorder {
    fn new(clock: Clock) -> Self {
        Self::sharing_ids(clock, Arc::new(TracyContextIds::new()))
    }
    fn sharing_ids(clock: Clock, ids: Arc<TracyContextIds>) -> Self {
        Self { log: Arc::default(), ids, registrations: Arc::default(), clock }
    }
    fn push(&self, msg: Msg) {
        self.log.lock().unwrap().push(msg);
    }
    fn messages(&self) -> Vec<Msg> {
        self.log.lock().unwrap().clone()
    }
    fn times(&self) -> Vec<i64> {
        self.messages()
            .iter()
            .filter_map(|m| if let Msg::Time { gpu, .. } = m { Some(*gpu) } else { None })
            .collect()
    }
}

impl TracyApi for Recorder {
    type Location = &'static SourceLocation;

    fn reserve_context(&mut self) -> Option<u8> {
        self.ids.take()
    }
    fn static_location(&mut self, location: &'static SourceLocation) -> &'static SourceLocation {
        self.registrations.fetch_add(1, Ordering::Relaxed);
        location
    }
    fn new_context(&mut self, context: u8, kind: TracyGpuKind, gpu: i64) {
        let cpu = (self.clock)();
        self.push(Msg::NewContext { context, kind, gpu, cpu });
    }
    fn name_context(&mut self, context: u8, name: &str) {
        self.push(Msg::Name { context, name: name.to_owned() });
    }
    fn calibrate(&mut self, context: u8, gpu: i64, cpu_delta: i64) {
        let cpu = (self.clock)();
        self.push(Msg::Calibrate { context, gpu, cpu_delta, cpu });
    }
    fn begin_span(&mut self, context: u8, location: &'static SourceLocation, query: u16) {
        self.push(Msg::Begin { context, name: location.name.to_owned(), dynamic: false, query });
    }
    fn begin_span_alloc(&mut self, context: u8, name: &str, _: &str, _: &str, _: u32, query: u16) {
        self.push(Msg::Begin { context, name: name.to_owned(), dynamic: true, query });
    }
    fn end_span(&mut self, context: u8, query: u16) {
        self.push(Msg::End { context, query });
    }
    fn upload_gpu_timestamp(&mut self, context: u8, query: u16, gpu: i64) {
        self.push(Msg::Time { context, query, gpu });
    }
    fn plot(&mut self, name: &str, value: f64) {
        let cpu = (self.clock)();
        self.push(Msg::Plot { name: name.to_owned(), value, cpu });
    }
    fn frame_mark(&mut self, name: &str) {
        let cpu = (self.clock)();
        self.push(Msg::FrameMark { name: name.to_owned(), cpu });
    }
    fn message(&mut self, text: &str) {
        self.push(Msg::Message { text: text.to_owned() });
    }
}

/// A zone as Tracy's server shows it.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    name: String,
    depth: usize,
    start: i64,
    end: i64,
}

/// One GPU context of the server model (Tracy's `GpuCtxData`, calibrated, period 1).
#[derive(Debug, Default)]
struct ModelContext {
    name: String,
    query: HashMap<u16, usize>,
    stack: Vec<usize>,
    zones: Vec<Shown>,
    calibrated_gpu: i64,
    calibrated_cpu: i64,
    rate: f64,
    last_gpu: i64,
}

/// Replays messages by the rules of Tracy's server (`TracyWorker.cpp`), panicking where the
/// server would assert or silently corrupt the capture.
#[derive(Debug, Default)]
struct Model {
    contexts: HashMap<u8, ModelContext>,
    /// Each plot's points (Tracy's clock, value), in the order sent.
    plots: HashMap<String, Vec<(i64, f64)>>,
    /// Each frame set's marks (Tracy's clock).
    frames: HashMap<String, Vec<i64>>,
}

impl Model {
    fn replay(messages: &[Msg]) -> Self {
        let mut model = Self::default();
        for msg in messages {
            model.apply(msg);
        }
        model
    }

    fn context(&mut self, id: u8) -> &mut ModelContext {
        self.contexts.get_mut(&id).unwrap_or_else(|| panic!("message for context {id}, never created"))
    }

    fn apply(&mut self, msg: &Msg) {
        match msg.clone() {
            Msg::NewContext { context, gpu, cpu, .. } => {
                let fresh = ModelContext {
                    calibrated_gpu: gpu,
                    calibrated_cpu: cpu,
                    rate: 1.0,
                    ..Default::default()
                };
                assert!(self.contexts.insert(context, fresh).is_none(), "context {context} created twice");
            }
            Msg::Name { context, name } => self.context(context).name = name,
            Msg::Calibrate { context, gpu, cpu_delta, cpu } => {
                let ctx = self.context(context);
                ctx.rate = cpu_delta as f64 / (gpu - ctx.calibrated_gpu) as f64;
                assert!(ctx.rate.is_finite() && ctx.rate > 0.0, "calibration gives rate {}", ctx.rate);
                ctx.calibrated_gpu = gpu;
                ctx.calibrated_cpu = cpu;
            }
            Msg::Begin { context, name, query, .. } => {
                let ctx = self.context(context);
                assert!(!ctx.query.contains_key(&query), "query id {query} reused while outstanding");
                ctx.zones.push(Shown { name, depth: ctx.stack.len(), start: -1, end: -1 });
                ctx.stack.push(ctx.zones.len() - 1);
                ctx.query.insert(query, ctx.zones.len() - 1);
            }
            Msg::End { context, query } => {
                let ctx = self.context(context);
                let zone = ctx.stack.pop().expect("zone end with no open zone");
                assert!(!ctx.query.contains_key(&query), "query id {query} reused while outstanding");
                ctx.query.insert(query, zone);
            }
            Msg::Time { context, query, gpu } => {
                let ctx = self.context(context);
                let zone =
                    ctx.query.remove(&query).unwrap_or_else(|| panic!("time for unused query id {query}"));
                assert!(
                    gpu >= ctx.last_gpu - (1 << 31),
                    "time {gpu} after {} reads as a timer wrap",
                    ctx.last_gpu
                );
                ctx.last_gpu = gpu;
                let shown = ((gpu - ctx.calibrated_gpu) as f64 * ctx.rate + ctx.calibrated_cpu as f64) as i64;
                let zone = &mut ctx.zones[zone];
                if zone.start < 0 {
                    zone.start = shown;
                } else {
                    zone.end = shown;
                }
            }
            Msg::Plot { name, value, cpu } => {
                let points = self.plots.entry(name).or_default();
                assert!(points.last().is_none_or(|&(last, _)| last <= cpu), "a plot point back in time");
                points.push((cpu, value));
            }
            Msg::FrameMark { name, cpu } => {
                let marks = self.frames.entry(name).or_default();
                assert!(marks.last().is_none_or(|&last| last <= cpu), "a frame mark back in time");
                marks.push(cpu);
            }
            Msg::Message { .. } => {}
        }
    }

    fn only(&self) -> &ModelContext {
        assert_eq!(self.contexts.len(), 1, "expected one context");
        self.contexts.values().next().unwrap()
    }

    fn named(&self, name: &str) -> &ModelContext {
        let names: Vec<&str> = self.contexts.values().map(|c| c.name.as_str()).collect();
        self.contexts
            .values()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no lane {name:?} in {names:?}"))
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.contexts.values().map(|c| c.name.clone()).collect();
        names.sort();
        names
    }

    fn zone_count(&self) -> usize {
        self.contexts.values().map(|c| c.zones.len()).sum()
    }
}

impl ModelContext {
    /// Panics unless the lane is what Tracy's GPU timeline assumes: every zone ends no earlier
    /// than it begins, children lie inside their parent, and siblings (top-level zones
    /// included) follow one another in time without crossing.
    fn assert_in_time_order(&self) {
        self.assert_in_time_order_within(&[]);
    }

    /// As [`assert_in_time_order`](Self::assert_in_time_order), but a zone may begin before
    /// its predecessor ends by as much as the two times' bounds, as the collected `zones` say
    /// (their true times are in order: a list placed high within its bounds, then one placed
    /// after the clock learnt better).
    fn assert_in_time_order_within(&self, zones: &[Zone]) {
        let bound = |start: i64, end: i64, of: fn(&Zone) -> u64| {
            zones.iter().find(|z| (z.host_begin_ns, z.host_end_ns) == (start, end)).map_or(0, of) as i64
        };
        let mut open: Vec<&Shown> = Vec::new();
        for zone in &self.zones {
            assert!(zone.start <= zone.end, "lane {:?}: {zone:?} ends before it begins", self.name);
            if let Some(parent) = zone.depth.checked_sub(1).map(|d| open[d]) {
                assert!(
                    parent.start <= zone.start && zone.end <= parent.end,
                    "lane {:?}: {zone:?} crosses its parent {parent:?}",
                    self.name
                );
            }
            if let Some(sibling) = open.get(zone.depth) {
                let apart = bound(sibling.start, sibling.end, |z| z.host_end_bound_ns)
                    + bound(zone.start, zone.end, |z| z.host_begin_bound_ns);
                assert!(
                    sibling.end <= zone.start + apart,
                    "lane {:?}: {zone:?} begins before its predecessor {sibling:?} ends",
                    self.name
                );
            }
            open.truncate(zone.depth);
            open.push(zone);
        }
    }
}

fn info(backend: &'static str) -> ContextInfo {
    ContextInfo {
        id: 1,
        name: "render queue".to_owned(),
        backend,
        base: Calibration { gpu_ns: 0, host_ns: 1_000_000 },
        host_clock_origin: None,
    }
}

fn zone(location: impl Into<Location>, depth: u32, begin: i64, end: i64) -> Zone {
    Zone::new(location, Lane::Stream(1), depth, begin, end)
}

/// A sink on a recorder whose clock (Tracy's and the host's) reads `now`.
fn sink_at(now: &Arc<AtomicI64>) -> (TracySink<Recorder>, Recorder) {
    let clock_now = Arc::clone(now);
    let clock: Clock = Arc::new(move || clock_now.load(Ordering::Relaxed));
    let recorder = Recorder::new(Arc::clone(&clock));
    (TracySink::with_api(recorder.clone(), move || clock()), recorder)
}

fn opened_sink() -> (TracySink<Recorder>, Recorder) {
    let now = Arc::new(AtomicI64::new(info("sim").base.host_ns));
    let (mut sink, recorder) = sink_at(&now);
    sink.open(&info("sim")).unwrap();
    (sink, recorder)
}

fn send(sink: &mut TracySink<Recorder>, list_id: u64, zones: &[Zone]) -> std::io::Result<()> {
    sink.zones(&info("sim"), ZoneBatch { list_id, zones })
}

#[test]
fn nested_zones_reach_tracy_as_the_same_tree() {
    let (mut sink, recorder) = opened_sink();
    let zones = [
        zone(location!("frame"), 0, 100, 900),
        zone(location!("upload"), 1, 110, 200),
        zone(location!("draw"), 1, 200, 800),
        zone(location!("pass 1"), 2, 210, 400),
        zone(location!("pass 2"), 2, 400, 790),
        zone(location!("present"), 0, 950, 990),
    ];
    send(&mut sink, 1, &zones).unwrap();

    let model = Model::replay(&recorder.messages());
    let shown: Vec<(String, usize)> = model.only().zones.iter().map(|z| (z.name.clone(), z.depth)).collect();
    let expected: Vec<(String, usize)> =
        zones.iter().map(|z| (z.location.name().to_owned(), z.depth as usize)).collect();
    assert_eq!(shown, expected);
    assert!(model.only().stack.is_empty(), "every zone begun in a batch ends in it");
}

#[test]
fn a_zone_whose_parent_was_dropped_ends_before_its_next_sibling_begins() {
    let (mut sink, recorder) = opened_sink();
    // The depth-0 parent and the depth-1 parent of "c" were dropped: depths have gaps.
    let zones = [
        zone(location!("a"), 1, 100, 200),
        zone(location!("b"), 1, 200, 300),
        zone(location!("c"), 2, 300, 400),
        zone(location!("d"), 1, 400, 500),
    ];
    send(&mut sink, 1, &zones).unwrap();

    let model = Model::replay(&recorder.messages());
    let shown: Vec<(&str, usize)> = model.only().zones.iter().map(|z| (z.name.as_str(), z.depth)).collect();
    assert_eq!(shown, [("a", 0), ("b", 0), ("c", 0), ("d", 0)]);
}

#[test]
fn every_query_id_is_resolved_before_the_batch_returns() {
    let (mut sink, recorder) = opened_sink();
    for list in 0..50 {
        let t = 1_000 + list * 1_000;
        let zones = [zone(location!("outer"), 0, t, t + 900), zone(location!("inner"), 1, t + 100, t + 800)];
        send(&mut sink, list as u64, &zones).unwrap();
        let model = Model::replay(&recorder.messages());
        assert!(model.only().query.is_empty(), "ids outstanding after list {list}: {:?}", model.only().query);
    }
}

#[test]
fn query_ids_are_distinct_within_a_batch_and_continue_across_batches() {
    let (mut sink, recorder) = opened_sink();
    let batch: Vec<Zone> =
        (0..100).map(|i| zone(location!("k"), 0, 1_000 + i * 10, 1_005 + i * 10)).collect();
    send(&mut sink, 1, &batch).unwrap();
    send(
        &mut sink,
        2,
        &batch
            .iter()
            .cloned()
            .map(|mut z| {
                z.gpu_begin_ns += 10_000;
                z.gpu_end_ns += 10_000;
                z
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();

    let ids: Vec<u16> = recorder
        .messages()
        .iter()
        .filter_map(|m| match m {
            Msg::Begin { query, .. } | Msg::End { query, .. } => Some(*query),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 400);
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "an id was used twice across two batches");
}

#[test]
fn query_ids_wrap_past_65536_without_reusing_an_outstanding_id() {
    let (mut sink, recorder) = opened_sink();
    // 40 000 zones: 80 000 ids, more than a u16 holds, in one batch.
    let zones: Vec<Zone> =
        (0..40_000).map(|i| zone(location!("tiny"), 0, 1_000 + i * 4, 1_002 + i * 4)).collect();
    send(&mut sink, 1, &zones).unwrap();

    let model = Model::replay(&recorder.messages());
    assert_eq!(model.only().zones.len(), zones.len());
    assert!(model.only().query.is_empty());
}

#[test]
fn each_zone_begins_before_it_ends_and_uploaded_times_only_move_forward() {
    let (mut sink, recorder) = opened_sink();
    let zones = [
        zone(location!("outer"), 0, 1_000, 9_000),
        zone(location!("a"), 1, 1_500, 3_000),
        zone(location!("b"), 1, 3_000, 8_000),
        zone(location!("b.1"), 2, 3_500, 7_000),
    ];
    send(&mut sink, 1, &zones).unwrap();

    let messages = recorder.messages();
    // Every begin and end is followed at once by its own time.
    for pair in messages.windows(2) {
        if let Msg::Begin { query, .. } | Msg::End { query, .. } = &pair[0] {
            assert!(matches!(&pair[1], Msg::Time { query: q, .. } if q == query), "{pair:?}");
        }
    }
    let times = recorder.times();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "times go back: {times:?}");
    let mut sent = times.clone();
    sent.sort_unstable();
    let mut expected: Vec<i64> = zones.iter().flat_map(|z| [z.gpu_begin_ns, z.gpu_end_ns]).collect();
    expected.sort_unstable();
    assert_eq!(sent, expected, "exactly the zones' own times are sent");
    for z in &Model::replay(&messages).only().zones {
        assert!(z.start <= z.end, "{z:?}");
    }
}

#[test]
fn static_locations_are_registered_once_however_many_zones_use_them() {
    let (mut sink, recorder) = opened_sink();
    let (dispatch, copy) = (location!("dispatch"), location!("copy"));
    for list in 0..10 {
        let zones: Vec<Zone> = (0..100)
            .map(|i| {
                let t = 1_000 + list * 10_000 + i * 100;
                zone(if i % 2 == 0 { dispatch } else { copy }, 0, t, t + 50)
            })
            .collect();
        send(&mut sink, list as u64, &zones).unwrap();
    }
    assert_eq!(recorder.registrations.load(Ordering::Relaxed), 2);
    let static_begins =
        recorder.messages().iter().filter(|m| matches!(m, Msg::Begin { dynamic: false, .. })).count();
    assert_eq!(static_begins, 1_000);
}

#[test]
fn dynamic_locations_use_tracys_allocated_source_locations() {
    let (mut sink, recorder) = opened_sink();
    let named = DynamicLocation::new("kernel matmul_128").with_source("run", "model.rs", 7);
    send(&mut sink, 1, &[zone(named, 0, 1_000, 2_000)]).unwrap();

    assert_eq!(recorder.registrations.load(Ordering::Relaxed), 0);
    assert!(recorder
        .messages()
        .iter()
        .any(|m| matches!(m, Msg::Begin { dynamic: true, name, .. } if name == "kernel matmul_128")));
}

#[test]
fn zone_arguments_reach_tracy_in_the_zone_name_and_the_call_site_in_its_location() {
    let (mut sink, recorder) = opened_sink();
    let plain = DynamicLocation::new("matmul");
    let line = line!() + 1;
    let with_args = DynamicLocation::new("matmul").arg("m", 1024).arg("dtype", "f16");
    assert_eq!((with_args.file.as_ref(), with_args.line), (file!(), line), "the call site is kept");
    send(&mut sink, 1, &[zone(plain, 0, 1_000, 2_000), zone(with_args, 0, 2_000, 3_000)]).unwrap();

    let names: Vec<String> = recorder
        .messages()
        .into_iter()
        .filter_map(|m| if let Msg::Begin { name, .. } = m { Some(name) } else { None })
        .collect();
    assert_eq!(names, ["matmul", "matmul (m=1024, dtype=f16)"]);
}

#[test]
fn a_lane_gets_its_context_when_it_first_emits_named_after_the_context_and_typed_after_the_backend() {
    for (backend, kind) in
        [("sim", TracyGpuKind::Custom), ("cuda", TracyGpuKind::Cuda), ("vulkan", TracyGpuKind::Vulkan)]
    {
        let now = Arc::new(AtomicI64::new(info(backend).base.host_ns + 250));
        let (mut sink, recorder) = sink_at(&now);
        sink.open(&info(backend)).unwrap();
        assert!(recorder.messages().is_empty(), "open only reserves an id");
        assert_eq!(sink.context_ids(), [254]);

        sink.zones(&info(backend), ZoneBatch { list_id: 1, zones: &[zone(location!("k"), 0, 300, 400)] })
            .unwrap();
        let messages = recorder.messages();
        let Msg::NewContext { context, kind: sent, gpu, .. } = &messages[0] else {
            panic!("expected a new context, got {messages:?}");
        };
        assert_eq!((*context, *sent), (254, kind));
        assert_eq!(
            *gpu,
            info(backend).base.host_ns + 250,
            "its clock is the host clock, read when it is made"
        );
        assert_eq!(messages[1], Msg::Name { context: 254, name: "render queue / stream 1".to_owned() });
        assert_eq!(sink.context_ids(), [254]);
    }
}

#[test]
fn opening_more_contexts_than_tracy_allows_fails_with_a_clear_error() {
    let ids = Arc::new(TracyContextIds::new());
    let clock: Clock = Arc::new(|| 1_000_000);
    let mut given = Vec::new();
    for _ in 0..MAX_CONTEXTS {
        let mut sink =
            TracySink::with_api(Recorder::sharing_ids(Arc::clone(&clock), Arc::clone(&ids)), || 1_000_000);
        sink.open(&info("sim")).unwrap();
        given.extend(sink.context_ids());
    }
    let expected: Vec<u8> = (0..=254).rev().collect();
    assert_eq!(given, expected, "ids are taken from the top, 254 downward");

    let recorder = Recorder::sharing_ids(clock, ids);
    let mut sink = TracySink::with_api(recorder.clone(), || 1_000_000);
    let error = sink.open(&info("sim")).unwrap_err();
    assert!(error.to_string().contains("255"), "{error}");
    assert!(error.to_string().contains("render queue"), "{error}");
    assert!(recorder.messages().is_empty());
}

#[test]
fn building_a_tracing_context_past_tracys_limit_returns_an_error() {
    let ids = Arc::new(TracyContextIds::new());
    while ids.take().is_some() {}
    let sim = SimBackend::manual();
    let clock = sim.clone();
    let recorder = Recorder::sharing_ids(Arc::new(|| 0), ids);
    let built =
        TracingContext::builder(sim.clone()).sink(TracySink::with_api(recorder, move || clock.now())).build();
    assert!(built.is_err());
}

#[test]
fn zones_sent_before_open_are_refused() {
    let now = Arc::new(AtomicI64::new(0));
    let (mut sink, recorder) = sink_at(&now);
    assert!(send(&mut sink, 1, &[zone(location!("early"), 0, 10, 20)]).is_err());
    assert!(recorder.messages().is_empty());
}

fn zone_on(lane: Lane, location: impl Into<Location>, depth: u32, begin: i64, end: i64) -> Zone {
    Zone::new(location, lane, depth, begin, end)
}

/// Defect 1 of issue 10: with all streams of a context on one Tracy GPU context, four
/// concurrent streams crossed thousands of times and top-level zones arrived out of time
/// order. Here four streams run at once, their lists collected interleaved, through the real
/// collector; the test checks that each stream is a lane of its own, named in order of first
/// use, and that on every lane zones nest inside their parents and follow one another in time
/// without crossing (the old sink put all four on one context: this fails there).
#[test]
fn concurrent_streams_each_get_a_lane_where_zones_never_cross_and_stay_in_time_order() {
    let (sim, ctx, recorder, memory) = traced_context(Config::default());
    let streams: Vec<_> = (0..4).map(|_| sim.stream()).collect();
    sim.advance(1_000_000);
    for round in 0..50 {
        for (s, stream) in streams.iter().enumerate() {
            let mut list = ctx.list();
            list.zone_begin(stream, location!("command buffer")).unwrap();
            list.zone_begin(stream, location!("dispatch")).unwrap();
            sim.launch(stream, 20_000 + 7_000 * s as i64 + 300 * round);
            list.zone_next(stream, location!("dispatch")).unwrap();
            sim.launch(stream, 15_000 + 5_000 * s as i64);
            list.zone_end(stream).unwrap();
            list.zone_end(stream).unwrap();
            ctx.submit(list).unwrap();
        }
        sim.advance(30_000);
        ctx.collect().unwrap();
    }
    ctx.flush().unwrap();

    let model = Model::replay(&recorder.messages());
    let lanes: Vec<String> = (1..=4).map(|n| format!("gpu / stream {n}")).collect();
    assert_eq!(model.names(), lanes);
    for lane in &lanes {
        let lane = model.named(lane);
        assert_eq!(lane.zones.len(), 50 * 3);
        lane.assert_in_time_order_within(&memory.zones());
    }
    assert_eq!(model.zone_count(), memory.zones().len());
}

/// One list of `n` back-to-back zones under one parent, from `begin` for `len` ns.
fn back_to_back(lane: Lane, begin: i64, len: i64, n: i64) -> Vec<Zone> {
    let mut zones = vec![zone_on(lane, location!("command buffer"), 0, begin, begin + len)];
    let step = len / n;
    for i in 0..n {
        let end = if i == n - 1 { begin + len } else { begin + (i + 1) * step };
        zones.push(zone_on(lane, location!("kernel"), 1, begin + i * step, end));
    }
    zones
}

/// A Chrome trace sink writing into memory, and a way to read its zones' durations back (ns).
fn chrome_sink() -> (ChromeTraceSink, Arc<Mutex<Vec<u8>>>) {
    let (writer, out) = trace_check::SharedWriter::new();
    (ChromeTrace::new(writer).sink(), out)
}

fn chrome_durations(trace: &[u8]) -> Vec<i64> {
    let events: Vec<serde_json::Value> = serde_json::from_slice(trace).unwrap();
    events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| (e["dur"].as_f64().expect("a number of µs") * 1_000.0).round() as i64)
        .collect()
}

/// The sink uploads each zone's host times (the collector's one mapping) to a context whose
/// clock is the host clock: Tracy shows every zone exactly there, durations equal the Chrome
/// sink's to the nanosecond, and no calibration is ever sent (a calibration could only move a
/// lane). Here the host times come from a mapping that is being corrected by slewing: zones
/// are longer on the host than on the GPU by up to 500 ppm, and Tracy shows what Chrome shows.
#[test]
fn every_zone_shows_at_its_host_time_with_the_chrome_duration_and_no_calibration_is_sent() {
    let now = Arc::new(AtomicI64::new(info("sim").base.host_ns));
    let (mut tracy, recorder) = sink_at(&now);
    let (mut chrome, trace) = chrome_sink();
    tracy.open(&info("sim")).unwrap();
    chrome.open(&info("sim")).unwrap();
    let mut sent = Vec::new();
    let host = |gpu: i64| 1_000_000 + gpu + gpu / 2_000; // a 500 ppm slew
    for list in 0..200 {
        let begin = list * 1_300_000;
        let zones: Vec<Zone> = back_to_back(Lane::Stream(1), begin, 1_300_000, 3)
            .into_iter()
            .map(|z| {
                let (b, e) = (host(z.gpu_begin_ns), host(z.gpu_end_ns));
                z.with_host_times(b, e)
            })
            .collect();
        now.store(host(begin + 1_300_000) + 400_000, Ordering::Relaxed);
        let batch = ZoneBatch { list_id: list as u64, zones: &zones };
        tracy.zones(&info("sim"), batch).unwrap();
        chrome.zones(&info("sim"), batch).unwrap();
        sent.extend(zones);
    }
    drop(chrome);
    let messages = recorder.messages();
    assert!(!messages.iter().any(|m| matches!(m, Msg::Calibrate { .. })), "a calibration was sent");
    let model = Model::replay(&messages);
    let lane = model.only();
    lane.assert_in_time_order();
    let shown: Vec<(i64, i64)> = lane.zones.iter().map(|z| (z.start, z.end)).collect();
    let expected: Vec<(i64, i64)> = sent.iter().map(|z| (z.host_begin_ns, z.host_end_ns)).collect();
    assert_eq!(shown, expected);
    let durations: Vec<i64> = lane.zones.iter().map(|z| z.end - z.start).collect();
    assert_eq!(durations, chrome_durations(&trace.lock().unwrap()), "Tracy and Chrome durations differ");
}

/// The overlap a real capture showed (issue 18): back-to-back command buffers of one stream
/// overlapped by up to 441 ns in Tracy although their GPU times touched, because the sink
/// kept its own fitted clock and recalibrated lanes between batches. Now, end to end on the
/// simulated GPU: the context is made while the GPU is busy (its first calibration pairs are
/// 800 µs late), anchors come 800 µs late whenever a stream has work queued, several streams
/// run back-to-back lists, collects come at uneven times, and the collector corrects its
/// mapping by slewing once the GPU goes idle. On Tracy's server model every lane is in time
/// order (no zone begins before its predecessor ends), every zone is shown at the host time
/// the memory sink got, host times never go back as GPU time goes on, and in the end the
/// mapping is within 1 µs of the truth.
#[test]
fn back_to_back_lists_never_overlap_in_tracy_when_anchors_come_late() {
    const LATE: i64 = 800_000;
    let sim = SimBackend::manual();
    sim.advance(3_000_000);
    sim.set_late_records(LATE);
    let busy = sim.stream();
    sim.launch(&busy, 50_000_000);
    let tracy_clock = sim.clone();
    let recorder = Recorder::new(Arc::new(move || tracy_clock.now()));
    let memory = MemorySink::new();
    let host = sim.clone();
    // GPU time 0 is the base event, which the busy GPU reaches late too: the true host time
    // of GPU time g is `base + g`.
    let base = sim.now() + LATE;
    let ctx = TracingContext::builder(sim.clone())
        .anchor_interval(Duration::from_millis(1))
        .sink(TracySink::with_api(recorder.clone(), move || host.now()))
        .sink(memory.clone())
        .build()
        .unwrap();
    let streams: Vec<_> = (0..4).map(|_| sim.stream()).collect();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for round in 0..400 {
        for stream in &streams {
            let mut list = ctx.list();
            list.zone_begin(stream, location!("command buffer")).unwrap();
            for _ in 0..3 {
                list.zone_begin(stream, location!("kernel")).unwrap();
                sim.launch(stream, 20_000 + jitter(&mut seed, 200_000));
                list.zone_end(stream).unwrap();
            }
            list.zone_end(stream).unwrap();
            ctx.submit(list).unwrap();
        }
        // Busy for the first half, then idle stretches let timely anchors through.
        let pause = if round < 200 { 100_000 } else { 3_000_000 };
        sim.advance(pause + jitter(&mut seed, 500_000));
        ctx.collect().unwrap();
    }
    ctx.flush().unwrap();

    let model = Model::replay(&recorder.messages());
    assert_eq!(model.contexts.len(), 4);
    let mut zones = memory.zones();
    for lane in model.contexts.values() {
        lane.assert_in_time_order_within(&zones);
    }
    assert_eq!(model.zone_count(), zones.len());
    assert_eq!(zones.len(), 400 * 4 * 4);
    for lane in model.contexts.values() {
        for shown in &lane.zones {
            assert!(
                zones.iter().any(|z| (z.host_begin_ns, z.host_end_ns) == (shown.start, shown.end)),
                "{shown:?} is not a collected zone's host time"
            );
        }
    }
    // The true host times follow the GPU's: placed ones go back by no more than their bounds.
    zones.sort_by_key(|z| z.gpu_begin_ns);
    for pair in zones.windows(2) {
        let apart = (pair[0].host_begin_bound_ns + pair[1].host_begin_bound_ns) as i64;
        assert!(pair[0].host_begin_ns <= pair[1].host_begin_ns + apart, "host time went back: {pair:?}");
    }

    let last = zones.last().unwrap();
    let error = last.host_begin_ns - (last.gpu_begin_ns + base);
    assert!(error.abs() <= 1_000, "the mapping is {error} ns off the truth at the end");
}

/// A small deterministic generator (xorshift) for jitter.
fn jitter(seed: &mut u64, max: i64) -> i64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed % (max as u64 + 1)) as i64
}

#[test]
fn graphs_share_one_lane_and_streams_past_the_cap_share_another_so_tracys_ids_last() {
    let ids = Arc::new(TracyContextIds::new());
    let now = Arc::new(AtomicI64::new(info("sim").base.host_ns));
    let clock_now = Arc::clone(&now);
    let recorder =
        Recorder::sharing_ids(Arc::new(move || clock_now.load(Ordering::Relaxed)), Arc::clone(&ids));
    let mut sink = TracySink::with_api(recorder.clone(), || 0);
    sink.open(&info("sim")).unwrap();
    // A graph per step, and a new stream every few steps: lanes that come and go.
    let mut t = 1_000;
    for step in 0..1_000_u64 {
        let lane = if step % 10 == 0 { Lane::Stream(100 + step) } else { Lane::Graph(step) };
        send(&mut sink, step, &[zone_on(lane, location!("step"), 0, t, t + 500)]).unwrap();
        t += 1_000;
    }

    let model = Model::replay(&recorder.messages());
    assert_eq!(model.contexts.len(), DEFAULT_MAX_STREAM_LANES + 2);
    assert_eq!(sink.context_ids().len(), DEFAULT_MAX_STREAM_LANES + 2);
    assert_eq!(ids.take(), Some(254 - (DEFAULT_MAX_STREAM_LANES as u8 + 2)), "no other id was taken");
    assert_eq!(model.named("render queue / graphs").zones.len(), 900);
    assert_eq!(model.named("render queue / other streams").zones.len(), 100 - DEFAULT_MAX_STREAM_LANES);
    assert_eq!(model.named(&format!("render queue / stream {DEFAULT_MAX_STREAM_LANES}")).zones.len(), 1);
    assert_eq!(model.zone_count(), 1_000);
    for lane in model.contexts.values() {
        lane.assert_in_time_order();
    }
}

#[test]
fn when_tracy_has_no_id_left_new_lanes_join_the_first_and_no_zone_is_lost() {
    let ids = Arc::new(TracyContextIds::new());
    let clock: Clock = Arc::new(|| 1_000_000);
    let recorder = Recorder::sharing_ids(Arc::clone(&clock), Arc::clone(&ids));
    let mut sink = TracySink::with_api(recorder.clone(), || 1_000_000);
    sink.open(&info("sim")).unwrap();
    while ids.take().is_some() {} // another part of the program takes the rest
    let lanes = [Lane::Stream(1), Lane::Stream(2), Lane::Graph(3), Lane::Stream(4)];
    for (i, lane) in lanes.into_iter().enumerate() {
        let t = 1_000 + i as i64 * 1_000;
        send(&mut sink, i as u64, &[zone_on(lane, location!("z"), 0, t, t + 500)]).unwrap();
    }
    let model = Model::replay(&recorder.messages());
    assert_eq!(model.names(), ["render queue / stream 1"]);
    assert_eq!(model.zone_count(), 4);
    assert_eq!(sink.context_ids(), [254]);
}

#[test]
fn streams_are_named_by_the_user_or_numbered_in_order_of_first_use() {
    let (sim, ctx, recorder, _memory) = traced_context(Config::default());
    let (first, copies, unused) = (sim.stream(), sim.stream(), sim.stream());
    ctx.name_stream(&copies, "copies");
    ctx.name_stream(&unused, "never used");
    sim.advance(1_000_000);
    for stream in [&first, &copies] {
        let mut list = ctx.list();
        list.zone_begin(stream, location!("work")).unwrap();
        sim.launch(stream, 10_000);
        list.zone_end(stream).unwrap();
        ctx.submit(list).unwrap();
    }
    ctx.flush().unwrap();
    let model = Model::replay(&recorder.messages());
    assert_eq!(model.names(), ["gpu / copies", "gpu / stream 1"], "no lane for an unused name");

    // Naming a stream that already has a lane renames it.
    ctx.name_stream(&first, "compute");
    ctx.flush().unwrap();
    let model = Model::replay(&recorder.messages());
    assert_eq!(model.names(), ["gpu / compute", "gpu / copies"]);
}

#[test]
fn a_list_is_shown_whole_on_the_lane_of_its_first_zone() {
    let (mut sink, recorder) = opened_sink();
    let zones = [
        zone_on(Lane::Stream(1), location!("outer"), 0, 100, 900),
        zone_on(Lane::Stream(2), location!("on another stream"), 1, 200, 300),
    ];
    send(&mut sink, 1, &zones).unwrap();
    let model = Model::replay(&recorder.messages());
    let shown: Vec<(&str, usize)> = model.only().zones.iter().map(|z| (z.name.as_str(), z.depth)).collect();
    assert_eq!(shown, [("outer", 0), ("on another stream", 1)]);
}

#[test]
fn a_batch_tracy_would_read_as_a_timer_wrap_is_refused_whole() {
    // On a shared lane (graphs share one): a stream's own lane never goes back (a list that
    // would is shown on the late lane).
    let (mut sink, recorder) = opened_sink();
    send(
        &mut sink,
        1,
        &[zone_on(Lane::Graph(1), location!("late graph"), 0, 10_000_000_000, 10_000_001_000)],
    )
    .unwrap();
    let before = recorder.messages().len();

    let error = send(
        &mut sink,
        2,
        &[zone_on(Lane::Graph(2), location!("early graph"), 0, 5_000_000_000, 5_000_001_000)],
    )
    .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("list 2"), "{error}");
    assert_eq!(recorder.messages().len(), before, "nothing of a refused batch is sent");

    // A jump back within Tracy's window is fine.
    send(&mut sink, 3, &[zone_on(Lane::Graph(3), location!("close graph"), 0, 9_000_000_000, 9_000_001_000)])
        .unwrap();
    Model::replay(&recorder.messages());
}

/// A tracing context on the manual sim, with a Tracy sink whose Tracy clock is the sim's.
fn traced_context(config: Config) -> (SimBackend, TracingContext<SimBackend>, Recorder, MemorySink) {
    let sim = SimBackend::manual();
    let tracy_clock = sim.clone();
    let recorder = Recorder::new(Arc::new(move || tracy_clock.now()));
    let memory = MemorySink::new();
    let host = sim.clone();
    let ctx = TracingContext::builder(sim.clone())
        .config(config)
        .sink(TracySink::with_api(recorder.clone(), move || host.now()))
        .sink(memory.clone())
        .build()
        .unwrap();
    (sim, ctx, recorder, memory)
}

#[test]
fn gpu_zones_show_in_tracy_at_the_host_time_they_ran() {
    let mut config = Config::default();
    config.anchor_interval = Duration::from_millis(1);
    let (sim, ctx, recorder, memory) = traced_context(config);
    let stream = sim.stream();
    sim.advance(1_000_000);
    let mut expected = Vec::new();
    for frame in 0..20 {
        let mut list = ctx.list();
        let start = sim.now().max(sim.now() + sim.pending_ns(&stream));
        list.zone_begin(&stream, location!("frame")).unwrap();
        let mid = sim.launch(&stream, 300_000);
        list.zone_begin(&stream, location!("blit")).unwrap();
        let end = sim.launch(&stream, 200_000);
        list.zone_end(&stream).unwrap();
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        expected.push(("frame".to_owned(), 0, start, end));
        expected.push(("blit".to_owned(), 1, mid, end));
        // The collector runs while the GPU is busy, and sees lists complete later.
        sim.advance(400_000 + frame * 37_000);
        ctx.collect().unwrap();
        sim.advance(2_000_000);
        ctx.collect().unwrap();
    }
    ctx.flush().unwrap();

    // The sim's pairs are exact and its clocks agree: the lane's first mapping never needs to move.
    let messages = recorder.messages();
    assert_eq!(messages.iter().filter(|m| matches!(m, Msg::Calibrate { .. })).count(), 0);
    let model = Model::replay(&messages);
    let shown: Vec<(String, usize, i64, i64)> =
        model.only().zones.iter().map(|z| (z.name.clone(), z.depth, z.start, z.end)).collect();
    assert_eq!(shown, expected);
    assert_eq!(memory.zones().len(), expected.len());
}

#[test]
fn dropped_and_unsubmitted_zones_never_reach_tracy() {
    let mut config = Config::default();
    (config.initial_capacity, config.max_capacity, config.batch) = (4, 4, 1);
    let (sim, ctx, recorder, memory) = traced_context(config);
    let stream = sim.stream();
    sim.advance(1_000_000);

    let mut abandoned = ctx.list();
    abandoned.zone_begin(&stream, location!("never submitted")).unwrap();
    sim.launch(&stream, 1_000);
    abandoned.zone_end(&stream).unwrap();
    drop(abandoned);

    // Four events for five back-to-back zones: the pool runs dry and the last ones are dropped.
    let mut list = ctx.list();
    let _ = list.zone_begin(&stream, location!("zone"));
    for _ in 0..4 {
        sim.launch(&stream, 1_000);
        let _ = list.zone_next(&stream, location!("zone"));
    }
    sim.launch(&stream, 1_000);
    let _ = list.zone_end(&stream);
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();

    let stats = ctx.stats();
    assert!(stats.dropped_zones > 0, "{stats:?}");
    assert_eq!(stats.zones_emitted + stats.dropped_zones, 5, "{stats:?}");
    let model = Model::replay(&recorder.messages());
    let shown: Vec<(i64, i64)> = model.only().zones.iter().map(|z| (z.start, z.end)).collect();
    let kept: Vec<(i64, i64)> = memory.zones().iter().map(|z| (z.gpu_begin_ns, z.gpu_end_ns)).collect();
    assert_eq!(shown, kept, "Tracy shows exactly the zones collected (GPU and host clocks agree here)");
    assert_eq!(shown.len(), stats.zones_emitted);
    assert!(model.only().zones.iter().all(|z| z.name == "zone"), "the abandoned list's zone was sent");
    assert!(recorder.times().iter().all(|&t| t > 0), "no placeholder time: {:?}", recorder.times());
    assert_eq!(stats.unaccounted(), 0);
}

/// Several GPUs in one process, a tracing context per GPU, each with its own sink, all taking
/// Tracy's ids from the one process-wide pool: per GPU, one Tracy context per stream that
/// records (the first reserved when the sink opens, so at least one), plus one for its graphs
/// if it has any (docs/cuda.md, "Several GPUs").
#[test]
fn a_context_per_gpu_takes_a_tracy_context_per_stream_lane_from_the_process_pool() {
    const STREAMS: usize = 3;
    let ids = Arc::new(TracyContextIds::new());
    let gpus: Vec<(SimBackend, TracingContext<SimBackend>, Recorder)> = (0..4)
        .map(|g| {
            let sim = SimBackend::manual();
            let tracy_clock = sim.clone();
            let recorder = Recorder::sharing_ids(Arc::new(move || tracy_clock.now()), Arc::clone(&ids));
            let host = sim.clone();
            let ctx = TracingContext::builder(sim.clone())
                .name(format!("gpu {g}"))
                .sink(TracySink::with_api(recorder.clone(), move || host.now()))
                .build()
                .unwrap();
            (sim, ctx, recorder)
        })
        .collect();
    // GPUs 0 to 2 record on three streams each, GPU 0 a graph too; GPU 3 records nothing.
    for (sim, ctx, _) in &gpus[..3] {
        sim.advance(1_000_000);
        for _ in 0..STREAMS {
            let stream = sim.stream();
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("work")).unwrap();
            sim.launch(&stream, 10_000);
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
        }
    }
    let (sim, ctx, _) = &gpus[0];
    let (graph, stream) = (sim.graph(), sim.stream());
    let mut list = ctx.list();
    list.graph_zone_begin(&graph, &[], location!("graph")).unwrap();
    list.graph_zone_end(&graph, &[]).unwrap();
    sim.launch_graph(&graph, &stream);
    ctx.submit(list).unwrap();
    for (_, ctx, _) in &gpus {
        ctx.flush().unwrap();
    }

    let lanes: Vec<Vec<String>> = gpus.iter().map(|(_, _, r)| Model::replay(&r.messages()).names()).collect();
    let expected = |g: usize| (1..=STREAMS).map(move |n| format!("gpu {g} / stream {n}"));
    assert_eq!(lanes[0], ["gpu 0 / graphs".to_owned()].into_iter().chain(expected(0)).collect::<Vec<_>>());
    assert_eq!(lanes[1], expected(1).collect::<Vec<_>>());
    assert_eq!(lanes[2], expected(2).collect::<Vec<_>>());
    assert!(lanes[3].is_empty(), "a GPU that records nothing shows no lane");
    let taken = STREAMS + 1 + STREAMS + STREAMS + 1;
    assert_eq!(
        ids.take(),
        Some(254 - taken as u8),
        "{taken} ids: the lanes, and the one GPU 3's sink reserved"
    );
}

/// A list held open past the hold limit is emitted after the later lists of its stream: on
/// the stream's lane it would go back in time, so it is shown on the sink's late lane, and
/// every lane stays in time order.
#[test]
fn a_list_emitted_after_its_lane_moved_on_is_shown_on_the_late_lane() {
    let mut config = Config::default();
    config.hold_limit = Duration::from_millis(1);
    let (sim, ctx, recorder, memory) = traced_context(config);
    let stream = sim.stream();
    let mut held = ctx.list();
    held.zone_begin(&stream, location!("held open")).unwrap();
    for _ in 0..20 {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("later")).unwrap();
        sim.launch(&stream, 100_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(200_000);
        let _ = ctx.collect();
    }
    held.zone_end(&stream).unwrap();
    ctx.submit(held).unwrap();
    sim.advance(1_000_000);
    ctx.flush().unwrap();
    assert_eq!(memory.zones().len(), 21);
    let model = Model::replay(&recorder.messages());
    for lane in model.contexts.values() {
        lane.assert_in_time_order();
    }
    let late = model.named("gpu / late lists");
    assert_eq!(late.zones.iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ["held open"]);
    assert_eq!(model.zone_count(), 21);
}

/// A tracing context on the manual sim whose Tracy sink plots the counters.
fn plotted_context(config: Config) -> (SimBackend, TracingContext<SimBackend>, Recorder) {
    let sim = SimBackend::manual();
    let tracy_clock = sim.clone();
    let recorder = Recorder::new(Arc::new(move || tracy_clock.now()));
    let host = sim.clone();
    let ctx = TracingContext::builder(sim.clone())
        .name("watched")
        .config(config)
        .sink(TracySink::with_api(recorder.clone(), move || host.now()).with_plots())
        .build()
        .unwrap();
    (sim, ctx, recorder)
}

#[test]
fn a_clock_discontinuity_reaches_tracy_as_a_message_and_the_bound_as_a_plot() {
    let (sim, ctx, recorder) = plotted_context(Config::default());
    let stream = sim.stream();
    let record = || {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("kernel")).unwrap();
        sim.launch(&stream, 10_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(1_000_000);
        ctx.collect()
    };
    record().unwrap();
    // A suspend: the host clock stands still while the GPU's runs on for 2 s.
    sim.set_host_drift(-1e6);
    sim.advance(2_000_000_000);
    sim.set_host_drift(0.0);
    let jumped = [record(), record(), record()].into_iter().filter_map(Result::err).count();
    ctx.flush().unwrap();
    assert_eq!((jumped, ctx.stats().clock_discontinuities), (1, 1));
    let messages = recorder.messages();
    let said: Vec<&String> = messages
        .iter()
        .filter_map(|m| if let Msg::Message { text } = m { Some(text) } else { None })
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("watched: clock discontinuity at GPU time"), "{}", said[0]);
    let plotted =
        messages.iter().any(|m| matches!(m, Msg::Plot { name, .. } if name == "watched / clock bound (us)"));
    assert!(plotted);
}

#[test]
fn counters_reach_tracy_as_plots_that_rise_and_fall_with_the_stats() {
    let mut config = Config::default();
    (config.initial_capacity, config.max_capacity, config.batch) = (8, 16, 2);
    let (sim, ctx, recorder) = plotted_context(config);
    let stream = sim.stream();
    sim.advance(1_000_000);
    let mut expected = Vec::new();
    let collect = |expected: &mut Vec<(usize, usize, usize)>| {
        ctx.collect().unwrap();
        let stats = ctx.stats();
        let pending = stats.lists_submitted - stats.lists_collected;
        expected.push((stats.in_use, stats.dropped_zones, pending));
    };
    for round in 0..3 {
        // Lists of two zones until the pool is exhausted and zones drop; none has run yet.
        for _ in 0..12 {
            let mut list = ctx.list();
            let _ = list.zone_begin(&stream, location!("pass"));
            sim.launch(&stream, 10_000);
            let _ = list.zone_next(&stream, location!("blit"));
            sim.launch(&stream, 5_000);
            let _ = list.zone_end(&stream);
            ctx.submit(list).unwrap();
            collect(&mut expected);
        }
        assert!(ctx.stats().dropped_zones > round, "round {round}: the pool ran out");
        sim.advance(1_000_000);
        collect(&mut expected);
        assert_eq!(ctx.stats().in_use, 0, "round {round}: everything collected");
    }
    let model = Model::replay(&recorder.messages());
    let values = |plot: &str| -> Vec<usize> {
        let points = &model.plots[&format!("watched / {plot}")];
        points.iter().map(|&(_, value)| value as usize).collect()
    };
    let in_use: Vec<usize> = expected.iter().map(|e| e.0).collect();
    // Every value the stats showed after a collect is plotted, in order; there may be more
    // points: a recording thread that finds the pool exhausted collects too (before it drops
    // its zone), and each collect plots the counters.
    let in_order = |plot: Vec<usize>, seen: Vec<usize>| {
        let mut plot = plot.into_iter();
        seen.iter().all(|v| plot.any(|p| p == *v))
    };
    assert!(
        in_order(values("slots in use"), in_use.clone()),
        "{:?} against {in_use:?}",
        values("slots in use")
    );
    assert!(values("slots in use").iter().all(|&v| v <= 16));
    assert!(in_order(values("zones dropped"), expected.iter().map(|e| e.1).collect()));
    assert!(values("zones dropped").windows(2).all(|w| w[0] <= w[1]), "cumulative");
    assert!(in_order(values("lists pending"), expected.iter().map(|e| e.2).collect()));
    // A begin needs two free slots (its own and one kept for its end): one may stay free.
    assert!(*in_use.iter().max().unwrap() >= 15, "the plot reaches the pool's maximum: {in_use:?}");
    assert!(in_use.windows(2).any(|w| w[1] < w[0]), "and falls: {in_use:?}");
    let lag = &model.plots["watched / collection lag (us)"];
    assert!(!lag.is_empty() && lag.iter().all(|&(_, us)| us >= 0.0));
}

#[test]
fn frames_reach_tracy_as_frame_marks_and_no_plot_is_sent_unless_asked() {
    let (sim, ctx, recorder, _memory) = traced_context(Config::default());
    let stream = sim.stream();
    for frame in 0..5 {
        ctx.frame(frame);
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("frame")).unwrap();
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(10_000);
        ctx.collect().unwrap();
    }
    let model = Model::replay(&recorder.messages());
    assert_eq!(model.frames["gpu / frames"].len(), 5);
    assert!(model.plots.is_empty(), "plots were not asked for");
}
