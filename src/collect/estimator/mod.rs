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
//! or above the lower bounds of its *window*, as close to them as possible: the linear
//! program of Moon, Skelly and Towsley ("Estimation and removal of clock skew from network
//! delay measurements", 1999), whose solution is the edge of the bounds' upper convex hull
//! above their mean GPU time (`hull.rs`). Four rules make it trustworthy for hours while
//! the host clock's rate changes and the GPU is busy:
//!
//! - **Late is a step, a rate change is a slope.** The offset's rate changes by at most
//!   [`STEP_RATE`] (twice the largest plausible drift), so a bound that falls further below
//!   the line than that since the last bound on it is *late* (a busy GPU reached its event
//!   late): the lateness is measured there, and the bounds that follow, as late, are raised
//!   by it. Late bounds then say how the offset moves, at the truth's rate, and the line
//!   follows the host clock through hours of a busy GPU. A bound within [`LATE_NS`] of the
//!   line ends the lateness (the GPU is idle again); one above it in the lateness's first
//!   second lowers it (the first late bounds were later than the GPU's steady lateness).
//! - **A run on one side is a rate change.** Bounds that leave the line gradually are a
//!   rate change (NTP or chrony slewing the host clock), not lateness. The bounds off the
//!   line since the last one on it (below it by more than [`RUN_NS`], or above it: the line
//!   rises to each, so a rate that grows shows as bounds each a little above) form a *run*;
//!   when a line of their own fits them exactly and parts from the line now, the window
//!   starts anew where that line's bounds begin, and the line is that line. Exactly:
//!   [`SUPPORT`] bounds on it at distinct times, half on each half of the run and over
//!   [`SUPPORT_SPAN_NS`] or more, each within [`SUPPORT_NS`], and a quarter of all its
//!   bounds ([`EXACT_SHARE`]). Jittered bounds seldom show one: their best lie near their
//!   envelope, but few of them on a line through two of them. Then the line follows them by
//!   the fit alone, over seconds.
//! - **A bound above the line moves it at once.** The line never stays below a lower bound
//!   it has seen (the base rises to it, the drift kept until the next refit).
//! - **Wrong bounds are dropped.** A lower bound above an upper bound (carried with the
//!   largest plausible drift, [`MAX_DRIFT`]) cannot both be right: the host clock does not
//!   run backwards between a read and a later read, so the lower bound is the wrong one
//!   (a calibration a backend reported too late, a first pair taken while the host clock
//!   jumped). It is dropped and the bounds kept are taken again from the first.
//!
//! Bounds are kept per [`BUCKET_NS`] of GPU time (the best of each), the last [`HISTORY`]
//! buckets (about 33 s at a bound every few milliseconds: a drift of 0.5 ppm moves the
//! offset 16 µs over it). The drift is fitted over [`MIN_BASELINE_NS`] of bounds or more, or,
//! in a window a run began, over less once its bounds show it exactly.

mod hull;

use hull::{touching, Fitted};
use std::collections::VecDeque;

/// GPU nanoseconds per bucket of bounds.
pub(crate) const BUCKET_NS: i64 = 16_000_000;
/// A bound this far (ns) below the line at once is late, not a rate change; one within it
/// of the line ends a lateness.
pub(crate) const LATE_NS: f64 = 100_000.0;
/// The largest drift taken as plausible (host ns per GPU ns, minus 1): 0.1%, ten times a
/// poor crystal's.
pub(crate) const MAX_DRIFT: f64 = 1e-3;
/// The fastest the offset's rate can change: from one plausible drift to its opposite.
const STEP_RATE: f64 = 2.0 * MAX_DRIFT;
/// A bound this close (ns) to the line is on it, for the time since the last bound on it.
const ON_NS: f64 = 1_000.0;
/// A bound further below the line than this (ns)...
const RUN_NS: f64 = 200.0;
/// ...or above it by more than this (ns) is off it, in a run.
const UP_NS: f64 = 10.0;
/// Bounds of a run on a line of its own for the line to be taken as the new rate, at least
/// one on each half of the run's span...
const SUPPORT: usize = 4;
/// ...at least this much GPU time apart (1 ms)...
const SUPPORT_GAP_NS: i64 = 1_000_000;
/// ...spanning this much GPU time (10 ms) or more...
const SUPPORT_SPAN_NS: i64 = 10_000_000;
/// ...each within this much of the line (ns): jittered bounds fall that near a line through
/// two of them seldom, exact ones always.
const SUPPORT_NS: f64 = 20.0;
/// The least share of a run's bounds on its line for it to be taken.
const EXACT_SHARE: f64 = 0.25;
/// Bounds of a run kept, the newest.
const RUN: usize = 24;
/// How long after a lateness began a bound above the line lowers it (1 s).
const ENTRY_NS: i64 = 1_000_000_000;
/// Buckets still open to bounds that arrive out of order (lists are emitted by lane, not by
/// GPU time, and a collect's anchor before the lists it read), newest last: at least these...
const OPEN: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 4 };
/// ...and as many more as the bounds arrive late (GPU ns behind the newest), up to 1 s.
const MAX_OPEN_NS: i64 = 1_000_000_000;
/// The shortest span of GPU time a drift is fitted over (500 ms), but in a window a run began.
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

