//! Unit tests of a list's read: its times, its span against its own host reads, and its place
//! against the anchors, on the simulated GPU with constructed records.

use super::*;
use crate::backend::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use crate::collect::events::bounds::carry;
use crate::collect::events::emit::EventOrder;
use crate::shared::config::Config;
use crate::slots::pool::Pool;
use std::collections::VecDeque;
use std::time::Duration;

/// The simulated GPU, its distance reads counted and, while a test has scripted some, answered
/// from the script.
#[derive(Clone)]
struct Scripted {
    sim: SimBackend,
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    script: std::sync::Arc<std::sync::Mutex<VecDeque<Elapsed>>>,
}

impl Scripted {
    fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The next reads answer these distances (exact or not), whatever the events' times.
    fn answer(&self, distances: &[(i64, bool)]) {
        let mut script = self.script.lock().unwrap();
        script.clear();
        script.extend(distances.iter().map(|&(ns, exact)| Elapsed { ns, exact }));
    }
}

impl Backend for Scripted {
    const COMPLETE_WHEN_REACHED: bool = true;
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "scripted"
    }
    fn create_event(&self) -> Result<SimEvent, BackendError> {
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
        self.sim.elapsed_ms(start, end)
    }
    fn elapsed(&self, start: &SimEvent, end: &SimEvent) -> Result<Option<Elapsed>, BackendError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.script.lock().unwrap().pop_front() {
            Some(elapsed) => Ok(Some(elapsed)),
            None => self.sim.elapsed(start, end),
        }
    }
    fn host_now_ns(&self) -> i64 {
        self.sim.host_now_ns()
    }
}

/// GPU time of the newest anchor in [`context`]'s timeline; host times are the GPU's.
const ANCHOR_NS: i64 = 1_000_000;

/// A context's shared state on a manual simulation (a pool of 16 events), and a timeline whose
/// newest anchor is at [`ANCHOR_NS`], its host time read exactly (at the GPU's).
fn context() -> (Scripted, Inner<Scripted>, Timeline<Scripted>) {
    let backend =
        Scripted { sim: SimBackend::manual(), reads: Default::default(), script: Default::default() };
    let (_, info) = EventOrder::new(&backend, 1, "read").unwrap();
    let pool = Pool::new(16, 16, 16, || backend.create_event()).unwrap();
    let ctx = Inner::new(backend.clone(), Config::default(), pool, info);
    let (timeline, _) = Timeline::new(&backend).unwrap();
    backend.sim.advance(ANCHOR_NS);
    timeline.refresh(&backend, Duration::ZERO, true, None).unwrap();
    (backend, ctx, timeline)
}

/// Records of the events of slots 0, 1, ... stamped at `times` (at or after the present) on
/// `lane`: every other one an end, from the second.
fn records(backend: &Scripted, ctx: &Inner<Scripted>, lane: Lane, times: &[i64]) -> Vec<EventRecord> {
    let stream = backend.sim.stream();
    let mut by_time: Vec<(i64, u32)> = times.iter().copied().zip(0..).collect();
    by_time.sort_unstable();
    for (t, slot) in by_time {
        backend.sim.advance(t - backend.sim.now());
        backend.record(ctx.pool().event(slot), &stream).unwrap();
    }
    (0..times.len() as u32)
        .map(|slot| EventRecord {
            slot,
            lane,
            ends: slot % 2 == 1,
            begin_dropped: false,
            launched: false,
            begins: None,
        })
        .collect()
}

#[test]
fn a_lists_times_cost_one_read_per_step_and_a_list_of_one_event_one_read() {
    let (backend, ctx, _timeline) = context();
    let mut times = Vec::new();
    for n in [1, 2, 4] {
        let at: Vec<i64> = (0..n).map(|i| 2 * ANCHOR_NS * n + 100 * i).collect();
        let events = records(&backend, &ctx, Lane::Stream(1), &at);
        let before = backend.reads();
        let (rounding, span, _) = read_times(&ctx, 1, &events, false, &mut times).unwrap().unwrap();
        assert_eq!(backend.reads() - before, (n as usize - 1).max(1), "{n} events");
        assert_eq!((rounding, span), (0, (0, 100 * (n - 1))));
        assert_eq!(times, (0..n).map(|i| 100 * i).collect::<Vec<_>>());
    }
}

#[test]
fn an_end_before_the_event_recorded_before_it_is_a_step_back_on_a_stream_and_not_in_a_graph() {
    // Zone A over 0 to 1,000 ns, then zone B over 200 to 500 ns: B's end comes 500 ns before
    // A's. A graph's nodes may run side by side; a stream's run in the order recorded.
    let at = [0, 1_000, 200, 500].map(|t| 3 * ANCHOR_NS + t);
    let mut times = Vec::new();
    let (backend, ctx, _timeline) = context();
    let events = records(&backend, &ctx, Lane::Graph(1), &at);
    let (_, span, _) = read_times(&ctx, 1, &events, false, &mut times).unwrap().unwrap();
    assert_eq!((times.as_slice(), span), ([0, 1_000, 200, 500].as_slice(), (0, 1_000)));
    let (backend, ctx, _timeline) = context();
    let events = records(&backend, &ctx, Lane::Stream(1), &at);
    let error = read_times(&ctx, 1, &events, false, &mut times).unwrap_err();
    assert!(matches!(error, Error::Time(TimeError::WentBack { event: 3, by_ns: 500, .. })), "{error:?}");
}

