//! `EventList`: the zones of one command buffer, recorded by one thread.
//!
//! A list owns its slots outright (state Owned) and needs no lock to record a zone: the
//! shared operations are refilling its small reservation of slots from the thread's
//! magazine, whole segments at a time (a batch each), with one CAS on the freelist when the
//! magazine is empty (and, when the pool is empty, its growth), and, once per list, taking
//! and giving up its place on its lane (`shared/lanes/`: the lane's two locks). Its events are chained through the slots' links in recording order,
//! followed by its reservation (`slots/runs.rs`: the chain goes back to the pool whole, in
//! segments), and their records kept in the list's own buffer, in the same order, each
//! naming its slot (`shared/record.rs`):
//!
//! ```text
//!  runs:    first ─link─> ... ─link─> used_last ─link─> spare_first ─link─> ... ─> spare_last
//!           └── recorded events, in order ───────┘       └── reserved, not used yet ───┘
//!  records: [record of event 0, ..., record of event used - 1]
//!  stack:   [event of outermost open zone, ..., event of innermost open zone]
//! ```
//!
//! The recording steps themselves are in `list/step.rs`.
//!
//! Each event's record says whether it ends the innermost open zone, begins a new one, or
//! both (`zone_next`: K adjacent zones take K + 1 events, where the seed takes 2K). The
//! collector replays the records with a stack to rebuild the zones.
//!
//! A zone that begins can always end: `spare` always holds at least one slot per recorded
//! open zone (`reserved`), so a begin is recorded only if a slot for its end can be kept too;
//! when the pool is exhausted the inner zones are the ones dropped.

mod step;

use step::Step;

use super::error::RecordError;
use super::ENABLED;
use crate::backend::activity::{ZoneKey, ZoneThreads};
use crate::backend::{Backend, BackendError, Lane, Placement, Timing};
use crate::limits::MAX_DEPTH;
use crate::location::{Location, Verbosity};
use crate::shared::config::{BEGIN_SLOTS, MAX_SLOTS};
use crate::shared::lanes::{Holder, LaneSeq};
use crate::shared::record::EventRecord;
use crate::shared::Inner;
use crate::slots::freelist::NIL;
use crate::slots::runs::Runs;
use crate::sync::Arc;

/// A stack entry for a zone whose begin event was not recorded because of a failure.
const DROPPED: u32 = NIL;
/// A stack entry for a zone skipped by verbosity: it records nothing, and is not an error.
const SKIPPED: u32 = NIL - 1;

// No event's position in its list (below the pool's slot count) can be mistaken for a
// marker.
const _: () = assert!(MAX_SLOTS < SKIPPED && SKIPPED < DROPPED);

/// The backend calls that record an event, as a caught panic names them.
const RECORD: &str = "Backend::record_mark";
const ADD_NODE: &str = "Backend::add_graph_record_node";
/// The code of the error a graph step of a backend timed by activities makes, before it
/// becomes [`RecordError::Unsupported`].
const UNSUPPORTED: &str = "not supported by a backend timed by activities";

