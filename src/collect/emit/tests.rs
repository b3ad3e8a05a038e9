//! Unit tests of the emit phase (moved out of emit/mod.rs to keep it under 600 lines).

use super::*;
use crate::backend::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use crate::backend::Elapsed;
use crate::shared::config::Config;
use crate::shared::lanes::Holder;
use crate::slots::pool::Pool;
use std::sync::atomic::AtomicU32;

/// The simulated GPU, with a host clock that panics on its next `panics` reads.
struct PanickyClock {
    sim: SimBackend,
    panics: AtomicU32,
}

impl Backend for PanickyClock {
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "panicky clock"
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
        self.sim.elapsed(start, end)
    }
    fn host_now_ns(&self) -> i64 {
        if self.panics.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            panic!("host clock: injected panic");
        }
        self.sim.host_now_ns()
    }
}

/// Item 12 of issue 26: the emitter reads the host clock for the hold limit, once per
/// emit phase. A backend whose clock panics there fails the emit phase (an error,
/// counted), and unwinds through nothing; here a lane waits on a place still held.
#[test]
fn a_host_clock_that_panics_under_the_hold_limit_is_an_error_not_an_unwind() {
    let backend = PanickyClock { sim: SimBackend::manual(), panics: AtomicU32::new(0) };
    let (mut emitter, info) = EventOrder::new(&backend, 1, "panicky").unwrap();
    let pool = Pool::new(4, 4, 4, || backend.create_event()).unwrap();
    let ctx = Inner::new(backend, Config::default(), pool, info);
    let lane = Lane::Stream(1);
    let holder = |list_id| Holder {
        list_id,
        lane,
        location: crate::location!("held").into(),
        started_ns: ctx.backend().sim.host_now_ns(),
    };
    // Place 0 held by a list still being recorded; place 1 waiting (a void stands for the
    // read list there: only that something waits counts here).
    let (held, ()) = ctx.lanes().record_first(lane, || Ok::<_, ()>(()), || holder(1)).unwrap();
    let (later, ()) = ctx.lanes().record_first(lane, || Ok::<_, ()>(()), || holder(2)).unwrap();
    ctx.lanes().release(later);
    emitter.waiting.entry(later.entry).or_default().insert(later.seq, None);
    ctx.backend().panics.store(1, Ordering::Relaxed);
    let released =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| emitter.release_held_lanes(&ctx)))
            .expect("the host clock's panic unwound through the emitter");
    let errors: Vec<String> = released.iter().map(|r| r.error.to_string()).collect();
    assert!(
        matches!(&released[..], [r] if matches!(&r.error, Error::Backend(e) if e.code.contains("injected panic"))),
        "{errors:?}"
    );
    assert_eq!(emitter.next_place[held.entry as usize], held.seq, "the lane did not move on");
    // The clock works again: the held list is within the limit, nothing is reported.
    assert!(emitter.release_held_lanes(&ctx).is_empty());
}
