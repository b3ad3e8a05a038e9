//! The tracks of one context's lanes: each lane a track, and more rows where zones of a lane
//! overlap without nesting (as the Chrome sink does: a viewer nests a track's slices by time
//! alone). Each row is a packet sequence of its own, so its events are written in time
//! order: a zone's begin once every zone it does not nest in has ended there, its end when a
//! later begin passes it or when its batch is done. Of `perfetto/` it imports `sequence.rs`
//! and `output.rs`.
//!
//! # Which lanes it keeps
//!
//! When a batch is done, every zone begun has its end written: between batches a lane holds
//! nothing a later zone needs but its sequences' state (the names interned, the last
//! timestamp) and where its rows' zones end. Its rows' track uuids are made from the
//! context's track, the lane and the row ([`row_uuid`]), so a lane forgotten and met again
//! writes onto the same tracks, on new sequences. The sink keeps the lanes whose last zone
//! ended within [`IDLE_NS`] of the newest zone it was handed and forgets the others, between
//! two batches (never while a zone of theirs waits for its end), at most once per `IDLE_NS`
//! of the zones' time: its memory is that of the lanes used in the last second of the run,
//! whatever the number of lanes it meets over the run.

use super::output::{TraceOutput, Track, LANE_TRACK};
use super::sequence::Sequence;
use crate::backend::Lane;
use rustc_hash::FxHashMap;

/// How long a lane is kept after its last zone ended, in the zones' host time. A lane kept
/// costs about 1.2 KiB of memory (its rows' sequences: interned ids, the recent-location
/// cache); one forgotten and met again costs its sequence's first packet and its names
/// interned again, 100 to 200 bytes of trace. Forgetting the lanes idle for a second adds at
/// most about 200 bytes a second for a lane that comes back less often than that, and keeps
/// in memory only the lanes used in the last second.
pub(super) const IDLE_NS: i64 = 1_000_000_000;

/// A zone to place: its begin and end (`CLOCK_MONOTONIC` ns), its list, its index and its
/// parent's in that list's batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placing {
    pub(super) begin: i64,
    pub(super) end: i64,
    pub(super) list: u64,
    pub(super) index: usize,
    pub(super) parent: Option<usize>,
}

/// A zone on a row, begun and not yet passed by a later begin.
#[derive(Debug, Clone, Copy)]
struct Open {
    end: i64,
    list: u64,
    index: usize,
    /// Whether its end event is written.
    ended: bool,
}

/// One row: a track, and the sequence its events are written on.
#[derive(Debug)]
pub(super) struct Row {
    pub(super) sequence: Sequence,
    open: Vec<Open>,
}

impl Row {
    /// Writes the end of every open zone that ends by `at`, innermost first, and forgets
    /// them.
    #[inline]
    fn close_until(&mut self, out: &mut Vec<u8>, at: i64) {
        while let Some(&top) = self.open.last().filter(|top| top.end <= at) {
            self.open.pop();
            if !top.ended {
                self.sequence.end(out, top.end);
            }
        }
    }

    /// Whether `zone` nests truly here: every zone still open at its begin is one of its
    /// ancestors (those ended by then are closed first, their ends written).
    #[inline]
    fn fits(&mut self, out: &mut Vec<u8>, zone: Placing) -> bool {
        self.close_until(out, zone.begin);
        match (self.open.last(), zone.parent) {
            (None, _) => true,
            (Some(open), Some(parent)) => {
                open.list == zone.list && open.index == parent && zone.end <= open.end
            }
            (Some(_), None) => false,
        }
    }

    /// Writes the end of every zone still open: the batch is done, and a later zone lands on
    /// this row only once they have all ended.
    fn end_batch(&mut self, out: &mut Vec<u8>) {
        for open in self.open.iter_mut().rev().filter(|open| !open.ended) {
            open.ended = true;
            self.sequence.end(out, open.end);
        }
    }
}

/// One lane's rows.
#[derive(Debug)]
struct LaneRows {
    lane: Lane,
    rows: Vec<Row>,
    /// The latest end of its zones.
    last_end: i64,
}