/// The timing events of one command buffer: zones recorded on streams or as graph nodes,
/// submitted as a whole with [`TracingContext::submit`](crate::TracingContext::submit).
///
/// A list has one owner and may move between threads (`Send`). Dropping a list that was not
/// submitted returns its slots to the pool and emits nothing.
///
/// Recording a zone takes no lock (but the stack of open zones of a backend timed by
/// activities, below): its event comes from the list's own reservation of slots, refilled
/// from the thread's cache of free slots and a lock-free freelist behind it. A recording
/// thread waits for another thread only when:
///
/// - the list records its first event on a stream: that event and the list's place in the
///   stream's order are one step under a lock of the stream, held for that backend call, so
///   a list starting on the same stream at the same moment waits for it (one list records on
///   a stream at a time, so this is not seen in correct use). A list starting on another
///   stream never waits for it, however many streams came and went; a stream the context's
///   table of streams does not hold (new, or idle while others came) first takes an entry,
///   under a lock it shares with the streams of its hash for a few instructions (or while a
///   larger table is allocated);
/// - the list first records, is submitted or is dropped: a second lock of its stream,
///   never held across a backend call, is taken for a few instructions (a drop also takes
///   its thread's lock of places given up, which the collector empties). A backend timed
///   by activities (CUPTI) takes neither lock: its lists take no place;
/// - on a backend timed by activities, a zone's begin and end take a lock of the stack of
///   zones open on the thread that began it (a few instructions), as does each launch there:
///   a zone ended on another thread waits only for those;
/// - a zone (or [`TracingContext::list`](crate::TracingContext::list), which reserves the
///   first zone's slots) needs slots while the pool is empty and another thread is growing
///   it: it waits until the page of events is made;
/// - a zone needs slots while the pool is at its maximum: it collects before it is dropped
///   (that collect calls the sinks and may wait for another thread's collect to finish its
///   last round).
///
/// ```
/// use gpu_event_pool::{location, sim::SimBackend, TracingContext};
/// let sim = SimBackend::manual();
/// let stream = sim.stream();
/// let ctx = TracingContext::new(sim.clone()).unwrap();
/// let mut list = ctx.list();
/// list.zone_begin(&stream, location!("command buffer")).unwrap();
/// sim.launch(&stream, 1_000);
/// list.zone_next(&stream, location!("second dispatch")).unwrap();
/// sim.launch(&stream, 2_000);
/// list.zone_end(&stream).unwrap();
/// ctx.submit(list).unwrap();
/// ```
#[must_use = "a list's zones are lost unless it is submitted"]
pub struct EventList<B: Backend> {
    ctx: Arc<Inner<B>>,
    id: u64,
    /// The slots of its recorded events (used), then its reservation (spare).
    runs: Runs,
    /// The records of the `used` events, in order: moved to the collector at submit.
    records: Vec<EventRecord>,
    /// Open zones, outermost first: the begin event's position in `records`, DROPPED or
    /// SKIPPED.
    stack: [u32; MAX_DEPTH],
    depth: usize,
    /// Zones opened beyond `MAX_DEPTH` (all dropped), closed before anything on the stack.
    overflow: usize,
    /// Open zones whose begin was recorded: each keeps a slot of `spare` for its end
    /// (`spare.len >= reserved` between calls).
    reserved: u32,
    /// The list's place in the order of its home lane (the lane of its first event), taken
    /// in one step with recording that event, or at submission ([`Placement`]).
    home: Option<LaneSeq>,
    /// The host time read just before the list's first event was recorded (placed at its
    /// first record: a lower bound of the clocks' offset at that event's GPU time).
    first_host_ns: Option<i64>,
    /// The frame current when the list was made (its zones carry it).
    frame: Option<u64>,
    /// On a backend timed by activities, the threads whose stacks of open zones hold this
    /// list's zones (empty otherwise).
    zone_threads: ZoneThreads,
    /// The NVTX range of each open zone on the stack (0: none).
    #[cfg(feature = "nvtx")]
    nvtx: [crate::nvtx::Token; MAX_DEPTH],
}

impl<B: Backend> std::fmt::Debug for EventList<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventList")
            .field("id", &self.id)
            .field("events", &self.runs.used())
            .field("reserved", &self.runs.spare())
            .field("open_zones", &self.open_zones())
            .finish()
    }
}

impl<B: Backend> EventList<B> {
    /// A new list. While the context records, it takes its record buffer and reserves its
    /// first zone's slots (a batch) now: a first `zone_begin` that did it sat in the
    /// application's dispatch path with two or three cache lines more to fetch, often just
    /// after the thread slept (measured on the H200). A reservation that fails here is tried again, and
    /// reported, by that begin.
    pub(crate) fn new(ctx: Arc<Inner<B>>, id: u64) -> Self {
        let frame = if ENABLED { ctx.current_frame() } else { None };
        let switches = ctx.switches();
        let mut list = Self {
            ctx,
            id,
            runs: Runs::EMPTY,
            records: Vec::new(),
            stack: [NIL; MAX_DEPTH],
            depth: 0,
            overflow: 0,
            reserved: 0,
            home: None,
            first_host_ns: None,
            frame,
            zone_threads: ZoneThreads::default(),
            #[cfg(feature = "nvtx")]
            nvtx: [0; MAX_DEPTH],
        };
        if ENABLED && !switches.closed() && switches.level() != Verbosity::Off {
            list.records = list.ctx.record_buffers().take_for_list();
            let _ = list.reserve(BEGIN_SLOTS);
        }
        list
    }

