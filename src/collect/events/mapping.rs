//! The one mapping of GPU time to host time, for every sink of a context, and the bound of
//! every time it places (docs/design.md, section 8, "One clock").
//!
//! **The model.** Everything the collector learns of the offset `o(g) = host(g) - g` is a
//! bound at some GPU time: a host time read before the GPU can have reached `g` (an anchor's
//! record, a list's first record, a zone's launch) is a lower bound; one read after the GPU
//! was seen past `g` (an anchor found complete, a list read complete) an upper bound. The
//! clocks' rates differ by at most [`RATE_BOUND`], so each bound carries to every other GPU
//! time (`bounds.rs`). The offsets every mapping the bounds allow can take at `g` form the
//! interval `[lo(g), hi(g)]`: that is what the collector knows, and all it claims. A bound
//! read late is a wide interval: it can only narrow the set, never move it.
//!
//! **Segments.** Bounds that no mapping fits (an anchor's interval outside the set at its GPU
//! time: a suspend, a GPU counter that stopped, a host clock that stepped, a host clock slewed
//! beyond the rate bound) are a *discontinuity*: a new segment begins at that anchor, with
//! only the bounds from there on. A list is placed within its segment; a list whose own bounds
//! do not fit its segment (read after a discontinuity its segment has not seen yet), or that
//! lies between two segments, is placed from its own bounds alone. Nothing is refused.
//!
//! **Placing a list.** Every zone of a list gets the same offset ([`Placed::offset`]), so
//! durations and gaps inside a list are the GPU's, exact; where the offset must change, it
//! changes between lists. The offset is the middle of what the set allows over the list's
//! span, raised (never lowered) to keep every zone at or after its launch and the list after
//! the end of the one before it on its lane. Each zone's begin and end then carry their
//! *bound*: how far the true host time can be from the placed one, the larger distance from
//! the placed offset to the ends of the set at that GPU time.

pub(crate) use super::bounds::PointBound;
use super::bounds::{carry, Tent, Tents};

use crate::sink::ClockDiscontinuity as Discontinuity;
use std::collections::VecDeque;

/// Clock segments remembered: the current one and those before the latest discontinuities,
/// for lists emitted late. A list older than every segment kept is placed from its own
/// bounds alone (a wider bound, never a wrong one).
const SEGMENTS: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 8 };

/// Samples of the bound over a list's span, at most (its ends, and the bounds inside it):
/// beyond, a zone's bound is carried from fewer, so wider.
const SAMPLES: usize = 8;

/// A bound no time can be given: nothing bounds it on one side.
pub(crate) const UNBOUNDED: u64 = u64::MAX;

/// What is known of the offset over one segment: the best lower bound at any time, and the
/// best upper bound (kept negated, so that both are a [`Tents`] of lower bounds).
#[derive(Debug, Default, Clone)]
struct Known {
    lower: Tents,
    upper: Tents,
}

impl Known {
    fn lo(&self, gpu: i64) -> Option<i64> {
        self.lower.at(gpu)
    }

    fn hi(&self, gpu: i64) -> Option<i64> {
        self.upper.at(gpu).map(i64::saturating_neg)
    }

    /// Whether some mapping fits these bounds and `bound` too: its lower bound under the upper
    /// ones there, its upper bound over the lower ones (pairwise is enough for mappings whose
    /// rate is bounded: the Lipschitz extension).
    fn fits(&self, bound: &PointBound) -> bool {
        let under = |lower: i64| self.hi(bound.gpu).is_none_or(|hi| lower <= hi);
        let over = |upper: i64| self.lo(bound.gpu).is_none_or(|lo| upper >= lo);
        bound.lower.is_none_or(under) && bound.upper.is_none_or(over)
    }

    fn add(&mut self, bound: &PointBound) {
        if let Some(lower) = bound.lower {
            self.lower.insert(bound.gpu, lower);
        }
        if let Some(upper) = bound.upper {
            self.upper.insert(bound.gpu, upper.saturating_neg());
        }
    }