/// The best lower bound of one open bucket of GPU time, as fitted (raised by the GPU's
/// lateness) and as read.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    index: i64,
    best: Option<(Bound, Bound)>,
}

/// How late the GPU reaches events now (0 when it is not), and since when (GPU time).
#[derive(Debug, Clone, Copy, Default)]
struct Lateness {
    ns: f64,
    since: i64,
}

/// The bounds since the last one on the line (`from`, and the line then: `line`), newest
/// last. They are compared with that line, not the line now, which bounds above it raise.
#[derive(Debug, Default)]
struct Run {
    from: Option<(Bound, Line)>,
    bounds: VecDeque<Bound>,
    /// Bounds that came since the run was last looked at.
    unseen: usize,
}

/// Turns bounds into the best offset line (the module doc says how).
#[derive(Debug)]
pub(crate) struct Estimator {
    /// Buckets still open, oldest first, indices increasing.
    open: VecDeque<Bucket>,
    /// How many buckets behind the newest bounds have arrived lately.
    behind: f64,
    /// The best bound of each closed bucket, as fitted and as read, oldest first (the read
    /// ones are taken again when an upper bound proves some wrong).
    closed: VecDeque<(Bound, Bound)>,
    /// The closed buckets' bounds since the window began (the last run taken as a rate
    /// change), as fitted.
    fitted: Fitted,
    /// Where the window begins (GPU time): closed bounds before it are not fitted.
    window_from: i64,
    /// Whether a run showed the window's rate: its drift is fitted over less than
    /// [`MIN_BASELINE_NS`] then.
    shown: bool,
    line: Option<Line>,
    late: Lateness,
    /// GPU time of the latest bound within [`ON_NS`] of the line.
    last_on: Option<i64>,
    run: Run,
}

impl Estimator {
    pub(crate) fn new() -> Self {
        Self {
            open: VecDeque::new(),
            behind: 0.0,
            closed: VecDeque::new(),
            fitted: Fitted::default(),
            window_from: i64::MIN,
            shown: false,
            line: None,
            late: Lateness::default(),
            last_on: None,
            run: Run::default(),
        }
    }

    /// The estimate now (`None` before any lower bound).
    pub(crate) fn line(&self) -> Option<Line> {
        self.line
    }

    /// A lower bound: the offset at `gpu` is at least `offset`. Whether the line changed.
    pub(crate) fn lower(&mut self, raw: Bound) -> bool {
        let before = self.line;
        self.move_on(raw.gpu);
        let Some(line) = self.line else {
            self.keep(raw, raw);
            self.refit();
            self.run.from = self.line.map(|line| (raw, line));
            return self.line != before;
        };
        let Some(bound) = self.as_fitted(raw, line) else { return self.line != before };
        self.keep(bound, raw);
        self.follow(bound, line);
        // Never below a bound seen: the base rises at once, the drift waits for a refit.
        if let Some(line) = &mut self.line {
            let under = bound.offset - line.at(bound.gpu);
            if under > 0.0 {
                line.base += under;
            }
        }
        self.line != before
    }