    /// The list's id, unique within its context (sinks see it on every zone batch).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The frame this list belongs to: the one current when it was made
    /// ([`TracingContext::frame`](crate::TracingContext::frame)), or the one given to
    /// [`set_frame`](Self::set_frame).
    pub fn frame(&self) -> Option<u64> {
        self.frame
    }

    /// Puts this list in frame `frame` (`None`: in no frame), whatever frame was current when
    /// it was made: for a runtime that records a frame's command buffers ahead, or finishes
    /// one frame's while the next has begun. Its zones carry it ([`Zone::frame`](crate::sink::Zone::frame)).
    /// Does nothing when recording is compiled out ([`ENABLED`](crate::ENABLED)).
    ///
    /// ```
    /// use gpu_event_pool::{location, sim::SimBackend, sink::memory::MemorySink, TracingContext};
    /// let sim = SimBackend::manual();
    /// let stream = sim.stream();
    /// let zones = MemorySink::new();
    /// let ctx = TracingContext::builder(sim.clone()).sink(zones.clone()).build()?;
    /// ctx.frame(8);
    /// let mut next = ctx.list();
    /// next.set_frame(Some(9)); // recorded now, for the frame after
    /// next.zone_begin(&stream, location!("prepare"))?;
    /// next.zone_end(&stream)?;
    /// ctx.submit(next)?;
    /// ctx.flush()?;
    /// assert_eq!(zones.zones()[0].frame, Some(9));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_frame(&mut self, frame: Option<u64>) {
        if ENABLED {
            self.frame = frame;
        }
    }

    /// How many events this list has recorded.
    pub fn event_count(&self) -> usize {
        self.runs.used() as usize
    }

    /// How many zones are open (begun and not yet ended), including skipped and dropped ones.
    pub fn open_zones(&self) -> usize {
        self.depth + self.overflow
    }

    /// Begins a zone on `stream`: records one event there, unless the location's level is
    /// above the context's verbosity (then nothing is recorded and `Ok` is returned). (A
    /// backend timed by activities records no event: the zone spans the work launched inside
    /// it on this thread.)
    ///
    /// On a backend that places lists at their first record (CUDA, the simulation), the
    /// list's first event also takes the list's place in its stream's order, under a lock of
    /// that stream held for the backend call: a list starting on the same stream at that
    /// moment waits for it (see [`EventList`] for every wait of the recording calls).
    ///
    /// On an error the zone is still opened (as dropped), so the matching
    /// [`zone_end`](Self::zone_end) keeps the nesting balanced.
    pub fn zone_begin(
        &mut self,
        stream: &B::Stream,
        location: impl Into<Location>,
    ) -> Result<(), RecordError> {
        if !ENABLED {
            return Ok(());
        }
        self.stream_step(stream, false, Some(location.into()))
    }

    /// Ends the innermost open zone with one event on `stream`.
    pub fn zone_end(&mut self, stream: &B::Stream) -> Result<(), RecordError> {
        if !ENABLED {
            return Ok(());
        }
        self.stream_step(stream, true, None)
    }

    /// Ends the innermost open zone and begins the next one with ONE event on `stream`.
    pub fn zone_next(
        &mut self,
        stream: &B::Stream,
        location: impl Into<Location>,
    ) -> Result<(), RecordError> {
        if !ENABLED {
            return Ok(());
        }
        self.stream_step(stream, true, Some(location.into()))
    }

    /// A step on a stream: one event, recorded with the backend's `record_mark`.
    #[inline(always)]
    fn stream_step(
        &mut self,
        stream: &B::Stream,
        end: bool,
        begin: Option<Location>,
    ) -> Result<(), RecordError> {
        let lane = Lane::Stream(self.ctx.backend().stream_key(stream));
        self.step(Step { lane, end, begin, call: RECORD }, |b, e, mark| b.record_mark(e, stream, mark))
            .map(drop)
    }

    /// Begins a zone in `graph`: adds an event-record node after `dependencies` and returns
    /// it (`None` when the zone is skipped by verbosity: depend on your own nodes then).
    /// A backend timed by activity records (CUPTI) times every node of a graph launch
    /// itself: there it returns [`RecordError::Unsupported`] (the zone opens as dropped).
    pub fn graph_zone_begin(
        &mut self,
        graph: &B::Graph,
        dependencies: &[B::GraphNode],
        location: impl Into<Location>,
    ) -> Result<Option<B::GraphNode>, RecordError> {
        if !ENABLED {
            return Ok(None);
        }
        self.graph_step(graph, dependencies, false, Some(location.into()), "graph_zone_begin")
    }

    /// Ends the innermost open zone with an event-record node in `graph` after
    /// `dependencies`, and returns the node (`None` if the zone records nothing).
    pub fn graph_zone_end(
        &mut self,
        graph: &B::Graph,
        dependencies: &[B::GraphNode],
    ) -> Result<Option<B::GraphNode>, RecordError> {
        if !ENABLED {
            return Ok(None);
        }
        self.graph_step(graph, dependencies, true, None, "graph_zone_end")
    }

    /// Ends the innermost open zone and begins the next with ONE event-record node in `graph`.
    pub fn graph_zone_next(
        &mut self,
        graph: &B::Graph,
        dependencies: &[B::GraphNode],
        location: impl Into<Location>,
    ) -> Result<Option<B::GraphNode>, RecordError> {
        if !ENABLED {
            return Ok(None);
        }
        self.graph_step(graph, dependencies, true, Some(location.into()), "graph_zone_next")
    }

    /// A graph step: one event-record node; refused on a backend timed by activities.
    fn graph_step(
        &mut self,
        graph: &B::Graph,
        dependencies: &[B::GraphNode],
        end: bool,
        begin: Option<Location>,
        call: &'static str,
    ) -> Result<Option<B::GraphNode>, RecordError> {
        let lane = Lane::Graph(self.ctx.backend().graph_key(graph));
        let refused = self.ctx.backend().timing() == Timing::Activities;
        self.step(Step { lane, end, begin, call: ADD_NODE }, |b, e, _| {
            if refused {
                return Err(BackendError::new(ADD_NODE, UNSUPPORTED));
            }
            b.add_graph_record_node(e, graph, dependencies)
        })
        .map_err(|e| self.unsupported(call, e))
    }

    /// A graph step refused on a backend timed by activities, as its typed error.
    fn unsupported(&self, call: &'static str, error: RecordError) -> RecordError {
        match error {
            RecordError::Backend(e) if e.code == UNSUPPORTED => {
                RecordError::Unsupported { call, backend: self.ctx.backend().name() }
            }
            other => other,
        }
    }

    /// The key of the zone whose begin is this list's event at `position`.
    pub(super) fn zone_key(&self, position: u32) -> ZoneKey {
        ZoneKey { context: self.ctx.info().id, list: self.id, position }
    }

    /// Hands the recorded events to the context's submission queue and the unused
    /// reservation back to the pool. The caller has checked context and open zones.
    pub(crate) fn submit(mut self) {
        if B::PLACEMENT == Placement::Submit && self.runs.used() > 0 {
            // The place is taken now, in submission order, under the lane's locks and held
            // until the queue has the list, as a first record's is.
            let (ctx, list_id, first) = (&self.ctx, self.id, &self.records[0]);
            // Read before the lane is locked, as a first record's start is: no backend call
            // is made under the lane's locks here.
            let started = ctx.backend().host_now_ns();
            let holder = || holder(list_id, first.lane, first.begins.as_ref(), started);
            let taken =
                ctx.lanes().record_first(first.lane, || Ok::<_, std::convert::Infallible>(()), holder);
            self.home = taken.ok().map(|(home, ())| home);
        }
        let pool = self.ctx.pool();
        let (used, spare) = self.runs.take_chains(pool);
        if let Some(spare) = spare {
            pool.release_owned(spare);
        }
        let mut records = std::mem::take(&mut self.records);
        if used.is_none() {
            // Nothing recorded: the buffer taken for it goes to this thread's next list.
            self.ctx.record_buffers().give_back_on_thread(std::mem::take(&mut records));
        }
        self.ctx.enqueue(used, records, self.id, self.home.take(), self.first_host_ns, self.frame);
    }

    /// Tells the collector that none of the list's work can have begun before host time
    /// `host_ns` (read before the queue submission that carries its commands: a lower bound of
    /// the clocks' offset at its earliest event), unless its first record already did.
    #[cfg(any(feature = "vulkan", feature = "wgpu"))]
    pub(crate) fn submitted_after(&mut self, host_ns: i64) {
        self.first_host_ns.get_or_insert(host_ns);
    }

    pub(crate) fn context(&self) -> &Arc<Inner<B>> {
        &self.ctx
    }

    /// An activity list dropped unsubmitted: handed to the collector as discarded (counted in
    /// `Stats::lists_discarded`), so that the work its zones launched is emitted alone
    /// without waiting for a list that never comes.
    fn discard(&mut self) {
        let pool = self.ctx.pool();
        let (used, spare) = self.runs.take_chains(pool);
        if let Some(spare) = spare {
            pool.release_owned(spare);
        }
        let records = std::mem::take(&mut self.records);
        self.ctx.enqueue_discarded(used, records, self.id, self.home.take());
    }
}

