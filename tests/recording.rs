//! Recording under failure: a backend that panics, two threads starting lists on one stream
//! at once, an exhausted pool, and the last handle (issue 18, section 2).

use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Backend, BackendError, RecordError, Stats, TracingContext};
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A thread's first `record` after [`Hooks::gate`], holding up its caller right after the
/// event is recorded: it says so on `recorded`, then waits for `go` (at most `patience`).
struct Gate {
    recorded: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
    patience: Duration,
}

/// What a [`Hooked`] backend does besides simulating.
#[derive(Default)]
struct Hooks {
    /// `record` calls left to panic (before recording).
    panics: AtomicU32,
    gate: Mutex<Option<Gate>>,
}

impl Hooks {
    /// The next `n` records (and graph record nodes) panic.
    fn panic_records(&self, n: u32) {
        self.panics.store(n, Ordering::Relaxed);
    }

    /// The next record is held up after recording (see [`Gate`]).
    fn gate(&self, recorded: mpsc::Sender<()>, go: mpsc::Receiver<()>, patience: Duration) {
        *self.gate.lock().unwrap() = Some(Gate { recorded, go, patience });
    }

    fn before_record(&self) {
        if self.panics.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            panic!("injected record panic");
        }
    }

    fn after_record(&self) {
        let gate = self.gate.lock().unwrap().take();
        if let Some(gate) = gate {
            gate.recorded.send(()).unwrap();
            let _ = gate.go.recv_timeout(gate.patience);
        }
    }
}

/// The simulated GPU with [`Hooks`] around its record calls.
#[derive(Clone)]
struct Hooked {
    sim: SimBackend,
    hooks: Arc<Hooks>,
}

impl Backend for Hooked {
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "hooked"
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
        self.hooks.before_record();
        self.sim.record(event, stream)?;
        self.hooks.after_record();
        Ok(())
    }
    fn add_graph_record_node(
        &self,
        event: &SimEvent,
        graph: &SimGraph,
        dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        self.hooks.before_record();
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

/// A context on a hooked manual simulation, a pool of `initial` slots growing to `max`.
fn hooked(initial: u32, max: u32) -> (Arc<Hooks>, SimBackend, MemorySink, TracingContext<Hooked>) {
    let sim = SimBackend::manual();
    let hooks = Arc::new(Hooks::default());
    let sink = MemorySink::new();
    let backend = Hooked { sim: sim.clone(), hooks: hooks.clone() };
    let ctx =
        TracingContext::builder(backend).capacity(initial, max).batch(4).sink(sink.clone()).build().unwrap();
    (hooks, sim, sink, ctx)
}

fn assert_accounted<B: Backend>(ctx: &TracingContext<B>) -> Stats {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.free, "free counter matches the freelist");
    stats
}

fn names(zones: &[Zone]) -> Vec<String> {
    zones.iter().map(|z| z.location.name().to_owned()).collect()
}

/// Whether `e` is a backend error made from a caught panic with the injected message.
fn is_caught_panic(e: &RecordError) -> bool {
    matches!(e, RecordError::Backend(b) if b.code == "panicked: injected record panic")
}

#[test]
fn a_panic_in_backend_record_drops_the_zone_and_leaks_no_slot() {
    let (hooks, sim, sink, ctx) = hooked(8, 8);
    let stream = sim.stream();

    // A list whose only recording panics, then dropped: its reservation comes back whole.
    let mut list = ctx.list();
    hooks.panic_records(1);
    let begun = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        list.zone_begin(&stream, location!("panics"))
    }));
    drop(list);
    let stats = assert_accounted(&ctx);
    assert_eq!(stats.owned, 0, "the slot taken for the panicking record came back: {stats:?}");
    let begun = begun.expect("the panic is caught inside the list, not unwound to the caller");
    assert!(begun.as_ref().is_err_and(is_caught_panic), "{begun:?}");

    // A panic at a begin and one at an end, then zones that record: balanced, counted.
    let mut list = ctx.list();
    hooks.panic_records(1);
    assert!(list.zone_begin(&stream, location!("lost")).is_err_and(|e| is_caught_panic(&e)));
    assert_eq!(list.open_zones(), 1, "opened as dropped");
    list.zone_end(&stream).unwrap();
    list.zone_begin(&stream, location!("end lost")).unwrap();
    hooks.panic_records(1);
    assert!(list.zone_end(&stream).is_err_and(|e| is_caught_panic(&e)));
    let graph = sim.graph();
    hooks.panic_records(1);
    let node = list.graph_zone_begin(&graph, &[], location!("graph lost"));
    assert!(node.is_err_and(|e| is_caught_panic(&e)));
    list.graph_zone_end(&graph, &[]).unwrap();
    list.zone_begin(&stream, location!("fine")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["fine"]);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.owned, stats.submitted, stats.dropped_zones), (0, 0, 4), "{stats:?}");
}

