//! The estimate of the host-minus-GPU offset, as a line of GPU time, from bounds.
//!
//! What the collector learns of the two clocks is a set of *bounds* on the offset
//! `host - gpu` at given GPU times:
//!
//! - **Lower bounds**: a calibration pair (the host time read just before an anchor was
//!   recorded, and the anchor's GPU time), and a launch (the host time read just before a
//!   zone's event was recorded, and that event's GPU time). The GPU reaches the event after
//!   the host read the time, so `host - gpu` is at most the true offset: late (a busy GPU,
//!   a driver lock held while the host waits) makes a bound weak, never wrong.
//! - **Upper bounds**: an anchor observed complete (the host time read just after the read
//!   that found it complete): the GPU reached it before, so `host - gpu` is at least the true
//!   offset.
//!
//! The estimate ([`Estimator::line`]) is the line `offset(g) = base + drift * g` that lies on
//! or above every lower bound it uses, as close to them as possible: the linear program of
//! Moon, Skelly and Towsley ("Estimation and removal of clock skew from network delay
//! measurements", 1999), whose solution is the edge of the bounds' upper convex hull above
//! their mean GPU time. Three refinements make it trustworthy for hours:
//!
//! - **Late bounds do not tilt the line.** A late bound is consistent with the true line (it
//!   is below it), and so is a line tilted down through it: the program alone would invent
//!   a drift whenever the GPU stays busy (every pair then late by the same amount). So the
//!   drift is fitted only from bounds within [`LATE_NS`] of the current line (or above it):
//!   a run of late bounds leaves the line, and its drift, as the timely bounds made them.
//!   A real drift moves the bounds away from the line gradually, by much less than
//!   [`LATE_NS`] per refit, so the line follows it.
//! - **A bound above the line moves it at once.** The line never stays below a lower bound
//!   it has seen (the base rises to it, the drift kept until the next refit).
//! - **Wrong bounds are dropped.** A lower bound above an upper bound (carried with the
//!   largest plausible drift, [`MAX_DRIFT`]) cannot both be right: the host clock does not
//!   run backwards between a read and a later read, so the lower bound is the wrong one
//!   (a calibration a backend reported too late, a first pair taken while the host clock
//!   jumped). It is dropped and the line fitted anew from what remains.
//!
//! Bounds are kept per [`BUCKET_NS`] of GPU time (the best lower and the least upper of
//! each), the last [`HISTORY`] buckets of timely bounds (about 33 s: a drift of 0.5 ppm
//! moves the offset 16 µs over it). When no timely bound has come for longer (a GPU busy
//! for hours), the line keeps the drift and base it had: nothing newer says otherwise.

use std::collections::VecDeque;

/// GPU nanoseconds per bucket of bounds.
pub(crate) const BUCKET_NS: i64 = 16_000_000;
/// A bucket's best lower bound this far below the line (ns) is late: kept as a bound, not
/// used to fit the drift.
pub(crate) const LATE_NS: f64 = 50_000.0;
/// The largest drift taken as plausible (host ns per GPU ns, minus 1): 0.1%, ten times a
/// poor crystal's.
pub(crate) const MAX_DRIFT: f64 = 1e-3;
/// Buckets still open to bounds that arrive out of order (lists are emitted by lane, not by
/// GPU time), newest last.
const OPEN: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 4 };
/// The shortest span of GPU time a drift is fitted over (500 ms).
pub(crate) const MIN_BASELINE_NS: i64 = 500_000_000;
/// How fast the fit forgets: a bound this much GPU time older than the latest weighs half
/// as much (4 s).
const RECENCY_NS: f64 = 4e9;
/// Closed buckets kept for the fit, oldest dropped first.
pub(crate) const HISTORY: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 2048 };
/// An upper bound this far (ns) below a lower bound, beyond what drift explains, proves the
/// lower bound wrong: a margin for host clocks read with jitter (100 µs).
const CONTRADICTION_NS: f64 = 100_000.0;

/// A bound on the offset `host - gpu` (nanoseconds) at GPU time `gpu`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bound {
    pub(crate) gpu: i64,
    pub(crate) offset: f64,
}

