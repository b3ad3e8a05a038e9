//! [`SimBackend`]: the simulated GPU, timed by events (the module doc, in `sim/mod.rs`, says how
//! it runs).

use super::faults::SimFaults;
use crate::backend::{Backend, BackendError};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const NOT_RECORDED: i64 = i64::MIN;

/// The `code` of a read of a graph zone's event before the graph's first launch (hidden:
/// `ErrorKind::GraphNotLaunched` is the API).
#[doc(hidden)]
pub const GRAPH_NOT_LAUNCHED: &str = crate::backend::codes::GRAPH_NOT_LAUNCHED;

#[derive(Debug)]
enum Clock {
    Manual(AtomicI64),
    Realtime(Instant),
}

#[derive(Debug)]
struct Gpu {
    clock: Clock,
    next_id: AtomicU64,
    events_created: AtomicUsize,
    /// Event creations left before they fail; negative: never fail.
    creations_left: AtomicI64,
    record_failures: AtomicU32,
    elapsed_failures: AtomicU32,
    elapsed_panics: AtomicU32,
    host_clock_panics: AtomicU32,
    /// When the work queued on any stream finishes (the GPU is busy until then).
    busy_until: AtomicI64,
    /// How late a busy GPU stamps an event recorded on an idle stream (`set_late_records`).
    late_ns: AtomicI64,
    /// How long after its event the next `wait` returns (a slow readback), then 0.
    next_wait_delay_ns: AtomicI64,
    /// The manual host clock's rates, oldest first (`set_host_drift`); none: it reads the
    /// simulated time.
    host_rates: Mutex<Vec<HostRate>>,
}

/// From simulated time `since` on, the host clock reads `reading + (t - since) * (1 + drift)`.
#[derive(Debug, Clone, Copy)]
struct HostRate {
    since: i64,
    reading: f64,
    drift: f64,
}

/// The simulated GPU. Cheap to clone: clones share one device.
#[derive(Debug, Clone)]
pub struct SimBackend {
    gpu: Arc<Gpu>,
}

/// A simulated stream. Clones are the same stream.
#[derive(Debug, Clone)]
pub struct SimStream {
    id: u64,
    busy_until: Arc<AtomicI64>,
}

/// A simulated timing event: the time it was (last) stamped.
#[derive(Debug)]
pub struct SimEvent {
    state: Arc<EventState>,
}

#[derive(Debug)]
struct EventState {
    stamp: AtomicI64,
    /// Bumped whenever the event is recorded or added to a graph: a graph node stamps the
    /// event only if it is still the event's latest use.
    generation: AtomicU64,
}

impl SimEvent {
    /// The simulated time at which the GPU reaches this event as last recorded (it may be
    /// later than now: the event is then not complete yet); `None` for an event added to a
    /// graph that has not run. What a test compares the collector's times with.
    pub fn reached_at(&self) -> Option<i64> {
        Some(self.state.stamp.load(Ordering::Acquire)).filter(|&t| t != NOT_RECORDED)
    }
}

