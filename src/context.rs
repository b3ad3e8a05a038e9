//! `TracingContext`: the pool, the submission queue, the collector, calibration, verbosity,
//! sinks and statistics of one GPU timeline.

use crate::backend::Backend;
use crate::collector::{read_phase, CollectReport, Collector, ReadOutcome};
use crate::error::{CollectError, ConfigError, Error, SubmitError};
use crate::lanes::{LaneSeq, LaneTable};
use crate::list::{EventList, Run, MAX_SLOTS};
use crate::location::Verbosity;
use crate::pool::ListKind;
use crate::pool::Pool;
use crate::sink::{ContextInfo, Sink};
use crate::submit::SubmissionQueue;
use crate::sync::{
    lock, spin_wait, try_lock, Arc, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering,
};
use crate::tally::Tally;
use std::time::Duration;

/// How a context is built. Every field has a sensible default ([`Config::default`]); set
/// fields on a default value, or use the [`Builder`]'s setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The context's name (sinks show it: a Chrome process name, a Tracy GPU context name).
    pub name: String,
    /// Events created with the context (rounded up to a power of two). Default 64.
    pub initial_capacity: u32,
    /// Most events the pool may grow to; at the maximum, zones are dropped and counted.
    /// Default 16384 (the seed had a fixed 16128).
    pub max_capacity: u32,
    /// Slots a list reserves with one CAS. Default 16.
    pub batch: u32,
    /// Zones above this level record nothing. Default `Fine` (everything).
    pub verbosity: Verbosity,
    /// The collector takes a new time anchor when the newest one is older than this. While
    /// anchors are under 16 ms apart (collect at least every 16 ms minus this), every
    /// timestamp is exact to the nanosecond (docs/design.md, section 8). Default 5 ms.
    pub anchor_interval: Duration,
    /// With `Some(period)`, the context runs its own collector thread, which calls
    /// [`TracingContext::collect`] every `period` until the last handle is dropped. Default
    /// `None`: the application calls `collect`.
    pub collect_every: Option<Duration>,
    /// Whether each zone also pushes an NVTX range on the recording thread (feature `nvtx`;
    /// [`TracingContext::set_nvtx_ranges`] switches it at run time). Default `true`.
    #[cfg(feature = "nvtx")]
    pub nvtx_ranges: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: "gpu".to_owned(),
            initial_capacity: 64,
            max_capacity: 16384,
            batch: 16,
            verbosity: Verbosity::Fine,
            anchor_interval: Duration::from_millis(5),
            collect_every: None,
            #[cfg(feature = "nvtx")]
            nvtx_ranges: true,
        }
    }
}

impl Config {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (initial, max) = (self.initial_capacity, self.max_capacity);
        if initial == 0 || max == 0 {
            return Err(ConfigError::ZeroCapacity { initial, max });
        }
        if initial > max {
            return Err(ConfigError::InvertedCapacity { initial, max });
        }
        if self.batch == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        let rounded = initial.checked_next_power_of_two().ok_or(ConfigError::InitialTooLarge { initial })?;
        let shift = rounded.trailing_zeros();
        let limit = Pool::<()>::max_reachable(shift).min(u64::from(MAX_SLOTS));
        if u64::from(max) > limit || Pool::<()>::pages_needed(shift, max).is_none() {
            return Err(ConfigError::TooLarge { initial: rounded, max, limit });
        }
        Ok(())
    }
}

/// Counters of the context (the pool keeps the slot counts). Those bumped on the recording
/// path are sharded per thread (`recorded`); the rest change on failures or in the collector.
#[derive(Debug)]
pub(crate) struct Counters {
    /// LISTS_SUBMITTED, EVENTS_SUBMITTED, LISTS_DISCARDED.
    pub(crate) recorded: Tally<3>,
    pub(crate) dropped_zones: AtomicUsize,
    pub(crate) lists_collected: AtomicUsize,
    pub(crate) lists_failed: AtomicUsize,
    pub(crate) zones_emitted: AtomicUsize,
    pub(crate) lists_shifted: AtomicUsize,
    pub(crate) sink_failures: AtomicUsize,
    pub(crate) emitter_ns: AtomicU64,
}

