//! What sets off a dump ([`Trigger`]) and the check a recorder sink makes on what it is
//! handed ([`Watch`]): a zone or a frame longer than a threshold, given or taken from
//! [`FrameStats`] (a percentile times a factor, read again each time the zones seen have
//! doubled, then at most every 100 ms of host time). Of `flight/` it imports nothing.

use crate::location::{Location, SourceLocation};
use crate::sink::frames::FrameStats;
use crate::sink::{FrameMark, Zone};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::time::Duration;

/// How often thresholds taken from `FrameStats` are read again once the zones seen stop
/// doubling between two readings, in host nanoseconds: a reading costs a pass over every
/// name's durations (`FrameStats::summary`), which at most ten a second keeps from the
/// collector's path, while a threshold follows a change of pace within a tenth of a second.
const REFRESH_NS: i64 = 100_000_000;

/// Zones of a name a percentile needs before it is a threshold: below 100, a name's 99th
/// percentile is its slowest zone so far (rank ⌈0.99 n⌉ = n), not a percentile.
const MIN_ZONES: u64 = 100;

/// Frames a frame percentile needs before it is a threshold.
const MIN_FRAMES: usize = 20;

/// Frames whose spans a recorder sink follows at once.
const MAX_FRAMES: usize = 64;

/// What makes a [`FlightRecorder`](super::FlightRecorder) dump (besides
/// [`FlightRecorder::trigger`](super::FlightRecorder::trigger), which the application calls:
/// from [`Builder::on_error`](crate::Builder::on_error), say).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Trigger {
    /// A zone named `name` lasting longer than `threshold` (GPU time).
    ZoneLongerThan {
        /// The zone's name ([`Location::name`]).
        name: String,
        /// How long is too long.
        threshold: Duration,
    },
    /// A zone lasting longer than `factor` times the `percentile` (0 to 1: 0.99 is p99) of
    /// its name's durations in `stats`. Silent for a name until `stats` holds 100 zones of
    /// it (below 100, a p99 is the slowest zone so far); the thresholds are read again when
    /// a name reaches its 100th zone, each time the zones the recorder has seen double, and
    /// otherwise every 100 ms of host time.
    ZoneOverPercentile {
        /// Where the percentiles come from (fed by a sink of the same contexts).
        stats: FrameStats,
        /// Which percentile, 0 to 1.
        percentile: f64,
        /// How many times it.
        factor: f64,
    },
    /// A frame whose GPU work spans longer than `threshold` (its first zone's begin to its
    /// last zone's end, as this recorder saw them).
    FrameLongerThan(Duration),
    /// A frame spanning longer than `factor` times the `percentile` of the spans of the frames
    /// in `stats`. Silent until `stats` holds 20 frames; read again as the zone thresholds are.
    FrameOverPercentile {
        /// Where the frames' spans come from.
        stats: FrameStats,
        /// Which percentile, 0 to 1.
        percentile: f64,
        /// How many times it.
        factor: f64,
    },
}

impl Trigger {
    /// A zone longer than `factor` times its name's p99 in `stats`
    /// ([`ZoneOverPercentile`](Self::ZoneOverPercentile): silent for a name until `stats`
    /// holds 100 zones of it).
    pub fn zone_over_p99(stats: &FrameStats, factor: f64) -> Self {
        Self::ZoneOverPercentile { stats: stats.clone(), percentile: 0.99, factor }
    }

    /// A frame longer than `factor` times the frames' p99 in `stats`.
    pub fn frame_over_p99(stats: &FrameStats, factor: f64) -> Self {
        Self::FrameOverPercentile { stats: stats.clone(), percentile: 0.99, factor }
    }
}

/// A frame's span as a recorder sink saw its zones.
#[derive(Debug, Clone, Copy)]
struct FrameSpan {
    id: u64,
    begin: i64,
    end: i64,
}

/// The triggers one recorder sink checks, with their thresholds.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// Given thresholds by zone name.
    fixed: FxHashMap<Box<str>, u64>,
    /// From `FrameStats`: (stats, percentile, factor), and the thresholds read by name.
    learned_from: Option<(FrameStats, f64, f64)>,
    learned: FxHashMap<Box<str>, u64>,
    /// Each static location's threshold, looked up once per refresh.
    by_address: FxHashMap<usize, Option<u64>>,
    /// Zones seen of each static location with no threshold yet, while thresholds are
    /// learned: its 100th ([`MIN_ZONES`]) reads the thresholds again, so that its name is
    /// watched from then on.
    unlearned: FxHashMap<usize, u64>,
    frame_fixed: Option<u64>,
    frame_from: Option<(FrameStats, f64, f64)>,
    frame_learned: Option<u64>,
    refreshed_ns: Option<i64>,
    /// Zones seen so far, and at the last reading of the thresholds: they are read again
    /// each time the zones seen double, so that a short run has its thresholds as soon as a
    /// name has enough zones, at a cost of a reading per doubling.
    zones_seen: u64,
    zones_at_refresh: u64,
    frames: VecDeque<FrameSpan>,
}