/// The rows of every lane of one context that it keeps (module docs).
#[derive(Debug, Default)]
pub(super) struct Rows {
    lanes: Vec<LaneRows>,
    /// Where each lane is in `lanes`.
    index: FxHashMap<Lane, usize>,
    /// The lane used last (a batch's zones are mostly on its list's lane).
    last: usize,
    /// The names given with `name_stream`, kept for a lane forgotten and met again.
    names: FxHashMap<Lane, String>,
    /// The latest end of any zone placed.
    newest_end: i64,
    /// `newest_end` when idle lanes were last forgotten.
    swept_at: i64,
    /// Events written out of time order by the rows of lanes forgotten.
    forgotten_out_of_order: u64,
    /// Rows made so far: the next one's rank.
    count: i32,
    /// Rows touched by the batch being written: (lane's place in `lanes`, row). Places are
    /// stable during a batch: lanes are forgotten only between batches.
    touched: Vec<(usize, usize)>,
    /// Whether every zone's begin names its source location, not only its location's first
    /// on a row (`PerfettoSink::with_source_locations`).
    pub(super) every_location: bool,
}

/// A row's name: the lane's, and which row of it.
fn row_name(name: Option<&str>, lane: Lane, row: usize) -> String {
    let name = match (name, lane) {
        (Some(name), _) => name.to_owned(),
        (None, Lane::Stream(key)) => format!("stream {key:#x}"),
        (None, Lane::Graph(key)) => format!("graph {key:#x}"),
    };
    if row == 0 {
        name
    } else {
        format!("{name} (overlapping {row})")
    }
}

/// The uuid of row `row` of `lane` under the context's track `parent`: the same whenever the
/// lane is met, in the uuids' lane range ([`LANE_TRACK`]: bit 62 set, 62 bits of a hash;
/// two of a trace's tracks share one with odds of about n² / 2⁶³).
fn row_uuid(parent: u64, lane: Lane, row: usize) -> u64 {
    // SplitMix64's finalizer (Steele, Lea and Flood 2014) over each word in turn.
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let (kind, key) = match lane {
        Lane::Stream(key) => (1, key),
        Lane::Graph(key) => (2, key),
    };
    let hash = [kind, key, row as u64].into_iter().fold(mix(parent), |h, word| mix(h ^ word));
    LANE_TRACK | (hash & (LANE_TRACK - 1))
}

impl Rows {
    /// Starts a batch; between two batches, forgets the lanes idle for [`IDLE_NS`] (at most
    /// once per `IDLE_NS` of the zones' time).
    pub(super) fn begin_batch(&mut self) {
        if self.newest_end.saturating_sub(self.swept_at) >= IDLE_NS {
            self.forget_idle();
        }
        self.touched.clear();
    }

    /// The row `zone` goes to on `lane` (made, and its track described under `parent`, if
    /// none fits): the first where it nests truly. The ends it passes are written.
    #[inline]
    pub(super) fn place(
        &mut self,
        out: &mut TraceOutput,
        parent: u64,
        lane: Lane,
        zone: Placing,
    ) -> &mut Row {
        let at = self.lane(lane);
        let lane_rows = &mut self.lanes[at];
        lane_rows.last_end = lane_rows.last_end.max(zone.end);
        self.newest_end = self.newest_end.max(zone.end);
        let found = lane_rows.rows.iter_mut().position(|row| row.fits(out.staged(), zone));
        let index = match found {
            Some(index) => index,
            None => {
                let index = lane_rows.rows.len();
                let uuid = row_uuid(parent, lane, index);
                let sequence = Sequence::new(out.sequence_id(), uuid, self.every_location);
                self.count += 1;
                let name = row_name(self.names.get(&lane).map(String::as_str), lane, index);
                let track =
                    Track { parent: Some(parent), rank: Some(self.count), ..Track::named(uuid, &name) };
                out.describe(track, false);
                lane_rows.rows.push(Row { sequence, open: Vec::new() });
                index
            }
        };
        if !self.touched.contains(&(at, index)) {
            self.touched.push((at, index));
        }
        let row = &mut lane_rows.rows[index];
        row.open.push(Open { end: zone.end, list: zone.list, index: zone.index, ended: false });
        row
    }

    /// Ends the batch: the ends of its zones still open are written.
    pub(super) fn end_batch(&mut self, out: &mut Vec<u8>) {
        for &(lane, index) in &self.touched {
            self.lanes[lane].rows[index].end_batch(out);
        }
    }