const LISTS_SUBMITTED: usize = 0;
const EVENTS_SUBMITTED: usize = 1;
const LISTS_DISCARDED: usize = 2;

/// A snapshot of a context's statistics. Each counter is read on its own, so a snapshot
/// taken while other threads record is approximate; when they are quiet it is exact, and
/// `free + owned + submitted == capacity` ([`Stats::unaccounted`] is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Slots (events) created.
    pub capacity: usize,
    /// The most slots the pool may grow to.
    pub max_capacity: usize,
    /// Pages created.
    pub pages: usize,
    /// Free slots: on the freelist, or idle in threads' magazines (`in_magazines`).
    pub free: usize,
    /// Of the free slots, those in per-thread magazines (including those of exited threads
    /// until the pool moves them to the freelist): at most `magazine size x threads`.
    pub in_magazines: usize,
    /// Threads holding a magazine of this context now (each holds at most the magazine
    /// size in free slots); a thread hands its magazine back when it exits.
    pub threads_with_magazines: usize,
    /// Slots held by lists being recorded (including their unused reservations).
    pub owned: usize,
    /// Slots in submitted lists not yet collected.
    pub submitted: usize,
    /// `owned + submitted`.
    pub in_use: usize,
    /// The most slots seen in use at once: sampled when the pool grows (the moment it is
    /// full) and on every `stats()` call; on every collect, the slots submitted then (the
    /// collector reads no thread's magazine).
    pub high_water: usize,
    /// Times the pool grew.
    pub grows: usize,
    /// Zones not recorded because of exhaustion, depth or a backend error.
    pub dropped_zones: usize,
    /// Lists submitted (including empty ones).
    pub lists_submitted: usize,
    /// Lists collected (including empty ones).
    pub lists_collected: usize,
    /// Lists whose times could not be read (their zones are counted as dropped).
    pub lists_failed: usize,
    /// Lists dropped without being submitted (their events were released, nothing emitted).
    pub lists_discarded: usize,
    /// Events in submitted lists.
    pub events_submitted: usize,
    /// Zones delivered to the sinks.
    pub zones_emitted: usize,
    /// Lists moved later on their lane by the order guard because rounding would have made
    /// them overlap the list before (only possible when anchors were 16 ms or more apart:
    /// docs/design.md, section 8). 0 when the context is collected at least every
    /// `anchor_interval`.
    pub lists_shifted: usize,
    /// Batches that a sink failed to take (an error or a caught panic).
    pub sink_failures: usize,
    /// Host nanoseconds spent emitting: the part of collection that runs on one thread at a
    /// time (placing each list on the timeline, building its zones, the sinks, releasing
    /// slots). Reading times is not in it: concurrent `collect` callers share that.
    pub emitter_ns: u64,
}

impl Stats {
    /// `capacity - (free + owned + submitted)`: 0 when every slot is accounted for.
    pub fn unaccounted(&self) -> i64 {
        self.capacity as i64 - (self.free + self.owned + self.submitted) as i64
    }
}

/// The result of [`TracingContext::collect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collected {
    /// This call collected; see the report.
    Done(CollectReport),
    /// Another thread is collecting: this call returned at once and did nothing.
    Busy,
}