/// The estimate of the offset as a line of GPU time: `offset(g) = base + drift * g`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Line {
    pub(crate) base: f64,
    pub(crate) drift: f64,
}

impl Line {
    pub(crate) fn at(&self, gpu: i64) -> f64 {
        self.base + self.drift * gpu as f64
    }
}

/// The bounds of one open bucket of GPU time.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    index: i64,
    /// The largest lower bound in the bucket.
    lower: Option<Bound>,
}

/// The timely bounds the drift is fitted over (the best of each closed bucket whose best was
/// timely), with what the fit needs kept up to date as bounds come and go, so that a refit
/// costs the hull's size, not the history's: the upper hull of the points, and the sums of
/// their recency weights (weight `2^(-back / RECENCY_NS)` for a point `back` ns before the
/// latest) and of weight times `back`.
#[derive(Debug, Default)]
struct Fitted {
    points: VecDeque<Bound>,
    /// The upper hull of `points`: kept as points come, and built anew from every point
    /// when the oldest point, dropped, was one of its vertices (the points that vertex hid
    /// may be vertices now; a hull left with its newest vertex alone once tilted the line by
    /// 9 µs in tests/clock_hours.rs, ten hours of bounds 125 ms apart).
    hull: VecDeque<Bound>,
    weights: f64,
    moment: f64,
}

impl Fitted {
    fn weight(back: f64) -> f64 {
        (-back / RECENCY_NS * std::f64::consts::LN_2).exp()
    }

    /// Adds a point newer than every point in.
    fn push(&mut self, p: Bound) {
        if let Some(latest) = self.points.back() {
            // Every weight ages by the step; every `back` grows by it.
            let step = (p.gpu - latest.gpu) as f64;
            let aged = Self::weight(step);
            self.moment = aged * (self.moment + step * self.weights);
            self.weights *= aged;
        }
        self.weights += 1.0;
        self.points.push_back(p);
        self.push_hull(p);
        if self.points.len() > HISTORY {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        let (Some(oldest), Some(latest)) = (self.points.pop_front(), self.points.back()) else {
            *self = Self::default();
            return;
        };
        let back = (latest.gpu - oldest.gpu) as f64;
        let weight = Self::weight(back);
        self.weights -= weight;
        self.moment -= weight * back;
        if self.hull.front() == Some(&oldest) {
            self.hull.pop_front();
            self.expose_hidden();
        }
    }

    /// After the hull's first vertex left with its point: the points it hid (those before
    /// the hull's new first vertex) may be vertices now. Their own hull is joined to the
    /// rest by the upper bridge between the two chains: this costs the points hidden and
    /// the vertices dropped, not the history (collinear points are vertices, so a run of
    /// exact bounds hides none).
    fn expose_hidden(&mut self) {
        let end =
            self.hull.front().map_or(self.points.len(), |v| self.points.partition_point(|p| p.gpu < v.gpu));
        if end == 0 {
            return;
        }
        let mut left: Vec<Bound> = Vec::with_capacity(end.min(64));
        for &p in self.points.range(..end) {
            while left.len() >= 2 && below(left[left.len() - 2], left[left.len() - 1], p) {
                left.pop();
            }
            left.push(p);
        }
        // The upper bridge: drop the left chain's last vertices and the right chain's first
        // ones while they lie below the segment that would join past them.
        loop {
            let mut changed = false;
            while let (2.., Some(&first)) = (left.len(), self.hull.front()) {
                if !below(left[left.len() - 2], left[left.len() - 1], first) {
                    break;
                }
                left.pop();
                changed = true;
            }
            while let (Some(&last), 2..) = (left.last(), self.hull.len()) {
                if !below(last, self.hull[0], self.hull[1]) {
                    break;
                }
                self.hull.pop_front();
                changed = true;
            }
            if !changed {
                break;
            }
        }
        for &p in left.iter().rev() {
            self.hull.push_front(p);
        }
    }

    /// Adds `p`, newer than every point in, to the hull.
    fn push_hull(&mut self, p: Bound) {
        while self.hull.len() >= 2 {
            let (a, b) = (self.hull[self.hull.len() - 2], self.hull[self.hull.len() - 1]);
            if below(a, b, p) {
                self.hull.pop_back();
            } else {
                break;
            }
        }
        self.hull.push_back(p);
    }

    /// The recency-weighted mean GPU time of the points.
    fn mean(&self) -> Option<f64> {
        let latest = self.points.back()?;
        Some(latest.gpu as f64 - self.moment / self.weights)
    }
}

/// Whether `b` is below the segment from `a` to `p` (`a`, `b`, `p` in GPU time order): then
/// `b` is no vertex of an upper hull through `a` and `p`. A point on the segment stays a
/// vertex (it changes no edge's slope, and leaves nothing hidden behind it).
fn below(a: Bound, b: Bound, p: Bound) -> bool {
    (b.gpu - a.gpu) as f64 * (p.offset - a.offset) - (b.offset - a.offset) * (p.gpu - a.gpu) as f64 > 0.0
}

/// Turns bounds into the best offset line (the module doc says how).
#[derive(Debug)]
pub(crate) struct Estimator {
    /// Buckets still open, oldest first, indices increasing.
    open: VecDeque<Bucket>,
    /// The best lower bound of each closed bucket that had one, timely or not, oldest first
    /// (the fit starts anew from them when an upper bound proves the line wrong).
    closed: VecDeque<Bound>,
    fitted: Fitted,
    line: Option<Line>,
    /// Whether a drift was fitted yet (over [`MIN_BASELINE_NS`] or more). Until then every
    /// bound is timely: the line's drift is a guess, and a real drift moves the bounds away
    /// from it by [`LATE_NS`] in 500 ms at 100 ppm, which left them all "late", and the
    /// drift never fitted, at -100 ppm (tests/clock_hours.rs, rounds 250 ms apart).
    drift_fitted: bool,
}

impl Estimator {
    pub(crate) fn new() -> Self {
        Self {
            open: VecDeque::new(),
            closed: VecDeque::new(),
            fitted: Fitted::default(),
            line: None,
            drift_fitted: false,
        }
    }