    /// Names `lane`'s tracks (describing again those already described; a forgotten lane's
    /// when it is met again).
    pub(super) fn name(&mut self, out: &mut TraceOutput, parent: u64, lane: Lane, name: &str) {
        self.names.insert(lane, name.to_owned());
        let rows = self.index.get(&lane).map_or(0, |&at| self.lanes[at].rows.len());
        for row in 0..rows {
            let name = row_name(Some(name), lane, row);
            out.describe(
                Track { parent: Some(parent), ..Track::named(row_uuid(parent, lane, row), &name) },
                true,
            );
        }
    }

    /// Events written out of time order, over every row.
    pub(super) fn out_of_order(&self) -> u64 {
        let kept: u64 =
            self.lanes.iter().flat_map(|lane| &lane.rows).map(|row| row.sequence.out_of_order()).sum();
        kept + self.forgotten_out_of_order
    }

    /// Where `lane` is in `lanes` (added if new).
    #[inline]
    fn lane(&mut self, lane: Lane) -> usize {
        if self.lanes.get(self.last).is_some_and(|known| known.lane == lane) {
            return self.last;
        }
        let at = match self.index.get(&lane) {
            Some(&at) => at,
            None => {
                self.lanes.push(LaneRows { lane, rows: Vec::new(), last_end: i64::MIN });
                self.index.insert(lane, self.lanes.len() - 1);
                self.lanes.len() - 1
            }
        };
        self.last = at;
        at
    }

    /// Forgets the lanes whose last zone ended more than [`IDLE_NS`] before the newest
    /// (between batches: every zone begun has its end written).
    fn forget_idle(&mut self) {
        let since = self.newest_end.saturating_sub(IDLE_NS);
        let out_of_order = &mut self.forgotten_out_of_order;
        self.lanes.retain(|lane| {
            let kept = lane.last_end >= since;
            if !kept {
                *out_of_order += lane.rows.iter().map(|row| row.sequence.out_of_order()).sum::<u64>();
            }
            kept
        });
        self.index = self.lanes.iter().enumerate().map(|(at, lane)| (lane.lane, at)).collect();
        self.last = 0;
        self.swept_at = self.newest_end;
    }
}

#[cfg(test)]
mod tests {
    use super::{row_name, row_uuid, Placing, Rows, IDLE_NS, LANE_TRACK};
    use crate::backend::Lane;
    use crate::sink::perfetto::event::field;
    use crate::sink::perfetto::output::{lock, TraceOutput};
    use crate::sink::perfetto::wire::tests::{fields, Field};
    use crate::sink::perfetto::PerfettoTrace;

    /// A track as a `TrackDescriptor` describes it.
    #[derive(Debug)]
    struct Described {
        uuid: u64,
        parent: Option<u64>,
        name: String,
        rank: Option<i32>,
    }

    /// The tracks described in `packets` (whole `Trace.packet` fields), in order.
    fn described(packets: &[u8]) -> Vec<Described> {
        let mut tracks = Vec::new();
        for (_, packet) in fields(packets).into_iter().filter(|&(number, _)| number == field::PACKET) {
            let Field::Bytes(packet) = packet else { panic!("a packet is a message") };
            for (number, track) in fields(packet) {
                let (field::TRACK_DESCRIPTOR, Field::Bytes(track)) = (number, track) else { continue };
                let mut described = Described { uuid: 0, parent: None, name: String::new(), rank: None };
                for (number, value) in fields(track) {
                    match (number, value) {
                        (1, Field::Number(uuid)) => described.uuid = uuid,
                        (2, Field::Bytes(name)) => described.name = String::from_utf8(name.to_vec()).unwrap(),
                        (5, Field::Number(parent)) => described.parent = Some(parent),
                        (12, Field::Number(rank)) => described.rank = Some(rank as i64 as i32),
                        other => panic!("a lane's track has no field {other:?}"),
                    }
                }
                tracks.push(described);
            }
        }
        tracks
    }