    /// The middle of what is known at `gpu` (one side if only one is known).
    fn middle(&self, gpu: i64) -> Option<i64> {
        match (self.lo(gpu), self.hi(gpu)) {
            (Some(lo), Some(hi)) => Some(midpoint(lo, hi)),
            (lo, hi) => lo.or(hi),
        }
    }
}

fn midpoint(a: i64, b: i64) -> i64 {
    ((i128::from(a) + i128::from(b)).div_euclid(2)) as i64
}

/// The bounds from one discontinuity to the next.
#[derive(Debug)]
struct Segment {
    /// The GPU time of the anchor that began it (`i64::MIN` for the first).
    from: i64,
    /// The latest GPU time any of its bounds was at: after it, until the next segment's
    /// start, nothing says on which side of the discontinuity a time lies.
    last: i64,
    /// The drift of the anchor that began it: its GPU times are those of that anchor's
    /// steps. An anchor or a list whose drift differs by `d` is off them by at most `d` (the
    /// rounding of the steps between), not by its whole drift: a segment's bounds are as
    /// tight an hour after a long step (a suspend read as one distance) as before it.
    drift: i64,
    known: Known,
}

/// What a list's own reads say of the offset: the host time read before its first record
/// (`None` where the list took no place at a first record), its launches (in its zones), and
/// the host time read after it was found complete.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListReads {
    pub(crate) first_host_ns: Option<i64>,
    pub(crate) read_host_ns: i64,
    /// How far the list's GPU times may be off the timeline's (`f32` rounding of the reads
    /// that placed it): 0 in the exact range.
    pub(crate) uncertain: i64,
    /// How far the GPU time of the anchor the list was read from may be off the timeline's
    /// (the `f32` rounding of the anchor steps before it, summed): what the list shares with
    /// every anchor after the same steps, and differs from the others by.
    pub(crate) drift: i64,
}

/// Where a list went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    /// Host time minus GPU time, for every zone of the list.
    pub(crate) offset: i64,
    /// Placed from its own bounds alone: they did not fit its segment, or it lies between
    /// two segments.
    pub(crate) alone: bool,
    /// How far its GPU times may be off those of the bounds it was placed with (its reads'
    /// rounding, and how far its anchor's drift is from its segment's): each zone's bound
    /// holds this much more.
    pub(crate) uncertain: i64,
}

/// The GPU-to-host mapping of one context (the module doc states its model).
#[derive(Debug)]
pub(crate) struct HostClock {
    /// Oldest first, `from` increasing; the last is the current one.
    segments: VecDeque<Segment>,
    /// Scratch for a list placed alone, and the tents near a list.
    alone: Known,
    near_lower: Vec<Tent>,
    near_upper: Vec<Tent>,
    samples: Vec<(i64, u64)>,
}