#[test]
fn a_lists_span_fits_its_own_reads_within_its_rounding() {
    // 1 s of GPU time between host reads 500 µs (the rate bound over 1 s) and 30 ns less apart.
    let span = (0, 1_000_000_000);
    let reads = OwnReads { first_host_ns: Some(0), read_host_ns: span.1 - carry(span.1 as u64) - 30 };
    assert!(!reads.hold_span(span, 29));
    assert!(reads.hold_span(span, 30), "its times off by at most their rounding, 30 ns");
}

#[test]
fn a_place_its_reads_cannot_hold_is_read_again_and_judged_by_the_second_reading() {
    let (backend, ctx, timeline) = context();
    // The list ran at 2 ms, for 1 µs, its host reads 100 ns around it; the anchor it is read
    // from (1 ms) was seen complete before it began.
    let t = 2 * ANCHOR_NS;
    let around = OwnReads { first_host_ns: Some(t - 100), read_host_ns: t + 1_100 };
    // Began before the anchor was seen complete, read complete at host time 100 ns: no place
    // from 0 on fits both the anchor and this.
    let early = OwnReads { first_host_ns: Some(0), read_host_ns: 100 };
    let (far, rounding) =
        (1_000_000_000_000, |p: i64| reading_bound(Elapsed { ns: p - ANCHOR_NS, exact: false }));
    let (close, apart) = (far + rounding(far), far + 2 * rounding(far) + 1);
    assert_eq!((rounding(close), rounding(apart)), (rounding(far), rounding(far)));
    // What is read, the list's span and reads, the two placements read (as GPU times, exact or
    // not), and what must come of them.
    type Case<'a> = (&'a str, &'a OwnReads, Span, [(i64, bool); 2], fn(&Result<Placed, Error>) -> bool);
    let cases: [Case<'_>; 9] = [
        ("a place that fits, at the first reading", &around, (0, 1_000), [(t, true), (0, true)], |r| {
            matches!(r, Ok((2_000_000, 0, 0)))
        }),
        ("out of range twice (i64::MAX)", &around, (0, 0), [(i64::MAX, true); 2], |r| {
            matches!(r, Err(Error::Time(TimeError::OutOfRange { event: 0, .. })))
        }),
        ("out of range after another reading", &around, (0, 0), [(far, true), (i64::MAX, true)], |r| {
            matches!(
                r,
                Err(Error::Time(TimeError::PlacementDisagrees {
                    first_ns: 1_000_000_000_000,
                    second_ns: i64::MAX,
                    ..
                }))
            )
        }),
        ("before GPU time 0 twice", &around, (0, 1_000), [(-far, true); 2], |r| {
            matches!(r, Err(Error::Time(TimeError::BeforeAnchor { by_ns: 1_000_001_000_000, .. })))
        }),
        ("before GPU time 0 after another reading", &around, (0, 1_000), [(far, true), (-far, true)], |r| {
            matches!(r, Err(Error::Time(TimeError::PlacementDisagrees { .. })))
        }),
        (
            "before the anchor seen complete before the list began, twice",
            &around,
            (0, 1_000),
            [(ANCHOR_NS / 2, true); 2],
            |r| matches!(r, Err(Error::Time(TimeError::BeforeAnchor { by_ns: 500_000, .. }))),
        ),
        (
            "at GPU time 0 twice, begun before the anchor was seen (a discontinuity)",
            &early,
            (0, 1_000),
            [(0, true); 2],
            |r| matches!(r, Ok((0, 0, 0))),
        ),
        (
            "two readings within their rounding of each other",
            &around,
            (0, 1_000),
            [(far, false), (close, false)],
            |r| matches!(r, Ok((p, 0, _)) if *p == 1_000_000_000_000 + 59_605),
        ),
        (
            "two readings further apart than their rounding",
            &around,
            (0, 1_000),
            [(far, false), (apart, false)],
            |r| matches!(r, Err(Error::Time(TimeError::PlacementDisagrees { .. }))),
        ),
    ];
    for (case, reads, span, placements, verdict) in cases {
        backend.answer(&placements.map(|(p, exact)| (p.saturating_sub(ANCHOR_NS), exact)));
        let placed = place_checked(&ctx, timeline.anchors(), 0, 7, span, reads);
        assert!(verdict(&placed), "{case}: {placed:?}");
    }
}