static NEXT_CONTEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// Everything a context's handles and lists share.
pub(crate) struct Inner<B: Backend> {
    pub(crate) backend: B,
    pub(crate) config: Config,
    pub(crate) pool: Pool<B::Event>,
    pub(crate) queue: SubmissionQueue,
    /// Lists a collector found incomplete, and lists whose times were read (collector.rs).
    pub(crate) retry: SubmissionQueue,
    pub(crate) read: SubmissionQueue,
    /// Each list's place in its home lane's order (lanes.rs), and the places given up by
    /// lists dropped unsubmitted, for the emitter to skip.
    pub(crate) lanes: LaneTable,
    pub(crate) void_places: Mutex<Vec<LaneSeq>>,
    pub(crate) counters: Counters,
    pub(crate) info: ContextInfo,
    /// The emitting collector's state: one emitter at a time.
    collector: Mutex<Collector<B>>,
    /// Collectors in their read phase now, and whether a flush keeps new ones out.
    readers: AtomicUsize,
    flushing: AtomicBool,
    /// Where a contended read phase starts re-probing lanes (collector.rs).
    pub(crate) probe_cursor: AtomicU32,
    /// The context's own collector thread (`Config::collect_every`).
    background: std::sync::Mutex<Option<Background>>,
    /// The run-time switches: bits 0-1 the verbosity, bit 2 set while disabled, bit 3 set
    /// while NVTX ranges are off. Read with one relaxed load per recording call (see
    /// `switches`).
    switches: AtomicU8,
    /// Lane names given by the user, not yet delivered to the sinks (the collector does).
    pub(crate) lane_names: Mutex<Vec<(crate::backend::Lane, String)>>,
    /// Live `TracingContext` handles (lists do not count): the last one flushes.
    handles: AtomicUsize,
    next_list_id: AtomicU64,
}

/// Bits of `Inner::switches` holding the verbosity.
const VERBOSITY_BITS: u8 = 3;
/// Bit of `Inner::switches` set while the context is disabled.
const DISABLED: u8 = 1 << 2;
/// Bit of `Inner::switches` set while NVTX ranges are off (feature `nvtx`).
#[cfg(feature = "nvtx")]
const NVTX_OFF: u8 = 1 << 3;

/// What the recording path reads of the switches, from one load.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Switches(u8);

impl Switches {
    /// The level zones are recorded at: `Off` while disabled.
    #[inline]
    pub(crate) fn level(self) -> Verbosity {
        if self.0 & DISABLED != 0 {
            return Verbosity::Off;
        }
        verbosity_of(self.0)
    }

    /// Whether a recorded zone also pushes an NVTX range.
    #[cfg(feature = "nvtx")]
    #[inline]
    pub(crate) fn nvtx(self) -> bool {
        self.0 & NVTX_OFF == 0
    }
}

/// The verbosity in the low bits of `Inner::switches`.
fn verbosity_of(switches: u8) -> Verbosity {
    match switches & VERBOSITY_BITS {
        0 => Verbosity::Off,
        1 => Verbosity::Coarse,
        _ => Verbosity::Fine,
    }
}

impl<B: Backend> Inner<B> {
    /// The switches now. Relaxed: a switch takes effect for calls that start after it is
    /// seen; nothing else is published through it.
    #[inline]
    pub(crate) fn switches(&self) -> Switches {
        Switches(self.switches.load(Ordering::Relaxed))
    }

    pub(crate) fn count_dropped(&self, zones: usize) {
        self.counters.dropped_zones.fetch_add(zones, Ordering::Relaxed);
    }

    pub(crate) fn count_discarded(&self) {
        self.counters.recorded.add(LISTS_DISCARDED, 1);
    }

    /// A list dropped unsubmitted gives up its place in its lane's order (the collector skips
    /// it). Not on the recording path: a short lock, taken once per such list.
    pub(crate) fn void_place(&self, place: LaneSeq) {
        lock(&self.void_places).push(place);
    }