    /// An upper bound: the offset at `gpu` is at most `offset`. A line above it is wrong:
    /// the lower bounds it proves wrong are dropped, and the ones left are taken again from
    /// the first, as if none had come yet. Whether the line changed.
    pub(crate) fn upper(&mut self, bound: Bound) -> bool {
        // Moves the fit on to the bound's GPU time; keeps nothing.
        self.move_on(bound.gpu);
        let Some(line) = self.line else { return false };
        if line.at(bound.gpu) <= bound.offset + CONTRADICTION_NS {
            return false;
        }
        let right = |lower: &Bound| {
            let carried = MAX_DRIFT * (lower.gpu - bound.gpu).unsigned_abs() as f64;
            lower.offset <= bound.offset + carried + CONTRADICTION_NS
        };
        let open = self.open.iter().filter_map(|b| b.best);
        let mut kept: Vec<Bound> =
            self.closed.iter().copied().chain(open).map(|(_, raw)| raw).filter(right).collect();
        kept.sort_by_key(|b| b.gpu);
        *self = Self::new();
        for raw in kept {
            self.lower(raw);
        }
        true
    }

    /// The bound as the line fits it: raised by the GPU's lateness now, which a step below
    /// the line starts (or deepens), a bound near the line ends, and a bound above the line
    /// in its first second lowers. `None` for a bound that only measured the lateness: it
    /// says nothing of the offset.
    fn as_fitted(&mut self, raw: Bound, line: Line) -> Option<Bound> {
        let on = line.at(raw.gpu);
        if self.late.ns > 0.0 && on - raw.offset <= LATE_NS {
            self.late = Lateness::default();
        }
        let fitted = Bound { gpu: raw.gpu, offset: raw.offset + self.late.ns };
        let depth = on - fitted.offset;
        let since = self.last_on.map_or(0, |on| raw.gpu.saturating_sub(on).max(0));
        if depth > LATE_NS && depth > STEP_RATE * since as f64 + ON_NS {
            // Further below than any change of rate takes it: reached late.
            self.late = Lateness { ns: self.late.ns + depth, since: raw.gpu };
            return None;
        }
        if depth < 0.0 && self.late.ns > 0.0 && raw.gpu.saturating_sub(self.late.since) <= ENTRY_NS {
            // Less late than the lateness's first bounds: the GPU's steady lateness is the least.
            self.late.ns = (self.late.ns + depth).max(0.0);
            return None;
        }
        Some(fitted)
    }

    /// Keeps `bound` (read as `raw`) as its bucket's best if it is.
    fn keep(&mut self, bound: Bound, raw: Bound) {
        if let Some(bucket) = self.bucket(bound.gpu) {
            if bucket.best.is_none_or(|(best, _)| bound.offset > best.offset) {
                bucket.best = Some((bound, raw));
            }
        }
    }

    /// Follows the run of bounds off the line: a bound on it ends the run; a run that a line
    /// of its own fits, exactly enough, is a rate change, and the window starts anew there.
    /// A bound above the line by more than [`UP_NS`] is off it: the line rises to each such
    /// bound, so a rate that grows shows as bounds each a little above.
    fn follow(&mut self, bound: Bound, line: Line) {
        let below = line.at(bound.gpu) - bound.offset;
        if below.abs() <= ON_NS {
            self.last_on = self.last_on.max(Some(bound.gpu));
        }
        let Some((_, then)) = self.run.from.filter(|(from, _)| from.gpu < bound.gpu) else {
            self.run.from = self.run.from.or(Some((bound, line)));
            return;
        };
        let on = |below: f64| (-UP_NS..=RUN_NS).contains(&below);
        if on(then.at(bound.gpu) - bound.offset) {
            // On the run's line. The line now replaces it only if the bound is on both: a
            // line raised by a run of bounds each a little above stays off it.
            let then = if on(below) { line } else { then };
            self.run.from = Some((bound, then));
            self.run.bounds.clear();
            self.run.unseen = 0;
            return;
        }
        self.run.bounds.push_back(bound);
        if self.run.bounds.len() > RUN {
            self.run.bounds.pop_front();
        }
        // A long run is looked at again every quarter of its length: exact bounds show a rate
        // change within a few, so a long run is of jittered ones, and a look costs its length.
        self.run.unseen += 1;
        if self.run.unseen < self.run.bounds.len().div_ceil(4) {
            return;
        }
        self.run.unseen = 0;
        match self.rate_change(line) {
            Some((shown, true)) => self.restart(shown.first, shown.line),
            // The run shows the line now after all: it is on it (a run that began off a line
            // since refitted).
            Some((_, false)) => {
                let newest = self.run.bounds.iter().copied().max_by_key(|b| b.gpu).unwrap_or(bound);
                self.run = Run { from: Some((newest, line)), ..Run::default() };
            }
            None => {}
        }
    }

