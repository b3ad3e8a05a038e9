//! The window of the newest frames and what is kept of them (docs/design.md, section 12):
//! per zone name, the window's count, sum and histogram; per frame and name, what leaves
//! with the frame (its counts by bucket, its extremes); the zones of the newest frames.

use super::histogram::{bucket, middle, Histogram};
use crate::location::{Location, SourceLocation};
use crate::sink::Zone;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// What the window keeps, as the user set it (`FrameStats`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) frames: usize,
    pub(super) max_names: usize,
    pub(super) tree_frames: usize,
    pub(super) tree_zones: usize,
}

/// One zone name over the window.
#[derive(Debug)]
struct NameStats {
    name: Box<str>,
    count: u64,
    sum_ns: u128,
    histogram: Histogram,
}

/// One name in one frame: what leaves the window with the frame.
#[derive(Debug)]
struct FrameName {
    name: u32,
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
    /// (bucket, count), sorted by bucket.
    buckets: Vec<(u16, u32)>,
}

/// One frame of the window.
#[derive(Debug)]
pub(super) struct Frame {
    pub(super) id: u64,
    pub(super) zones: u64,
    pub(super) host_begin_ns: i64,
    pub(super) host_end_ns: i64,
    /// Sorted by name index.
    names: Vec<FrameName>,
    /// Its zones, batch after batch: only for the newest `tree_frames` frames.
    pub(super) kept: Option<Vec<Zone>>,
    pub(super) truncated: usize,
    /// Its zones' host-time bounds (the larger of begin and end), as (bucket, count) sorted
    /// by bucket, and the largest.
    bounds: Vec<(u16, u32)>,
    pub(super) worst_bound_ns: u64,
}

/// A name's figures over the window, as read.
#[derive(Debug, Clone, Copy)]
pub(super) struct NameFigures {
    pub(super) count: u64,
    pub(super) sum_ns: u128,
    pub(super) min_ns: u64,
    pub(super) max_ns: u64,
    pub(super) frames: usize,
}

/// Zones the window did not count, and why.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Skipped {
    pub(super) late: u64,
    pub(super) unframed: u64,
    pub(super) untracked: u64,
}

/// The window of the newest `limits.frames` frame ids seen.
#[derive(Debug)]
pub(super) struct Window {
    pub(super) limits: Limits,
    names: Vec<NameStats>,
    by_text: FxHashMap<Box<str>, u32>,
    /// Static locations by address: a name found once is not hashed again.
    by_static: FxHashMap<usize, u32>,
    /// Sorted by id, oldest first.
    pub(super) frames: VecDeque<Frame>,
    pub(super) skipped: Skipped,
}

impl Window {
    pub(super) fn new(limits: Limits) -> Self {
        Self {
            limits,
            names: Vec::new(),
            by_text: FxHashMap::default(),
            by_static: FxHashMap::default(),
            frames: VecDeque::new(),
            skipped: Skipped::default(),
        }
    }

    /// Counts a batch of zones (one list's: one frame, in practice).
    pub(super) fn add(&mut self, zones: &[Zone]) {
        let mut current: Option<(u64, Option<usize>)> = None;
        for zone in zones {
            let Some(id) = zone.frame else {
                self.skipped.unframed += 1;
                continue;
            };
            let index = match current {
                Some((seen, index)) if seen == id => index,
                _ => {
                    let index = self.frame_index(id);
                    current = Some((id, index));
                    index
                }
            };
            let Some(index) = index else {
                self.skipped.late += 1;
                continue;
            };
            let name = self.name_index(&zone.location);
            let frame = &mut self.frames[index];
            frame.zones += 1;
            frame.add_bound(zone.host_begin_bound_ns.max(zone.host_end_bound_ns));
            frame.host_begin_ns = frame.host_begin_ns.min(zone.host_begin_ns);
            frame.host_end_ns = frame.host_end_ns.max(zone.host_end_ns);
            match &mut frame.kept {
                Some(kept) if kept.len() < self.limits.tree_zones => kept.push(zone.clone()),
                Some(_) => frame.truncated += 1,
                None => {}
            }
            let Some(name) = name else {
                self.skipped.untracked += 1;
                continue;
            };
            let ns = zone.duration_ns();
            let b = bucket(ns);
            if frame.count(name, ns, b) {
                let stats = &mut self.names[name as usize];
                stats.count += 1;
                stats.sum_ns += u128::from(ns);
                stats.histogram.add(b, 1);
            } else {
                self.skipped.untracked += 1;
            }
        }
    }

    /// The index of frame `id` in the window, made if it is newer than the oldest kept (or
    /// the window is not full); `None` for a frame older than the window.
    fn frame_index(&mut self, id: u64) -> Option<usize> {
        let mut at = match self.frames.binary_search_by_key(&id, |f| f.id) {
            Ok(at) => return Some(at),
            Err(at) => at,
        };
        if at == 0 && self.frames.len() == self.limits.frames {
            return None;
        }
        let frame = Frame {
            id,
            zones: 0,
            host_begin_ns: i64::MAX,
            host_end_ns: i64::MIN,
            names: Vec::new(),
            kept: None,
            truncated: 0,
            bounds: Vec::new(),
            worst_bound_ns: 0,
        };
        self.frames.insert(at, frame);
        if self.frames.len() > self.limits.frames {
            self.evict_oldest();
            at -= 1;
        }
        // The newest `tree_frames` keep their zones: this one if it is among them, and the
        // frame it pushed out of them lets go of its own, handing this one its buffer: a
        // fresh one grew by reallocation and faulted its pages in, zone by zone (a third of
        // this sink's time in the emitter in the demo's profile).
        let len = self.frames.len();
        let first_kept = len.saturating_sub(self.limits.tree_frames);
        if at >= first_kept {
            let spent = first_kept.checked_sub(1).and_then(|out| self.frames[out].kept.take());
            let mut kept = spent.unwrap_or_default();
            kept.clear();
            self.frames[at].kept = Some(kept);
        }
        Some(at)
    }