    /// Owned -> Submitted: puts a list's events on the submission queue.
    pub(crate) fn enqueue(&self, used: Run, list_id: u64, home: Option<LaneSeq>) {
        self.counters.recorded.add(LISTS_SUBMITTED, 1);
        let Some(home) = home.filter(|_| used.len > 0) else {
            self.counters.lists_collected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Safety: the list's slots are still Owned by the submitting thread until the push
        // below publishes them to the collector.
        self.pool.slot(used.first).record.with_mut(|r| unsafe {
            (*r).list_last = used.last;
            (*r).list_len = used.len;
            (*r).list_id = list_id;
            (*r).list_seq = home;
            (*r).list_kind = ListKind::Submitted;
        });
        self.pool.mark_submitted(used.len);
        self.counters.recorded.add(EVENTS_SUBMITTED, i64::from(used.len));
        self.queue.push(&self.pool, used.first);
    }

    /// Whether some `TracingContext` handle is left (`CollectorThread`).
    #[cfg(not(gpu_event_pool_loom))]
    pub(crate) fn has_handles(&self) -> bool {
        self.handles.load(Ordering::Acquire) > 0
    }

    /// `TracingContext::collect`.
    pub(crate) fn collect(&self) -> Result<Collected, CollectError> {
        let inner = self;
        let outcome = inner.read(false);
        let mut report =
            CollectReport { read_lists: outcome.read, errors: outcome.errors, ..Default::default() };
        let mut error = outcome.error;
        let mut emitted = false;
        // Lists read by a caller that found the emitter busy are emitted by the emitter: after
        // unlocking, it looks at the read queue once more. SeqCst fences on both sides (a
        // reader's push then try_lock; the emitter's unlock then look) make sure one of the
        // two sees the other, so no read list is left behind until the next collect.
        loop {
            crate::sync::fence_seq_cst();
            let Some(mut collector) = try_lock(&inner.collector) else { break };
            if let Some(e) = collector.emit_phase(inner, false, false, &mut report) {
                error.get_or_insert(e);
            }
            report.pending_lists = collector.waiting_lists() + outcome.retried;
            emitted = true;
            drop(collector);
            crate::sync::fence_seq_cst();
            if inner.read.is_empty_now() && lock(&inner.void_places).is_empty() {
                break;
            }
        }
        match error {
            Some(error) => Err(CollectError { error, report }),
            None if emitted => Ok(Collected::Done(report)),
            None => Ok(Collected::Busy),
        }
    }

    /// Phase 1 of a collect, unless a flush is running (then nothing: the flush reads).
    fn read(&self, wait: bool) -> ReadOutcome {
        // Dekker with the flush: each side writes its own word, then reads the other's with a
        // read-modify-write (SeqCst), which reads the latest value: either this reader sees
        // the flush's flag, or the flush sees this reader's count and waits for it. (A plain
        // SeqCst load would do on hardware; loom models only the RMW form as SeqCst.)
        let others = self.readers.fetch_add(1, Ordering::SeqCst);
        let outcome = if self.flushing.fetch_or(false, Ordering::SeqCst) {
            ReadOutcome::default()
        } else {
            read_phase(self, wait, others > 0)
        };
        // Release: the lists this reader pushed are visible to a flush that sees the count.
        self.readers.fetch_sub(1, Ordering::Release);
        outcome
    }

    /// Waits for everything submitted so far and collects it all; `force` also emits lists
    /// whose earlier lane neighbour never came (only when no list can come any more).
    fn flush(&self, collector: &mut Collector<B>, force: bool) -> (CollectReport, Option<Error>) {
        let mut report = CollectReport::default();
        let mut error = None;
        // SeqCst RMWs: see `read`.
        self.flushing.swap(true, Ordering::SeqCst);
        // Also Acquire: pairs with the readers' Release decrement: their lists are on the
        // queues.
        while self.readers.fetch_add(0, Ordering::SeqCst) != 0 {
            spin_wait();
        }
        loop {
            let outcome = read_phase(self, true, false);
            report.read_lists += outcome.read;
            report.errors += outcome.errors;
            if let Some(e) = outcome.error {
                error.get_or_insert(e);
            }
            if let Some(e) = collector.emit_phase(self, true, force, &mut report) {
                error.get_or_insert(e);
            }
            if !outcome.took {
                break;
            }
        }
        self.flushing.store(false, Ordering::SeqCst);
        report.pending_lists = collector.waiting_lists();
        if let Some(e) = collector.flush_sinks() {
            report.errors += 1;
            error.get_or_insert(e);
        }
        (report, error)
    }
}

impl<B: Backend> Drop for Inner<B> {
    /// The very end (no handle and no list left): lists submitted after the last handle went,
    /// and lists held back for a neighbour that will never come now, are emitted.
    fn drop(&mut self) {
        let mut collector = lock(&self.collector);
        let left = !self.queue.is_empty()
            || !self.retry.is_empty()
            || !self.read.is_empty()
            || !lock(&self.void_places).is_empty();
        if left || collector.waiting_lists() > 0 {
            let _ = self.flush(&mut collector, true);
        }
    }
}

/// The context's own collector thread, and how to stop it.
struct Background {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

/// A GPU tracing context: hands out [`EventList`]s to recording threads, takes them back
/// with [`submit`](Self::submit), and turns them into zones with [`collect`](Self::collect).
///
/// Cheap to clone (`Send + Sync`); dropping the last handle flushes everything submitted
/// and, once every list is gone too, destroys the events.
///
/// ```
/// use gpu_event_pool::{location, sim::SimBackend, sink::memory::MemorySink, TracingContext};
/// let sim = SimBackend::manual();
/// let stream = sim.stream();
/// let zones = MemorySink::new();
/// let ctx = TracingContext::builder(sim.clone()).sink(zones.clone()).build().unwrap();
///
/// let mut list = ctx.list();
/// list.zone_begin(&stream, location!("dispatch")).unwrap();
/// sim.launch(&stream, 5_000); // a 5 µs kernel
/// list.zone_end(&stream).unwrap();
/// ctx.submit(list).unwrap();
///
/// ctx.collect().unwrap(); // not run yet on the manual clock: nothing collected
/// assert!(zones.zones().is_empty());
/// sim.advance(10_000);
/// ctx.collect().unwrap();
/// assert_eq!(zones.zones()[0].gpu_end_ns - zones.zones()[0].gpu_begin_ns, 5_000);
/// ```
pub struct TracingContext<B: Backend> {
    inner: Arc<Inner<B>>,
}

impl<B: Backend> std::fmt::Debug for TracingContext<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingContext")
            .field("id", &self.inner.info.id)
            .field("name", &self.inner.config.name)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Clone for TracingContext<B> {
    fn clone(&self) -> Self {
        self.inner.handles.fetch_add(1, Ordering::Relaxed);
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<B: Backend> Drop for TracingContext<B> {
    fn drop(&mut self) {
        // AcqRel: the last handle sees every other handle's submissions before flushing.
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            let background = crate::sync::lock_std(&self.inner.background).take();
            if let Some(Background { stop, thread }) = background {
                *crate::sync::lock_std(&stop.0) = true;
                stop.1.notify_all();
                let _ = thread.join();
            }
            // Nobody is left to report a failure to: it is counted in the stats.
            let _ = self.flush();
        }
    }
}

/// Builds a [`TracingContext`] with a configuration and sinks.
pub struct Builder<B: Backend> {
    backend: B,
    config: Config,
    /// What the setters set: applied over `config` when building, so a setter wins over a
    /// whole `config(..)` whichever comes first.
    set: Vec<Setter>,
    sinks: Vec<Box<dyn Sink>>,
}

/// One setter call of a [`Builder`], kept until `build`.
type Setter = Box<dyn FnOnce(&mut Config) + Send>;

impl<B: Backend> std::fmt::Debug for Builder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("setters", &self.set.len())
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl<B: Backend> Builder<B> {
    /// Replaces the whole configuration. Setters ([`name`](Self::name), [`capacity`](Self::capacity),
    /// ...) still apply over it, whether called before or after.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }
    /// Sets the context's name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set.push(Box::new(move |c| c.name = name));
        self
    }
    /// Sets the verbosity.
    pub fn verbosity(mut self, verbosity: Verbosity) -> Self {
        self.set.push(Box::new(move |c| c.verbosity = verbosity));
        self
    }
    /// Sets the initial and maximum capacities.
    pub fn capacity(mut self, initial: u32, max: u32) -> Self {
        self.set.push(Box::new(move |c| (c.initial_capacity, c.max_capacity) = (initial, max)));
        self
    }
    /// Sets how many slots a list reserves at once.
    pub fn batch(mut self, batch: u32) -> Self {
        self.set.push(Box::new(move |c| c.batch = batch));
        self
    }
    /// Sets how often the collector takes a new time anchor (default 5 ms; docs/design.md,
    /// section 8: anchors under 16 ms apart keep every time exact).
    pub fn anchor_interval(mut self, interval: Duration) -> Self {
        self.set.push(Box::new(move |c| c.anchor_interval = interval));
        self
    }
    /// Runs a collector thread owned by the context, calling `collect` every `period` until
    /// the last handle is dropped (which then stops it and flushes). Keeps anchors fresh
    /// and the pool drained without a loop in the application.
    pub fn collect_every(mut self, period: Duration) -> Self {
        self.set.push(Box::new(move |c| c.collect_every = Some(period)));
        self
    }
    /// Sets whether each zone also pushes an NVTX range on the recording thread (feature
    /// `nvtx`, default on; docs/nvtx.md).
    #[cfg(feature = "nvtx")]
    pub fn nvtx_ranges(mut self, on: bool) -> Self {
        self.set.push(Box::new(move |c| c.nvtx_ranges = on));
        self
    }
    /// Adds a sink.
    pub fn sink(mut self, sink: impl Sink + 'static) -> Self {
        self.sinks.push(Box::new(sink));
        self
    }
    /// Builds the context: creates the first page of events and the base event, records the
    /// base event, waits for it, and opens the sinks.
    pub fn build(self) -> Result<TracingContext<B>, Error> {
        let Builder { backend, mut config, set, sinks } = self;
        for setter in set {
            setter(&mut config);
        }
        #[allow(unused_mut)]
        let mut switches = config.verbosity as u8;
        #[cfg(feature = "nvtx")]
        if !config.nvtx_ranges {
            switches |= NVTX_OFF;
        }
        config.validate()?;
        let pool = Pool::new(config.initial_capacity, config.max_capacity, || backend.create_event())?;
        let id = NEXT_CONTEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (collector, info) = Collector::new(&backend, id, &config, sinks)?;
        let inner = Inner {
            backend,
            config,
            pool,
            queue: SubmissionQueue::new(),
            retry: SubmissionQueue::new(),
            read: SubmissionQueue::new(),
            lanes: LaneTable::new(),
            void_places: Mutex::new(Vec::new()),
            counters: Counters {
                recorded: Tally::new(),
                dropped_zones: AtomicUsize::new(0),
                lists_collected: AtomicUsize::new(0),
                lists_failed: AtomicUsize::new(0),
                zones_emitted: AtomicUsize::new(0),
                lists_shifted: AtomicUsize::new(0),
                sink_failures: AtomicUsize::new(0),
                emitter_ns: AtomicU64::new(0),
            },
            info,
            collector: Mutex::new(collector),
            readers: AtomicUsize::new(0),
            flushing: AtomicBool::new(false),
            probe_cursor: AtomicU32::new(0),
            background: std::sync::Mutex::new(None),
            lane_names: Mutex::new(Vec::new()),
            switches: AtomicU8::new(switches),
            handles: AtomicUsize::new(1),
            next_list_id: AtomicU64::new(1),
        };
        let ctx = TracingContext { inner: Arc::new(inner) };
        if let Some(period) = ctx.inner.config.collect_every {
            ctx.start_background(period)?;
        }
        Ok(ctx)
    }
}

impl<B: Backend> TracingContext<B> {
    /// A context with the default configuration and no sinks.
    pub fn new(backend: B) -> Result<Self, Error> {
        Self::builder(backend).build()
    }