    #[test]
    fn lanes_in_use_keep_their_sequences_and_lanes_idle_for_a_second_are_forgotten() {
        let trace = PerfettoTrace::new(std::io::sink());
        let mut out = lock(&trace.out);
        let mut rows = Rows::default();
        // A step of 1 ms: a list on each of 4 streams, then one on a graph of its own.
        let (steps, step_ns) = (5_000_i64, 1_000_000);
        let mut sequences = Vec::new();
        for step in 0..steps {
            sequences.push(out.sequence_id());
            for (at, lane) in (0..4).map(Lane::Stream).chain([Lane::Graph(step as u64)]).enumerate() {
                let begin = step * step_ns + at as i64 * 1_000;
                rows.begin_batch();
                let zone = Placing { begin, end: begin + 1_000, list: step as u64, index: 0, parent: None };
                rows.place(&mut out, 1, lane, zone);
                rows.end_batch(out.staged());
                out.staged().clear();
            }
            let graphs_kept = rows.lanes.iter().filter(|lane| matches!(lane.lane, Lane::Graph(_))).count();
            assert!(
                graphs_kept as i64 <= 2 * IDLE_NS / step_ns + 1,
                "step {step}: {graphs_kept} graphs kept"
            );
        }
        // After the first step, a sequence starts only for each new graph (and the id taken
        // here): the streams keep theirs.
        let started: Vec<u32> = sequences.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(started[0], 1 + 5, "the first step starts the streams' and its graph's");
        assert!(started[1..].iter().all(|&n| n == 2), "{:?}", &started[..10]);
    }

    /// A zone goes to the first row of its lane where every zone still open at its begin is
    /// one of its ancestors (same list, its parent, ending no later); otherwise to a row of
    /// its own. Ends are written when a later begin passes them or the batch ends, once.
    #[test]
    fn a_zone_goes_to_the_first_row_where_it_nests_and_each_end_is_written_once() {
        let trace = PerfettoTrace::new(std::io::sink());
        let mut out = lock(&trace.out);
        let mut rows = Rows::default();
        let lane = Lane::Stream(3);
        let zone = |begin, end, list, index, parent| Placing { begin, end, list, index, parent };
        let rows_now = |rows: &Rows| rows.lanes[0].rows.len();
        rows.begin_batch();
        rows.place(&mut out, 1, lane, zone(0, 100, 1, 0, None));
        out.staged().clear();
        rows.place(&mut out, 1, lane, zone(10, 50, 1, 1, Some(0)));
        assert_eq!((rows_now(&rows), out.staged().len()), (1, 0), "a child nests in its parent's row");
        rows.place(&mut out, 1, lane, zone(60, 70, 1, 2, Some(0)));
        assert_eq!(rows_now(&rows), 1, "a later child, after its sibling ended");
        assert!(!out.staged().is_empty(), "the sibling's end, passed by this begin, is written");
        out.staged().clear();
        rows.end_batch(out.staged());
        let ends = out.staged().len();
        assert!(ends > 0, "the batch's open zones' ends are written");
        out.staged().clear();
        rows.end_batch(out.staged());
        assert!(out.staged().is_empty(), "and only once");
        // The next batch: each zone that does not nest goes to a row of its own.
        rows.begin_batch();
        rows.place(&mut out, 1, lane, zone(200, 400, 2, 0, None));
        rows.place(&mut out, 1, lane, zone(210, 300, 2, 1, Some(0)));
        assert_eq!(rows_now(&rows), 1, "the first row is free again: the last batch's zones ended");
        rows.place(&mut out, 1, lane, zone(220, 500, 3, 0, None));
        assert_eq!(rows_now(&rows), 2, "no parent, zones open: a row of its own");
        rows.place(&mut out, 1, lane, zone(230, 450, 2, 2, Some(0)));
        assert_eq!(rows_now(&rows), 3, "its parent ends before it: not nested");
        rows.place(&mut out, 1, lane, zone(240, 260, 2, 3, Some(1)));
        assert_eq!(rows_now(&rows), 3, "a grandchild in the first row");
        rows.place(&mut out, 1, lane, zone(310, 320, 2, 4, Some(1)));
        assert_eq!(rows_now(&rows), 4, "its parent has ended by its begin: not nested");
        rows.place(&mut out, 1, lane, zone(330, 340, 4, 0, Some(0)));
        assert_eq!(rows_now(&rows), 4, "another list's zone: the row whose zones have all ended");
        rows.end_batch(out.staged());
    }

    /// A row is named after its lane (the name given, else the stream's or graph's handle),
    /// and a row past the first says which it is.
    #[test]
    fn rows_are_named_after_their_lane_and_number() {
        assert_eq!(row_name(None, Lane::Stream(0x3f), 0), "stream 0x3f");
        assert_eq!(row_name(None, Lane::Graph(0x3f), 2), "graph 0x3f (overlapping 2)");
        assert_eq!(row_name(Some("copies"), Lane::Stream(1), 1), "copies (overlapping 1)");
    }

