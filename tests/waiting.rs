//! What a recording thread, `submit` and `collect` wait for while another thread is inside a
//! slow backend call (docs/design.md, section 8, "The lane locks"): a list's first record on
//! a stream holds that stream's place lock for the length of its backend call, so another
//! list starting on the same stream at that moment waits for it; submitting or dropping a
//! list of that stream, and collecting, do not.
//!
//! The backend here is the simulated GPU with a gate in its `record`: once armed, the next
//! record call says it has recorded and then holds its caller until the test opens the gate
//! (or a patience of seconds runs out, which the tests treat as "something waited for it").

use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, Backend, BackendError, TracingContext};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a held record call waits for the gate before giving up: far longer than any call
/// the tests make while it is held, so a call that waited for it is seen as having run out.
const PATIENCE: Duration = Duration::from_secs(5);

/// A held record call: it says on `recorded` that it has recorded, then waits for `open`.
struct Held {
    recorded: mpsc::Sender<()>,
    open: mpsc::Receiver<()>,
}

#[derive(Default)]
struct Gate {
    armed: Mutex<Option<Held>>,
    /// Holds the next `create_event` call the same way.
    armed_create: Mutex<Option<Held>>,
    /// Record calls made so far (entered, held or not).
    records: AtomicUsize,
    /// Whether a held call ran out of patience: something waited for it instead of opening it.
    ran_out: Mutex<bool>,
}

/// The simulated GPU with a [`Gate`] in its record call.
#[derive(Clone)]
struct Gated {
    sim: SimBackend,
    gate: Arc<Gate>,
}

impl Gated {
    /// Holds the next record call; returns the receiver told once it has recorded and the
    /// sender that lets it go.
    fn hold_next_record(&self) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (recorded_tx, recorded) = mpsc::channel();
        let (open, open_rx) = mpsc::channel();
        *self.gate.armed.lock().unwrap() = Some(Held { recorded: recorded_tx, open: open_rx });
        (recorded, open)
    }

    /// Holds the next `create_event` call (a growing pool's), as `hold_next_record` does.
    fn hold_next_event_creation(&self) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (created_tx, created) = mpsc::channel();
        let (open, open_rx) = mpsc::channel();
        *self.gate.armed_create.lock().unwrap() = Some(Held { recorded: created_tx, open: open_rx });
        (created, open)
    }

    fn records(&self) -> usize {
        self.gate.records.load(Ordering::SeqCst)
    }

    fn ran_out(&self) -> bool {
        *self.gate.ran_out.lock().unwrap()
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
        let event = self.sim.create_event()?;
        let held = self.gate.armed_create.lock().unwrap().take();
        if let Some(held) = held {
            held.recorded.send(()).unwrap();
            if held.open.recv_timeout(PATIENCE).is_err() {
                *self.gate.ran_out.lock().unwrap() = true;
            }
        }
        Ok(event)
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
        self.gate.records.fetch_add(1, Ordering::SeqCst);
        self.sim.record(event, stream)?;
        let held = self.gate.armed.lock().unwrap().take();
        if let Some(held) = held {
            held.recorded.send(()).unwrap();
            if held.open.recv_timeout(PATIENCE).is_err() {
                *self.gate.ran_out.lock().unwrap() = true;
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

fn gated() -> (Gated, SimStream, MemorySink, TracingContext<Gated>) {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let gpu = Gated { sim, gate: Arc::default() };
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(gpu.clone()).sink(sink.clone()).build().unwrap();
    (gpu, stream, sink, ctx)
}

fn names(sink: &MemorySink) -> Vec<String> {
    sink.zones().iter().map(|z| z.location.name().to_owned()).collect()
}

/// List `a` is recorded on a stream and left unsubmitted (the usage rule allows it: it is
/// done recording there); list `b` starts on the same stream and its first record is held in
/// the backend. `finish_a` (submitting or dropping `a`) and a collect must return while `b`'s
/// call is still held: the gate is opened only after they return, so a call that waited for
/// it would have run out of patience first.
fn finishing_a_list_while_another_first_record_is_held(
    finish_a: impl FnOnce(&TracingContext<Gated>, gpu_event_pool::EventList<Gated>),
) -> (Gated, MemorySink) {
    let (gpu, stream, sink, ctx) = gated();
    let mut a = ctx.list();
    a.zone_begin(&stream, location!("a")).unwrap();
    gpu.sim.launch(&stream, 1_000);
    a.zone_end(&stream).unwrap();
    let (recorded, open) = gpu.hold_next_record();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut b = ctx.list();
            b.zone_begin(&stream, location!("b")).unwrap();
            gpu.sim.launch(&stream, 1_000);
            b.zone_end(&stream).unwrap();
            ctx.submit(b).unwrap();
        });
        recorded.recv().unwrap();
        finish_a(&ctx, a);
        ctx.collect().unwrap();
        let _ = open.send(());
    });
    assert!(!gpu.ran_out(), "a call waited for another list's backend call");
    gpu.sim.advance(10_000);
    ctx.flush().unwrap();
    assert_eq!(ctx.stats().unaccounted(), 0);
    (gpu, sink)
}

#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn submitting_a_list_does_not_wait_for_another_lists_first_record_on_its_stream() {
    let (_gpu, sink) = finishing_a_list_while_another_first_record_is_held(|ctx, a| ctx.submit(a).unwrap());
    assert_eq!(names(&sink), ["a", "b"], "both emitted, in the stream's GPU order");
}

#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn dropping_a_list_does_not_wait_for_another_lists_first_record_on_its_stream() {
    let (_gpu, sink) = finishing_a_list_while_another_first_record_is_held(|_, a| drop(a));
    assert_eq!(names(&sink), ["b"]);
}