    /// Starts building a context.
    pub fn builder(backend: B) -> Builder<B> {
        Builder { backend, config: Config::default(), set: Vec::new(), sinks: Vec::new() }
    }

    /// What sinks are told about this context.
    pub fn info(&self) -> &ContextInfo {
        &self.inner.info
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// Names `stream` for the sinks (a Tracy GPU lane, a Chrome track). The name reaches the
    /// sinks with the next collect, before any zone collected after it.
    pub fn name_stream(&self, stream: &B::Stream, name: impl Into<String>) {
        let lane = crate::backend::Lane::Stream(self.inner.backend.stream_key(stream));
        lock(&self.inner.lane_names).push((lane, name.into()));
    }

    /// Sets the verbosity from now on (zones begun after the call; a zone already open is still
    /// ended). Costs recording one relaxed atomic load per call, and never uses up a Tracy
    /// context the way rebuilding a context would.
    pub fn set_verbosity(&self, verbosity: Verbosity) {
        // Relaxed: see `Inner::switches`.
        let _ = self.inner.switches.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
            Some((s & !VERBOSITY_BITS) | verbosity as u8)
        });
    }

    /// The verbosity set now (by [`set_verbosity`](Self::set_verbosity) or the builder); it
    /// is kept while the context is disabled.
    pub fn verbosity(&self) -> Verbosity {
        verbosity_of(self.inner.switches.load(Ordering::Relaxed))
    }

