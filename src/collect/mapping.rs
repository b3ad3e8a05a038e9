//! The one mapping of GPU time to host time, for every sink of a context.
//!
//! The collector learns the offset between the two clocks from *calibration pairs*: the host
//! time read just before an anchor event is recorded, and that anchor's GPU time. The GPU
//! reaches the anchor after the host read it (later still when the GPU is busy: measured up
//! to a millisecond on an H200 under load), so every pair's `host - gpu` is a lower bound of
//! the true offset, and the largest is the most exact ([`Estimator`]). Tracy's Vulkan client
//! filters its calibrations the same way.
//!
//! The mapping itself ([`HostMapping`]) is `host = gpu + offset(gpu)`, where `offset` is
//! piecewise linear in GPU time:
//!
//! - **A function of GPU time alone.** Once a GPU time has been mapped, the mapping up to it
//!   (the *frontier*) never changes: a new estimate only re-plans the mapping beyond the
//!   frontier. Whatever list, lane or collect call a zone comes from, its host time depends
//!   on its GPU time only.
//! - **Monotone and continuous.** A new estimate is reached by slewing the offset from the
//!   frontier, never by a step: at [`SLEW`] (500 ppm, Linux's `adjtime` limit) for an error
//!   up to 10 µs, faster for a larger one so that it is done within [`SLEW_SPAN_NS`] (20 ms)
//!   of GPU time, but never faster than [`SLEW_MAX`] (5%). So `g1 <= g2` gives `h1 <= h2`,
//!   and no time already emitted moves.
//! - **Rate 1.** Between corrections the offset changes only by the measured drift, taken as
//!   0 below [`DRIFT_FLOOR`] (1 ppm) or until it is measured over [`DRIFT_BASELINE_NS`] (2 s):
//!   host durations then equal GPU durations to the nanosecond. A zone that spans a
//!   correction is longer or shorter by at most the correction (and by at most the slew rate
//!   of its duration).
//!
//! The context is calibrated when it is made, on an idle GPU ([`STARTUP_PAIRS`] pairs): the
//! first estimate is then within a record's latency of the truth, and later corrections are
//! rare and small.

use std::collections::VecDeque;

/// How fast a correction moves the offset at the least: 500 ppm of GPU time (0.5 µs per ms).
pub(crate) const SLEW: f64 = 500e-6;
/// A larger correction is slewed faster, so that it is done within this much GPU time...
pub(crate) const SLEW_SPAN_NS: f64 = 20_000_000.0;
/// ...but never faster than 5% (an error of 1 ms takes 20 ms, one of 10 ms 200 ms).
pub(crate) const SLEW_MAX: f64 = 0.05;
/// One calibration epoch, in GPU nanoseconds: the estimator keeps the best pair of each.
pub(crate) const EPOCH_NS: i64 = 1_000_000_000;
/// The shortest GPU-time baseline a drift is measured over.
pub(crate) const DRIFT_BASELINE_NS: i64 = 2 * EPOCH_NS;
/// A smaller measured drift (host ns per GPU ns, minus 1) is taken as none.
pub(crate) const DRIFT_FLOOR: f64 = 1e-6;
/// Calibration pairs taken when the context is made, while its GPU is idle.
pub(crate) const STARTUP_PAIRS: usize = if cfg!(gpu_event_pool_loom) { 1 } else { 4 };
/// Epoch bests kept (one per second of GPU time).
const EPOCHS: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 64 };
/// Pieces of the mapping kept, oldest dropped first: a list emitted after its pieces are gone
/// is mapped by the oldest piece kept.
const PIECES: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 4096 };

/// A calibration pair as GPU time and `host - gpu` offset (a lower bound of the true one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pair {
    pub(crate) gpu: i64,
    pub(crate) offset: i64,
}

/// The best estimate of the offset as a line of GPU time: `offset(g) = base + drift * g`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Line {
    base: f64,
    drift: f64,
}

impl Line {
    fn at(&self, gpu: i64) -> f64 {
        self.base + self.drift * gpu as f64
    }
}

