//! `EventList`: the zones of one command buffer, recorded by one thread.
//!
//! A list owns its slots outright (state Owned) and needs no synchronization to record: the
//! only shared operation is refilling its small reservation of slots from the freelist, one
//! CAS per batch. Its events are chained through the slots' links in recording order (the
//! chain goes back to the pool whole), and their records kept in the list's own buffer, in
//! the same order, each naming its slot (`shared/record.rs`):
//!
//! ```text
//!  used:    first ─link─> ... ─link─> last       (recorded events, in order)
//!  spare:   first ─link─> ... ─link─> last       (reserved, not used yet)
//!  records: [record of event 0, ..., record of event used.len - 1]
//!  stack:   [event of outermost open zone, ..., event of innermost open zone]
//! ```
//!
//! Each event's record says whether it ends the innermost open zone, begins a new one, or
//! both (`zone_next`: K adjacent zones take K + 1 events, where the seed takes 2K). The
//! collector replays the records with a stack to rebuild the zones.
//!
//! A zone that begins can always end: `spare` always holds at least one slot per recorded
//! open zone (`reserved`), so a begin is recorded only if a slot for its end can be kept too;
//! when the pool is exhausted the inner zones are the ones dropped.

use super::error::RecordError;
use crate::backend::{guarded, Backend, Lane, Mark, Placement};
use crate::launch::{thread_number, Launch};
use crate::location::Location;
use crate::shared::config::MAX_SLOTS;
use crate::shared::lanes::{Holder, LaneSeq};
use crate::shared::record::EventRecord;
use crate::shared::Inner;
use crate::slots::freelist::{Chain, NIL};
use crate::slots::pool::AcquireError;
use crate::sync::consts::MAX_DEPTH;
use crate::sync::{Arc, Ordering};

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

/// A run of slots owned by the list, linked first to last (empty when `len == 0`).
#[derive(Debug, Clone, Copy)]
struct Run {
    first: u32,
    last: u32,
    len: u32,
}

impl Run {
    const EMPTY: Run = Run { first: NIL, last: NIL, len: 0 };

    fn chain(self) -> Option<Chain> {
        (self.len > 0).then_some(Chain { first: self.first, last: self.last, len: self.len })
    }
}

/// The timing events of one command buffer: zones recorded on streams or as graph nodes,
/// submitted as a whole with [`TracingContext::submit`](crate::TracingContext::submit).
///
/// A list has one owner and may move between threads (`Send`). Dropping a list that was not
/// submitted returns its slots to the pool and emits nothing.
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
    used: Run,
    spare: Run,
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
    /// The NVTX range of each open zone on the stack (0: none).
    #[cfg(feature = "nvtx")]
    nvtx: [crate::nvtx::Token; MAX_DEPTH],
}

impl<B: Backend> std::fmt::Debug for EventList<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventList")
            .field("id", &self.id)
            .field("events", &self.used.len)
            .field("reserved", &self.spare.len)
            .field("open_zones", &self.open_zones())
            .finish()
    }
}

impl<B: Backend> EventList<B> {
    pub(crate) fn new(ctx: Arc<Inner<B>>, id: u64) -> Self {
        Self {
            ctx,
            id,
            used: Run::EMPTY,
            spare: Run::EMPTY,
            records: Vec::new(),
            stack: [NIL; MAX_DEPTH],
            depth: 0,
            overflow: 0,
            reserved: 0,
            home: None,
            #[cfg(feature = "nvtx")]
            nvtx: [0; MAX_DEPTH],
        }
    }

    /// The list's id, unique within its context (sinks see it on every zone batch).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// How many events this list has recorded.
    pub fn event_count(&self) -> usize {
        self.used.len as usize
    }

    /// How many zones are open (begun and not yet ended), including skipped and dropped ones.
    pub fn open_zones(&self) -> usize {
        self.depth + self.overflow
    }