    /// A row's uuid is the same whenever its lane is met, differs from every other row's,
    /// lane's and context's here, and lies in the lanes' range of uuids.
    #[test]
    fn row_uuids_are_stable_distinct_and_in_the_lanes_range() {
        let mut seen = std::collections::HashSet::new();
        for parent in [1, 2] {
            for lane in [Lane::Stream(0), Lane::Stream(1), Lane::Graph(0), Lane::Graph(1)] {
                for row in 0..3 {
                    let uuid = row_uuid(parent, lane, row);
                    assert_eq!(uuid, row_uuid(parent, lane, row));
                    assert_eq!(uuid & !(LANE_TRACK - 1), LANE_TRACK, "{uuid:#x}");
                    assert!(seen.insert(uuid), "{parent} {lane:?} {row}: {uuid:#x} twice");
                }
            }
        }
    }

    /// Each row's track is described once, when the row is made: under its context's track,
    /// named after its lane (a name given before the row was made included), ranked after
    /// every row made before it. A lane named once its rows exist has them described again
    /// with the name, still under the context. A lane's zones go to its own rows, whichever
    /// lane was used in between.
    #[test]
    fn rows_are_described_under_their_context_in_order_of_first_use_with_their_lanes_name() {
        let trace = PerfettoTrace::new(std::io::sink());
        let mut out = lock(&trace.out);
        out.staged().clear();
        let mut rows = Rows::default();
        let (context, compute, copies) = (7, Lane::Stream(1), Lane::Stream(2));
        let zone = |begin, end| Placing { begin, end, list: 1, index: 0, parent: None };
        rows.name(&mut out, context, copies, "copies");
        rows.begin_batch();
        rows.place(&mut out, context, compute, zone(0, 10));
        rows.place(&mut out, context, copies, zone(5, 100));
        rows.place(&mut out, context, compute, zone(20, 30));
        rows.place(&mut out, context, compute, zone(25, 40));
        rows.end_batch(out.staged());
        rows.name(&mut out, context, compute, "compute");
        let tracks = described(out.staged());
        let shown: Vec<_> = tracks.iter().map(|t| (t.uuid, t.parent, t.name.as_str())).collect();
        let uuid = |lane, row| row_uuid(context, lane, row);
        assert_eq!(
            shown,
            [
                (uuid(compute, 0), Some(context), "stream 0x1"),
                (uuid(copies, 0), Some(context), "copies"),
                (uuid(compute, 1), Some(context), "stream 0x1 (overlapping 1)"),
                (uuid(compute, 0), Some(context), "compute"),
                (uuid(compute, 1), Some(context), "compute (overlapping 1)"),
            ]
        );
        let ranks: Vec<_> = tracks[..3].iter().map(|t| t.rank).collect();
        assert_eq!(
            ranks,
            [Some(1), Some(2), Some(3)],
            "in order of first use, after the context's rank-0 tracks"
        );
    }

    /// `out_of_order` is the sum over every row's sequence, a forgotten lane's rows' counts
    /// kept after it is forgotten (and counted once).
    #[test]
    fn events_out_of_order_are_counted_over_lanes_kept_and_forgotten() {
        let trace = PerfettoTrace::new(std::io::sink());
        let mut out = lock(&trace.out);
        let mut rows = Rows::default();
        // A batch of one zone at `at` on `lane`, its row's sequence also given `back` events
        // each earlier than the one before (which the sink never writes on a row: the
        // sequences count, the rows sum).
        let batch = |rows: &mut Rows, out: &mut TraceOutput, lane, at: i64, back: i64| {
            rows.begin_batch();
            let zone = Placing { begin: at, end: at + 100, list: 0, index: 0, parent: None };
            let row = rows.place(out, 1, lane, zone);
            for ns in (0..=back).map(|k| at + 50 - k) {
                row.sequence.end(out.staged(), ns);
            }
            rows.end_batch(out.staged());
        };
        // The zones' times are `CLOCK_MONOTONIC`: an hour after boot.
        let (hour, once, often) = (3_600_000_000_000, Lane::Stream(1), Lane::Stream(2));
        batch(&mut rows, &mut out, once, hour, 1);
        batch(&mut rows, &mut out, often, hour + 2 * IDLE_NS, 2);
        assert_eq!(rows.out_of_order(), 3, "both lanes kept");
        batch(&mut rows, &mut out, often, hour + 3 * IDLE_NS, 0);
        assert_eq!(rows.lanes.len(), 1, "the lane idle for over a second is forgotten");
        assert_eq!(rows.out_of_order(), 3, "its count kept");
    }
}