/// The holder of a place on `lane` taken by list `list_id`, whose first zone begins at
/// `first`.
fn holder(list_id: u64, lane: Lane, first: Option<&Location>, started_ns: i64) -> Holder {
    // The first event of a list always begins a zone (an end needs a begin recorded before
    // it), so the fallback is never used.
    let location = first.cloned().unwrap_or_else(|| crate::location!("list").into());
    Holder { list_id, lane, location, started_ns }
}

impl<B: Backend> Drop for EventList<B> {
    fn drop(&mut self) {
        // The NVTX ranges of zones left open, innermost first.
        #[cfg(feature = "nvtx")]
        for token in self.nvtx[..self.depth].iter().rev() {
            crate::nvtx::pop(*token);
        }
        if self.ctx.backend().timing() == Timing::Activities {
            // Its open zones leave this thread's stack (launches here are no longer theirs),
            // and the collector hears of it: its launches' work goes out alone, at once.
            self.zone_threads.close_list(self.ctx.info().id, self.id);
            if self.runs.used() > 0 {
                self.discard();
                return;
            }
        }
        // The records are in the list's buffer (the slots' records were never written):
        // emptied for a later list.
        self.ctx.record_buffers().give_back_on_thread(std::mem::take(&mut self.records));
        let pool = self.ctx.pool();
        let recorded = self.runs.used() > 0;
        // Its events need no `Backend::retire`: recorded into a command buffer that is never
        // submitted (a dropped list's must not be), they were never written.
        if let Some(chain) = self.runs.take_all(pool) {
            pool.release_owned(chain);
        }
        if recorded {
            self.ctx.count_discarded();
        }
        // Its place in its lane's order is given up, so that later lists of the lane do
        // not wait for it.
        if let Some(home) = self.home {
            self.ctx.void_place(home);
        }
    }
}

/// Why `submit` refused a list. The list is handed back unchanged.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError<B: Backend> {
    /// The list still has open zones: end them first.
    #[error("list has {open} open zone(s): end them before submitting")]
    OpenZones {
        /// How many zones are open.
        open: usize,
        /// The list, unchanged (boxed: it keeps the error small).
        list: Box<EventList<B>>,
    },
    /// The list belongs to another tracing context.
    #[error("list belongs to another tracing context")]
    WrongContext {
        /// The list, unchanged (boxed: it keeps the error small).
        list: Box<EventList<B>>,
    },
}

impl<B: Backend> SubmitError<B> {
    /// Takes the list back out of the error.
    pub fn into_list(self) -> EventList<B> {
        match self {
            Self::OpenZones { list, .. } | Self::WrongContext { list } => *list,
        }
    }
}

impl<B: Backend> std::fmt::Debug for SubmitError<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OpenZones { open, list } => {
                f.debug_struct("OpenZones").field("open", open).field("list", &list.id()).finish()
            }
            Self::WrongContext { list } => f.debug_struct("WrongContext").field("list", &list.id()).finish(),
        }
    }
}