    /// The oldest frame leaves: its counts leave the names' figures.
    fn evict_oldest(&mut self) {
        let Some(frame) = self.frames.pop_front() else { return };
        for entry in frame.names {
            let stats = &mut self.names[entry.name as usize];
            stats.count -= entry.count;
            stats.sum_ns -= entry.sum_ns;
            for (b, count) in entry.buckets {
                stats.histogram.remove(b, u64::from(count));
            }
        }
    }

    /// The index of a zone's name, made if there is room (`max_names`).
    fn name_index(&mut self, location: &Location) -> Option<u32> {
        let key = match location {
            Location::Static(source) => {
                let key = *source as *const SourceLocation as usize;
                if let Some(&index) = self.by_static.get(&key) {
                    return Some(index);
                }
                Some(key)
            }
            Location::Dynamic(_) => None,
        };
        let text = location.name();
        let index = match self.by_text.get(text) {
            Some(&index) => index,
            None if self.names.len() < self.limits.max_names => {
                let index = self.names.len() as u32;
                self.names.push(NameStats {
                    name: text.into(),
                    count: 0,
                    sum_ns: 0,
                    histogram: Histogram::default(),
                });
                self.by_text.insert(text.into(), index);
                index
            }
            None => return None,
        };
        if let Some(key) = key {
            self.by_static.insert(key, index);
        }
        Some(index)
    }

    /// Every name with zones in the window, with its figures, in name order.
    pub(super) fn figures(&self) -> Vec<(&str, NameFigures)> {
        let mut extremes: Vec<Option<(u64, u64, usize)>> = vec![None; self.names.len()];
        for frame in &self.frames {
            for entry in &frame.names {
                let e = &mut extremes[entry.name as usize];
                *e = Some(match *e {
                    None => (entry.min_ns, entry.max_ns, 1),
                    Some((min, max, frames)) => (min.min(entry.min_ns), max.max(entry.max_ns), frames + 1),
                });
            }
        }
        let mut figures: Vec<(&str, NameFigures)> = self
            .names
            .iter()
            .zip(extremes)
            .filter_map(|(stats, extremes)| {
                let (min_ns, max_ns, frames) = extremes?;
                let figures =
                    NameFigures { count: stats.count, sum_ns: stats.sum_ns, min_ns, max_ns, frames };
                Some((&*stats.name, figures))
            })
            .collect();
        figures.sort_unstable_by(|a, b| a.0.cmp(b.0));
        figures
    }

    /// The nearest-rank `p` percentile (`0 < p <= 1`) of `name`'s durations in the window, as
    /// the middle of its bucket clamped to the window's extremes (`figures`).
    pub(super) fn percentile(&self, name: &str, figures: &NameFigures, p: f64) -> u64 {
        let Some(&index) = self.by_text.get(name) else { return 0 };
        let rank = ((p * figures.count as f64).ceil() as u64).clamp(1, figures.count.max(1));
        let histogram = &self.names[index as usize].histogram;
        match histogram.bucket_of_rank(rank) {
            Some(b) => middle(b).clamp(figures.min_ns, figures.max_ns),
            None => figures.max_ns,
        }
    }
}

impl Frame {
    /// Counts one duration of name `name` in bucket `b`; false (nothing counted) in the
    /// impossible case of 2^32 durations of one name in one bucket of one frame.
    fn add_bound(&mut self, bound_ns: u64) {
        self.worst_bound_ns = self.worst_bound_ns.max(bound_ns);
        let b = bucket(bound_ns);
        match self.bounds.binary_search_by_key(&b, |&(bucket, _)| bucket) {
            Ok(i) => self.bounds[i].1 = self.bounds[i].1.saturating_add(1),
            Err(i) => self.bounds.insert(i, (b, 1)),
        }
    }

    /// The 99th percentile of its zones' host-time bounds: nearest rank, within 1/64 (the
    /// middle of its bucket; exact below 64 ns), at most the largest.
    pub(super) fn p99_bound_ns(&self) -> u64 {
        let total: u64 = self.bounds.iter().map(|&(_, n)| u64::from(n)).sum();
        let rank = (total * 99).div_ceil(100).max(1);
        let mut seen = 0;
        for &(b, n) in &self.bounds {
            seen += u64::from(n);
            if seen >= rank {
                return middle(b).min(self.worst_bound_ns);
            }
        }
        0
    }

    fn count(&mut self, name: u32, ns: u64, b: u16) -> bool {
        let at = match self.names.binary_search_by_key(&name, |n| n.name) {
            Ok(at) => at,
            Err(at) => {
                let entry =
                    FrameName { name, count: 0, sum_ns: 0, min_ns: u64::MAX, max_ns: 0, buckets: Vec::new() };
                self.names.insert(at, entry);
                at
            }
        };
        let entry = &mut self.names[at];
        match entry.buckets.binary_search_by_key(&b, |&(bucket, _)| bucket) {
            Ok(i) => match entry.buckets[i].1.checked_add(1) {
                Some(count) => entry.buckets[i].1 = count,
                None => return false,
            },
            Err(i) => entry.buckets.insert(i, (b, 1)),
        }
        entry.count += 1;
        entry.sum_ns += u128::from(ns);
        entry.min_ns = entry.min_ns.min(ns);
        entry.max_ns = entry.max_ns.max(ns);
        true
    }
}