    /// The estimate now (`None` before any lower bound).
    pub(crate) fn line(&self) -> Option<Line> {
        self.line
    }

    /// Whether `lower` is fitted: within [`LATE_NS`] of the line, or above it (any bound,
    /// before a drift was fitted).
    fn timely(&self, lower: Bound) -> bool {
        !self.drift_fitted || self.line.is_none_or(|line| lower.offset >= line.at(lower.gpu) - LATE_NS)
    }

    /// The bucket for `gpu`, opened if it is newer than every open one (closing the open
    /// ones [`OPEN`] buckets of GPU time or more older, then fitting anew); `None` if it is
    /// older than every open one. Buckets close by GPU time, not by count: with bounds a
    /// quarter of a second apart (a collector that runs seldom), a bucket waited for four
    /// newer ones, a second, before its bound was fitted, and a drift went unseen for as
    /// long (tests/clock_hours.rs, ten hours at one round every 250 ms: 12.5 µs off at
    /// 1.25 s with a -10 ppm drift).
    fn bucket(&mut self, gpu: i64) -> Option<&mut Bucket> {
        let index = gpu.div_euclid(BUCKET_NS);
        if self.open.back().is_none_or(|b| b.index < index) {
            self.open.push_back(Bucket { index, lower: None });
            let oldest_open = index - (OPEN as i64 - 1);
            if self.open.front().is_some_and(|b| b.index < oldest_open) {
                while self.open.front().is_some_and(|b| b.index < oldest_open) {
                    let closing = self.open.pop_front().expect("an open bucket");
                    if let Some(lower) = closing.lower {
                        self.closed.push_back(lower);
                        if self.closed.len() > HISTORY {
                            self.closed.pop_front();
                        }
                        if self.timely(lower) {
                            self.fitted.push(lower);
                        }
                    }
                }
                self.refit();
            }
        }
        let at = self.open.partition_point(|b| b.index < index);
        self.open.get_mut(at).filter(|b| b.index == index)
    }

