//! Lists recorded on one stream at once, found by their GPU times when they are emitted.
//!
//! Events recorded on a stream run in the order they are recorded, so two lists recording on
//! one stream at the same time interleave their events on the GPU: the earlier list's zones
//! take in the later one's work, and the later list begins on the stream before the earlier
//! one has ended there. Lists recorded one after the other never do that on a stream, however
//! they are submitted: a list that is complete but not yet submitted holds nothing, so lists
//! of a stream may still be submitted in any order.
//!
//! The emitter gives each list of a stream, in place order, to [`ConcurrentLists::check`]
//! after the order guard (`keep_lane_order`) has moved lists that overlapped by rounding
//! alone: any overlap left on the list's home lane is real. Such a list is counted
//! (`Stats::concurrent_lists`) and, the first time on each stream, reported as
//! [`Error::ConcurrentLists`]. It costs the emitter a map lookup per list and the recording
//! path nothing. A late list (emitted after its lane moved on without it: the hold limit)
//! comes after lists with later places, and is not compared.
//!
//! Checked on streams of backends whose streams run events in recording order
//! ([`Placement::FirstRecord`]: CUDA, the simulation); not on graphs (their nodes carry their
//! own dependencies) nor on Vulkan queues, where commands without a barrier may run at once
//! and lists are ordered at submission.

use crate::backend::{Lane, Placement};
use crate::error::Error;
use crate::location::Location;
use crate::shared::lanes::LaneSeq;
use crate::shared::record::ListRecord;
use crate::sink::Zone;
use crate::sync::{AtomicUsize, Ordering};
use std::collections::{HashMap, HashSet};

/// A list's zones on its home lane: the first of them (its index, in begin order), their
/// earliest begin and their latest end. Gathered by the emitter in the pass that places the
/// list's zones on its anchor, for the order guard and for this check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HomeSpan {
    pub(super) first: usize,
    pub(super) begin: i64,
    pub(super) end: i64,
}

impl HomeSpan {
    /// The span of `zones` on `home` (`None` if none is there).
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(super) fn of(zones: &[Zone], home: Lane) -> Option<Self> {
        let mut span = None;
        for (index, zone) in zones.iter().enumerate() {
            Self::add(&mut span, index, zone, home);
        }
        span
    }

    /// `span` with `zone`, the `index`th of its list, counted if it is on `home`.
    #[inline]
    pub(super) fn add(span: &mut Option<Self>, index: usize, zone: &Zone, home: Lane) {
        if zone.lane != home {
            return;
        }
        match span {
            None => *span = Some(Self { first: index, begin: zone.gpu_begin_ns, end: zone.gpu_end_ns }),
            Some(s) => (s.begin, s.end) = (s.begin.min(zone.gpu_begin_ns), s.end.max(zone.gpu_end_ns)),
        }
    }
}

/// The emitter's check for lists recorded on one stream at once.
#[derive(Debug)]
pub(super) struct ConcurrentLists {
    /// Whether streams run events in recording order (`Placement::FirstRecord`).
    on: bool,
    /// Per stream, the latest end emitted there in place order, and the list it is in.
    last: HashMap<Lane, LastList>,
    /// Streams already reported.
    reported: HashSet<Lane>,
    /// Reports not yet handed to the collect.
    reports: Vec<Error>,
}

/// The list with the latest end emitted on a stream.
#[derive(Debug)]
struct LastList {
    /// Its place in the stream's order. (A stream moves to another entry of the lane table
    /// only once every list of it was emitted: a list on another entry is later.)
    place: LaneSeq,
    /// Its end on the stream, GPU nanoseconds.
    end: i64,
    list_id: u64,
    /// Its first zone on the stream.
    location: Location,
}

impl ConcurrentLists {
    /// The check for a backend placed as `placement` says.
    pub(super) fn new(placement: Placement) -> Self {
        Self {
            on: placement == Placement::FirstRecord,
            last: HashMap::new(),
            reported: HashSet::new(),
            reports: Vec::new(),
        }
    }

    /// `record`'s list, whose zones are `zones` (placed, in begin order; `on_home` those on
    /// its home lane, `HomeSpan::of`), is emitted: counts it in `counter` if it began on its
    /// home stream before the list emitted before it there ended, and reports the first on
    /// each stream.
    pub(super) fn check(
        &mut self,
        counter: &AtomicUsize,
        record: &ListRecord,
        zones: &[Zone],
        on_home: Option<HomeSpan>,
    ) {
        let home = record.lane;
        if !self.on || !matches!(home, Lane::Stream(_)) {
            return;
        }
        let Some(HomeSpan { first, begin, end }) = on_home else { return };
        let first = &zones[first];
        let place = record.list_seq;
        let latest = LastList { place, end, list_id: record.list_id, location: first.location.clone() };
        let Some(last) = self.last.get_mut(&home) else {
            self.last.insert(home, latest);
            return;
        };
        if place.entry == last.place.entry && place.seq <= last.place.seq {
            return;
        }
        if begin < last.end {
            // Relaxed: a statistic; nothing is published through it.
            counter.fetch_add(1, Ordering::Relaxed);
            if self.reported.insert(home) {
                self.reports.push(Error::ConcurrentLists {
                    lane: home,
                    list_id: record.list_id,
                    location: first.location.clone(),
                    earlier_list_id: last.list_id,
                    earlier_location: last.location.clone(),
                });
            }
        }
        if end >= last.end {
            *last = latest;
        } else {
            last.place = place;
        }
    }

