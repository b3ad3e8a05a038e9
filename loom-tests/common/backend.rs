//! A loom-compatible backend and the slot accounting check, for the models that run a whole
//! `TracingContext`.
//!
//! The backend keeps every piece of state that crosses threads in loom atomics, so loom sees
//! (and checks) the synchronization between a recording thread's `record` and the
//! collector's completion checks. An event is complete once it is recorded.
//!
//! **Its clocks.** The collector checks GPU times against the host reads around them (a list's
//! span against the host time between its first record and its read, a list's place against
//! its anchor's reads), so the model's GPU and host clocks must be one clock, as a real pair
//! is within the rate bound: GPU time counts ticks (1 µs), and the host clock reads the GPU's
//! newest tick (in ns, plus the calling thread's [`set_host_clock`] tag). A stream's next event
//! runs one tick after its last, or, when the recording thread read the host clock since its
//! last record (before a list's first record, an anchor's, a launch), one tick after the
//! newest tick of the GPU: never before a host time read before it was recorded. So a zone
//! recorded begin then end by one thread is exactly 1 000 ns long, whatever other threads do.
//! The clock is `std` state, outside loom's view: loom runs one thread at a time, so it is the
//! same in every replay of an interleaving.

use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{
    Backend, BackendError, Builder, DynamicLocation, EventList, Lane, Stats, TracingContext,
};
use loom::sync::atomic::{AtomicU64, Ordering};
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;

loom::thread_local! {
    /// The calling model thread's tag, added to each host time it reads ([`set_host_clock`]).
    static HOST_TAG: Cell<i64> = Cell::new(0);
    /// Whether the calling model thread read the host clock since its last record.
    static READ_HOST: Cell<bool> = Cell::new(false);
}

/// Tags the calling model thread's host times: each read on this thread is the GPU's newest
/// tick in ns plus `ns` (1 to 999), so what the crate read on which thread (a zone's launch)
/// can be told apart.
#[allow(dead_code, reason = "each loom_* target compiles this module; not all read host times")]
pub fn set_host_clock(ns: i64) {
    assert!((1..1_000).contains(&ns), "a tag is under one tick: {ns}");
    HOST_TAG.with(|tag| tag.set(ns));
}

/// The tag of a host time read on a thread that [`set_host_clock`] tagged.
#[allow(dead_code, reason = "each loom_* target compiles this module; not all read host times")]
pub fn host_tag(ns: i64) -> i64 {
    ns % TICK_NS
}

/// One tick, in nanoseconds.
const TICK_NS: i64 = 1_000;
/// One tick of a stream, in milliseconds (1 µs).
const TICK_MS: f32 = 1e-3;

/// A GPU for loom: events complete once recorded, timed by the ticks of one clock (the module
/// doc).
#[derive(Debug, Clone)]
pub struct LoomBackend {
    /// The newest tick any event ran at (std: see the module doc).
    newest_tick: std::sync::Arc<std::sync::atomic::AtomicU64>,
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

/// A stream: one recording thread's queue.
#[derive(Debug)]
pub struct LoomStream {
    id: u64,
    /// The tick its last event ran at.
    last: Cell<u64>,
    /// The record count of a stream several threads record on (each through its own
    /// `LoomStream` of the same id): an RMW at each record, whose modification order is the
    /// order the GPU runs them in (each runs one tick after the GPU's newest). `None`: the
    /// thread's own stream (no atomic, so the models that do not need it stay small).
    shared: Option<loom::sync::Arc<AtomicU64>>,
    /// The driver's queue of the stream's command buffers, in plain memory, and this handle's
    /// command buffer: see [`LoomStream::opening`]. `None`: no such driver state.
    opens: Option<Opens>,
}

/// The names of the command buffers opened on a stream, in order, as a driver keeps them in
/// plain memory, leaving the serialization of openings to its caller as Vulkan leaves a
/// command buffer's and a queue's host access to the application ("externally
/// synchronized"): the crate's lane place lock is what serializes them (`shared/lanes/`). A
/// loom cell: loom reports two openings, or an opening and a failed one's look, with no
/// happens-before edge between them as a data race.
#[derive(Debug)]
pub struct Openings(loom::cell::UnsafeCell<Vec<&'static str>>);

// Safety: every access goes through loom's cell, which checks it: two with no happens-before
// edge between them (one a write) fail the model instead of racing.
unsafe impl Sync for Openings {}

impl Openings {
    #[allow(dead_code, reason = "each loom_* target compiles this module; not all record on a shared stream")]
    pub fn new() -> Self {
        Self(loom::cell::UnsafeCell::new(Vec::new()))
    }

    /// The openings so far, once every thread that opened one has been joined.
    #[allow(dead_code, reason = "each loom_* target compiles this module; not all record on a shared stream")]
    pub fn names(&self) -> Vec<&'static str> {
        // Safety: loom checks the access (above); the caller joined every opener.
        self.0.with(|queue| unsafe { (*queue).clone() })
    }
}

/// A handle's side of [`Openings`].
#[derive(Debug)]
struct Opens {
    queue: loom::sync::Arc<Openings>,
    /// This handle's command buffer; opened by its first record.
    name: &'static str,
    opened: Cell<bool>,
    /// Whether the first record fails (after looking at the queue), as a driver out of
    /// command buffers would; the next one then opens.
    fails_once: Cell<bool>,
}

impl LoomStream {
    /// A stream whose lane is `Lane::Stream(id)`.
    pub fn new(id: u64) -> Self {
        Self { id, last: Cell::new(0), shared: None, opens: None }
    }