    /// A lower bound: the offset at `gpu` is at least `offset`. Whether the line changed.
    pub(crate) fn lower(&mut self, bound: Bound) -> bool {
        let before = self.line;
        if let Some(bucket) = self.bucket(bound.gpu) {
            if bucket.lower.is_none_or(|best| bound.offset > best.offset) {
                bucket.lower = Some(bound);
            }
        }
        match &mut self.line {
            None => self.refit(),
            // Never below a bound seen: the base rises at once, the drift waits for a refit.
            Some(line) if bound.offset > line.at(bound.gpu) => line.base += bound.offset - line.at(bound.gpu),
            Some(_) => {}
        }
        self.line != before
    }

    /// An upper bound: the offset at `gpu` is at most `offset`. A line above it is wrong:
    /// the lower bounds it proves wrong are dropped, and the line is fitted anew from every
    /// bound left, as if none had been fitted yet. Whether the line changed.
    pub(crate) fn upper(&mut self, bound: Bound) -> bool {
        // Opens the bucket (the bound's GPU time moves the fit on), keeps nothing in it.
        let _ = self.bucket(bound.gpu);
        let Some(line) = self.line else { return false };
        if line.at(bound.gpu) <= bound.offset + CONTRADICTION_NS {
            return false;
        }
        let right = |lower: &Bound| {
            let carried = MAX_DRIFT * (lower.gpu - bound.gpu).unsigned_abs() as f64;
            lower.offset <= bound.offset + carried + CONTRADICTION_NS
        };
        for bucket in &mut self.open {
            bucket.lower = bucket.lower.filter(right);
        }
        self.closed.retain(right);
        // What was late against the wrong line may be timely against the right one.
        self.fitted = Fitted::default();
        for &lower in &self.closed {
            self.fitted.push(lower);
        }
        self.line = None;
        self.drift_fitted = false;
        self.refit();
        true
    }

