//! A loom-compatible backend and the slot accounting check, for the models that run a whole
//! `TracingContext`.
//!
//! The backend keeps every piece of state that crosses threads in loom atomics, so loom sees
//! (and checks) the synchronization between a recording thread's `record` and the
//! collector's completion checks. It has no GPU clock: an event is complete once it is
//! recorded, and its time is its stream's tick count at recording (one tick = 1 µs). Its host
//! clock reads 0, unless the calling model thread set a clock of its own
//! ([`set_host_clock`]).

use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{
    Backend, BackendError, Builder, DynamicLocation, EventList, Lane, Stats, TracingContext,
};
use loom::sync::atomic::{AtomicU64, Ordering};
use std::cell::Cell;

loom::thread_local! {
    /// The calling model thread's host clock: 0 (not set) reads 0 for ever; once set, each
    /// read returns it and moves it on by 1 ns.
    static HOST_CLOCK: Cell<i64> = Cell::new(0);
}

/// Starts the calling model thread's host clock at `ns` (not 0): the backend's
/// `host_now_ns` on this thread then reads `ns`, `ns + 1`, ..., so what the crate read on
/// which thread (a zone's launch) can be told apart.
#[allow(dead_code, reason = "each loom_* target compiles this module; not all read host times")]
pub fn set_host_clock(ns: i64) {
    assert_ne!(ns, 0, "0 is the clock that is not set");
    HOST_CLOCK.with(|clock| clock.set(ns));
}

/// One tick of a stream, in milliseconds (1 µs).
const TICK_MS: f32 = 1e-3;

/// A GPU for loom: events complete once recorded, timed by their stream's ticks.
#[derive(Debug, Clone)]
pub struct LoomBackend {
    /// Events alive now (test bookkeeping, read only after every thread has joined).
    live_events: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Time reads left to fail (a loom atomic: collectors on several threads read it).
    failing_reads: loom::sync::Arc<loom::sync::atomic::AtomicUsize>,
    /// Whether those reads panic instead of returning an error (set before the model's
    /// threads start, read only: not part of what loom checks).
    panicking: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The payload of an injected backend panic ([`LoomBackend::panic_in_elapsed`]).
pub const INJECTED_PANIC: &str = "injected backend panic";

/// A stream: one recording thread's queue, counting the events recorded on it.
#[derive(Debug)]
pub struct LoomStream {
    id: u64,
    ticks: Cell<u64>,
    /// The tick count of a stream several threads record on (each through its own
    /// `LoomStream` of the same id): its modification order is the GPU's order. `None`: the
    /// thread's own count (no atomic, so the models that do not need it stay small).
    shared: Option<loom::sync::Arc<AtomicU64>>,
}

impl LoomStream {
    /// A stream whose lane is `Lane::Stream(id)`.
    pub fn new(id: u64) -> Self {
        Self { id, ticks: Cell::new(0), shared: None }
    }

    /// A handle, for one thread, on the stream `Lane::Stream(id)` whose ticks are `ticks`,
    /// shared with the other threads recording on it.
    #[allow(dead_code, reason = "each loom_* target compiles this module; not all record on a shared stream")]
    pub fn shared(id: u64, ticks: loom::sync::Arc<AtomicU64>) -> Self {
        Self { id, ticks: Cell::new(0), shared: Some(ticks) }
    }
}

/// A timing event: 0 until recorded, then its stream's tick count (at least 1).
#[derive(Debug)]
pub struct LoomEvent {
    stamp: AtomicU64,
    live_events: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for LoomEvent {
    fn drop(&mut self) {
        self.live_events.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Default for LoomBackend {
    fn default() -> Self {
        Self {
            live_events: Default::default(),
            failing_reads: loom::sync::Arc::new(loom::sync::atomic::AtomicUsize::new(0)),
            panicking: Default::default(),
        }
    }
}

impl LoomBackend {
    /// The next `n` time reads fail.
    pub fn fail_elapsed(&self, n: usize) {
        self.failing_reads.store(n, Ordering::Relaxed);
    }

    /// The next `n` time reads panic (with [`INJECTED_PANIC`]), as a user's backend may: the
    /// crate catches backend panics (`backend::guarded`) and fails the list. The default
    /// panic hook is silenced for this payload only, so that a model's thousands of
    /// executions do not print thousands of expected panics.
    #[allow(dead_code, reason = "each loom_* target compiles this module; not all inject panics")]
    pub fn panic_in_elapsed(&self, n: usize) {
        static QUIET: std::sync::Once = std::sync::Once::new();
        QUIET.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if info.payload().downcast_ref::<&str>() != Some(&INJECTED_PANIC) {
                    default(info);
                }
            }));
        });
        self.panicking.store(true, std::sync::atomic::Ordering::Relaxed);
        self.fail_elapsed(n);
    }

    /// Events created and not yet destroyed.
    pub fn live_events(&self) -> usize {
        self.live_events.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stamp(event: &LoomEvent) -> Option<u64> {
        // Acquire: pairs with the Release store of `record`.
        Some(event.stamp.load(Ordering::Acquire)).filter(|&t| t != 0)
    }
}

impl Backend for LoomBackend {
    type Event = LoomEvent;
    type Stream = LoomStream;
    type Graph = ();
    type GraphNode = ();

