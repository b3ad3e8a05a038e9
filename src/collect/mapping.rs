//! The one mapping of GPU time to host time, for every sink of a context.
//!
//! The estimate of the offset between the clocks is a line of GPU time (`estimator/`); the
//! mapping itself ([`HostMapping`]) is `host = gpu + offset(gpu)`, where `offset` is
//! piecewise linear in GPU time and leads to that line:
//!
//! - **A function of GPU time alone.** Once a GPU time has been mapped, the mapping up to it
//!   (the *frontier*) never changes: a new estimate only re-plans the mapping beyond the
//!   frontier. Whatever list, lane or collect call a zone comes from, its host time depends
//!   on its GPU time only.
//! - **Monotone and continuous.** A new estimate is reached by slewing the offset from the
//!   frontier, never by a step: at [`SLEW`] (5 ppm) for an error up to [`SMALL_NS`] (2 µs),
//!   so that host durations stay within 5 ppm of the estimate's rate; a larger error (a
//!   context made while its GPU was busy, a calibration proved wrong) is slewed so that it
//!   is done within [`SLEW_SPAN_NS`] (20 ms) of GPU time, never faster than [`SLEW_MAX`]
//!   (5%). So `g1 <= g2` gives `h1 <= h2`, and no time already emitted moves.
//! - **The estimate's rate.** Between corrections the offset changes only by the estimated
//!   drift: host durations are GPU durations scaled by it. A zone that spans a correction
//!   is longer or shorter by at most the slew rate of its duration.
//! - **A long memory.** Pieces are made only when the estimate moves the plan by a
//!   nanosecond or more within the next [`PLAN_CHECK_NS`], and kept while they end within
//!   [`KEEP_NS`] (an hour) of the frontier (at most [`PIECES`]): a zone open for minutes is
//!   mapped by the pieces of its own time.

use super::estimator::{Bound, Estimator, Line};
use std::collections::VecDeque;

/// How fast a small correction moves the offset: 5 ppm of GPU time (5 ns per ms).
pub(crate) const SLEW: f64 = 5e-6;
/// The largest correction slewed at [`SLEW`]; a larger one is slewed faster.
pub(crate) const SMALL_NS: f64 = 2_000.0;
/// A larger correction is slewed faster, so that it is done within this much GPU time...
pub(crate) const SLEW_SPAN_NS: f64 = 20_000_000.0;
/// ...but never faster than 5% (an error of 1 ms takes 20 ms, one of 10 ms 200 ms).
pub(crate) const SLEW_MAX: f64 = 0.05;
/// A new estimate re-plans the mapping only if it moves some time within this much GPU time
/// past the frontier by half a nanosecond or more (100 s: a drift change of 0.005 ppm).
const PLAN_CHECK_NS: f64 = 100e9;
/// Pieces ending this long (GPU ns) before the frontier are dropped.
const KEEP_NS: i64 = 3_600_000_000_000;
/// Pieces kept at most, oldest dropped first.
const PIECES: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 1 << 16 };

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
}

