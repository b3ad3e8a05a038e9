//! One context's ring: the newest collected lists (their zones), frame marks, counter
//! samples and lane names, bounded by time and by bytes. Written by the context's recorder
//! sink (once per collected list: one lock), copied out by a dump. A leaf of `flight/`.

use crate::backend::Lane;
use crate::launch::Launch;
use crate::location::Location;
use crate::sink::{ContextInfo, CounterSample, FrameMark, Zone};
use std::collections::VecDeque;
use std::time::Instant;

/// A zone as the ring keeps it: 72 bytes where a `Zone` takes 120 (its launch, when it has
/// one, in its list's `launches`; no frame is `u64::MAX`). The ring is most of the
/// recorder's memory, and writing it most of its time.
#[derive(Debug, Clone)]
pub(super) struct Record {
    location: Location,
    lane: u64,
    host_begin_ns: i64,
    host_end_ns: i64,
    gpu_begin_ns: i64,
    gpu_end_ns: i64,
    frame: u64,
    depth: u32,
    /// Bit 0: the lane is a graph; bit 1: it has a launch.
    flags: u32,
}

const GRAPH: u32 = 1;
const LAUNCHED: u32 = 2;

impl Record {
    fn new(zone: &Zone) -> Self {
        let (lane, graph) = match zone.lane {
            Lane::Stream(key) => (key, 0),
            Lane::Graph(key) => (key, GRAPH),
        };
        Self {
            location: zone.location.clone(),
            lane,
            host_begin_ns: zone.host_begin_ns,
            host_end_ns: zone.host_end_ns,
            gpu_begin_ns: zone.gpu_begin_ns,
            gpu_end_ns: zone.gpu_end_ns,
            frame: zone.frame.unwrap_or(u64::MAX),
            depth: zone.depth,
            flags: graph | if zone.launch.is_some() { LAUNCHED } else { 0 },
        }
    }

    /// The zone again, with its launch taken from `launches` when it had one.
    fn zone(&self, launches: &mut impl Iterator<Item = Launch>) -> Zone {
        let lane = if self.flags & GRAPH != 0 { Lane::Graph(self.lane) } else { Lane::Stream(self.lane) };
        let mut zone = Zone::new(self.location.clone(), lane, self.depth, self.gpu_begin_ns, self.gpu_end_ns)
            .with_host_times(self.host_begin_ns, self.host_end_ns);
        if self.frame != u64::MAX {
            zone = zone.with_frame(self.frame);
        }
        if self.flags & LAUNCHED != 0 {
            if let Some(launch) = launches.next() {
                zone = zone.with_launch(launch);
            }
        }
        zone
    }
}

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
struct Kept {
    list_id: u64,
    zones: Vec<Record>,
    /// The launches of its zones that had one, in order.
    launches: Vec<Launch>,
    /// The latest host end of its zones.
    end_ns: i64,
    /// What it counts for in the ring's bytes.
    bytes: usize,
}

/// One collected list, as a dump replays it.
#[derive(Debug, Clone)]
pub(super) struct KeptList {
    pub(super) list_id: u64,
    pub(super) zones: Vec<Zone>,
}

/// A copy of a ring, for a dump.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    /// The context, with a host clock origin where it had none (`Ring::snapshot`).
    pub(super) info: Option<ContextInfo>,
    pub(super) lanes: Vec<(Lane, String)>,
    pub(super) lists: Vec<KeptList>,
    pub(super) frames: Vec<FrameMark>,
    pub(super) counters: Vec<CounterSample>,
}

/// One context's ring (module docs).
#[derive(Debug, Default)]
pub(super) struct Ring {
    info: Option<ContextInfo>,
    opened: Option<Instant>,
    lanes: Vec<(Lane, String)>,
    lists: VecDeque<Kept>,
    spare: Vec<(Vec<Record>, Vec<Launch>)>,
    frames: VecDeque<FrameMark>,
    counters: VecDeque<CounterSample>,
    bytes: usize,
    /// The latest host end of a zone kept.
    newest_ns: i64,
    /// The latest host time of a frame mark or counter sample kept.
    newest_mark_ns: i64,
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
    /// The context opened the sink at `opened`.
    pub(super) fn open(&mut self, context: &ContextInfo, opened: Instant) {
        self.info = Some(context.clone());
        self.opened = Some(opened);
    }