/// Thread A records its list's first event at GPU time 0 and is held up right after; thread
/// B then queues 1 µs of work and starts its own list on the same stream (GPU time 1,000).
/// The lane order must be the GPU's: A's list before B's. When recording the first event
/// and taking the place were two steps, B took place 0 while A was held up, and the sink got
/// B before A. Now A holds its lane until it has its place, and B records after it.
///
/// A is held up until B has recorded, or for at most two seconds (B cannot record while A
/// holds the lane: the wait ends by the timeout then, and the order is right whatever the
/// timing).
#[test]
fn two_threads_starting_lists_on_one_stream_at_once_are_emitted_in_gpu_order() {
    let (hooks, sim, sink, ctx) = hooked(16, 16);
    let stream = sim.stream();
    let (recorded_tx, recorded_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    hooks.gate(recorded_tx, go_rx, Duration::from_secs(2));
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("a")).unwrap();
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
        });
        let (ctx, sim, stream) = (&ctx, &sim, &stream);
        s.spawn(move || {
            recorded_rx.recv().unwrap();
            sim.launch(stream, 1_000);
            let mut list = ctx.list();
            list.zone_begin(stream, location!("b")).unwrap();
            let _ = go_tx.send(());
            list.zone_end(stream).unwrap();
            ctx.submit(list).unwrap();
        });
    });
    sim.advance(10_000);
    ctx.flush().unwrap();
    let zones = sink.zones();
    let order: Vec<(String, i64)> =
        zones.iter().map(|z| (z.location.name().to_owned(), z.gpu_begin_ns)).collect();
    assert_eq!(names(&zones), ["a", "b"], "lane order is GPU order: {order:?}");
    assert!(zones[0].gpu_begin_ns < zones[1].gpu_begin_ns, "{order:?}");
    assert_accounted(&ctx);
}

/// The reproduction: a pool of 4 slots and a command buffer of nested zones,
/// `cb { p1 { d1; d2 } p2 { d3; d4 } }`. The outer zones keep their end's slot, so they are
/// emitted whole; the inner ones are dropped and counted.
#[test]
fn an_exhausted_pool_drops_the_inner_zones_and_keeps_the_outer_ones_whole() {
    let (_hooks, sim, sink, ctx) = hooked(4, 4);
    let stream = sim.stream();
    let mut list = ctx.list();
    let mut results = Vec::new();
    results.push(list.zone_begin(&stream, location!("cb")));
    results.push(list.zone_begin(&stream, location!("p1")));
    results.push(list.zone_begin(&stream, location!("d1")));
    sim.launch(&stream, 100);
    results.push(list.zone_next(&stream, location!("d2")));
    sim.launch(&stream, 100);
    results.push(list.zone_end(&stream));
    results.push(list.zone_end(&stream));
    results.push(list.zone_begin(&stream, location!("p2")));
    results.push(list.zone_begin(&stream, location!("d3")));
    sim.launch(&stream, 100);
    results.push(list.zone_next(&stream, location!("d4")));
    sim.launch(&stream, 100);
    results.push(list.zone_end(&stream));
    results.push(list.zone_end(&stream));
    results.push(list.zone_end(&stream));
    assert_eq!(list.open_zones(), 0, "balanced");
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(names(&zones), ["cb", "p1"], "{results:?}");
    let (cb, p1) = (&zones[0], &zones[1]);
    assert!(cb.gpu_begin_ns <= p1.gpu_begin_ns && p1.gpu_end_ns <= cb.gpu_end_ns);
    assert_eq!(cb.gpu_end_ns - cb.gpu_begin_ns, 400, "cb ends after all the work");
    let exhausted = RecordError::PoolExhausted { capacity: 4 };
    let errors: Vec<&RecordError> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors, [&exhausted; 5], "d1, d2, p2, d3, d4: {results:?}");
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.dropped_zones, stats.zones_emitted, stats.owned), (5, 2, 0), "{stats:?}");
}

/// A `Write` that keeps what is written where the test can read it.
#[derive(Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn dropping_the_last_handle_completes_a_chrome_trace_while_a_list_is_alive() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let out = SharedBuffer::default();
    let ctx =
        TracingContext::builder(sim.clone()).sink(ChromeTrace::new(out.clone()).sink()).build().unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("dispatch")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(1_000);
    let unused = ctx.list();
    drop(ctx);
    let json = out.0.lock().unwrap().clone();
    let trace: serde_json::Value =
        serde_json::from_slice(&json).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&json)));
    let names: Vec<&str> = trace.as_array().unwrap().iter().filter_map(|e| e["name"].as_str()).collect();
    assert!(names.contains(&"dispatch"), "{names:?}");
    drop(unused);
}

#[test]
fn recording_after_the_last_handle_is_dropped_and_counted_and_stays_balanced() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(sink.clone()).build().unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("begun before")).unwrap();
    drop(ctx);
    assert!(sink.flushes() >= 1, "the last handle finished the sinks");
    assert_eq!(list.zone_begin(&stream, location!("after")), Err(RecordError::ContextClosed));
    assert_eq!(list.zone_next(&stream, location!("after, next")), Err(RecordError::ContextClosed));
    assert_eq!(list.open_zones(), 2, "opened as dropped: still balanced");
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    assert_eq!(list.open_zones(), 0);
    assert_eq!(list.zone_end(&stream), Err(RecordError::NoOpenZone));
    drop(list);
    assert!(sink.zones().is_empty());
}