    /// Forgets streams whose latest end is before `oldest` (GPU ns): a list emitted later
    /// begins after it, unless it was recorded beside a list long collected.
    pub(super) fn forget_before(&mut self, oldest: i64) {
        self.last.retain(|_, last| last.end >= oldest);
    }

    /// Streams remembered (a test's view of [`Self::forget_before`]).
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(super) fn remembered(&self) -> usize {
        self.last.len()
    }

    /// The reports made since the last call.
    pub(super) fn take_reports(&mut self) -> Vec<Error> {
        std::mem::take(&mut self.reports)
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    const STREAM: Lane = Lane::Stream(7);

    /// A list at `seq` on `lane` with one zone `begin..end` there.
    fn list(lane: Lane, seq: u64, begin: i64, end: i64) -> (ListRecord, Vec<Zone>) {
        on_entry(0, lane, seq, begin, end)
    }

    /// A list at `seq` of lane-table entry `entry`.
    fn on_entry(entry: u32, lane: Lane, seq: u64, begin: i64, end: i64) -> (ListRecord, Vec<Zone>) {
        let record = ListRecord {
            lane,
            list_id: seq + 100,
            list_seq: LaneSeq { entry, seq },
            ..ListRecord::default()
        };
        (record, vec![Zone::new(crate::location!("zone"), lane, 0, begin, end)])
    }

    fn check(lists: &mut ConcurrentLists, counter: &AtomicUsize, (record, zones): (ListRecord, Vec<Zone>)) {
        lists.check(counter, &record, &zones, HomeSpan::of(&zones, record.lane));
    }

    #[test]
    fn a_list_that_begins_before_the_one_before_it_ends_is_counted_and_reported_once() {
        let (mut lists, counter) = (ConcurrentLists::new(Placement::FirstRecord), AtomicUsize::new(0));
        check(&mut lists, &counter, list(STREAM, 0, 0, 100));
        check(&mut lists, &counter, list(STREAM, 1, 100, 200));
        assert_eq!(counter.load(Ordering::Relaxed), 0, "touching is not overlapping");
        check(&mut lists, &counter, list(STREAM, 2, 150, 300));
        check(&mut lists, &counter, list(STREAM, 3, 250, 260));
        assert_eq!(counter.load(Ordering::Relaxed), 2);
        let reports = lists.take_reports();
        assert_eq!(reports.len(), 1, "once per stream");
        let Error::ConcurrentLists { list_id, earlier_list_id, .. } = reports[0] else { panic!() };
        assert_eq!((list_id, earlier_list_id), (102, 101));
        check(&mut lists, &counter, list(STREAM, 4, 270, 280));
        assert_eq!(counter.load(Ordering::Relaxed), 3, "list 2's end (300) is still the latest");
    }

    #[test]
    fn late_lists_graphs_and_lanes_placed_at_submission_are_not_checked() {
        let (mut lists, counter) = (ConcurrentLists::new(Placement::FirstRecord), AtomicUsize::new(0));
        check(&mut lists, &counter, list(STREAM, 5, 100, 200));
        check(&mut lists, &counter, list(STREAM, 4, 0, 150));
        check(&mut lists, &counter, list(Lane::Graph(1), 0, 0, 100));
        check(&mut lists, &counter, list(Lane::Graph(1), 1, 50, 100));
        let mut vulkan = ConcurrentLists::new(Placement::Submit);
        check(&mut vulkan, &counter, list(STREAM, 0, 0, 100));
        check(&mut vulkan, &counter, list(STREAM, 1, 50, 100));
        assert_eq!(counter.load(Ordering::Relaxed), 0);
        assert!(lists.take_reports().is_empty() && vulkan.take_reports().is_empty());
    }

    /// A stream whose table entry went to another lane (every list of it emitted) goes on on
    /// another entry, whose places may be lower: its next list is still later.
    #[test]
    fn a_stream_on_a_new_entry_of_the_lane_table_is_still_checked() {
        let (mut lists, counter) = (ConcurrentLists::new(Placement::FirstRecord), AtomicUsize::new(0));
        check(&mut lists, &counter, on_entry(3, STREAM, 40, 0, 100));
        check(&mut lists, &counter, on_entry(9, STREAM, 2, 50, 150));
        assert_eq!(counter.load(Ordering::Relaxed), 1, "compared although its place is lower");
        check(&mut lists, &counter, on_entry(9, STREAM, 3, 150, 200));
        assert_eq!(counter.load(Ordering::Relaxed), 1);
    }
}