    /// Turns recording off or back on. While off, a new zone records nothing and takes no
    /// slot (as a zone above the verbosity does); a zone begun before is still ended, so
    /// nesting stays balanced. Lists already submitted are still collected.
    pub fn set_enabled(&self, enabled: bool) {
        if enabled {
            self.inner.switches.fetch_and(!DISABLED, Ordering::Relaxed);
        } else {
            self.inner.switches.fetch_or(DISABLED, Ordering::Relaxed);
        }
    }

    /// Whether recording is on ([`set_enabled`](Self::set_enabled)).
    pub fn is_enabled(&self) -> bool {
        self.inner.switches.load(Ordering::Relaxed) & DISABLED == 0
    }

    /// Turns the NVTX ranges around zones on or off (feature `nvtx`). A zone begun while on
    /// pops its range when it ends, even if the switch is off by then. Like the other
    /// switches, it costs recording no more than the one relaxed load they share.
    #[cfg(feature = "nvtx")]
    pub fn set_nvtx_ranges(&self, on: bool) {
        if on {
            self.inner.switches.fetch_and(!NVTX_OFF, Ordering::Relaxed);
        } else {
            self.inner.switches.fetch_or(NVTX_OFF, Ordering::Relaxed);
        }
    }

    /// Whether zones push NVTX ranges ([`set_nvtx_ranges`](Self::set_nvtx_ranges)).
    #[cfg(feature = "nvtx")]
    pub fn nvtx_ranges(&self) -> bool {
        self.inner.switches().nvtx()
    }