    fn name(&self) -> &'static str {
        "loom"
    }

    fn create_event(&self) -> Result<LoomEvent, BackendError> {
        self.live_events.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(LoomEvent { stamp: AtomicU64::new(0), live_events: self.live_events.clone() })
    }

    fn create_stream(&self) -> Result<LoomStream, BackendError> {
        Ok(LoomStream::new(u64::MAX))
    }

    fn stream_key(&self, stream: &LoomStream) -> u64 {
        stream.id
    }

    fn graph_key(&self, _graph: &()) -> u64 {
        0
    }

    fn record(&self, event: &LoomEvent, stream: &LoomStream) -> Result<(), BackendError> {
        let tick = match &stream.shared {
            // Relaxed: the GPU's order is the counter's modification order; the event's
            // stamp is published by the Release store below.
            Some(ticks) => ticks.fetch_add(1, Ordering::Relaxed) + 1,
            None => {
                stream.ticks.set(stream.ticks.get() + 1);
                stream.ticks.get()
            }
        };
        // Release: whoever sees the stamp sees the event as recorded.
        event.stamp.store(tick, Ordering::Release);
        Ok(())
    }

    fn add_graph_record_node(&self, _: &LoomEvent, _: &(), _: &[()]) -> Result<(), BackendError> {
        Err(BackendError::new("loom::add_graph_record_node", "graphs are not modelled"))
    }

    fn is_complete(&self, event: &LoomEvent) -> Result<bool, BackendError> {
        Ok(Self::stamp(event).is_some())
    }

    fn wait(&self, event: &LoomEvent) -> Result<(), BackendError> {
        match Self::stamp(event) {
            Some(_) => Ok(()),
            None => Err(BackendError::new("loom::wait", "event was never recorded")),
        }
    }

    fn elapsed_ms(&self, start: &LoomEvent, end: &LoomEvent) -> Result<Option<f32>, BackendError> {
        let failing =
            self.failing_reads.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if failing.is_ok() {
            if self.panicking.load(std::sync::atomic::Ordering::Relaxed) {
                std::panic::panic_any(INJECTED_PANIC);
            }
            return Err(BackendError::new("loom::elapsed_ms", "injected failure"));
        }
        Ok(Self::stamp(start).zip(Self::stamp(end)).map(|(a, b)| (b as f32 - a as f32) * TICK_MS))
    }

    fn host_now_ns(&self) -> i64 {
        HOST_CLOCK.with(|clock| {
            let now = clock.get();
            if now != 0 {
                clock.set(now + 1);
            }
            now
        })
    }
}

/// A builder for a context on a fresh [`LoomBackend`] with a pool of `initial` slots growing
/// to `max`, reserving `batch` slots at a time, feeding a [`MemorySink`].
pub fn builder(initial: u32, max: u32, batch: u32) -> (LoomBackend, MemorySink, Builder<LoomBackend>) {
    let backend = LoomBackend::default();
    let sink = MemorySink::new();
    let builder =
        TracingContext::builder(backend.clone()).capacity(initial, max).batch(batch).sink(sink.clone());
    (backend, sink, builder)
}

/// The context [`builder`] describes.
pub fn context(initial: u32, max: u32, batch: u32) -> (LoomBackend, MemorySink, TracingContext<LoomBackend>) {
    let (backend, sink, builder) = builder(initial, max, batch);
    (backend, sink, builder.build().expect("a valid configuration"))
}

/// A new list holding one zone named `name` (two events on `stream`).
#[allow(dead_code, reason = "each loom_* target compiles this module; not all record whole lists")]
pub fn record_one_zone(
    ctx: &TracingContext<LoomBackend>,
    stream: &LoomStream,
    name: &str,
) -> EventList<LoomBackend> {
    let mut list = ctx.list();
    list.zone_begin(stream, DynamicLocation::new(name)).expect("the pool has room");
    list.zone_end(stream).expect("the pool has room");
    list
}

/// One collected zone as the models check it: name, lane, and duration in ns.
fn summary(zone: &Zone) -> (String, Lane, i64) {
    (zone.location.name().to_owned(), zone.lane, zone.gpu_end_ns - zone.gpu_begin_ns)
}

/// Every zone the sink received, summarized.
pub fn received(sink: &MemorySink) -> Vec<(String, Lane, i64)> {
    sink.zones().iter().map(summary).collect()
}

/// Waits until every joined thread has handed its magazines back. loom's `join` returns
/// before the thread's thread-local destructors run (std's waits for them), so without this
/// what the joining thread does next would run beside those destructors, and a model whose
/// later steps differ from one execution to the next (the collector releases held reference
/// events in `HashMap` order) would stop being deterministic for loom.
#[allow(dead_code, reason = "each loom_* target compiles this module; not all need it")]
pub fn wait_for_exited_threads(ctx: &TracingContext<LoomBackend>) {
    while ctx.stats().threads_with_magazines > 0 {
        loom::thread::yield_now();
    }
}

/// The slot accounting invariant, checked when no other thread uses the context: every slot
/// is in exactly one state, and the free counter matches the freelist itself.
pub fn assert_accounted(ctx: &TracingContext<LoomBackend>) -> Stats {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "free + owned + submitted != capacity: {stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.free, "free counter disagrees with the freelist: {stats:?}");
    stats
}
