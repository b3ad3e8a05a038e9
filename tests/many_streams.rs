//! Any number of streams over a run (docs/design.md, section 8, "Order: per lane, in GPU
//! order"): a stream's first record never waits for another stream's backend call, and its
//! finished zones are never held back by another stream's list, however many streams came
//! and went (a runtime that makes a stream or a graph per step).
//!
//! The backend is the simulated GPU with a gate in its `record`: the first record on one
//! stream is held in the backend for the whole run (or until a patience of seconds runs out,
//! which the test treats as "something waited for it").

use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, Backend, BackendError, TracingContext};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long the held record call waits to be let go: far longer than the run takes anywhere
/// (20 s was not: ThreadSanitizer's run of 100,000 streams took longer, and Miri's
/// of 300 a minute), so a record that waited for it shows as the patience running out. Only a
/// failing run waits for it.
const PATIENCE: Duration = Duration::from_secs(if cfg!(miri) { 1_800 } else { 600 });

/// The stream whose next record is held: it says on the first sender that it is held, then
/// waits on the receiver.
type HeldRecord = (u64, mpsc::Sender<()>, mpsc::Receiver<()>);

/// The simulated GPU, holding the next record call on one stream.
#[derive(Clone)]
struct Gated {
    sim: SimBackend,
    held: Arc<Mutex<Option<HeldRecord>>>,
    ran_out: Arc<AtomicBool>,
}

impl Gated {
    /// Holds the next record on `stream`: the receiver hears once it is held, the sender lets
    /// it go.
    fn hold_next_record_on(&self, stream: &SimStream) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (held_tx, held_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        *self.held.lock().unwrap() = Some((self.sim.stream_key(stream), held_tx, go_rx));
        (held_rx, go_tx)
    }
}

impl Backend for Gated {
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "gated"
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
        self.sim.record(event, stream)?;
        let key = self.sim.stream_key(stream);
        let held = {
            let mut held = self.held.lock().unwrap();
            if held.as_ref().is_some_and(|(on, _, _)| *on == key) {
                held.take()
            } else {
                None
            }
        };
        if let Some((_, held, go)) = held {
            held.send(()).unwrap();
            if go.recv_timeout(PATIENCE).is_err() {
                self.ran_out.store(true, Ordering::SeqCst);
            }
        }
        Ok(())
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
    fn host_now_ns(&self) -> i64 {
        self.sim.host_now_ns()
    }
}

/// Streams that come and go over the run: each records one list, which the GPU runs and a
/// collect emits, while one stream's list is still being recorded and another stream's first
/// record is held in the backend all along. Each list is emitted at the first collect after
/// the GPU ran it (none waits for the list being recorded, nor for the held record), and no
/// first record waits for the held one.
#[test]
fn no_stream_waits_for_another_or_is_held_back_by_another_over_100_000_streams() {
    // (Under Miri 300 streams, collected every 100.)
    const STREAMS: usize = if cfg!(miri) { 300 } else { 100_000 };
    /// Lists between two collects.
    const COLLECT_EVERY: usize = if cfg!(miri) { 100 } else { 1_000 };
    let sim = SimBackend::manual();
    let gpu = Gated { sim: sim.clone(), held: Arc::default(), ran_out: Arc::default() };
    let memory = MemorySink::new();
    let ctx = TracingContext::builder(gpu.clone())
        .hold_limit(Duration::from_secs(3_600))
        .sink(memory.clone())
        .build()
        .unwrap();
    // A list being recorded on `open` for the whole run: it holds its place on its stream.
    let open = sim.stream();
    let mut being_recorded = ctx.list();
    being_recorded.zone_begin(&open, location!("being recorded")).unwrap();
    // A first record held in the backend on `blocked`, on another thread.
    let blocked = sim.stream();
    let (held, go) = gpu.hold_next_record_on(&blocked);
    let recorder = {
        let (ctx, blocked) = (ctx.clone(), blocked.clone());
        std::thread::spawn(move || {
            let mut list = ctx.list();
            list.zone_begin(&blocked, location!("held")).unwrap();
            list.zone_end(&blocked).unwrap();
            ctx.submit(list).unwrap();
        })
    };
    held.recv().unwrap();
    for n in 1..=STREAMS {
        let stream = sim.stream();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("step")).unwrap();
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        if n % COLLECT_EVERY == 0 || n == STREAMS {
            sim.advance(10_000);
            ctx.collect().unwrap();
            assert_eq!(ctx.stats().zones_emitted, n, "a finished list held back by another stream's");
        }
    }
    assert!(!gpu.ran_out.load(Ordering::SeqCst), "a first record waited for another stream's");
    go.send(()).unwrap();
    recorder.join().unwrap();
    being_recorded.zone_end(&open).unwrap();
    ctx.submit(being_recorded).unwrap();
    ctx.flush().unwrap();
    assert_eq!(memory.zones().len(), STREAMS + 2);
    let stats = ctx.stats();
    assert_eq!((stats.lanes_released, stats.owned, stats.submitted), (0, 0, 0), "{stats:?}");
}
