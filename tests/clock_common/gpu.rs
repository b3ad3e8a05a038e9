//! The simulated GPU of a world: the crate's simulated GPU, a host clock that drifts, stops
//! and steps as the world says, host reads delayed, a first pair that can be wrong, absurd
//! reads on demand, and a log of the simulated time every recorded event is reached at.

use super::{BadPair, Lateness};
use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{Backend, BackendError, Elapsed};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Which read an absurd value is injected into.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Read {
    /// A step between two events of a list.
    ListStep,
    /// A list's first event read from an anchor (its placement).
    Placement,
    /// The step from one anchor to the next.
    AnchorStep,
}

/// What the world's GPU changes as it runs.
#[derive(Debug)]
struct State {
    /// A small deterministic generator (xorshift).
    seed: u64,
    lateness: Lateness,
    /// Where the lateness is measured from (its start), and whether it is on now.
    late_on: bool,
    read_delay: i64,
    bad_pair: Option<BadPair>,
    /// Host reads and anchors so far.
    reads: u32,
    anchors: u32,
    /// The simulated time the GPU reached the context's base event (its first anchor) at.
    base: Option<i64>,
    /// From simulated time `.0` on, the host clock reads `.1` ns more than the simulation's
    /// (steps of the host clock, counters standing still).
    steps: Vec<(i64, i64)>,
    /// The simulated times recorded events are reached at, in the order recorded.
    stamps: Vec<i64>,
    /// The next `.2` reads of kind `.0` return `.1` ns.
    absurd: Option<(Read, i64, u32)>,
    /// Reads of an anchor from the one before (asks whether it is complete), so far.
    anchor_reads: u64,
}

/// The world's GPU (cheap to clone: clones share it).
#[derive(Clone)]
pub struct WorldGpu {
    pub sim: SimBackend,
    state: Arc<Mutex<State>>,
}

/// A simulated event that knows whether it was last recorded as an anchor.
#[derive(Debug)]
pub struct Event {
    sim: SimEvent,
    anchor: AtomicBool,
}

impl WorldGpu {
    pub fn new(
        seed: u64,
        drift_ppm: f64,
        lateness: Lateness,
        read_delay: i64,
        bad_pair: Option<BadPair>,
    ) -> Self {
        let sim = SimBackend::manual();
        sim.set_host_drift(drift_ppm);
        sim.advance(3_000_000);
        let state = State {
            seed: seed.max(1),
            lateness,
            late_on: false,
            read_delay,
            bad_pair,
            reads: 0,
            anchors: 0,
            base: None,
            steps: Vec::new(),
            stamps: Vec::new(),
            absurd: None,
            anchor_reads: 0,
        };
        Self { sim, state: Arc::new(Mutex::new(state)) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// A random number in `0..=max` from the world's sequence.
    pub fn random(&self, max: i64) -> i64 {
        random(&mut self.state().seed, max)
    }

    /// The true host time at simulated time `t`.
    pub fn truth(&self, t: i64) -> i64 {
        let step = self.state().steps.iter().rev().find(|(since, _)| *since <= t).map_or(0, |s| s.1);
        self.sim.host_at(t) + step
    }

    /// The simulated time the GPU reached the context's base event at: GPU time 0.
    pub fn base(&self) -> i64 {
        self.state().base.expect("the context is made")
    }

    /// From now on the host clock reads `ns` more (less, if negative) than it did.
    pub fn step_host_clock(&self, ns: i64) {
        let now = self.sim.now();
        let mut state = self.state();
        let total = state.steps.last().map_or(0, |s| s.1) + ns;
        state.steps.push((now, total));
    }

    /// Whether the lateness is on (a burst): the runner keeps a stream busy meanwhile.
    pub fn set_late_on(&self, on: bool) {
        self.state().late_on = on;
    }

    /// The next `times` reads of kind `read` return `ns`, exact.
    pub fn absurd_read(&self, read: Read, ns: i64, times: u32) {
        self.state().absurd = Some((read, ns, times));
    }

    /// Reads of an anchor from the one before so far: each ask whether an anchor is complete.
    pub fn anchor_reads(&self) -> u64 {
        self.state().anchor_reads
    }

    /// Anchors recorded so far (the base event's included).
    pub fn anchors_recorded(&self) -> u32 {
        self.state().anchors
    }

    /// The simulated times of the events recorded since the last call, in order.
    pub fn take_stamps(&self) -> Vec<i64> {
        std::mem::take(&mut self.state().stamps)
    }

    /// Sets the sim's lateness for the record about to be made, as the world's pattern says.
    fn set_lateness(&self) {
        let now = self.sim.now();
        let mut state = self.state();
        let late = match state.lateness {
            Lateness::None => 0,
            Lateness::Constant(late) => late,
            Lateness::Bursts { late, .. } => late * i64::from(state.late_on),
            Lateness::Random(max) => random(&mut state.seed, max),
            Lateness::Rising { per_s } => (now as i128 * per_s as i128 / 1_000_000_000) as i64,
        };
        self.sim.set_late_records(late);
    }

    fn log(&self, event: &SimEvent) {
        if let Some(t) = event.reached_at() {
            self.state().stamps.push(t);
        }
    }

    /// Time passing while the reading thread is descheduled.
    fn delay(&self) {
        let max = self.state().read_delay;
        if max > 0 {
            self.sim.advance(self.random(max));
        }
    }
}

fn random(seed: &mut u64, max: i64) -> i64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed % (max.max(0) as u64 + 1)) as i64
}

/// The wrong host time of a bad pair.
const BAD_PAIR_NS: i64 = 10_000_000;