    /// A new, empty list for one command buffer. Takes no slot until its first zone.
    #[must_use = "a list records nothing until zones are begun on it, and must be submitted"]
    pub fn list(&self) -> EventList<B> {
        let id = self.inner.next_list_id.fetch_add(1, Ordering::Relaxed);
        EventList::new(Arc::clone(&self.inner), id)
    }

    /// Submits a list: its zones will be collected once the GPU has run them. Lock-free (one
    /// CAS, plus one to return the list's unused reservation).
    ///
    /// Refuses, handing the list back, if it has open zones or belongs to another context.
    pub fn submit(&self, list: EventList<B>) -> Result<(), SubmitError<B>> {
        if !Arc::ptr_eq(list.context(), &self.inner) {
            return Err(SubmitError::WrongContext { list: Box::new(list) });
        }
        let open = list.open_zones();
        if open > 0 {
            return Err(SubmitError::OpenZones { open, list: Box::new(list) });
        }
        list.submit();
        Ok(())
    }

    /// Collects every submitted list whose events have all completed. Never blocks, neither
    /// on the GPU nor on another collector.
    ///
    /// Zones of one lane (stream) reach the sinks in that lane's GPU order (the order its
    /// lists began recording on it), whatever order the lists were submitted in; a lane whose
    /// work is done is collected even while another lane waits for the GPU.
    ///
    /// Any number of threads may call it at once: each reads the times of different lists
    /// (the driver calls overlap), and one of them hands the zones to the sinks; the others
    /// return [`Collected::Busy`] once their reading is done, and the lists they read are
    /// emitted by the current or the next call.
    ///
    /// On a failure the failing list's zones are dropped and counted, its slots released,
    /// the other lists still collected, and the error carries what the call did.
    pub fn collect(&self) -> Result<Collected, CollectError> {
        self.inner.collect()
    }