    /// The line the run shows ([`shown`]), if it shows one, and whether it parts from `now`,
    /// the line now, by more than [`RUN_NS`] as far past the newest bound as the run is long
    /// (a line raised to each bound of a run above it meets the run's line at the newest
    /// bound, and only parts from it after).
    fn rate_change(&self, now: Line) -> Option<(Shown, bool)> {
        let (first, newest) =
            self.run.bounds.iter().fold((i64::MAX, i64::MIN), |(f, n), b| (f.min(b.gpu), n.max(b.gpu)));
        if self.run.bounds.len() < SUPPORT || newest.saturating_sub(first) < SUPPORT_SPAN_NS {
            return None;
        }
        let mut run: Vec<Bound> = self.run.bounds.iter().copied().collect();
        run.sort_by_key(|b| b.gpu);
        let shown = shown(&run)?;
        let ahead = newest.saturating_add(newest - first);
        let parts = (shown.line.at(ahead) - now.at(ahead)).abs() > RUN_NS;
        Some((shown, parts))
    }

    /// Starts the window anew at `from` (the bounds before it no longer say where the
    /// offset goes), with the line a run showed.
    fn restart(&mut self, from: Bound, line: Line) {
        self.fitted = Fitted::default();
        for &(bound, _) in self.closed.iter().filter(|(b, _)| b.gpu >= from.gpu) {
            self.fitted.push(bound);
        }
        self.window_from = from.gpu;
        self.shown = true;
        self.line = Some(line);
        let newest = self.run.bounds.iter().copied().max_by_key(|b| b.gpu).unwrap_or(from);
        self.run = Run { from: Some((newest, line)), ..Run::default() };
    }

    /// Opens the bucket of `gpu` if it is newer than every open one, closing the open ones
    /// too old for bounds to come for them any more and fitting anew: [`OPEN`] buckets of
    /// GPU time or more older, or as many as bounds arrive late. Buckets close by GPU time,
    /// not by count: with bounds a quarter of a second apart (a collector that runs seldom),
    /// a bucket waited for four newer ones, a second, before its bound was fitted.
    fn move_on(&mut self, gpu: i64) {
        let index = gpu.div_euclid(BUCKET_NS);
        let newest = self.open.back().map_or(i64::MIN, |b| b.index);
        // How late bounds arrive, forgotten slowly (a 64th per bound).
        let behind = (newest.saturating_sub(index)).clamp(0, MAX_OPEN_NS / BUCKET_NS) as f64;
        self.behind = (self.behind * (63.0 / 64.0)).max(behind);
        if newest >= index {
            return;
        }
        self.open.push_back(Bucket { index, best: None });
        let oldest_open = index - (OPEN as i64 - 1).max(self.behind.ceil() as i64 + 1);
        if self.open.front().is_none_or(|b| b.index >= oldest_open) {
            return;
        }
        while self.open.front().is_some_and(|b| b.index < oldest_open) {
            if let Some(best) = self.open.pop_front().and_then(|closing| closing.best) {
                self.closed.push_back(best);
                if self.closed.len() > HISTORY {
                    self.closed.pop_front();
                }
                if best.0.gpu >= self.window_from {
                    self.fitted.push(best.0);
                }
            }
        }
        self.refit();
    }

    /// The open bucket of `gpu`; `None` if it is older than every open one.
    fn bucket(&mut self, gpu: i64) -> Option<&mut Bucket> {
        let index = gpu.div_euclid(BUCKET_NS);
        let at = self.open.partition_point(|b| b.index < index);
        self.open.get_mut(at).filter(|b| b.index == index)
    }

