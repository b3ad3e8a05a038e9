//! One context's ring: the newest collected lists (their zones), frame marks, counter
//! samples and lane names, bounded by time and by bytes. Written by the context's recorder
//! sink (once per collected list: one lock), copied out by a dump. A leaf of `flight/`.

use crate::backend::Lane;
use crate::location::Location;
use crate::sink::{ContextInfo, CounterSample, FrameMark, Zone};
use std::collections::VecDeque;

/// Frame marks and counter samples kept per context (the newest).
const MAX_MARKS: usize = 4096;

/// Lane names kept per context.
const MAX_LANE_NAMES: usize = 4096;

/// Emptied zone buffers kept for the next lists (so that a steady run allocates nothing).
const MAX_SPARE: usize = 16;

/// How much a ring keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bounds {
    /// Lists whose last zone ended more than this before the newest zone's end are dropped.
    pub(super) window_ns: i64,
    /// The ring's bytes at most (zones, what dynamic locations hold, buffers' spare room).
    pub(super) max_bytes: usize,
}

/// One collected list, kept.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    pub(super) list_id: u64,
    pub(super) zones: Vec<Zone>,
    /// The latest host end of its zones.
    pub(super) end_ns: i64,
    /// What it counts for in the ring's bytes.
    bytes: usize,
}

/// A copy of a ring, for a dump.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    pub(super) info: Option<ContextInfo>,
    pub(super) lanes: Vec<(Lane, String)>,
    pub(super) lists: Vec<Kept>,
    pub(super) frames: Vec<FrameMark>,
    pub(super) counters: Vec<CounterSample>,
}

/// One context's ring (module docs).
#[derive(Debug, Default)]
pub(super) struct Ring {
    pub(super) info: Option<ContextInfo>,
    lanes: Vec<(Lane, String)>,
    lists: VecDeque<Kept>,
    spare: Vec<Vec<Zone>>,
    frames: VecDeque<FrameMark>,
    counters: VecDeque<CounterSample>,
    bytes: usize,
    newest_ns: i64,
    /// Lists dropped to stay within the bounds.
    pub(super) dropped_lists: u64,
}

/// What a zone holds beyond its own size: a dynamic location's text and arguments (counted
/// in full for each zone that shares it: a bound, not an exact figure).
fn held_bytes(zone: &Zone) -> usize {
    match &zone.location {
        Location::Static(_) => 0,
        Location::Dynamic(location) => {
            location.name.len() + location.file.len() + location.function.len() + location.args.len() * 48
        }
    }
}

impl Ring {
    /// Keeps a collected list, then drops the oldest lists past `bounds`.
    pub(super) fn push(&mut self, list_id: u64, zones: &[Zone], bounds: Bounds) {
        let mut kept = self.spare.pop().unwrap_or_default();
        kept.extend_from_slice(zones);
        let mut end_ns = i64::MIN;
        let mut held = 0;
        for zone in zones {
            end_ns = end_ns.max(zone.host_end_ns);
            held += held_bytes(zone);
        }
        let bytes = kept.capacity() * std::mem::size_of::<Zone>() + held;
        self.bytes += bytes;
        self.newest_ns = self.newest_ns.max(end_ns);
        self.lists.push_back(Kept { list_id, zones: kept, end_ns, bytes });
        while let Some(oldest) = self.lists.front() {
            let too_old = oldest.end_ns < self.newest_ns.saturating_sub(bounds.window_ns);
            if !too_old && self.bytes <= bounds.max_bytes {
                break;
            }
            let Some(mut gone) = self.lists.pop_front() else { break };
            self.bytes -= gone.bytes;
            self.dropped_lists += 1;
            gone.zones.clear();
            if self.spare.len() < MAX_SPARE {
                self.spare.push(gone.zones);
            }
        }
    }

    pub(super) fn name_lane(&mut self, lane: Lane, name: &str) {
        self.lanes.retain(|(known, _)| *known != lane);
        if self.lanes.len() >= MAX_LANE_NAMES {
            self.lanes.remove(0);
        }
        self.lanes.push((lane, name.to_owned()));
    }

    pub(super) fn frame(&mut self, mark: FrameMark) {
        if self.frames.len() >= MAX_MARKS {
            self.frames.pop_front();
        }
        self.frames.push_back(mark);
    }

    pub(super) fn counters(&mut self, sample: CounterSample) {
        if self.counters.len() >= MAX_MARKS {
            self.counters.pop_front();
        }
        self.counters.push_back(sample);
    }

    /// The ring's bytes: its lists (zones and buffers' room) and what it keeps besides.
    pub(super) fn bytes(&self) -> usize {
        let spare: usize = self.spare.iter().map(|v| v.capacity() * std::mem::size_of::<Zone>()).sum();
        self.bytes
            + spare
            + self.frames.capacity() * std::mem::size_of::<FrameMark>()
            + self.counters.capacity() * std::mem::size_of::<CounterSample>()
            + self
                .lanes
                .iter()
                .map(|(_, name)| name.capacity() + std::mem::size_of::<(Lane, String)>())
                .sum::<usize>()
    }

    /// Zones kept now.
    pub(super) fn zones(&self) -> usize {
        self.lists.iter().map(|list| list.zones.len()).sum()
    }

    /// A copy for a dump: the lists kept, and the frame marks and counter samples from the
    /// oldest list's time on.
    pub(super) fn snapshot(&self) -> Snapshot {
        let from =
            self.lists.iter().flat_map(|l| &l.zones).map(|z| z.host_begin_ns).min().unwrap_or(i64::MAX);
        Snapshot {
            info: self.info.clone(),
            lanes: self.lanes.clone(),
            lists: self.lists.iter().cloned().collect(),
            frames: self.frames.iter().filter(|m| m.host_ns >= from).copied().collect(),
            counters: self.counters.iter().filter(|s| s.host_ns >= from).copied().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Bounds, Ring};
    use crate::backend::Lane;
    use crate::location::SourceLocation;
    use crate::sink::Zone;

    static KERNEL: SourceLocation = SourceLocation {
        name: "kernel",
        function: || "tests",
        file: "ring.rs",
        line: 1,
        level: crate::location::Verbosity::Fine,
    };

    fn list(at: i64) -> Vec<Zone> {
        (0..4).map(|i| Zone::new(&KERNEL, Lane::Stream(1), 0, at + i * 100, at + i * 100 + 100)).collect()
    }

    #[test]
    fn lists_older_than_the_window_leave_the_ring() {
        let mut ring = Ring::default();
        let bounds = Bounds { window_ns: 10_000, max_bytes: usize::MAX };
        for step in 0..100 {
            ring.push(step, &list(step as i64 * 1_000), bounds);
        }
        // Ends at 99,400; kept: lists ending at or after 89,400, the last eleven.
        assert_eq!(ring.zones(), 11 * 4);
        assert_eq!(ring.dropped_lists, 89);
    }

    #[test]
    fn the_ring_stays_within_its_bytes_and_its_memory_stops_growing() {
        let mut ring = Ring::default();
        let bounds = Bounds { window_ns: i64::MAX, max_bytes: 64 * 1024 };
        let mut after_warm = 0;
        for step in 0..100_000 {
            ring.push(step, &list(step as i64 * 1_000), bounds);
            assert!(ring.bytes <= bounds.max_bytes);
            if step == 1_000 {
                after_warm = ring.bytes();
            }
        }
        assert_eq!(ring.bytes(), after_warm, "constant once warm");
        assert!(ring.zones() > 0);
    }
}