impl EventState {
    fn rebind(&self, stamp: i64) -> u64 {
        self.stamp.store(stamp, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }
}

#[derive(Debug)]
enum Node {
    Kernel(i64),
    Record(Arc<EventState>, u64),
}

/// A simulated graph: nodes run one after another, in the order they were added, when the
/// graph is launched on a stream ([`SimBackend::launch_graph`]).
#[derive(Debug)]
pub struct SimGraph {
    id: u64,
    nodes: Mutex<Vec<Node>>,
    /// Whether the timed (first) launch happened.
    launched: AtomicBool,
}

/// A node of a [`SimGraph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimGraphNode(pub usize);

impl SimBackend {
    fn with_clock(clock: Clock) -> Self {
        Self {
            gpu: Arc::new(Gpu {
                clock,
                next_id: AtomicU64::new(1),
                events_created: AtomicUsize::new(0),
                creations_left: AtomicI64::new(-1),
                record_failures: AtomicU32::new(0),
                elapsed_failures: AtomicU32::new(0),
                elapsed_panics: AtomicU32::new(0),
                host_clock_panics: AtomicU32::new(0),
                busy_until: AtomicI64::new(0),
                late_ns: AtomicI64::new(0),
                next_wait_delay_ns: AtomicI64::new(0),
                host_rates: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A simulated GPU whose clock moves only with [`advance`](Self::advance) (and waits).
    pub fn manual() -> Self {
        Self::with_clock(Clock::Manual(AtomicI64::new(0)))
    }

    /// A simulated GPU that runs on the host's monotonic clock.
    pub fn realtime() -> Self {
        Self::with_clock(Clock::Realtime(Instant::now()))
    }

    /// The simulated time, in nanoseconds since the simulation started.
    pub fn now(&self) -> i64 {
        match &self.gpu.clock {
            Clock::Manual(now) => now.load(Ordering::Acquire),
            Clock::Realtime(start) => start.elapsed().as_nanos() as i64,
        }
    }

    /// Moves the manual clock forward by `ns` (no effect on a real-time clock).
    pub fn advance(&self, ns: i64) {
        if let Clock::Manual(now) = &self.gpu.clock {
            now.fetch_add(ns.max(0), Ordering::AcqRel);
        }
    }

    fn advance_to(&self, t: i64) {
        match &self.gpu.clock {
            Clock::Manual(now) => {
                now.fetch_max(t, Ordering::AcqRel);
            }
            Clock::Realtime(_) => {
                let left = t - self.now();
                if left > 0 {
                    std::thread::sleep(std::time::Duration::from_nanos(left as u64));
                }
            }
        }
    }

    /// A new stream.
    pub fn stream(&self) -> SimStream {
        SimStream {
            id: self.gpu.next_id.fetch_add(1, Ordering::Relaxed),
            busy_until: Arc::new(AtomicI64::new(0)),
        }
    }

    /// A new, empty graph.
    pub fn graph(&self) -> SimGraph {
        SimGraph {
            id: self.gpu.next_id.fetch_add(1, Ordering::Relaxed),
            nodes: Mutex::new(Vec::new()),
            launched: AtomicBool::new(false),
        }
    }

    /// Queues a kernel of `duration_ns` on `stream`; returns when it will finish.
    pub fn launch(&self, stream: &SimStream, duration_ns: i64) -> i64 {
        let now = self.now();
        let start = stream.busy_until.fetch_max(now, Ordering::AcqRel).max(now);
        stream.busy_until.fetch_add(duration_ns.max(0), Ordering::AcqRel);
        let end = start + duration_ns.max(0);
        self.gpu.busy_until.fetch_max(end, Ordering::AcqRel);
        end
    }

    /// Adds a kernel node of `duration_ns` to `graph` (dependencies are implied by order).
    pub fn add_kernel_node(&self, graph: &SimGraph, duration_ns: i64) -> SimGraphNode {
        let mut nodes = graph.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.push(Node::Kernel(duration_ns.max(0)));
        SimGraphNode(nodes.len() - 1)
    }

    /// Launches `graph` on `stream`: its kernels are queued in order and, on its first
    /// launch only, its zone events stamped. Returns whether this launch was the timed one.
    pub fn launch_graph(&self, graph: &SimGraph, stream: &SimStream) -> bool {
        let timed = !graph.launched.swap(true, Ordering::AcqRel);
        let nodes = graph.nodes.lock().unwrap_or_else(|p| p.into_inner());
        for node in nodes.iter() {
            match node {
                Node::Kernel(duration) => {
                    self.launch(stream, *duration);
                }
                Node::Record(event, generation) => {
                    if timed && event.generation.load(Ordering::Acquire) == *generation {
                        event.stamp.store(self.stamp_time(stream), Ordering::Release);
                    }
                }
            }
        }
        timed
    }

    /// How long until everything queued on `stream` has run (0 if idle).
    pub fn pending_ns(&self, stream: &SimStream) -> i64 {
        (stream.busy_until.load(Ordering::Acquire) - self.now()).max(0)
    }

    fn host_reading(&self, t: i64) -> f64 {
        let rates = self.gpu.host_rates.lock().unwrap_or_else(|p| p.into_inner());
        match rates.iter().rev().find(|r| r.since <= t) {
            Some(rate) => rate.reading + (t - rate.since) as f64 * (1.0 + rate.drift),
            None => t as f64,
        }
    }

    fn stamp_time(&self, stream: &SimStream) -> i64 {
        let now = self.now();
        let queued = stream.busy_until.load(Ordering::Acquire);
        if queued > now {
            return queued;
        }
        let late = self.gpu.late_ns.load(Ordering::Relaxed);
        if late == 0 || self.gpu.busy_until.load(Ordering::Acquire) <= now {
            return now;
        }
        // The stream waits for the late event, so its later work starts after it.
        stream.busy_until.fetch_max(now + late, Ordering::AcqRel);
        now + late
    }

    /// The event's stamp; an event never stamped is a graph zone whose graph has not run.
    fn stamp(call: &'static str, event: &SimEvent) -> Result<i64, BackendError> {
        match event.state.stamp.load(Ordering::Acquire) {
            NOT_RECORDED => Err(BackendError::new(call, GRAPH_NOT_LAUNCHED)),
            t => Ok(t),
        }
    }

    fn injected(counter: &AtomicU32) -> bool {
        counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
    }
}

impl Backend for SimBackend {
    // The simulated GPU marks an event complete at the very time it stamps it.
    const COMPLETE_WHEN_REACHED: bool = true;
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "sim"
    }

    fn create_event(&self) -> Result<SimEvent, BackendError> {
        let left = &self.gpu.creations_left;
        if left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n > 0).then(|| n - 1)).is_err()
            && left.load(Ordering::Relaxed) == 0
        {
            return Err(BackendError::new("sim::create_event", "injected failure"));
        }
        self.gpu.events_created.fetch_add(1, Ordering::Relaxed);
        Ok(SimEvent {
            state: Arc::new(EventState {
                stamp: AtomicI64::new(NOT_RECORDED),
                generation: AtomicU64::new(0),
            }),
        })
    }

    fn create_stream(&self) -> Result<SimStream, BackendError> {
        Ok(self.stream())
    }

    fn stream_key(&self, stream: &SimStream) -> u64 {
        stream.id
    }

    fn graph_key(&self, graph: &SimGraph) -> u64 {
        graph.id
    }

    fn record(&self, event: &SimEvent, stream: &SimStream) -> Result<(), BackendError> {
        if Self::injected(&self.gpu.record_failures) {
            return Err(BackendError::new("sim::record", "injected failure"));
        }
        event.state.rebind(self.stamp_time(stream));
        Ok(())
    }

    fn add_graph_record_node(
        &self,
        event: &SimEvent,
        graph: &SimGraph,
        _dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        if Self::injected(&self.gpu.record_failures) {
            return Err(BackendError::new("sim::add_graph_record_node", "injected failure"));
        }
        // Until the graph is launched, the event has no time (as with CUDA).
        let generation = event.state.rebind(NOT_RECORDED);
        let mut nodes = graph.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.push(Node::Record(Arc::clone(&event.state), generation));
        Ok(SimGraphNode(nodes.len() - 1))
    }

    fn is_complete(&self, event: &SimEvent) -> Result<bool, BackendError> {
        Ok(Self::stamp("sim::is_complete", event)? <= self.now())
    }

    fn wait(&self, event: &SimEvent) -> Result<(), BackendError> {
        let delay = self.gpu.next_wait_delay_ns.swap(0, Ordering::Relaxed);
        self.advance_to(Self::stamp("sim::wait", event)?.saturating_add(delay));
        Ok(())
    }

    fn elapsed_ms(&self, start: &SimEvent, end: &SimEvent) -> Result<Option<f32>, BackendError> {
        if Self::injected(&self.gpu.elapsed_panics) {
            panic!("sim::elapsed_ms: injected panic");
        }
        if Self::injected(&self.gpu.elapsed_failures) {
            return Err(BackendError::new("sim::elapsed_ms", "injected failure"));
        }
        let (a, b) = (Self::stamp("sim::elapsed_ms", start)?, Self::stamp("sim::elapsed_ms", end)?);
        if a.max(b) > self.now() {
            return Ok(None);
        }
        Ok(Some(((b - a) as f64 / 1e6) as f32))
    }

    fn host_now_ns(&self) -> i64 {
        if Self::injected(&self.gpu.host_clock_panics) {
            panic!("host clock: injected panic");
        }
        match &self.gpu.clock {
            Clock::Manual(now) => self.host_at(now.load(Ordering::Acquire)),
            Clock::Realtime(_) => self.now(),
        }
    }

    fn host_clock_origin(&self) -> Option<Instant> {
        match &self.gpu.clock {
            Clock::Manual(_) => None,
            Clock::Realtime(start) => Some(*start),
        }
    }
}

impl SimFaults for SimBackend {
    fn events_created(&self) -> usize {
        self.gpu.events_created.load(Ordering::Relaxed)
    }

