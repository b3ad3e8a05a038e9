//! Activity records: the second kind of source, for a GPU API that reports the work it ran
//! (CUPTI: every kernel, copy and memset, with its stream and its times) instead of timing
//! events the crate records. A backend's [`Timing`] says which kind it is; what an activity
//! source lost is counted in [`ActivityLosses`] (`Stats::activity`).
//!
//! The contract between such a backend and the collector (the source, its records and
//! launch links) is the crate's own, implemented by CUPTI and the simulation's
//! `SimActivities`; public only because [`Backend`](super::Backend) names it, and hidden.

// How it works (docs/design.md, section 13): a backend whose `Backend::TIMING` is
// `Timing::Activities` records no event for a zone: its lists take slots as every list does
// (they carry the list through submission), but a zone's GPU span is the span of the work
// launched inside it. What ties a launch to a zone is the launching thread: while a zone is
// open, it is on its thread's stack of open zones (`current_zone`), and the backend, called
// at the entry of each launching API call, links the call's correlation id to the innermost
// one (`Link`). The collector reads the backend's `ActivitySource`: the work records and the
// links, and makes zones of them in each stream's GPU order (`collect/activities/`).

use super::BackendError;
use crate::location::Location;
use crate::sync::lock_std;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

/// How a backend's zones are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Each zone begins and ends with an event the backend records on the stream; the
    /// collector reads their times (the simulation, CUDA events, Vulkan queries).
    Events,
    /// The backend records nothing; its activity source reports the work that ran, and a
    /// zone spans the work launched inside it (CUPTI).
    Activities,
}

/// A zone as a launch link names it: the context, the list and the position of the zone's
/// begin event in the list. Unique in the process while the list lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[doc(hidden)]
pub struct ZoneKey {
    pub(crate) context: u32,
    pub(crate) list: u64,
    pub(crate) position: u32,
}

/// What kind of work an [`Activity`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[doc(hidden)]
pub enum WorkKind {
    /// A kernel.
    Kernel,
    /// A memory copy.
    Copy,
    /// A memory set.
    Set,
}

/// One piece of work the GPU ran, as a source reports it, on the host clock.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct Activity {
    /// What it was.
    pub kind: WorkKind,
    /// Its zone's name (a kernel's function name) and arguments (a graph node's ids).
    pub location: Location,
    /// Its stream's lane key: the key [`Backend::stream_key`](super::Backend::stream_key)
    /// gives that stream.
    pub lane: u64,
    /// The id of the API call that launched it, as the source numbers calls (in the order they
    /// are made, wrapping at `u32::MAX`); a graph launch's nodes share their launch's id.
    pub correlation: u32,
    /// Begin and end on the backend's host clock
    /// ([`Backend::host_now_ns`](super::Backend::host_now_ns)), in nanoseconds.
    pub begin_ns: i64,
    /// End, on the same clock (`>= begin_ns`).
    pub end_ns: i64,
}

/// A launching API call tied to the zone open on its thread when it was made, or untied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub struct Link {
    /// The call's correlation id.
    pub correlation: u32,
    /// The innermost zone open on the launching thread at the call's entry; `None` unties
    /// the call (it failed: it launched nothing).
    pub zone: Option<ZoneKey>,
    /// The call this one was made inside, if any (a runtime API call's driver call): one
    /// launch with two ids, of which its records carry one.
    pub outer: Option<u32>,
}

/// What one [`ActivitySource::read`] hands the collector; the collector empties it.
#[derive(Debug, Default)]
#[doc(hidden)]
pub struct ActivityBatch {
    /// Work that completed, in the order the source read it.
    pub activities: Vec<Activity>,
    /// Links made before those records could be read: every record above has its link here or
    /// in an earlier batch.
    pub links: Vec<Link>,
}

/// What an activity source lost or could not time, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActivityLosses {
    /// Records the API dropped for want of buffer space, as it reports them (CUPTI counts them
    /// per buffer it completes: a lower bound).
    pub records_dropped: u64,
    /// Buffer requests the source answered with no buffer (every buffer was in the API's
    /// hands or waiting to be read): records were lost if above 0.
    pub buffers_refused: u64,
    /// Records delivered without their times (work not finished when the source was forced to
    /// hand everything over): not emitted.
    pub records_incomplete: u64,
    /// Launch links the source could not keep (its queue of links, bounded, was full: nobody
    /// collected): their work comes out alone, at depth 0.
    pub links_dropped: u64,
}

