//! `TracingContext`: the pool, the submission queue, the collector, calibration, verbosity,
//! sinks and statistics of one GPU timeline.

use crate::backend::Backend;
use crate::collector::{CollectReport, Collector};
use crate::error::{ConfigError, Error, SubmitError};
use crate::list::{EventList, MAX_SLOTS};
use crate::location::Verbosity;
use crate::pool::Pool;
use crate::sink::{ContextInfo, Sink};
use crate::submit::SubmissionQueue;
use crate::sync::{lock, try_lock, Arc, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::tally::Tally;
use std::time::Duration;

/// How a context is built. Every field has a sensible default ([`Config::default`]).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The collector takes a new time anchor when the current one is older than this.
    /// Anchors closer than about 8 ms keep every timestamp exact to the nanosecond that
    /// `f32` milliseconds can carry. Default 5 ms.
    pub anchor_interval: Duration,
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
        let rounded = initial.checked_next_power_of_two().ok_or(ConfigError::TooLarge {
            initial,
            max,
            limit: u64::from(MAX_SLOTS),
        })?;
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
}

const LISTS_SUBMITTED: usize = 0;
const EVENTS_SUBMITTED: usize = 1;
const LISTS_DISCARDED: usize = 2;

/// A snapshot of a context's statistics. Each counter is read on its own, so a snapshot
/// taken while other threads record is approximate; when they are quiet it is exact, and
/// `free + owned + submitted == capacity` ([`Stats::unaccounted`] is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub(crate) counters: Counters,
    pub(crate) info: ContextInfo,
    collector: Mutex<Collector<B>>,
    /// Lane names given by the user, not yet delivered to the sinks (the collector does).
    pub(crate) lane_names: Mutex<Vec<(crate::backend::Lane, String)>>,
    /// Live `TracingContext` handles (lists do not count): the last one flushes.
    handles: AtomicUsize,
    next_list_id: AtomicU64,
}

impl<B: Backend> Inner<B> {
    pub(crate) fn count_dropped(&self, zones: usize) {
        self.counters.dropped_zones.fetch_add(zones, Ordering::Relaxed);
    }

    pub(crate) fn count_discarded(&self) {
        self.counters.recorded.add(LISTS_DISCARDED, 1);
    }

    /// Owned -> Submitted: puts a list's events on the submission queue.
    pub(crate) fn enqueue(&self, first: u32, last: u32, len: u32, list_id: u64) {
        self.counters.recorded.add(LISTS_SUBMITTED, 1);
        if len == 0 {
            self.counters.lists_collected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Safety: the list's slots are still Owned by the submitting thread until the push
        // below publishes them to the collector.
        self.pool.slot(first).record.with_mut(|r| unsafe {
            (*r).list_last = last;
            (*r).list_len = len;
            (*r).list_id = list_id;
        });
        self.pool.mark_submitted(len);
        self.counters.recorded.add(EVENTS_SUBMITTED, i64::from(len));
        self.queue.push(&self.pool, first);
    }
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
            .field("stats", &self.stats())
            .finish()
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
            // Nobody is left to report a failure to: it is counted in the stats.
            let _ = self.flush();
        }
    }
}

/// Builds a [`TracingContext`] with a configuration and sinks.
pub struct Builder<B: Backend> {
    backend: B,
    config: Config,
    sinks: Vec<Box<dyn Sink>>,
}

impl<B: Backend> std::fmt::Debug for Builder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder").field("config", &self.config).field("sinks", &self.sinks.len()).finish()
    }
}

impl<B: Backend> Builder<B> {
    /// Replaces the whole configuration.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }
    /// Sets the context's name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.config.name = name.into();
        self
    }
    /// Sets the verbosity.
    pub fn verbosity(mut self, verbosity: Verbosity) -> Self {
        self.config.verbosity = verbosity;
        self
    }
    /// Sets the initial and maximum capacities.
    pub fn capacity(mut self, initial: u32, max: u32) -> Self {
        self.config.initial_capacity = initial;
        self.config.max_capacity = max;
        self
    }
    /// Sets how many slots a list reserves at once.
    pub fn batch(mut self, batch: u32) -> Self {
        self.config.batch = batch;
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
        let Builder { backend, config, sinks } = self;
        config.validate()?;
        let pool = Pool::new(config.initial_capacity, config.max_capacity, || backend.create_event())?;
        let id = NEXT_CONTEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (collector, info) = Collector::new(&backend, id, &config, sinks)?;
        let inner = Inner {
            backend,
            config,
            pool,
            queue: SubmissionQueue::new(),
            counters: Counters {
                recorded: Tally::new(),
                dropped_zones: AtomicUsize::new(0),
                lists_collected: AtomicUsize::new(0),
                lists_failed: AtomicUsize::new(0),
                zones_emitted: AtomicUsize::new(0),
            },
            info,
            collector: Mutex::new(collector),
            lane_names: Mutex::new(Vec::new()),
            handles: AtomicUsize::new(1),
            next_list_id: AtomicU64::new(1),
        };
        Ok(TracingContext { inner: Arc::new(inner) })
    }
}

impl<B: Backend> TracingContext<B> {
    /// A context with the default configuration and no sinks.
    pub fn new(backend: B) -> Result<Self, Error> {
        Self::builder(backend).build()
    }

    /// Starts building a context.
    pub fn builder(backend: B) -> Builder<B> {
        Builder { backend, config: Config::default(), sinks: Vec::new() }
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

    /// A new, empty list for one command buffer. Takes no slot until its first zone.
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

    /// Collects every submitted list whose events have all completed, in submission order,
    /// and stops at the first that has not (it and later lists wait for the next call).
    /// Never blocks: if another thread is collecting, returns [`Collected::Busy`] at once.
    ///
    /// On a backend error the failing list's zones are dropped and counted, its slots are
    /// released, the lists after it are still collected, and the first error is returned.
    pub fn collect(&self) -> Result<Collected, Error> {
        match try_lock(&self.inner.collector) {
            Some(mut collector) => collector.run(&self.inner, false).map(Collected::Done),
            None => Ok(Collected::Busy),
        }
    }

    /// Waits for every list submitted before this call to complete, collects them all, and
    /// flushes the sinks. Waits for a concurrent collector to finish first.
    pub fn flush(&self) -> Result<CollectReport, Error> {
        let mut collector = lock(&self.inner.collector);
        let report = collector.run(&self.inner, true);
        let flushed = collector.flush_sinks();
        let report = report?;
        flushed?;
        Ok(report)
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
        }
    }

    /// Walks the freelist and every thread's magazine and counts the slots really free.
    /// Exact only while no other thread records, submits or collects; use it to check
    /// [`Stats::free`] in tests.
    pub fn free_slots_walked(&self) -> usize {
        self.inner.pool.free_slots_walked()
    }
}