    fn fail_event_creation_after(&self, n: Option<u32>) {
        self.gpu.creations_left.store(n.map_or(-1, i64::from), Ordering::Relaxed);
    }

    fn fail_records(&self, n: u32) {
        self.gpu.record_failures.store(n, Ordering::Relaxed);
    }

    fn set_late_records(&self, late_ns: i64) {
        self.gpu.late_ns.store(late_ns.max(0), Ordering::Relaxed);
    }

    fn delay_next_wait(&self, delay_ns: i64) {
        self.gpu.next_wait_delay_ns.store(delay_ns.max(0), Ordering::Relaxed);
    }

    fn set_host_drift(&self, ppm: f64) {
        if let Clock::Manual(_) = &self.gpu.clock {
            let since = self.now();
            let reading = self.host_reading(since);
            let mut rates = self.gpu.host_rates.lock().unwrap_or_else(|p| p.into_inner());
            rates.retain(|r| r.since < since);
            rates.push(HostRate { since, reading, drift: ppm * 1e-6 });
        }
    }

    fn host_at(&self, t: i64) -> i64 {
        self.host_reading(t).round() as i64
    }

    fn fail_elapsed(&self, n: u32) {
        self.gpu.elapsed_failures.store(n, Ordering::Relaxed);
    }

    fn panic_in_elapsed(&self, n: u32) {
        self.gpu.elapsed_panics.store(n, Ordering::Relaxed);
    }

