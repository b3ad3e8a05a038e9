//! Writing what the rings kept as a trace: the kept lists, lane names, frame marks and
//! counter samples of each context replayed, in the order they came, into the crate's own
//! Perfetto or Chrome sink, so that a dump is a normal trace of its kind. Of `flight/` it
//! imports `ring.rs`.

use super::ring::Snapshot;
use crate::sink::chrome::ChromeTrace;
use crate::sink::perfetto::PerfettoTrace;
use crate::sink::{Sink, ZoneBatch};
use std::path::Path;
use std::time::{Duration, Instant};

/// The format of a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpFormat {
    /// Perfetto's protobuf trace (`.pftrace`).
    Perfetto,
    /// Chrome trace event JSON (`.json`), on the host clock.
    Chrome,
}

impl DumpFormat {
    /// The file extension of the format.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Perfetto => "pftrace",
            Self::Chrome => "json",
        }
    }
}

/// Replays one context's snapshot into `sink`.
fn replay(sink: &mut dyn Sink, snapshot: &Snapshot) -> std::io::Result<usize> {
    let Some(info) = &snapshot.info else { return Ok(0) };
    sink.open(info)?;
    for (lane, name) in &snapshot.lanes {
        sink.name_lane(info, *lane, name)?;
    }
    let mut zones = 0;
    for list in &snapshot.lists {
        sink.zones(info, ZoneBatch { list_id: list.list_id, zones: &list.zones })?;
        zones += list.zones.len();
    }
    for mark in &snapshot.frames {
        sink.frame(info, *mark)?;
    }
    for sample in &snapshot.counters {
        sink.counters(info, sample)?;
    }
    sink.flush()?;
    Ok(zones)
}

/// The `Instant` of the earliest zone kept, where a context's host clock is an `Instant`'s:
/// the Chrome dump's origin, so that no `ts` is negative.
fn earliest(snapshots: &[Snapshot]) -> Option<Instant> {
    snapshots
        .iter()
        .filter_map(|snapshot| {
            let origin = snapshot.info.as_ref()?.host_clock_origin?;
            let first = snapshot.lists.iter().flat_map(|l| &l.zones).map(|z| z.host_begin_ns).min()?;
            let launch = snapshot
                .lists
                .iter()
                .flat_map(|l| &l.zones)
                .filter_map(|z| z.launch)
                .map(|l| l.host_begin_ns)
                .min();
            let first = launch.map_or(first, |launch| first.min(launch));
            let frames =
                snapshot.frames.iter().map(|m| m.host_ns).chain(snapshot.counters.iter().map(|s| s.host_ns));
            let first = frames.fold(first, i64::min);
            Some(origin + Duration::from_nanos(first.max(0) as u64))
        })
        .min()
}

/// Writes `snapshots` (one per context) to `path` as `format`, a Chrome dump on
/// `chrome_timeline` (an origin and nanoseconds added to every `ts`) when given: the zones
/// written, and the file's bytes.
pub(super) fn write(
    snapshots: &[Snapshot],
    path: &Path,
    format: DumpFormat,
    chrome_timeline: Option<(Instant, i64)>,
) -> std::io::Result<(usize, u64)> {
    let counters = |snapshot: &Snapshot| !snapshot.counters.is_empty();
    let mut zones = 0;
    match format {
        DumpFormat::Perfetto => {
            let trace = PerfettoTrace::create(path)?;
            for snapshot in snapshots {
                let sink = trace.sink();
                let mut sink = if counters(snapshot) { sink.with_counters(Duration::ZERO) } else { sink };
                zones += replay(&mut sink, snapshot)?;
            }
            trace.flush()?;
        }
        DumpFormat::Chrome => {
            let trace = ChromeTrace::create(path)?;
            let trace = match (chrome_timeline, earliest(snapshots)) {
                (Some((origin, origin_ns)), _) => trace.with_timeline(origin, origin_ns),
                (None, Some(origin)) => trace.with_origin(origin),
                (None, None) => trace,
            };
            for snapshot in snapshots {
                let sink = trace.sink();
                let mut sink = if counters(snapshot) { sink.with_counters(Duration::ZERO) } else { sink };
                zones += replay(&mut sink, snapshot)?;
            }
            trace.flush()?;
        }
    }
    Ok((zones, std::fs::metadata(path)?.len()))
}