/// What does wait: list `b`'s first record on a stream is held in the backend; list `c`
/// starts on the same stream meanwhile. `c`'s record call must not begin until `b`'s has
/// returned and `b` has its place, so that places follow the GPU order of first events. The
/// check looks for `c`'s call for 200 ms: with no lock it would begin at once.
#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn a_first_record_on_a_stream_waits_while_another_first_record_there_is_in_the_backend() {
    let (gpu, stream, sink, ctx) = gated();
    let (recorded, open) = gpu.hold_next_record();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut b = ctx.list();
            b.zone_begin(&stream, location!("b")).unwrap();
            b.zone_end(&stream).unwrap();
            ctx.submit(b).unwrap();
        });
        recorded.recv().unwrap();
        let before = gpu.records();
        let c = s.spawn(|| {
            let mut c = ctx.list();
            c.zone_begin(&stream, location!("c")).unwrap();
            c.zone_end(&stream).unwrap();
            ctx.submit(c).unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            gpu.records(),
            before,
            "c recorded on the stream while b's first record was in the backend"
        );
        open.send(()).unwrap();
        c.join().unwrap();
    });
    gpu.sim.advance(10_000);
    ctx.flush().unwrap();
    assert_eq!(names(&sink), ["b", "c"]);
}

/// Lists on other streams never wait for it.
#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn a_first_record_on_another_stream_does_not_wait_for_a_held_first_record() {
    let (gpu, stream, sink, ctx) = gated();
    let other = gpu.sim.stream();
    let (recorded, open) = gpu.hold_next_record();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut b = ctx.list();
            b.zone_begin(&stream, location!("b")).unwrap();
            b.zone_end(&stream).unwrap();
            ctx.submit(b).unwrap();
        });
        recorded.recv().unwrap();
        let mut c = ctx.list();
        c.zone_begin(&other, location!("c")).unwrap();
        c.zone_end(&other).unwrap();
        ctx.submit(c).unwrap();
        let _ = open.send(());
    });
    assert!(!gpu.ran_out(), "a list on another stream waited for the held record");
    gpu.sim.advance(10_000);
    ctx.flush().unwrap();
    let mut names = names(&sink);
    names.sort();
    assert_eq!(names, ["b", "c"]);
}

/// A pool that is empty while another thread grows it: a list being made (it reserves its
/// first zone's slots) waits until the page is made, one backend call per event. The check
/// looks for the new list for 200 ms while the growth's first `create_event` is held.
#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn a_list_that_needs_slots_waits_while_another_thread_grows_the_empty_pool() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let gpu = Gated { sim, gate: Arc::default() };
    let ctx = TracingContext::builder(gpu.clone()).capacity(2, 64).batch(2).build().unwrap();
    let mut grower = ctx.list();
    grower.zone_begin(&stream, location!("outer")).unwrap();
    let (created, open) = gpu.hold_next_event_creation();
    let made = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            grower.zone_begin(&stream, location!("inner: the pool grows")).unwrap();
            grower.zone_end(&stream).unwrap();
            grower.zone_end(&stream).unwrap();
        });
        created.recv().unwrap();
        let waiter = s.spawn(|| {
            let list = ctx.list();
            made.store(1, Ordering::SeqCst);
            list
        });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(made.load(Ordering::SeqCst), 0, "a list took slots while the empty pool was growing");
        open.send(()).unwrap();
        let mut list = waiter.join().unwrap();
        list.zone_begin(&stream, location!("after")).unwrap();
        list.zone_end(&stream).unwrap();
    });
    assert!(ctx.stats().grows >= 1);
    assert_eq!(ctx.stats().dropped_zones, 0);
}

/// A sink whose first batch holds the collect that delivers it (as `Gated` holds a record).
struct HeldSink {
    held: Option<Held>,
    ran_out: Arc<Mutex<bool>>,
}

impl gpu_event_pool::sink::Sink for HeldSink {
    fn zones(
        &mut self,
        _: &gpu_event_pool::sink::ContextInfo,
        _: gpu_event_pool::sink::ZoneBatch<'_>,
    ) -> std::io::Result<()> {
        if let Some(held) = self.held.take() {
            held.recorded.send(()).unwrap();
            if held.open.recv_timeout(PATIENCE).is_err() {
                *self.ran_out.lock().unwrap() = true;
            }
        }
        Ok(())
    }
}

/// Recording, submitting and dropping lists, on the stream of the list being emitted, while
/// a collect is held inside a sink: none of them waits for it.
#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn recording_submitting_and_dropping_do_not_wait_for_a_collect_held_in_a_sink() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (delivering, delivering_rx) = mpsc::channel();
    let (open, open_rx) = mpsc::channel();
    let ran_out = Arc::new(Mutex::new(false));
    let sink =
        HeldSink { held: Some(Held { recorded: delivering, open: open_rx }), ran_out: Arc::clone(&ran_out) };
    let ctx = TracingContext::builder(sim.clone()).sink(sink).build().unwrap();
    let record = |name: &'static str| {
        let mut list = ctx.list();
        list.zone_begin(&stream, gpu_event_pool::DynamicLocation::new(name)).unwrap();
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap();
        list
    };
    ctx.submit(record("emitted")).unwrap();
    sim.advance(10_000);
    std::thread::scope(|s| {
        s.spawn(|| ctx.collect().unwrap());
        delivering_rx.recv().unwrap();
        ctx.submit(record("submitted meanwhile")).unwrap();
        drop(record("dropped meanwhile"));
        let _ = open.send(());
    });
    assert!(!*ran_out.lock().unwrap(), "recording waited for the collect held in the sink");
    sim.advance(10_000);
    ctx.flush().unwrap();
    assert_eq!(ctx.stats().lists_collected, 2);
}