impl ActivityLosses {
    /// The sum of two sources' losses.
    pub fn plus(self, other: Self) -> Self {
        Self {
            records_dropped: self.records_dropped + other.records_dropped,
            buffers_refused: self.buffers_refused + other.buffers_refused,
            records_incomplete: self.records_incomplete + other.records_incomplete,
            links_dropped: self.links_dropped + other.links_dropped,
        }
    }
}

/// Why the collector reads an activity source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub enum ReadFor {
    /// A collect: what the source has at hand, read cheaply (records the source still
    /// buffers come in a later read).
    Collect,
    /// A flush: also the completed work the source still buffers (CUPTI: the buffers
    /// `cuptiActivityFlushAll` completes), so that work done before the flush is in it.
    Flush,
    /// The context is ending, nothing more will be read: everything, counting what has no
    /// times yet as incomplete.
    Final,
}

/// Where the collector reads activity records: the work that ran, and the links that tie
/// launches to zones.
///
/// Contract (docs/design.md, section 13, invariant L): `read` appends the records it reads
/// first, and only then the links the source holds, so that every record handed over has
/// its link in the same or an earlier batch (a launch's link is made at its call's entry,
/// before its work can complete). Records are on the backend's host clock.
#[doc(hidden)]
pub trait ActivitySource: Send + Sync {
    /// Appends to `out` the work completed since the last read, then the links made so far.
    /// Never blocks on the GPU. `why` says how far to go: see [`ReadFor`].
    fn read(&self, why: ReadFor, out: &mut ActivityBatch) -> Result<(), BackendError>;
    /// What was lost so far.
    fn losses(&self) -> ActivityLosses;
    /// How far a record's host time may be from the true host time at which the GPU did what
    /// it records, in nanoseconds: the source's own placement of the GPU's clock on the host's
    /// (every zone of the source carries it, `Zone::host_begin_bound_ns`). Default
    /// `u64::MAX`: the source cannot say (CUPTI places its records itself).
    fn host_time_bound(&self) -> u64 {
        u64::MAX
    }
    /// Called when a context is built on this source. A source whose records would be split
    /// between contexts (CUPTI's, which reads the process's records once) refuses a second
    /// one with an error that says so. Default: any number.
    fn attach(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// The event methods of a backend timed by activity records, inside its `impl Backend`: it
/// records no event (`type Event = ()`), `record` does nothing and never fails, and the
/// collector calls none of the others ([`Backend::TIMING`](super::Backend::TIMING)); a graph
/// zone is refused.
macro_rules! no_events {
    ($name:literal) => {
        fn create_event(&self) -> Result<(), $crate::backend::BackendError> {
            Ok(())
        }
        fn record(&self, _event: &(), _stream: &Self::Stream) -> Result<(), $crate::backend::BackendError> {
            Ok(())
        }
        fn add_graph_record_node(
            &self,
            _event: &(),
            _graph: &Self::Graph,
            _dependencies: &[Self::GraphNode],
        ) -> Result<Self::GraphNode, $crate::backend::BackendError> {
            Err($crate::backend::BackendError::new(
                concat!($name, "::add_graph_record_node"),
                "graph zones are not timed by activity records",
            ))
        }
        fn is_complete(&self, _event: &()) -> Result<bool, $crate::backend::BackendError> {
            Ok(true)
        }
        fn wait(&self, _event: &()) -> Result<(), $crate::backend::BackendError> {
            Ok(())
        }
        fn elapsed_ms(&self, _start: &(), _end: &()) -> Result<Option<f32>, $crate::backend::BackendError> {
            Ok(Some(0.0))
        }
    };
}
pub(crate) use no_events;

/// The zones open on one thread, outermost first (docs/design.md, section 13, invariant S):
/// pushed by that thread when a zone's begin is recorded, removed by key by whichever thread
/// ends the zone or drops its list. Plain `std` (loom never models it): its lock is held for
/// a push, a look or a removal, with no other call inside, and a thread's stack outlives the
/// thread in the lists that hold it, so the thread-local's drop makes no modelled step.
#[derive(Debug, Default)]
pub(crate) struct OpenZones(Mutex<Vec<ZoneKey>>);

crate::sync::const_thread_local! {
    /// This thread's open zones (made at its first zone).
    static OPEN: RefCell<Option<Arc<OpenZones>>> = RefCell::new(None);
}

/// The innermost zone open on the calling thread, in any context timed by activities: what a
/// source's launch hook links a launch to. `None` when none is open (or the thread is
/// exiting).
#[doc(hidden)]
pub fn current_zone() -> Option<ZoneKey> {
    OPEN.try_with(|open| {
        let open = open.try_borrow().ok()?;
        let innermost = lock_std(&open.as_ref()?.0).last().copied();
        innermost
    })
    .ok()
    .flatten()
}

/// The threads a list's zones were begun on (their stacks of open zones): a zone ends, and a
/// dropped list's zones leave, on the stack it was pushed on, whichever thread ends it.
/// Nearly always one thread; a list that moves between threads while it records has more.
#[derive(Debug, Default)]
pub(crate) struct ZoneThreads(Vec<Arc<OpenZones>>);

impl ZoneThreads {
    /// A zone's begin was recorded on this thread: launches made here are its work until it
    /// ends.
    pub(crate) fn open(&mut self, key: ZoneKey) {
        let here = OPEN.try_with(|open| {
            let mut open = open.try_borrow_mut().ok()?;
            Some(Arc::clone(open.get_or_insert_with(Arc::default)))
        });
        let Some(here) = here.ok().flatten() else { return };
        lock_std(&here.0).push(key);
        if !self.0.iter().any(|known| Arc::ptr_eq(known, &here)) {
            self.0.push(here);
        }
    }

    /// A zone ended: it leaves the stack it was pushed on wherever it is in it, so that a
    /// zone ended out of order, or on another thread, never leaves a thread on a closed zone.
    pub(crate) fn close(&self, key: ZoneKey) {
        for zones in &self.0 {
            let mut open = lock_std(&zones.0);
            if let Some(at) = open.iter().rposition(|&k| k == key) {
                open.remove(at);
                return;
            }
        }
    }

    /// Every zone of list `list` of context `context` leaves the stacks it was pushed on (the
    /// list is dropped with zones open).
    pub(crate) fn close_list(&mut self, context: u32, list: u64) {
        for zones in self.0.drain(..) {
            lock_std(&zones.0).retain(|k| (k.context, k.list) != (context, list));
        }
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    fn key(list: u64, position: u32) -> ZoneKey {
        ZoneKey { context: 9, list, position }
    }

    #[test]
    fn the_innermost_open_zone_is_current_and_zones_leave_by_key() {
        let (mut one, mut two) = (ZoneThreads::default(), ZoneThreads::default());
        assert_eq!(current_zone(), None);
        one.open(key(1, 0));
        two.open(key(2, 0));
        one.open(key(1, 1));
        assert_eq!(current_zone(), Some(key(1, 1)));
        // Ended out of order (lists interleaved on one thread): the others stay.
        two.close(key(2, 0));
        assert_eq!(current_zone(), Some(key(1, 1)));
        one.close(key(1, 1));
        assert_eq!(current_zone(), Some(key(1, 0)));
        // Not on any stack of the list: nothing happens.
        one.close(key(7, 7));
        one.close_list(9, 1);
        assert_eq!(current_zone(), None);
    }

    #[test]
    fn each_thread_has_its_own_open_zones() {
        let mut list = ZoneThreads::default();
        list.open(key(3, 0));
        let there = std::thread::spawn(current_zone).join().unwrap();
        assert_eq!(there, None);
        list.close(key(3, 0));
    }

    /// A zone begun on one thread and ended on another leaves the first thread's stack: the
    /// first thread's later launches are no longer its work (before, `close_zone` looked at
    /// the ending thread's stack only, and the zone stayed open on the first for good).
    #[test]
    fn a_zone_ended_on_another_thread_leaves_the_stack_it_was_begun_on() {
        let mut list = ZoneThreads::default();
        list.open(key(4, 0));
        let list = std::thread::spawn(move || {
            list.close(key(4, 0));
            list
        })
        .join()
        .unwrap();
        assert_eq!(current_zone(), None);
        let mut list = list;
        list.open(key(4, 1));
        std::thread::spawn(move || list.close_list(9, 4)).join().unwrap();
        assert_eq!(current_zone(), None, "a list dropped on another thread leaves this one's stack");
    }
}
