//! The upper hull of a window of bounds and the line fitted to it (docs/design.md, section 8,
//! "One clock"): the solution of the linear program of Moon, Skelly and Towsley (1999), the
//! line on or above every point as close to them as possible, is an edge of their upper
//! convex hull. The hull is kept as points come and go, so a refit costs the hull's
//! logarithm and the points a leaving vertex hid, not the history.

use super::{Bound, Line, HISTORY, MAX_DRIFT, RECENCY_NS};
use std::collections::VecDeque;

/// The bounds a line is fitted over, oldest first, with what the fit needs kept up to date as
/// bounds come and go, so that a refit costs the hull's size, not the history's: the upper
/// hull of the points, and the sums of their recency weights (weight `2^(-back / RECENCY_NS)`
/// for a point `back` ns before the latest) and of weight times `back`. At most [`HISTORY`]
/// points, the oldest dropped first.
#[derive(Debug, Default)]
pub(super) struct Fitted {
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
    pub(super) fn push(&mut self, p: Bound) {
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

    /// GPU time from the oldest point to the latest (0 without points).
    pub(super) fn span(&self) -> i64 {
        match (self.points.front(), self.points.back()) {
            (Some(first), Some(last)) => last.gpu - first.gpu,
            _ => 0,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The slope of the line on or above the points that minimises the sum of its heights
    /// above them, each weighted by how recent it is: the upper hull's edge over the points'
    /// weighted mean GPU time, within [`MAX_DRIFT`]. The weighting puts that edge near the
    /// present, where the line is used, on a baseline long enough for its slope. `None` for
    /// fewer than two distinct points.
    pub(super) fn slope(&self) -> Option<f64> {
        slope_at(&self.hull, self.mean()?)
    }

    /// The line of slope `drift` on or above every point and every one of `more`, touching
    /// one (found among the hull's vertices near that slope, not the whole history). `None`
    /// without any.
    pub(super) fn line_through<'a>(
        &'a self,
        drift: f64,
        more: impl Iterator<Item = &'a Bound>,
    ) -> Option<Line> {
        touching(touched(&self.hull, drift).chain(more), drift)
    }

    /// The points, oldest first.
    pub(super) fn points(&self) -> impl Iterator<Item = &Bound> {
        self.points.iter()
    }
}

/// Whether `b` is below the segment from `a` to `p` (`a`, `b`, `p` in GPU time order): then
/// `b` is no vertex of an upper hull through `a` and `p`. A point on the segment stays a
/// vertex (it changes no edge's slope, and leaves nothing hidden behind it).
fn below(a: Bound, b: Bound, p: Bound) -> bool {
    (b.gpu - a.gpu) as f64 * (p.offset - a.offset) - (b.offset - a.offset) * (p.gpu - a.gpu) as f64 > 0.0
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
pub(super) fn touching<'a>(points: impl Iterator<Item = &'a Bound>, drift: f64) -> Option<Line> {
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
        let mut fitted = Fitted::default();
        points.iter().for_each(|&p| fitted.push(p));
        let line = fitted.line_through(fitted.slope().unwrap(), std::iter::empty()).unwrap();
        assert!(points.iter().all(|p| line.at(p.gpu) >= p.offset - 1e-6), "{line:?}");
        // Weighted mean GPU time about 2.1 s: the hull edge from (1 s, 50 µs) to (3 s, 90 µs).
        assert!((line.drift - 2e-5).abs() < 1e-15, "{line:?}");
        assert!((line.at(S) - 50_000.0).abs() < 1e-6);
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