    /// Begins a zone on `stream`: records one event there, unless the location's level is
    /// above the context's verbosity (then nothing is recorded and `Ok` is returned).
    ///
    /// On an error the zone is still opened (as dropped), so the matching
    /// [`zone_end`](Self::zone_end) keeps the nesting balanced.
    pub fn zone_begin(
        &mut self,
        stream: &B::Stream,
        location: impl Into<Location>,
    ) -> Result<(), RecordError> {
        let lane = Lane::Stream(self.ctx.backend.stream_key(stream));
        self.step(lane, false, Some(location.into()), RECORD, |b, e, mark| b.record_mark(e, stream, mark))
            .map(drop)
    }

    /// Ends the innermost open zone with one event on `stream`.
    pub fn zone_end(&mut self, stream: &B::Stream) -> Result<(), RecordError> {
        let lane = Lane::Stream(self.ctx.backend.stream_key(stream));
        self.step(lane, true, None, RECORD, |b, e, mark| b.record_mark(e, stream, mark)).map(drop)
    }

    /// Ends the innermost open zone and begins the next one with ONE event on `stream`.
    pub fn zone_next(
        &mut self,
        stream: &B::Stream,
        location: impl Into<Location>,
    ) -> Result<(), RecordError> {
        let lane = Lane::Stream(self.ctx.backend.stream_key(stream));
        self.step(lane, true, Some(location.into()), RECORD, |b, e, mark| b.record_mark(e, stream, mark))
            .map(drop)
    }

    /// Begins a zone in `graph`: adds an event-record node after `dependencies` and returns
    /// it (`None` when the zone is skipped by verbosity: depend on your own nodes then).
    pub fn graph_zone_begin(
        &mut self,
        graph: &B::Graph,
        dependencies: &[B::GraphNode],
        location: impl Into<Location>,
    ) -> Result<Option<B::GraphNode>, RecordError> {
        let lane = Lane::Graph(self.ctx.backend.graph_key(graph));
        self.step(lane, false, Some(location.into()), ADD_NODE, |b, e, _| {
            b.add_graph_record_node(e, graph, dependencies)
        })
    }

    /// Ends the innermost open zone with an event-record node in `graph` after
    /// `dependencies`, and returns the node (`None` if the zone records nothing).
    pub fn graph_zone_end(
        &mut self,
        graph: &B::Graph,
        dependencies: &[B::GraphNode],
    ) -> Result<Option<B::GraphNode>, RecordError> {
        let lane = Lane::Graph(self.ctx.backend.graph_key(graph));
        self.step(lane, true, None, ADD_NODE, |b, e, _| b.add_graph_record_node(e, graph, dependencies))
    }

    /// Ends the innermost open zone and begins the next with ONE event-record node in `graph`.
    pub fn graph_zone_next(
        &mut self,
        graph: &B::Graph,
        dependencies: &[B::GraphNode],
        location: impl Into<Location>,
    ) -> Result<Option<B::GraphNode>, RecordError> {
        let lane = Lane::Graph(self.ctx.backend.graph_key(graph));
        self.step(lane, true, Some(location.into()), ADD_NODE, |b, e, _| {
            b.add_graph_record_node(e, graph, dependencies)
        })
    }