impl HostClock {
    pub(crate) fn new() -> Self {
        Self {
            segments: VecDeque::new(),
            alone: Known::default(),
            near_lower: Vec::new(),
            near_upper: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// An anchor: its GPU time was reached after the host read `before` and before it read
    /// `after` (`None`: not read, or found wrong: a pair whose host time is after the read
    /// that saw it complete), and its GPU time is off the timeline's by at most `drift`. Kept
    /// in the current segment if some mapping fits it (widened by how far its drift is from
    /// the segment's); otherwise it begins a new one (returned).
    pub(crate) fn anchor(&mut self, bound: PointBound, drift: i64) -> Option<Discontinuity> {
        let Some(current) = self.segments.back_mut() else {
            self.begin(i64::MIN, bound, drift);
            return None;
        };
        let widened = bound.widened(drift.abs_diff(current.drift).min(i64::MAX as u64) as i64);
        if current.known.fits(&widened) {
            current.known.add(&widened);
            current.last = current.last.max(bound.gpu);
            return None;
        }
        let old = current.known.middle(bound.gpu);
        self.begin(bound.gpu, bound, drift);
        let new = self.segments.back().and_then(|s| s.known.middle(bound.gpu));
        let (old, new) = (old.unwrap_or(0), new.unwrap_or(0));
        Some(Discontinuity { gpu_ns: bound.gpu, host_ns: bound.gpu.saturating_add(new), jump_ns: new - old })
    }

    fn begin(&mut self, from: i64, bound: PointBound, drift: i64) {
        let mut known = Known::default();
        known.add(&bound);
        self.segments.push_back(Segment { from, last: bound.gpu, drift, known });

        if self.segments.len() > SEGMENTS {
            self.segments.pop_front();
        }
    }

    /// Discontinuities so far are counted by the caller; segments kept now (tests).
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    fn segments(&self) -> usize {
        self.segments.len()
    }

    /// The segments a list spanning `first..=last` may lie in (their indices): the one that
    /// holds it, or, for a list between the last bound of one segment and the start of the
    /// next (the discontinuity lies somewhere between), both. None for a list that straddles
    /// a segment's start or is older than every segment kept.
    fn candidates(&self, first: i64, last: i64) -> (Option<usize>, Option<usize>) {
        let Some(at) = self.segments.partition_point(|s| s.from <= first).checked_sub(1) else {
            return (None, None);
        };
        let Some(next) = self.segments.get(at + 1) else { return (Some(at), None) };
        if last >= next.from {
            return (None, None);
        }
        if first > self.segments[at].last {
            return (Some(at), Some(at + 1));
        }
        (Some(at), None)
    }

    /// How far a list's GPU times may be off those of segment `i`'s bounds: its reads'
    /// rounding, and how far its anchor's drift is from the segment's.
    fn uncertain_in(&self, i: usize, reads: &ListReads) -> i64 {
        let apart = reads.drift.abs_diff(self.segments[i].drift).min(i64::MAX as u64) as i64;
        reads.uncertain.max(0).saturating_add(apart)
    }

    /// The segment a list with the bounds `own` (its GPU times known as `reads` says) is
    /// placed in: the one it lies in if they fit it, or, between two, the one of the two
    /// they fit if they fit one only (they cannot belong to a segment whose bounds they
    /// contradict). `None`: placed alone.
    fn segment_for(
        &self,
        first: i64,
        last: i64,
        own: &[Option<PointBound>],
        reads: &ListReads,
    ) -> Option<usize> {
        let fits = |i: usize| {
            let uncertain = self.uncertain_in(i, reads);
            own.iter().flatten().all(|b| self.segments[i].known.fits(&b.widened(uncertain)))
        };
        match self.candidates(first, last) {
            (Some(i), None) => fits(i).then_some(i),
            (Some(i), Some(j)) => match (fits(i), fits(j)) {
                (true, false) => Some(i),
                (false, true) => Some(j),
                _ => None,
            },
            _ => None,
        }
    }

    /// Places a list whose zones (GPU times on the context's timeline) have the edges
    /// `edges`: adds its own bounds (`reads`, and `launch`, its best launch as an offset at
    /// a GPU time) to its segment if they fit, chooses its offset, and returns it with each
    /// edge's bound through `bound_of` (begin, end), plus `rounding`, how far its GPU times
    /// may be off. The offset keeps every launch before its zone (`launch_floor`, the highest
    /// launch offset), and is at least `floor` (the end of the list before it on its lane) as
    /// far as the set allows.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn place(
        &mut self,
        first: i64,
        last: i64,
        reads: ListReads,
        launch: Option<Tent>,
        launch_floor: Option<i64>,
        floor: Option<i64>,
    ) -> (Placed, ListBound<'_>) {
        // Its GPU times are known to within `uncertain` of those of the bounds it is placed
        // with (`uncertain_in`; alone, its reads' rounding): its own bounds are that much
        // wider, and so is each zone's.
        let own_lower = reads.first_host_ns.map(|host| PointBound::from_host(first, Some(host), None));
        let own_upper = PointBound::from_host(last, None, Some(reads.read_host_ns));
        let own_launch = launch.map(|t| PointBound { gpu: t.gpu, lower: Some(t.at), upper: None });
        // (An array, not a `Vec`: no allocation per list.)
        let mut own = [own_lower, own_launch, Some(own_upper)];
        let segment = self.segment_for(first, last, &own, &reads);
        let uncertain = segment.map_or(reads.uncertain.max(0), |i| self.uncertain_in(i, &reads));
        for b in own.iter_mut().flatten() {
            *b = b.widened(uncertain);
        }
        if let Some(i) = segment {
            let segment = &mut self.segments[i];
            for b in own.iter().flatten() {
                segment.known.add(b);
            }
            segment.last = segment.last.max(last);
        }
        let HostClock { segments, alone: scratch, near_lower, near_upper, samples } = self;
        let known = match segment {
            Some(i) => &segments[i].known,
            None => {
                *scratch = Known::default();
                for b in own.iter().flatten() {
                    scratch.add(b);
                }
                &*scratch
            }
        };
        let alone = segment.is_none();
        near_lower.clear();
        near_upper.clear();
        known.lower.around(first, last, near_lower);
        known.upper.around(first, last, near_upper);
        // Where the set is sampled: the span's ends, and the bounds inside it (where the
        // set's narrowest points lie).
        samples.clear();
        let inside =
            near_lower.iter().chain(near_upper.iter()).map(|t| t.gpu).filter(|&g| first < g && g < last);
        samples.extend(inside.map(|g| (g, 0)));
        if samples.len() > SAMPLES - 2 {
            samples.sort_unstable();
            samples.dedup();
            let step = samples.len().div_ceil(SAMPLES - 2);
            let mut k = 0;
            samples.retain(|_| {
                k += 1;
                (k - 1) % step == 0
            });
        }
        samples.push((first, 0));
        samples.push((last, 0));
        let lo = |g: i64| super::bounds::best_at(near_lower, g);
        let hi = |g: i64| super::bounds::best_at(near_upper, g).map(i64::saturating_neg);
        // The offset: the middle of the set over the span, within what every sample allows
        // where one offset can be (the span is short against the set's width), raised to the
        // floors.
        let (mut low, mut high) = (None::<i64>, None::<i64>);
        let (mut lowest, mut highest) = (None::<i64>, None::<i64>);
        for &(g, _) in samples.iter() {
            if let Some(lo) = lo(g) {
                low = low.max(Some(lo));
                lowest = Some(lowest.map_or(lo, |l| l.min(lo)));
            }
            if let Some(hi) = hi(g) {
                high = Some(high.map_or(hi, |h| h.min(hi)));
                highest = highest.max(Some(hi));
            }
        }
        let middle = match (lowest, highest) {
            (Some(a), Some(b)) => Some(midpoint(a, b)),
            (a, b) => a.or(b),
        };
        // Every lower bound holds: nothing is drawn before the host asked for it.
        let raised = low.max(launch_floor);
        let offset = match (middle, raised, high) {
            (Some(m), Some(r), Some(h)) if r <= h => m.clamp(r, h),
            (_, Some(r), _) => r,
            (Some(m), None, _) => m,
            (None, None, h) => h.unwrap_or(reads.read_host_ns.saturating_sub(last)),
        };
        // After the list before it on its lane, as far as the set allows: a list placed
        // higher than this one's set can be (from wider bounds) does not drag it along.
        let offset = match (floor, high) {
            (Some(f), Some(h)) if f > offset => offset.max(f.min(h)),
            (Some(f), None) => offset.max(f),
            _ => offset,
        };
        for sample in samples.iter_mut() {
            let g = sample.0;
            sample.1 = match (lo(g), hi(g)) {
                (Some(lo), Some(hi)) => {
                    offset.saturating_sub(lo).max(hi.saturating_sub(offset)).max(0) as u64
                }
                _ => UNBOUNDED,
            };
        }
        (Placed { offset, alone, uncertain }, ListBound { samples })
    }
}

/// The bound of any GPU time of a placed list: carried from the set's samples over its span,
/// the least of them (exact at the samples; the bound changes by at most the rate bound
/// between).
pub(crate) struct ListBound<'a> {
    samples: &'a [(i64, u64)],
}

impl ListBound<'_> {
    /// How far the true host time of GPU time `gpu` may be from the placed one (ns).
    #[inline]
    pub(crate) fn at(&self, gpu: i64) -> u64 {
        let mut best = UNBOUNDED;
        for &(g, bound) in self.samples {
            best = best.min(bound.saturating_add(carry(g.abs_diff(gpu)) as u64));
        }
        best
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