    /// A handle, for one thread, on the stream `Lane::Stream(id)` whose record count is
    /// `ticks`, shared with the other threads recording on it.
    #[allow(dead_code, reason = "each loom_* target compiles this module; not all record on a shared stream")]
    pub fn shared(id: u64, ticks: loom::sync::Arc<AtomicU64>) -> Self {
        Self { id, last: Cell::new(0), shared: Some(ticks), opens: None }
    }

    /// [`shared`](Self::shared), for one list's recording: its first record opens a command
    /// buffer named `name` on the stream's `queue` of openings, in plain memory (the driver
    /// relies on its caller to serialize openings); with `fails_once`, the first record fails
    /// after looking at the queue, and the next one opens. The other records only run.
    #[allow(dead_code, reason = "each loom_* target compiles this module; not all record on a shared stream")]
    pub fn opening(
        id: u64,
        ticks: loom::sync::Arc<AtomicU64>,
        queue: loom::sync::Arc<Openings>,
        name: &'static str,
        fails_once: bool,
    ) -> Self {
        let opens = Opens { queue, name, opened: Cell::new(false), fails_once: Cell::new(fails_once) };
        Self { opens: Some(opens), ..Self::shared(id, ticks) }
    }
}

/// A timing event: 0 until recorded, then the tick it ran at (at least 1).
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
            newest_tick: Default::default(),
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

    /// Events created and not yet destroyed (read by some of the loom targets that share
    /// this module, not all).
    #[allow(dead_code)]
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
        if let Some(opens) = stream.opens.as_ref().filter(|o| !o.opened.get()) {
            if opens.fails_once.replace(false) {
                // Safety: loom checks the access (`Openings`): unordered with another, it fails
                // the model.
                let _open = opens.queue.0.with(|queue| unsafe { (*queue).len() });
                return Err(BackendError::new("loom::record", "no command buffer free"));
            }
            // Safety: as above.
            opens.queue.0.with_mut(|queue| unsafe { (*queue).push(opens.name) });
            opens.opened.set(true);
        }
        // After a host read on this thread, one tick after the GPU's newest (module doc).
        let after_read = READ_HOST.with(|read| read.replace(false));
        let newest = self.newest_tick.load(Relaxed);
        let tick = match &stream.shared {
            Some(ticks) => {
                // Relaxed: the GPU's order is the count's modification order; the event's
                // stamp is published by the Release store below.
                ticks.fetch_add(1, Ordering::Relaxed);
                newest + 1
            }
            None if after_read => stream.last.get().max(newest) + 1,
            None => stream.last.get() + 1,
        };
        stream.last.set(tick);
        self.newest_tick.fetch_max(tick, Relaxed);
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
        READ_HOST.with(|read| read.set(true));
        let newest = self.newest_tick.load(Relaxed) as i64;
        newest * TICK_NS + HOST_TAG.with(Cell::get)
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