    /// One recording step: optionally end the innermost zone, optionally begin a new one, with
    /// at most one event. Every zone that cannot be recorded is counted as dropped.
    fn step<R>(
        &mut self,
        lane: Lane,
        end: bool,
        begin: Option<Location>,
        call: &'static str,
        record: impl FnOnce(&B, &B::Event, Mark) -> Result<R, crate::BackendError>,
    ) -> Result<Option<R>, RecordError> {
        let ended = if !end {
            None
        } else if self.overflow > 0 {
            self.overflow -= 1;
            None
        } else if self.depth > 0 {
            self.depth -= 1;
            #[cfg(feature = "nvtx")]
            crate::nvtx::pop(std::mem::take(&mut self.nvtx[self.depth]));
            Some(self.stack[self.depth]).filter(|&s| s < SKIPPED)
        } else {
            return Err(RecordError::NoOpenZone);
        };
        if ended.is_some() {
            // The slot kept for this end is the one the event below takes.
            self.reserved -= 1;
        }

        let mut error = None;
        let mut opened = None;
        let mut begin_location = None;
        let mut launches = false;
        if let Some(location) = begin {
            let switches = self.ctx.switches();
            let wanted = switches.level().records(location.level());
            if self.depth == MAX_DEPTH {
                if wanted {
                    self.ctx.count_dropped(1);
                    error = Some(RecordError::TooDeep { max_depth: MAX_DEPTH });
                }
                self.overflow += 1;
            } else if !wanted {
                opened = Some(SKIPPED);
            } else {
                // The range opens before the begin event is recorded, and covers the zone's
                // work on this thread; it is pushed for a zone that fails to record too
                // (refused for want of a slot, or failing in the backend).
                #[cfg(feature = "nvtx")]
                if switches.nvtx() {
                    self.nvtx[self.depth] = crate::nvtx::push(location.name());
                }
                if let Err(e) = self.refuse_begin(switches.closed()) {
                    self.ctx.count_dropped(1);
                    error = Some(e);
                    opened = Some(DROPPED);
                } else {
                    begin_location = Some(location);
                    launches = switches.launches();
                }
            }
        }

        let mut output = None;
        if ended.is_some() || begin_location.is_some() {
            let begins = begin_location.is_some();
            match self.record_event(lane, ended.is_some(), begin_location, launches, call, record) {
                Ok((event, out)) => {
                    output = Some(out);
                    if begins {
                        opened = Some(event);
                        self.reserved += 1;
                    }
                }
                Err(e) => {
                    if let Some(begin) = ended {
                        self.records[begin as usize].begin_dropped = true;
                        self.ctx.count_dropped(1);
                    }
                    if begins {
                        self.ctx.count_dropped(1);
                        opened = Some(DROPPED);
                    }
                    error.get_or_insert(e);
                }
            }
        }
        if let Some(entry) = opened {
            self.stack[self.depth] = entry;
            self.depth += 1;
        }
        match error {
            Some(e) => Err(e),
            None => Ok(output),
        }
    }

    /// Why a zone that would be recorded cannot begin, if it cannot: the context is closed, or
    /// the reservation cannot hold a slot for its begin event and one kept for its end, besides
    /// those kept for the other open zones (a zone this step ends has given its kept slot
    /// back already: it becomes the begin event's).
    fn refuse_begin(&mut self, closed: bool) -> Result<(), RecordError> {
        if closed {
            return Err(RecordError::ContextClosed);
        }
        self.reserve(self.reserved + 2)
    }

    /// Takes a slot, records its event, appends it and its record to the list, and returns
    /// the event's position in the list. The list's first event also takes the list's place
    /// on its lane, in the same step.
    fn record_event<R>(
        &mut self,
        lane: Lane,
        ends: bool,
        begins: Option<Location>,
        launches: bool,
        call: &'static str,
        record: impl FnOnce(&B, &B::Event, Mark) -> Result<R, crate::BackendError>,
    ) -> Result<(u32, R), RecordError> {
        let index = self.take_slot()?;
        let ctx = &*self.ctx;
        let slot = ctx.pool.slot(index);
        let mark = match (ends, begins.is_some()) {
            (true, true) => Mark::EndAndBegin,
            (true, false) => Mark::End,
            _ => Mark::Begin,
        };
        // A backend that panics loses the event, not the slot: `guarded` makes the panic its
        // error. With launches on, the record call's host times are kept.
        let event = || {
            let begin = launches.then(|| ctx.backend.host_now_ns());
            let out = guarded(call, || record(&ctx.backend, &slot.event, mark))?;
            Ok((out, begin.map(|begin| Launch::new(begin, ctx.backend.host_now_ns(), thread_number()))))
        };
        let recorded = if self.used.len == 0 && B::PLACEMENT == Placement::FirstRecord {
            let list_id = self.id;
            let holder = || holder(list_id, lane, begins.as_ref(), ctx.backend.host_now_ns());
            ctx.lanes.record_first(lane, event, holder).map(|(home, out)| {
                self.home = Some(home);
                out
            })
        } else {
            event()
        };
        let (out, launch) = match recorded {
            Ok(recorded) => recorded,
            Err(e) => {
                self.untake_slot(index);
                return Err(RecordError::Backend(e));
            }
        };
        let launched = launch.is_some();
        if let Some(launch) = launch {
            // Safety: the slot is Owned by this list (taken from its reservation): no other
            // thread reads or writes its launch until the list is submitted or dropped.
            slot.launch.with_mut(|l| unsafe { *l = launch });
        }
        if self.used.len == 0 {
            self.records = self.ctx.record_buffers.take_for_list();
        }
        self.records.push(EventRecord { slot: index, lane, ends, begin_dropped: false, launched, begins });
        let position = self.used.len;
        if self.used.len == 0 {
            self.used.first = index;
        } else {
            // Relaxed: the list's links are published by the Release CAS of submit or release.
            self.ctx.pool.slot(self.used.last).link.store(index, Ordering::Relaxed);
        }
        self.used.last = index;
        self.used.len += 1;
        Ok((position, out))
    }