fn ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Watch {
    /// The checks `triggers` ask for; `None` if none is on zones or frames.
    pub(super) fn new(triggers: &[Trigger]) -> Option<Self> {
        let mut watch = Self::default();
        for trigger in triggers {
            match trigger {
                Trigger::ZoneLongerThan { name, threshold } => {
                    watch.fixed.insert(name.as_str().into(), ns(*threshold));
                }
                Trigger::ZoneOverPercentile { stats, percentile, factor } => {
                    watch.learned_from = Some((stats.clone(), *percentile, *factor));
                }
                Trigger::FrameLongerThan(threshold) => watch.frame_fixed = Some(ns(*threshold)),
                Trigger::FrameOverPercentile { stats, percentile, factor } => {
                    watch.frame_from = Some((stats.clone(), *percentile, *factor));
                }
            }
        }
        (!triggers.is_empty()).then_some(watch)
    }

    fn watches_frames(&self) -> bool {
        self.frame_fixed.is_some() || self.frame_from.is_some()
    }

    /// Reads the thresholds taken from `FrameStats` again.
    fn refresh(&mut self) {
        self.by_address.clear();
        if let Some((stats, percentile, factor)) = &self.learned_from {
            self.learned.clear();
            for zone in stats.summary().into_iter().filter(|zone| zone.count >= MIN_ZONES) {
                if let Some(at) = stats.percentile(&zone.name, *percentile) {
                    self.learned.insert(zone.name.into_boxed_str(), (at as f64 * factor) as u64);
                }
            }
        }
        if let Some((stats, percentile, factor)) = &self.frame_from {
            let mut spans: Vec<u64> = stats.frames().iter().map(|frame| frame.span_ns()).collect();
            self.frame_learned = (spans.len() >= MIN_FRAMES).then(|| {
                spans.sort_unstable();
                let rank = ((percentile * spans.len() as f64).ceil() as usize).clamp(1, spans.len());
                (spans[rank - 1] as f64 * factor) as u64
            });
        }
    }

    /// The threshold of a zone named `name`: the lower of the given and the learned one.
    fn threshold_of(&self, name: &str) -> Option<u64> {
        match (self.fixed.get(name), self.learned.get(name)) {
            (Some(&a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b).copied(),
        }
    }

    fn threshold(&mut self, location: &Location) -> Option<u64> {
        match location {
            Location::Static(source) => {
                let address = *source as *const SourceLocation as usize;
                let threshold = match self.by_address.get(&address) {
                    Some(&known) => known,
                    None => {
                        let threshold = self.threshold_of(source.name);
                        self.by_address.insert(address, threshold);
                        threshold
                    }
                };
                if threshold.is_none() && self.learned_from.is_some() {
                    let seen = self.unlearned.entry(address).or_default();
                    *seen += 1;
                    if *seen == MIN_ZONES {
                        // Its name may have a percentile now (the statistics' sink comes
                        // first, this zone in it).
                        self.refresh();
                        return self.threshold(location);
                    }
                }
                threshold
            }
            Location::Dynamic(_) => self.threshold_of(location.name()),
        }
    }

    /// Checks a collected list's zones: why to dump, if one is too long.
    pub(super) fn zones(&mut self, zones: &[Zone]) -> Option<String> {
        let now = zones.iter().map(|zone| zone.host_end_ns).max()?;
        self.zones_seen += zones.len() as u64;
        let doubled = self.zones_seen >= 2 * self.zones_at_refresh;
        if doubled || self.refreshed_ns.is_none_or(|at| now.saturating_sub(at) >= REFRESH_NS) {
            self.refreshed_ns = Some(now);
            self.zones_at_refresh = self.zones_seen;
            self.refresh();
        }
        let mut reason = None;
        let frames = self.watches_frames();
        for zone in zones {
            if frames {
                self.follow_frame(zone);
            }
            if reason.is_some() {
                continue;
            }
            let Some(threshold) = self.threshold(&zone.location) else { continue };
            if zone.duration_ns() > threshold {
                reason = Some(format!(
                    "zone {} took {} ns, over its threshold of {threshold} ns",
                    zone.location.name(),
                    zone.duration_ns()
                ));
            }
        }
        reason
    }

    fn follow_frame(&mut self, zone: &Zone) {
        let Some(id) = zone.frame else { return };
        match self.frames.iter_mut().find(|frame| frame.id == id) {
            Some(frame) => {
                frame.begin = frame.begin.min(zone.host_begin_ns);
                frame.end = frame.end.max(zone.host_end_ns);
            }
            None => {
                if self.frames.len() >= MAX_FRAMES {
                    self.frames.pop_front();
                }
                self.frames.push_back(FrameSpan { id, begin: zone.host_begin_ns, end: zone.host_end_ns });
            }
        }
    }

    /// A frame started: checks the frames two or more before it (a frame's lists are
    /// collected as the GPU finishes them; by then its work is in). Why to dump, if one is
    /// too long.
    pub(super) fn frame(&mut self, mark: FrameMark) -> Option<String> {
        let threshold = match (self.frame_fixed, self.frame_learned) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        let mut reason = None;
        while let Some(frame) = self.frames.front().copied().filter(|f| f.id.saturating_add(2) <= mark.id) {
            self.frames.pop_front();
            let span = frame.end.saturating_sub(frame.begin).max(0) as u64;
            if span > threshold && reason.is_none() {
                reason = Some(format!(
                    "frame {} spanned {span} ns, over its threshold of {threshold} ns",
                    frame.id
                ));
            }
        }
        reason
    }
}