impl Backend for WorldGpu {
    type Event = Event;
    // The crate's simulated GPU underneath: an event is complete the moment it is stamped.
    const COMPLETE_WHEN_REACHED: bool = true;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "world sim"
    }
    fn create_event(&self) -> Result<Event, BackendError> {
        Ok(Event { sim: self.sim.create_event()?, anchor: AtomicBool::new(false) })
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
    fn record(&self, event: &Event, stream: &SimStream) -> Result<(), BackendError> {
        event.anchor.store(false, Ordering::Relaxed);
        self.set_lateness();
        self.sim.record(&event.sim, stream)?;
        self.log(&event.sim);
        Ok(())
    }
    fn record_anchor(&self, event: &Event, stream: &SimStream) -> Result<Option<i64>, BackendError> {
        self.set_lateness();
        let now = self.sim.now();
        self.sim.record(&event.sim, stream)?;
        event.anchor.store(true, Ordering::Relaxed);
        let n = {
            let mut state = self.state();
            state.anchors += 1;
            if state.base.is_none() {
                state.base = event.sim.reached_at();
            }
            state.anchors - 1
        };

        let claimed = self.state().bad_pair == Some(BadPair::Claimed) && n < 5;
        Ok(claimed.then(|| self.truth(now) + BAD_PAIR_NS))
    }
    fn add_graph_record_node(
        &self,
        event: &Event,
        graph: &SimGraph,
        dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        event.anchor.store(false, Ordering::Relaxed);
        self.sim.add_graph_record_node(&event.sim, graph, dependencies)
    }
    fn is_complete(&self, event: &Event) -> Result<bool, BackendError> {
        self.sim.is_complete(&event.sim)
    }
    fn wait(&self, event: &Event) -> Result<(), BackendError> {
        self.sim.wait(&event.sim)
    }
    fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<Option<f32>, BackendError> {
        self.sim.elapsed_ms(&start.sim, &end.sim)
    }
    fn elapsed(&self, start: &Event, end: &Event) -> Result<Option<Elapsed>, BackendError> {
        let read = match (start.anchor.load(Ordering::Relaxed), end.anchor.load(Ordering::Relaxed)) {
            (true, true) => Read::AnchorStep,
            (true, false) => Read::Placement,
            _ => Read::ListStep,
        };
        let elapsed = self.sim.elapsed(&start.sim, &end.sim)?;
        let mut state = self.state();
        state.anchor_reads += u64::from(read == Read::AnchorStep);
        match state.absurd {
            Some((kind, ns, times)) if kind == read && elapsed.is_some() => {
                state.absurd = (times > 1).then_some((kind, ns, times - 1));
                Ok(Some(Elapsed::from_ns(ns)))
            }
            _ => Ok(elapsed),
        }
    }
    fn host_now_ns(&self) -> i64 {
        self.delay();
        let now = self.sim.now();
        let glitch = {
            let mut state = self.state();
            state.reads += 1;
            state.bad_pair == Some(BadPair::Reads) && state.reads <= 2
        };
        let host = self.truth(now) + if glitch { BAD_PAIR_NS } else { 0 };
        self.delay();
        host
    }
}

/// A world's GPU whose anchors are seen complete only `lag` ns after the GPU reached them (a
/// readback, as on wgpu), and that says so: [`Backend::COMPLETE_WHEN_REACHED`] is `false`.
#[derive(Clone)]
pub struct Lagged {
    pub gpu: WorldGpu,
    lag: i64,
}

impl Lagged {
    pub fn new(gpu: WorldGpu, lag: i64) -> Self {
        Self { gpu, lag }
    }
}

impl Backend for Lagged {
    type Event = Event;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "lagged world sim"
    }
    fn create_event(&self) -> Result<Event, BackendError> {
        self.gpu.create_event()
    }
    fn create_stream(&self) -> Result<SimStream, BackendError> {
        self.gpu.create_stream()
    }
    fn stream_key(&self, stream: &SimStream) -> u64 {
        self.gpu.stream_key(stream)
    }
    fn graph_key(&self, graph: &SimGraph) -> u64 {
        self.gpu.graph_key(graph)
    }
    fn record(&self, event: &Event, stream: &SimStream) -> Result<(), BackendError> {
        self.gpu.record(event, stream)
    }
    fn record_anchor(&self, event: &Event, stream: &SimStream) -> Result<Option<i64>, BackendError> {
        self.gpu.record_anchor(event, stream)
    }
    fn add_graph_record_node(
        &self,
        event: &Event,
        graph: &SimGraph,
        dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        self.gpu.add_graph_record_node(event, graph, dependencies)
    }
    fn is_complete(&self, event: &Event) -> Result<bool, BackendError> {
        self.gpu.is_complete(event)
    }
    fn wait(&self, event: &Event) -> Result<(), BackendError> {
        self.gpu.wait(event)?;
        // The readback comes `lag` after the GPU reached the event.
        if let Some(t) = event.sim.reached_at() {
            let now = self.gpu.sim.now();
            self.gpu.sim.advance((t + self.lag - now).max(0));
        }
        Ok(())
    }
    fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<Option<f32>, BackendError> {
        self.gpu.elapsed_ms(start, end)
    }
    fn elapsed(&self, start: &Event, end: &Event) -> Result<Option<Elapsed>, BackendError> {
        let seen = |e: &Event| e.sim.reached_at().is_some_and(|t| t + self.lag <= self.gpu.sim.now());
        if end.anchor.load(Ordering::Relaxed) && !seen(end) {
            return Ok(None);
        }
        self.gpu.elapsed(start, end)
    }
    fn host_now_ns(&self) -> i64 {
        self.gpu.host_now_ns()
    }
}