    /// Fits the line anew over the fitted bounds, and the open buckets' bounds that are
    /// timely now (only those, while nothing is fitted yet).
    fn refit(&mut self) {
        let open: Vec<Bound> = self.open.iter().filter_map(|b| b.lower).filter(|&l| self.timely(l)).collect();
        let drift = self.line.map_or(0.0, |l| l.drift);
        let line = if self.fitted.points.is_empty() {
            let (first, last) = (open.first(), open.last());
            let baseline = last.zip(first).map_or(0, |(l, f)| l.gpu - f.gpu);
            self.drift_fitted |= baseline >= MIN_BASELINE_NS && open.len() >= 2;
            line_over(&open, drift)
        } else {
            let (first, latest) = (self.fitted.points.front(), self.fitted.points.back());
            let baseline = latest.zip(first).map_or(0, |(l, f)| l.gpu - f.gpu);
            let mean = self.fitted.mean();
            let hull = &self.fitted.hull;
            let drift =
                match mean.filter(|_| baseline >= MIN_BASELINE_NS).and_then(|mean| slope_at(hull, mean)) {
                    Some(fitted) => {
                        self.drift_fitted = true;
                        fitted
                    }
                    None => drift,
                };
            touching(touched(hull, drift).chain(&open), drift)
        };
        if let Some(line) = line {
            self.line = Some(line);
        }
    }
}

/// The line on or above `points` (sorted by GPU time) that minimises the sum of its heights
/// above them, each weighted by how recent it is (a weight that halves every [`RECENCY_NS`]
/// back from the latest point): the upper hull's edge over the points' weighted mean GPU
/// time, its slope within [`MAX_DRIFT`]. The weighting puts that edge near the present,
/// where the line is used, on a baseline long enough for its slope. Points that span less
/// than [`MIN_BASELINE_NS`] keep `drift` (a bound a few microseconds weak would tilt a line
/// through a few milliseconds by hundreds of ppm). `None` without points.
fn line_over(points: &[Bound], drift: f64) -> Option<Line> {
    let (first, last) = (points.first()?, points.last()?);
    let drift = if last.gpu - first.gpu >= MIN_BASELINE_NS {
        let mut fitted = Fitted::default();
        points.iter().for_each(|&p| fitted.push(p));
        let mean = fitted.mean()?;
        slope_at(&fitted.hull, mean).unwrap_or(drift)
    } else {
        drift
    };
    touching(points.iter(), drift)
}

/// The vertices of an upper hull that a line of slope `drift` on or above it may touch: the
/// vertex where the edges' slopes (decreasing) pass below `drift`, and its neighbours (for
/// points a rounding error off a line). A binary search: the hull of exact bounds on a
/// line keeps every point, and the fit runs at every bucket closed.
/// The hull stays a ring buffer (`VecDeque`): made contiguous at every refit, a hull of
/// thousands of collinear vertices was rotated at every bucket closed.
fn touched(hull: &VecDeque<Bound>, drift: f64) -> impl Iterator<Item = &Bound> {
    if hull.len() < 2 {
        return hull.range(..);
    }
    let slope = |i: usize| (hull[i + 1].offset - hull[i].offset) / (hull[i + 1].gpu - hull[i].gpu) as f64;
    let (mut lo, mut hi) = (0, hull.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if slope(mid) >= drift {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    hull.range(lo.saturating_sub(1)..(lo + 2).min(hull.len()))
}

/// The line of slope `drift` on or above every point, touching one. `None` without points.
fn touching<'a>(points: impl Iterator<Item = &'a Bound>, drift: f64) -> Option<Line> {
    let base = points.map(|p| p.offset - drift * p.gpu as f64).reduce(f64::max)?;
    Some(Line { base, drift })
}

/// The slope of the hull's edge over GPU time `mean` (the edge at the nearer end when `mean`
/// is outside the hull), within [`MAX_DRIFT`]; `None` for a hull of one point.
fn slope_at(hull: &VecDeque<Bound>, mean: f64) -> Option<f64> {
    if hull.len() < 2 {
        return None;
    }
    let right = hull.partition_point(|p| (p.gpu as f64) < mean).clamp(1, hull.len() - 1);
    let (a, b) = (hull[right - 1], hull[right]);
    Some(((b.offset - a.offset) / (b.gpu - a.gpu) as f64).clamp(-MAX_DRIFT, MAX_DRIFT))
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    fn b(gpu: i64, offset: f64) -> Bound {
        Bound { gpu, offset }
    }

    #[test]
    fn the_fit_is_the_hull_edge_over_the_mean_and_lies_on_or_above_every_point() {
        const S: i64 = 1_000_000_000;
        let points = [b(0, 0.0), b(S, 50_000.0), b(2 * S, 40_000.0), b(3 * S, 90_000.0), b(4 * S, 20_000.0)];
        let line = line_over(&points, 0.0).unwrap();
        assert!(points.iter().all(|p| line.at(p.gpu) >= p.offset - 1e-6), "{line:?}");
        // Weighted mean GPU time about 2.1 s: the hull edge from (1 s, 50 µs) to (3 s, 90 µs).
        assert!((line.drift - 2e-5).abs() < 1e-15, "{line:?}");
        assert!((line.at(S) - 50_000.0).abs() < 1e-6);
    }

    #[test]
    fn a_short_span_keeps_the_drift_given() {
        let line = line_over(&[b(5, 1.0), b(5, 3.0)], 1e-6).unwrap();
        assert_eq!(line.drift, 1e-6);
        assert!((line.at(5) - 3.0).abs() < 1e-9);
        // Three microseconds weak, 40 ms later: no tilt.
        let line = line_over(&[b(0, 10_000.0), b(40_000_000, 7_000.0)], 0.0).unwrap();
        assert_eq!(line, Line { base: 10_000.0, drift: 0.0 });
    }

    #[test]
    fn a_drift_is_followed_from_timely_bounds() {
        let mut estimator = Estimator::new();
        // -0.9 ppm over 100 s of exact bounds, one every 4 ms (40 ms under Miri).
        let step = if cfg!(miri) { 40_000_000 } else { 4_000_000 };
        for k in 0..=(100_000_000_000 / step) {
            let gpu = k * step;
            estimator.lower(b(gpu, 1_000.0 - 0.9e-6 * gpu as f64));
        }
        let line = estimator.line().unwrap();
        assert!((line.drift + 0.9e-6).abs() < 1e-9, "{line:?}");
        let end = 100_000_000_000;
        assert!((line.at(end) - (1_000.0 - 0.9e-6 * end as f64)).abs() < 2.0, "{line:?}");
    }

    #[test]
    fn late_bounds_after_timely_ones_leave_the_line_and_its_drift() {
        let mut estimator = Estimator::new();
        let truth = |gpu: i64| 5_000.0 + 20e-6 * gpu as f64;
        // 1.2 s of exact bounds, then 10 s of bounds 1 ms late.
        for k in 0..1_200i64 {
            let gpu = k * 1_000_000;
            estimator.lower(b(gpu, truth(gpu)));
        }
        for k in 1_200..11_200i64 {
            let gpu = k * 1_000_000;
            estimator.lower(b(gpu, truth(gpu) - 1_000_000.0));
        }
        let line = estimator.line().unwrap();
        let end = 11_200_000_000;
        assert!((line.at(end) - truth(end)).abs() < 50.0, "{} ns off", line.at(end) - truth(end));
    }

    #[test]
    fn a_lower_bound_above_the_line_raises_it_at_once() {
        let mut estimator = Estimator::new();
        estimator.lower(b(0, 100.0));
        assert!(estimator.lower(b(1_000, 150.0)));
        assert!(estimator.line().unwrap().at(1_000) >= 150.0);
        assert!(!estimator.lower(b(2_000, 10.0)), "a weaker bound changes nothing");
    }

    #[test]
    fn lower_bounds_an_upper_bound_proves_wrong_are_dropped() {
        let mut estimator = Estimator::new();
        // The first pairs 10 ms too high, then exact ones.
        for k in 0..4 {
            estimator.lower(b(k * 1_000, 10_000_000.0));
        }
        for k in 1..100i64 {
            estimator.lower(b(k * 1_000_000, 0.0));
        }
        assert!(estimator.line().unwrap().at(100_000_000) > 9_000_000.0, "the wrong pairs rule");
        assert!(estimator.upper(b(100_000_000, 300.0)));
        let line = estimator.line().unwrap();
        assert!(line.at(100_000_000).abs() < 1.0, "{line:?}");
        assert!(!estimator.upper(b(101_000_000, 500.0)), "a consistent upper bound changes nothing");
    }

    #[test]
    fn the_hull_keeps_only_vertices() {
        let mut fitted = Fitted::default();
        for p in [b(0, 0.0), b(1, 1.0), b(2, 2.0), b(3, 0.0), b(4, 5.0)] {
            fitted.push(p);
        }
        assert_eq!(fitted.hull, [b(0, 0.0), b(4, 5.0)]);
    }

    /// The vertices a line of any slope touches are among those `touched` gives.
    #[test]
    fn the_touched_vertices_hold_the_highest_point_for_every_slope() {
        let mut fitted = Fitted::default();
        for (i, offset) in [0.0, 40.0, 70.0, 90.0, 100.0, 105.0, 100.0, 80.0, 30.0].into_iter().enumerate() {
            fitted.push(b(i as i64 * 10, offset));
        }
        let hull = fitted.hull.clone();
        for drift in [-10.0, -5.0, -2.0, -0.5, 0.0, 0.3, 0.5, 1.0, 2.5, 4.0, 10.0] {
            let all = touching(hull.iter(), drift).unwrap();
            let near = touching(touched(&hull, drift), drift).unwrap();
            assert_eq!(all, near, "slope {drift}");
        }
    }

    /// The hull kept as points come and go is the hull built from the points left, for
    /// every history length (pseudo-random offsets, some on a line, some far above).
    #[test]
    #[cfg_attr(miri, ignore = "millions of steps: arithmetic only, no raw pointer or atomic")]
    fn the_hull_after_the_oldest_points_leave_is_the_hull_of_the_points_left() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut fitted = Fitted::default();
        for i in 0..(3 * HISTORY as i64) {
            let offset = match next() % 4 {
                0 => 0.0,
                1 => (next() % 1000) as f64,
                2 => -((next() % 100_000) as f64),
                _ => 5_000.0 + (next() % 10) as f64,
            };
            fitted.push(b(i * 1000, offset));
            let mut expected: Vec<Bound> = Vec::new();
            for &p in &fitted.points {
                while expected.len() >= 2
                    && below(expected[expected.len() - 2], expected[expected.len() - 1], p)
                {
                    expected.pop();
                }
                expected.push(p);
            }
            assert_eq!(fitted.hull, expected, "after point {i}");
        }
    }
}