    fn panic_in_host_clock(&self, n: u32) {
        self.gpu.host_clock_panics.store(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_complete_only_once_the_stream_reaches_them() {
        let sim = SimBackend::manual();
        let s = sim.stream();
        let (a, b) = (sim.create_event().unwrap(), sim.create_event().unwrap());
        sim.record(&a, &s).unwrap();
        sim.launch(&s, 1_500);
        sim.record(&b, &s).unwrap();
        assert!(sim.is_complete(&a).unwrap());
        assert!(!sim.is_complete(&b).unwrap());
        assert_eq!(sim.elapsed_ms(&a, &b).unwrap(), None);
        sim.advance(1_500);
        assert_eq!(sim.elapsed_ms(&a, &b).unwrap(), Some(0.0015));
    }

    #[test]
    fn graph_events_are_stamped_when_the_graph_runs() {
        let sim = SimBackend::manual();
        let s = sim.stream();
        let g = sim.graph();
        let (a, b) = (sim.create_event().unwrap(), sim.create_event().unwrap());
        sim.add_graph_record_node(&a, &g, &[]).unwrap();
        sim.add_kernel_node(&g, 2_000);
        sim.add_graph_record_node(&b, &g, &[]).unwrap();
        let err = sim.elapsed_ms(&a, &b).unwrap_err();
        assert_eq!(err.code, GRAPH_NOT_LAUNCHED);
        assert!(sim.wait(&b).is_err(), "waiting for a graph that never runs would never end");
        sim.advance(100);
        assert!(sim.launch_graph(&g, &s), "the first launch is timed");
        sim.wait(&b).unwrap();
        assert_eq!(sim.elapsed_ms(&a, &b).unwrap(), Some(0.002));
        sim.record(&a, &s).unwrap();
        let (a_time, b_time) = (a.state.stamp.load(Ordering::Relaxed), b.state.stamp.load(Ordering::Relaxed));
        assert!(!sim.launch_graph(&g, &s), "later launches are not timed");
        sim.advance(10_000);
        assert_eq!(a.state.stamp.load(Ordering::Relaxed), a_time, "a reused event is not stamped again");
        assert_eq!(b.state.stamp.load(Ordering::Relaxed), b_time, "b keeps its first launch's time");
    }

    #[test]
    fn the_host_clock_drifts_at_the_rates_set_and_stays_continuous() {
        let sim = SimBackend::manual();
        sim.advance(1_000_000);
        assert_eq!(sim.host_now_ns(), 1_000_000, "no drift set: the simulated time");
        sim.set_host_drift(100.0);
        sim.advance(1_000_000_000);
        assert_eq!(sim.host_now_ns(), 1_001_100_000, "100 ppm over a second: 100 µs");
        sim.set_host_drift(-10.0);
        sim.advance(2_000_000_000);
        assert_eq!(sim.host_now_ns(), 3_001_080_000, "then -10 ppm over two seconds");
        assert_eq!(sim.host_at(500_000), 500_000, "before the first drift");
        assert_eq!(sim.host_at(1_001_000_000), 1_001_100_000, "at the change");
    }

    #[test]
    fn injected_failures_fail_exactly_as_often_as_asked() {
        let sim = SimBackend::manual();
        sim.fail_event_creation_after(Some(1));
        assert!(sim.create_event().is_ok());
        assert!(sim.create_event().is_err());
        sim.fail_event_creation_after(None);
        let e = sim.create_event().unwrap();
        sim.fail_records(1);
        let s = sim.stream();
        assert!(sim.record(&e, &s).is_err());
        assert!(sim.record(&e, &s).is_ok());
    }
}