/// Turns calibration pairs into the best offset line: the largest lower bound, carried with
/// the drift measured between the first epoch's best pair and the latest complete epoch's.
#[derive(Debug)]
pub(crate) struct Estimator {
    /// The best pair of the first complete epoch (the early end of the drift baseline).
    first: Option<Pair>,
    /// The best pairs of complete epochs, oldest first.
    epochs: VecDeque<Pair>,
    /// The best pair of the epoch in progress, which began at GPU time `epoch_start`.
    current: Option<Pair>,
    epoch_start: i64,
    drift: f64,
}

impl Estimator {
    pub(crate) fn new() -> Self {
        Self { first: None, epochs: VecDeque::new(), current: None, epoch_start: 0, drift: 0.0 }
    }

    /// A pair's offset carried to GPU time 0 with the drift: the larger, the better.
    fn merit(&self, pair: Pair) -> f64 {
        pair.offset as f64 - self.drift * pair.gpu as f64
    }

    /// Takes a pair in; returns the estimate after it (`None` before any pair).
    pub(crate) fn observe(&mut self, pair: Pair) -> Option<Line> {
        match self.current {
            None => {
                self.current = Some(pair);
                self.epoch_start = pair.gpu;
            }
            Some(best) if pair.gpu - self.epoch_start >= EPOCH_NS => {
                let first = *self.first.get_or_insert(best);
                self.epochs.push_back(best);
                if self.epochs.len() > EPOCHS {
                    self.epochs.pop_front();
                }
                self.current = Some(pair);
                self.epoch_start = pair.gpu;
                if best.gpu - first.gpu >= DRIFT_BASELINE_NS {
                    let drift = (best.offset - first.offset) as f64 / (best.gpu - first.gpu) as f64;
                    self.drift = if drift.abs() >= DRIFT_FLOOR { drift } else { 0.0 };
                }
            }
            Some(best) if self.merit(pair) > self.merit(best) => self.current = Some(pair),
            Some(_) => {}
        }
        self.line()
    }

    /// The best line now: through the pair of largest merit, with the drift.
    pub(crate) fn line(&self) -> Option<Line> {
        let base = self
            .first
            .iter()
            .chain(self.epochs.iter())
            .chain(self.current.iter())
            .map(|&p| self.merit(p))
            .max_by(f64::total_cmp)?;
        Some(Line { base, drift: self.drift })
    }
}

/// One piece of the mapping: from GPU time `start` on (until the next piece),
/// `offset(g) = offset + slope * (g - start)`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    start: i64,
    offset: f64,
    slope: f64,
}

impl Piece {
    fn at(&self, gpu: i64) -> f64 {
        self.offset + self.slope * (gpu - self.start) as f64
    }
}

/// `x.round() as i64` (halves away from zero, saturating, NaN to 0), without the call into
/// the C library that `f64::round` makes on x86_64's baseline (it has no rounding
/// instruction before SSE 4.1): the emitter maps two times per zone.
#[inline]
fn round_to_i64(x: f64) -> i64 {
    // Truncation toward zero, saturating; exact for every |x| < 2^63.
    let whole = x as i64;
    // Exact: below 2^52 both are doubles one fraction apart; above, `x` is whole.
    let fraction = x - whole as f64;
    if fraction >= 0.5 {
        whole.saturating_add(1)
    } else if fraction <= -0.5 {
        whole.saturating_sub(1)
    } else {
        whole
    }
}

/// The GPU-to-host mapping of one context (the module doc states its guarantees).
#[derive(Debug)]
pub(crate) struct HostMapping {
    /// Oldest first; starts strictly increase. The pieces after the frontier are the plan.
    pieces: VecDeque<Piece>,
    /// The latest GPU time mapped: the mapping up to it is fixed.
    frontier: Option<i64>,
    /// The line the plan leads to.
    target: Option<Line>,
}

impl HostMapping {
    pub(crate) fn new() -> Self {
        Self { pieces: VecDeque::new(), frontier: None, target: None }
    }

    fn piece_at(&self, gpu: i64) -> Option<&Piece> {
        // Most times asked fall in one of the last two pieces (the plan's end, or the slew
        // leading to it): no search.
        let n = self.pieces.len();
        if let Some(last) = self.pieces.back().filter(|last| last.start <= gpu) {
            return Some(last);
        }
        if let Some(before) = n.checked_sub(2).map(|i| &self.pieces[i]).filter(|p| p.start <= gpu) {
            return Some(before);
        }
        let after = self.pieces.partition_point(|p| p.start <= gpu);
        self.pieces.get(after.saturating_sub(1))
    }