    /// Waits for every list submitted before this call to complete, collects them all, and
    /// flushes the sinks. Waits for a concurrent collector to finish first. A list whose
    /// lane has an earlier list still being recorded (not submitted) stays pending, in order,
    /// and is counted in `pending_lists`.
    pub fn flush(&self) -> Result<CollectReport, CollectError> {
        let mut collector = lock(&self.inner.collector);
        match self.inner.flush(&mut collector, false) {
            (report, None) => Ok(report),
            (report, Some(error)) => Err(CollectError { error, report }),
        }
    }

    /// The context, held weakly (`CollectorThread`).
    #[cfg(not(gpu_event_pool_loom))]
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner<B>> {
        Arc::downgrade(&self.inner)
    }

    /// Starts the context's own collector thread.
    fn start_background(&self, period: Duration) -> Result<(), Error> {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let inner = Arc::clone(&self.inner);
        let signal = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("{} collector", self.inner.config.name))
            .spawn(move || {
                let (stopped, wake) = &*signal;
                let mut stopped_now = crate::sync::lock_std(stopped);
                while !*stopped_now {
                    // Failures are counted in the stats; the thread goes on.
                    let _ = inner.collect();
                    stopped_now = match wake.wait_timeout(stopped_now, period) {
                        Ok((guard, _)) => guard,
                        Err(poisoned) => poisoned.into_inner().0,
                    };
                }
            })
            .map_err(|e| Error::Sink(std::io::Error::new(e.kind(), format!("collector thread: {e}"))))?;
        *crate::sync::lock_std(&self.inner.background) = Some(Background { stop, thread });
        Ok(())
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        let p = self.inner.pool.counts();
        let c = &self.inner.counters;
        let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let recorded = |field| c.recorded.sum(field).max(0) as usize;
        Stats {
            capacity: p.capacity,
            max_capacity: p.max_capacity,
            pages: p.pages,
            free: p.free,
            in_magazines: p.in_magazines,
            threads_with_magazines: p.threads_with_magazines,
            owned: p.owned,
            submitted: p.submitted,
            in_use: p.owned + p.submitted,
            high_water: p.high_water,
            grows: p.grows,
            dropped_zones: get(&c.dropped_zones),
            lists_submitted: recorded(LISTS_SUBMITTED),
            lists_collected: get(&c.lists_collected),
            lists_failed: get(&c.lists_failed),
            lists_discarded: recorded(LISTS_DISCARDED),
            events_submitted: recorded(EVENTS_SUBMITTED),
            zones_emitted: get(&c.zones_emitted),
            lists_shifted: get(&c.lists_shifted),
            sink_failures: get(&c.sink_failures),
            emitter_ns: c.emitter_ns.load(Ordering::Relaxed),
        }
    }

    /// Walks the freelist and every thread's magazine and counts the slots really free: an
    /// audit of [`Stats::free`], supported for tests and diagnostics. Exact only while no
    /// other thread records, submits or collects.
    pub fn free_slots_walked(&self) -> usize {
        self.inner.pool.free_slots_walked()
    }
}