    /// Keeps a collected list, then drops the oldest lists past `bounds`.
    pub(super) fn push(&mut self, list_id: u64, zones: &[Zone], bounds: Bounds) {
        let (mut kept, mut launches) = self.spare.pop().unwrap_or_default();
        kept.reserve(zones.len());
        let mut end_ns = i64::MIN;
        let mut held = 0;
        for zone in zones {
            kept.push(Record::new(zone));
            if let Some(launch) = zone.launch {
                launches.push(launch);
            }
            end_ns = end_ns.max(zone.host_end_ns);
            held += held_bytes(zone);
        }
        let bytes = kept.capacity() * std::mem::size_of::<Record>()
            + launches.capacity() * std::mem::size_of::<Launch>()
            + held;
        self.bytes += bytes;
        self.newest_ns = self.newest_ns.max(end_ns);
        self.lists.push_back(Kept { list_id, zones: kept, launches, end_ns, bytes });
        while let Some(oldest) = self.lists.front() {
            let too_old = oldest.end_ns < self.newest_ns.saturating_sub(bounds.window_ns);
            if !too_old && self.bytes <= bounds.max_bytes {
                break;
            }
            let Some(mut gone) = self.lists.pop_front() else { break };
            self.bytes -= gone.bytes;
            self.dropped_lists += 1;
            gone.zones.clear();
            gone.launches.clear();
            if self.spare.len() < MAX_SPARE {
                self.spare.push((gone.zones, gone.launches));
            }
        }
        self.drop_old_marks(bounds);
    }

    /// Drops the frame marks and counter samples older than the window (counted back from
    /// the newest zone, mark or sample): a context that only samples counters, its GPU idle,
    /// keeps the last window of them.
    fn drop_old_marks(&mut self, bounds: Bounds) {
        let since = self.newest_ns.max(self.newest_mark_ns).saturating_sub(bounds.window_ns);
        while self.frames.front().is_some_and(|mark| mark.host_ns < since) {
            self.frames.pop_front();
        }
        while self.counters.front().is_some_and(|sample| sample.host_ns < since) {
            self.counters.pop_front();
        }
    }

    pub(super) fn name_lane(&mut self, lane: Lane, name: &str) {
        self.lanes.retain(|(known, _)| *known != lane);
        if self.lanes.len() >= MAX_LANE_NAMES {
            self.lanes.remove(0);
        }
        self.lanes.push((lane, name.to_owned()));
    }

    pub(super) fn frame(&mut self, mark: FrameMark, bounds: Bounds) {
        self.newest_mark_ns = self.newest_mark_ns.max(mark.host_ns);
        self.frames.push_back(mark);
        self.drop_old_marks(bounds);
    }

    pub(super) fn counters(&mut self, sample: CounterSample, bounds: Bounds) {
        self.newest_mark_ns = self.newest_mark_ns.max(sample.host_ns);
        self.counters.push_back(sample);
        self.drop_old_marks(bounds);
    }

    /// The ring's bytes: its lists (zones and buffers' room) and what it keeps besides.
    pub(super) fn bytes(&self) -> usize {
        let spare: usize = self
            .spare
            .iter()
            .map(|(zones, launches)| {
                zones.capacity() * std::mem::size_of::<Record>()
                    + launches.capacity() * std::mem::size_of::<Launch>()
            })
            .sum();
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

    /// The context's info, with a host clock origin where the context had none: where its
    /// sinks placed its host times when it opened them (`Instant::now()` then, less the base
    /// pair's host time), as the recorder's sink saw it. A dump then places them as the
    /// context's other sinks did, to within the moments they were opened, rather than from
    /// the dump's own moment.
    fn placed_info(&self) -> Option<ContextInfo> {
        let mut info = self.info.clone()?;
        if info.host_clock_origin.is_none() {
            info.host_clock_origin = self.opened.and_then(|opened| {
                let host_ns = u64::try_from(info.base.host_ns).ok()?;
                opened.checked_sub(std::time::Duration::from_nanos(host_ns))
            });
        }
        Some(info)
    }

    /// A copy for a dump: the lists kept, and the frame marks and counter samples from the
    /// oldest list's time on.
    pub(super) fn snapshot(&self) -> Snapshot {
        let from =
            self.lists.iter().flat_map(|l| &l.zones).map(|z| z.host_begin_ns).min().unwrap_or(i64::MAX);
        let list = |kept: &Kept| {
            let mut launches = kept.launches.iter().copied();
            KeptList {
                list_id: kept.list_id,
                zones: kept.zones.iter().map(|z| z.zone(&mut launches)).collect(),
            }
        };
        Snapshot {
            info: self.placed_info(),
            lanes: self.lanes.clone(),
            lists: self.lists.iter().map(list).collect(),
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

    #[test]
    fn a_zone_comes_back_from_its_record_as_it_went_in() {
        let launch = crate::launch::Launch::new(5, 9, 3);
        let zones = [
            Zone::new(&KERNEL, Lane::Graph(7), 2, -5, 40)
                .with_host_times(100, 150)
                .with_frame(12)
                .with_launch(launch),
            Zone::new(&KERNEL, Lane::Stream(u64::MAX), 0, 0, 1),
        ];
        let mut ring = Ring::default();
        ring.push(3, &zones, Bounds { window_ns: i64::MAX, max_bytes: usize::MAX });
        let snapshot = ring.snapshot();
        let back = &snapshot.lists[0].zones;
        assert_eq!(format!("{back:?}"), format!("{zones:?}"));
        assert_eq!(std::mem::size_of::<super::Record>(), 72);
    }

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