    /// The offset at `gpu` as planned now.
    fn offset_at(&self, gpu: i64) -> f64 {
        self.piece_at(gpu).map_or(0.0, |p| p.at(gpu))
    }

    /// Leads the mapping to `target` from the frontier on (or from now on, if nothing was
    /// mapped yet: then it simply is the target).
    pub(crate) fn aim(&mut self, target: Line) {
        if self.target == Some(target) {
            return;
        }
        self.target = Some(target);
        let Some(from) = self.frontier else {
            self.pieces.clear();
            self.pieces.push_back(Piece { start: 0, offset: target.at(0), slope: target.drift });
            return;
        };
        let offset = self.offset_at(from);
        // The plan from the frontier on is replaced, a piece starting at the frontier too:
        // the new plan starts from the same offset there, so nothing mapped moves.
        let after = self.pieces.partition_point(|p| p.start < from);
        self.pieces.truncate(after);
        let error = target.at(from) - offset;
        if error.abs() < 0.5 {
            self.pieces.push_back(Piece { start: from, offset, slope: target.drift });
        } else {
            let rate = (error.abs() / SLEW_SPAN_NS).clamp(SLEW, SLEW_MAX);
            let slope = target.drift + rate.copysign(error);
            let span = (error.abs() / rate).ceil() as i64;
            let slewing = Piece { start: from, offset, slope };
            let end = from.saturating_add(span.max(1));
            self.pieces.push_back(slewing);
            self.pieces.push_back(Piece { start: end, offset: slewing.at(end), slope: target.drift });
        }
        while self.pieces.len() > PIECES {
            self.pieces.pop_front();
        }
    }

    /// The offset of every GPU time from `first` to `last` when one flat piece covers them
    /// (then `host_time(g) == g + offset` for each), fixing the mapping up to `last`.
    pub(crate) fn flat_offset(&mut self, first: i64, last: i64) -> Option<i64> {
        let after = self.pieces.partition_point(|p| p.start <= first);
        let piece = self.pieces.get(after.checked_sub(1)?)?;
        let ends_after = self.pieces.get(after).is_none_or(|next| next.start > last);
        if piece.slope != 0.0 || !ends_after {
            return None;
        }
        let offset = round_to_i64(piece.offset);
        if self.frontier.is_none_or(|f| last > f) {
            self.frontier = Some(last);
        }
        Some(offset)
    }