    /// Fits the line anew over the window and the open buckets' bounds: the drift from the
    /// window when it spans [`MIN_BASELINE_NS`] (with the open buckets' bounds if it is
    /// shorter: bounds come late; or, in a window a run began, once they show it exactly),
    /// the line on or above every bound.
    fn refit(&mut self) {
        let open = self.open.iter().filter_map(|b| b.best.map(|(bound, _)| bound));
        let open: Vec<Bound> = open.filter(|b| b.gpu >= self.window_from).collect();
        let drift = self.line.map_or(0.0, |l| l.drift);
        let drift = if self.fitted.span() >= MIN_BASELINE_NS {
            self.fitted.slope().unwrap_or(drift)
        } else {
            // A short window: with the open buckets' bounds (bounds come late), its slope once
            // they span enough, or, in a window a run began, once they show one.
            let mut all: Vec<Bound> = self.fitted.points().chain(&open).copied().collect();
            all.sort_by(|a, b| a.gpu.cmp(&b.gpu).then(a.offset.total_cmp(&b.offset)));
            all.dedup_by(|later, kept| later.gpu == kept.gpu);
            let span = all.last().zip(all.first()).map_or(0, |(last, first)| last.gpu - first.gpu);
            if span >= MIN_BASELINE_NS {
                let mut fit = Fitted::default();
                all.iter().for_each(|&b| fit.push(b));
                fit.slope().unwrap_or(drift)
            } else if self.shown {
                shown(&all).map_or(drift, |shown| shown.line.drift)
            } else {
                drift
            }
        };
        let line = if self.fitted.is_empty() {
            touching(open.iter(), drift)
        } else {
            self.fitted.line_through(drift, open.iter())
        };
        if let Some(line) = line {
            self.line = Some(line);
        }
    }
}

/// A line bounds show exactly, and the first of them on it.
#[derive(Debug, Clone, Copy)]
struct Shown {
    line: Line,
    first: Bound,
}

/// The line `bounds` (in GPU order) show exactly, and the first of them on it, if they show
/// one: their fitted line ([`Fitted::slope`]), with [`SUPPORT`] of them on it (within
/// [`SUPPORT_NS`]) at distinct times [`SUPPORT_GAP_NS`] apart, half on each half of their
/// span, over [`SUPPORT_SPAN_NS`] or more; and a quarter of all of them but the two it is
/// drawn through ([`EXACT_SHARE`]).
fn shown(bounds: &[Bound]) -> Option<Shown> {
    // The best bound of each GPU time (the hull takes one point per time).
    let mut best: Vec<Bound> = Vec::with_capacity(bounds.len());
    for &b in bounds {
        match best.last_mut() {
            Some(last) if last.gpu == b.gpu => last.offset = last.offset.max(b.offset),
            _ => best.push(b),
        }
    }
    let mut fit = Fitted::default();
    best.iter().for_each(|&b| fit.push(b));
    let shown = fit.line_through(fit.slope()?, std::iter::empty())?;
    let is_on = |b: &&Bound| shown.at(b.gpu) - b.offset <= SUPPORT_NS;
    // Exact enough: a quarter of all the bounds on it but the two it is drawn through. The
    // best of jittered bounds lie near their envelope, any line through the best of them,
    // but few of all.
    let on_it = bounds.iter().filter(is_on).count().saturating_sub(2);
    if (on_it as f64) < EXACT_SHARE * bounds.len().saturating_sub(2) as f64 {
        return None;
    }
    let on: Vec<&Bound> = best.iter().filter(is_on).collect();
    let bounds = &best[..];
    // Bounds at about one time count once, and half of them on each half of the run: two
    // define any line, and a line through one far bound and bounds near the other end is
    // only as good as that one bound.
    let (first, newest) = (bounds.first()?.gpu, bounds.last()?.gpu);
    let middle = first + (newest - first) / 2;
    let (mut older, mut newer, mut last) = (0, 0, i64::MIN);
    for b in &on {
        if b.gpu.saturating_sub(last) >= SUPPORT_GAP_NS {
            last = b.gpu;
            if b.gpu < middle {
                older += 1;
            } else {
                newer += 1;
            }
        }
    }
    let spread = last - on.first()?.gpu >= SUPPORT_SPAN_NS;
    let first = **on.first()?;
    (older >= SUPPORT / 2 && newer >= SUPPORT / 2 && spread).then_some(Shown { line: shown, first })
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
