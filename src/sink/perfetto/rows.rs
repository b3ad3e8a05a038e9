//! The tracks of one context's lanes: each lane a track, and more rows where zones of a lane
//! overlap without nesting (as the Chrome sink does: a viewer nests a track's slices by time
//! alone). Each row is a packet sequence of its own, so its events are written in time
//! order: a zone's begin once every zone it does not nest in has ended there, its end when a
//! later begin passes it or when its batch is done. Of `perfetto/` it imports `sequence.rs`
//! and `output.rs`.

use super::output::{TraceOutput, Track};
use super::sequence::Sequence;
use crate::backend::Lane;
use rustc_hash::FxHashMap;

/// Lanes a sink keeps; past it, it forgets the half used longest ago (their tracks stay in
/// the file; a forgotten lane that comes back gets new ones).
const MAX_LANES: usize = 4096;

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
    pub(super) uuid: u64,
    pub(super) sequence: Sequence,
    open: Vec<Open>,
}

impl Row {
    /// Writes the end of every open zone that ends by `at`, innermost first, and forgets
    /// them.
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
    pub(super) fn end_batch(&mut self, out: &mut Vec<u8>) {
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
    /// The name given with `name_stream`, if any.
    name: Option<String>,
    rows: Vec<Row>,
    /// The batch that used it last.
    used: u64,
}

/// The rows of every lane of one context.
#[derive(Debug, Default)]
pub(super) struct Rows {
    lanes: Vec<LaneRows>,
    /// Where each lane is in `lanes`.
    index: FxHashMap<Lane, usize>,
    /// The lane used last (a batch's zones are mostly on its list's lane).
    last: usize,
    /// Rows made so far: the next one's rank.
    count: i32,
    batches: u64,
    /// Rows touched by the batch being written: (lane's place in `lanes`, row).
    touched: Vec<(usize, usize)>,
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

impl Rows {
    /// Starts a batch.
    pub(super) fn begin_batch(&mut self) {
        self.batches += 1;
        self.touched.clear();
    }

    /// The row `zone` goes to on `lane` (made, and its track described under `parent`, if
    /// none fits): the first where it nests truly. The ends it passes are written.
    pub(super) fn place(
        &mut self,
        out: &mut TraceOutput,
        parent: u64,
        lane: Lane,
        zone: Placing,
    ) -> &mut Row {
        let batch = self.batches;
        let at = self.lane(lane);
        let lane_rows = &mut self.lanes[at];
        lane_rows.used = batch;
        let found = lane_rows.rows.iter_mut().position(|row| row.fits(out.staged(), zone));
        let index = match found {
            Some(index) => index,
            None => {
                let index = lane_rows.rows.len();
                let uuid = out.uuid();
                let sequence = Sequence::new(out.sequence_id(), uuid);
                self.count += 1;
                let name = row_name(lane_rows.name.as_deref(), lane, index);
                let track =
                    Track { parent: Some(parent), rank: Some(self.count), ..Track::named(uuid, &name) };
                out.describe(track, false);
                lane_rows.rows.push(Row { uuid, sequence, open: Vec::new() });
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
            if let Some(row) = self.lanes.get_mut(lane).and_then(|lane| lane.rows.get_mut(index)) {
                row.end_batch(out);
            }
        }
    }

    /// Names `lane`'s tracks (describing again those already described).
    pub(super) fn name(&mut self, out: &mut TraceOutput, parent: u64, lane: Lane, name: &str) {
        let at = self.lane(lane);
        let lane_rows = &mut self.lanes[at];
        lane_rows.name = Some(name.to_owned());
        for (index, row) in lane_rows.rows.iter().enumerate() {
            let name = row_name(Some(name), lane, index);
            out.describe(Track { parent: Some(parent), ..Track::named(row.uuid, &name) }, true);
        }
    }

    /// Events written out of time order, over every row.
    pub(super) fn out_of_order(&self) -> u64 {
        self.lanes.iter().flat_map(|lane| &lane.rows).map(|row| row.sequence.out_of_order()).sum()
    }

    /// Where `lane` is in `lanes` (added if new).
    fn lane(&mut self, lane: Lane) -> usize {
        if self.lanes.get(self.last).is_some_and(|known| known.lane == lane) {
            return self.last;
        }
        let at = match self.index.get(&lane) {
            Some(&at) => at,
            None => {
                if self.lanes.len() >= MAX_LANES {
                    self.forget_oldest();
                }
                self.lanes.push(LaneRows { lane, name: None, rows: Vec::new(), used: self.batches });
                self.index.insert(lane, self.lanes.len() - 1);
                self.lanes.len() - 1
            }
        };
        self.last = at;
        at
    }

    /// Forgets the half of the lanes used longest ago (between batches: nothing is touched).
    fn forget_oldest(&mut self) {
        let mut used: Vec<u64> = self.lanes.iter().map(|lane| lane.used).collect();
        used.sort_unstable();
        let cut = used[used.len() / 2];
        self.lanes.retain(|lane| lane.used > cut);
        self.index = self.lanes.iter().enumerate().map(|(at, lane)| (lane.lane, at)).collect();
        self.touched.clear();
        self.last = 0;
    }
}