    /// The host time of `gpu` (nanoseconds on the backend's host clock), fixing the mapping up
    /// to it.
    pub(crate) fn host_time(&mut self, gpu: i64) -> i64 {
        if self.frontier.is_none_or(|f| gpu > f) {
            self.frontier = Some(gpu);
        }
        gpu.saturating_add(round_to_i64(self.offset_at(gpu)))
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    fn line(base: f64) -> Line {
        Line { base, drift: 0.0 }
    }

    #[test]
    fn the_estimate_is_the_largest_lower_bound_seen() {
        let mut estimator = Estimator::new();
        assert_eq!(estimator.observe(Pair { gpu: 0, offset: 100 }), Some(line(100.0)));
        assert_eq!(estimator.observe(Pair { gpu: 5_000_000, offset: 40 }), Some(line(100.0)), "a late pair");
        assert_eq!(estimator.observe(Pair { gpu: 10_000_000, offset: 103 }), Some(line(103.0)));
        // Kept past epochs: a later epoch of late pairs never pulls the estimate down.
        for k in 1..5 {
            estimator.observe(Pair { gpu: k * EPOCH_NS + 7, offset: 50 });
        }
        assert_eq!(estimator.line(), Some(line(103.0)));
    }

    #[test]
    fn a_drift_counts_only_over_two_seconds_and_above_one_ppm() {
        let mut estimator = Estimator::new();
        // 0.5 ppm: below the floor.
        for k in 0..4 {
            estimator.observe(Pair { gpu: k * EPOCH_NS, offset: 1_000 + k * 500 });
        }
        assert_eq!(estimator.line().unwrap().drift, 0.0);
        let mut estimator = Estimator::new();
        // 10 ppm over 3 s.
        for k in 0..4 {
            estimator.observe(Pair { gpu: k * EPOCH_NS, offset: 1_000 + k * 10_000 });
        }
        let drift = estimator.line().unwrap().drift;
        assert!((drift - 10e-6).abs() < 1e-9, "{drift}");
    }

    #[test]
    fn the_first_target_is_taken_at_once_and_later_ones_are_slewed_from_the_frontier() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(1_000.0));
        assert_eq!(mapping.host_time(0), 1_000);
        assert_eq!(mapping.host_time(10_000), 11_000);
        mapping.aim(line(1_100.0)); // 100 ns more: 200 µs of slewing at 500 ppm
        assert_eq!(mapping.host_time(10_000), 11_000, "nothing mapped moves");
        assert_eq!(mapping.host_time(5_000), 6_000, "nor anything before the frontier");
        assert_eq!(mapping.host_time(110_000), 111_050);
        assert_eq!(mapping.host_time(210_000), 211_100);
        assert_eq!(mapping.host_time(1_210_000), 1_211_100, "rate 1 once there");
    }

    #[test]
    fn a_lower_target_is_slewed_down_and_the_mapping_never_goes_back() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(5_000.0));
        let mut last = mapping.host_time(0);
        mapping.aim(line(0.0));
        for gpu in (1..20_000_000).step_by(997) {
            let host = mapping.host_time(gpu);
            assert!(host >= last, "{gpu}: {host} < {last}");
            last = host;
        }
        assert_eq!(mapping.host_time(30_000_000), 30_000_000);
    }

    #[test]
    fn a_flat_span_has_one_offset_equal_to_every_host_time_in_it() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(1_234.4));
        assert_eq!(mapping.flat_offset(0, 5_000), Some(1_234));
        mapping.aim(line(2_000.0)); // slewing from 5 000 on
        assert_eq!(mapping.flat_offset(4_000, 6_000), None, "a span over the slew");
        assert_eq!(mapping.flat_offset(0, 4_000), Some(1_234), "before it, still flat");
        let offset = mapping.flat_offset(10_000_000, 10_000_100).expect("flat again after the slew");
        assert_eq!(offset, 2_000);
        let mut check = HostMapping::new();
        check.aim(line(1_234.4));
        check.host_time(5_000);
        check.aim(line(2_000.0));
        assert_eq!(check.host_time(10_000_050), 10_000_050 + offset);
    }

    #[test]
    fn re_planning_from_an_unmoved_frontier_adds_no_piece() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(0.0));
        mapping.host_time(1_000);
        for k in 1..100 {
            mapping.aim(line(f64::from(k)));
        }
        assert!(mapping.pieces.len() <= 3, "{} pieces", mapping.pieces.len());
    }

    #[test]
    fn the_same_gpu_time_maps_to_the_same_host_time_whenever_it_is_asked() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(0.0));
        let early: Vec<i64> = (0..100).map(|k| mapping.host_time(k * 1_000)).collect();
        mapping.aim(line(10_000.0));
        let later: Vec<i64> = (0..100).map(|k| mapping.host_time(k * 1_000)).collect();
        assert_eq!(early, later);
    }

    #[test]
    fn rounding_to_an_integer_is_f64_round() {
        let edges = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            0.49999999999999994,
            -0.49999999999999994,
            4503599627370495.5,
            4503599627370497.0,
            -4503599627370495.5,
            9.3e18,
            -9.3e18,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            123_456_789.499_999,
            -123_456_789.500_001,
        ];
        for x in edges {
            assert_eq!(round_to_i64(x), x.round() as i64, "{x}");
        }
        // A spread of magnitudes and fractions (xorshift: no dependency for a test).
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..if cfg!(miri) { 1_000 } else { 200_000 } {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f64::from_bits(state);
            if x.is_finite() {
                assert_eq!(round_to_i64(x), x.round() as i64, "{x:e}");
                let scaled = (state >> 11) as f64 / 1024.0 - 4.0e12;
                assert_eq!(round_to_i64(scaled), scaled.round() as i64, "{scaled}");
            }
        }
    }
}