    /// Refills the reservation until it holds `n` slots (one batch or more at a time).
    fn reserve(&mut self, n: u32) -> Result<(), RecordError> {
        while self.spare.len < n {
            let ctx = &self.ctx;
            let want = ctx.config.batch.max(n - self.spare.len);
            let chain = ctx.pool.acquire(want, || ctx.backend.create_event()).map_err(|e| match e {
                AcquireError::Exhausted => RecordError::PoolExhausted { capacity: ctx.config.max_capacity },
                AcquireError::Backend(e) => RecordError::Backend(e),
            })?;
            if self.spare.len == 0 {
                self.spare.first = chain.first;
            } else {
                // Relaxed: the list's own slots; published by whichever Release CAS hands
                // them on.
                ctx.pool.slot(self.spare.last).link.store(chain.first, Ordering::Relaxed);
            }
            self.spare.last = chain.last;
            self.spare.len += chain.len;
        }
        Ok(())
    }

    fn take_slot(&mut self) -> Result<u32, RecordError> {
        self.reserve(1)?;
        let index = self.spare.first;
        self.spare.len -= 1;
        if self.spare.len > 0 {
            self.spare.first = self.ctx.pool.slot(index).link.load(Ordering::Relaxed);
        }
        Ok(index)
    }

    fn untake_slot(&mut self, index: u32) {
        if self.spare.len == 0 {
            self.spare.last = index;
        } else {
            self.ctx.pool.slot(index).link.store(self.spare.first, Ordering::Relaxed);
        }
        self.spare.first = index;
        self.spare.len += 1;
    }

    /// Hands the recorded events to the context's submission queue and the unused
    /// reservation back to the pool. The caller has checked context and open zones.
    pub(crate) fn submit(mut self) {
        if B::PLACEMENT == Placement::Submit && self.used.len > 0 {
            // The place is taken now, in submission order, under the lane's lock and held
            // until the queue has the list, as a first record's is.
            let (ctx, list_id, first) = (&self.ctx, self.id, &self.records[0]);
            let holder = || holder(list_id, first.lane, first.begins.as_ref(), ctx.backend.host_now_ns());
            let taken = ctx.lanes.record_first(first.lane, || Ok::<_, std::convert::Infallible>(()), holder);
            self.home = taken.ok().map(|(home, ())| home);
        }
        let spare = std::mem::replace(&mut self.spare, Run::EMPTY);
        let used = std::mem::replace(&mut self.used, Run::EMPTY);
        if let Some(spare) = spare.chain() {
            self.ctx.pool.release_owned(spare);
        }
        let records = std::mem::take(&mut self.records);
        self.ctx.enqueue(used.chain(), records, self.id, self.home.take());
    }

    pub(crate) fn context(&self) -> &Arc<Inner<B>> {
        &self.ctx
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
        // The records are in the list's buffer (the slots' records were never written):
        // emptied for a later list.
        self.ctx.record_buffers.give_back_on_thread(std::mem::take(&mut self.records));
        let pool = &self.ctx.pool;
        let chain = match (self.used.chain(), self.spare.chain()) {
            (Some(used), Some(spare)) => {
                pool.slot(used.last).link.store(spare.first, Ordering::Relaxed);
                Some(Chain { first: used.first, last: spare.last, len: used.len + spare.len })
            }
            (used, spare) => used.or(spare),
        };
        if let Some(chain) = chain {
            pool.release_owned(chain);
        }
        if self.used.len > 0 {
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