impl HostMapping {
    pub(crate) fn new() -> Self {
        Self { pieces: VecDeque::new(), frontier: None }
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
    /// mapped yet: then it simply is the target). A target the plan already follows (to half
    /// a nanosecond over [`PLAN_CHECK_NS`] past the frontier) changes nothing.
    pub(crate) fn aim(&mut self, target: Line) {
        let Some(from) = self.frontier else {
            self.pieces.clear();
            self.pieces.push_back(Piece { start: 0, offset: target.at(0), slope: target.drift });
            return;
        };
        let offset = self.offset_at(from);
        let error = target.at(from) - offset;
        let ahead = from.saturating_add(PLAN_CHECK_NS as i64);
        if error.abs() < 0.5 && (target.at(ahead) - self.offset_at(ahead)).abs() < 0.5 {
            return;
        }
        // The plan from the frontier on is replaced, a piece starting at the frontier too:
        // the new plan starts from the same offset there, so nothing mapped moves.
        let after = self.pieces.partition_point(|p| p.start < from);
        self.pieces.truncate(after);
        if error.abs() < 0.5 {
            self.pieces.push_back(Piece { start: from, offset, slope: target.drift });
        } else {
            let rate = if error.abs() <= SMALL_NS {
                SLEW
            } else {
                (error.abs() / SLEW_SPAN_NS).clamp(SLEW, SLEW_MAX)
            };
            let slope = target.drift + rate.copysign(error);
            let span = (error.abs() / rate).ceil() as i64;
            let slewing = Piece { start: from, offset, slope };
            let end = from.saturating_add(span.max(1));
            self.pieces.push_back(slewing);
            self.pieces.push_back(Piece { start: end, offset: slewing.at(end), slope: target.drift });
        }
        // Pieces that end long before the frontier, or beyond the most kept: the oldest go.
        while self.pieces.len() > PIECES
            || self.pieces.get(1).is_some_and(|next| next.start < from.saturating_sub(KEEP_NS))
        {
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

/// The emitter's side of the clock: the estimate of the offset and the one mapping it leads.
#[derive(Debug)]
pub(crate) struct HostClock {
    estimator: Estimator,
    mapping: HostMapping,
}

impl HostClock {
    pub(crate) fn new() -> Self {
        Self { estimator: Estimator::new(), mapping: HostMapping::new() }
    }

    /// A calibration: the anchor at `gpu` was recorded after the host read `recorded_ns` (a
    /// lower bound of the offset) and found complete before it read `observed_ns` (an upper
    /// bound).
    pub(crate) fn calibrate(&mut self, gpu: i64, recorded_ns: i64, observed_ns: i64) {
        let lower = self.estimator.lower(bound(gpu, recorded_ns));
        let upper = self.estimator.upper(bound(gpu, observed_ns));
        if lower || upper {
            self.aim();
        }
    }

    /// A lower bound from a list: the host read `host_ns` before an event whose GPU time is
    /// `gpu` was recorded (a list's first record, a zone's launch).
    pub(crate) fn lower_bound(&mut self, gpu: i64, host_ns: i64) {
        if self.estimator.lower(bound(gpu, host_ns)) {
            self.aim();
        }
    }

    fn aim(&mut self) {
        if let Some(line) = self.estimator.line() {
            self.mapping.aim(line);
        }
    }

    /// [`HostMapping::host_time`].
    pub(crate) fn host_time(&mut self, gpu: i64) -> i64 {
        self.mapping.host_time(gpu)
    }

    /// [`HostMapping::flat_offset`].
    pub(crate) fn flat_offset(&mut self, first: i64, last: i64) -> Option<i64> {
        self.mapping.flat_offset(first, last)
    }
}

/// The offset `host_ns - gpu` as a bound at `gpu`.
fn bound(gpu: i64, host_ns: i64) -> Bound {
    Bound { gpu, offset: host_ns.saturating_sub(gpu) as f64 }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    fn line(base: f64) -> Line {
        Line { base, drift: 0.0 }
    }

    #[test]
    fn the_first_target_is_taken_at_once_and_later_ones_are_slewed_from_the_frontier() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(1_000.0));
        assert_eq!(mapping.host_time(0), 1_000);
        assert_eq!(mapping.host_time(10_000), 11_000);
        mapping.aim(line(1_100.0)); // 100 ns more: 20 ms of slewing at 5 ppm
        assert_eq!(mapping.host_time(10_000), 11_000, "nothing mapped moves");
        assert_eq!(mapping.host_time(5_000), 6_000, "nor anything before the frontier");
        assert_eq!(mapping.host_time(10_010_000), 10_011_050);
        assert_eq!(mapping.host_time(20_010_000), 20_011_100);
        assert_eq!(mapping.host_time(1_020_010_000), 1_020_011_100, "rate 1 once there");
    }

    #[test]
    fn a_lower_target_is_slewed_down_and_the_mapping_never_goes_back() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(5_000.0));
        let mut last = mapping.host_time(0);
        mapping.aim(line(0.0));
        // 5 µs down, above the small errors: done within 20 ms.
        for gpu in (1..700_000_000).step_by(9_973) {
            let host = mapping.host_time(gpu);
            assert!(host >= last, "{gpu}: {host} < {last}");
            last = host;
        }
        assert_eq!(mapping.host_time(700_000_000), 700_000_000);
    }

    #[test]
    fn a_flat_span_has_one_offset_equal_to_every_host_time_in_it() {
        let mut mapping = HostMapping::new();
        mapping.aim(line(1_234.4));
        assert_eq!(mapping.flat_offset(0, 5_000), Some(1_234));
        mapping.aim(line(2_000.0)); // slewing from 5 000 on
        assert_eq!(mapping.flat_offset(4_000, 6_000), None, "a span over the slew");
        assert_eq!(mapping.flat_offset(0, 4_000), Some(1_234), "before it, still flat");
        let offset = mapping.flat_offset(200_000_000, 200_000_100).expect("flat again after the slew");
        assert_eq!(offset, 2_000);
        let mut check = HostMapping::new();
        check.aim(line(1_234.4));
        check.host_time(5_000);
        check.aim(line(2_000.0));
        assert_eq!(check.host_time(200_000_050), 200_000_050 + offset);
    }

    /// A zone's begin mapped long after the frontier passed it (its list emitted late, after
    /// many re-plans under drift) gets the host time the mapping had for it all along.
    #[test]
    fn a_time_mapped_late_gets_the_host_time_it_had_when_the_frontier_passed_it() {
        let (mut early, mut late) = (HostMapping::new(), HostMapping::new());
        let begin = 50_000_000;
        let mut answer = None;
        for k in 0..5_000i64 {
            // An estimate at 100 ppm whose base moves a little with every new bound.
            let target = Line { base: (k % 7) as f64 * 3.0 + 0.01 * k as f64, drift: 100e-6 };
            early.aim(target);
            late.aim(target);
            let now = k * 1_000_000;
            early.host_time(now);
            late.host_time(now);
            if answer.is_none() && now >= begin {
                answer = Some(early.host_time(begin));
            }
        }
        assert_eq!(late.host_time(begin), answer.unwrap(), "{} pieces kept", late.pieces.len());
        assert!(late.host_time(begin) <= late.host_time(begin + 1));
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
