//! What the collector knows of the clocks' offset, one side of it: the best bound at any GPU
//! time that a set of point bounds gives, when the two clocks' rates differ by at most
//! [`RATE_BOUND`] (docs/design.md, section 8, "One clock").
//!
//! The offset is `o(g) = host(g) - g`: the host time at which the GPU reached GPU time `g`,
//! less `g`. Its slope is the host clock's rate against the GPU's, less 1, so it lies within
//! `±RATE_BOUND`. A point bound `o(g_i) >= a_i` (a host time read before the GPU reached
//! `g_i`) therefore bounds every other time too: `o(g) >= a_i - RATE_BOUND * |g - g_i|`, a
//! *tent* around `g_i`. The best lower bound at `g` is the highest tent there. Upper bounds
//! (host times read after the GPU reached `g_i`) are the same with the sign turned: the
//! collector keeps them negated in a second [`Tents`].
//!
//! Only tents that are somewhere the highest are kept (a tent lower than another everywhere,
//! *dominated*, says nothing more), sorted by GPU time. Then the highest tent at `g` is one of
//! the two kept tents around `g`: a query is one binary search. Tents are slopes of
//! `RATE_BOUND` rounded up to whole nanoseconds ([`carry`]), so every value is an integer and
//! every bound handed out is sound: rounding only ever weakens a bound. This is the
//! Lipschitz-extension form of interval clock synchronisation (Marzullo's intervals carried at
//! the largest drift, as TrueTime's error grows at its assumed 200 µs/s).

use std::collections::VecDeque;

/// The most the host clock's rate and the GPU clock's rate may differ by, as a fraction:
/// 500 ppm. The kernel bounds the frequency correction NTP and chrony apply to the host's
/// clocks at ±500 ppm (`MAXFREQ` in Linux's `kernel/time/ntp.c`); the correction cancels the
/// host crystal's own error, and the GPU's crystal, undisciplined, is within tens of ppm of
/// true time. A host clock slewed faster (chrony's tick-based slews, `adjtimex` with
/// `ADJ_TICK`) breaks the bound: the collector then sees bounds no mapping fits and starts a
/// new clock segment (a discontinuity, counted and reported), as it does for a suspend.
pub(crate) const RATE_BOUND: f64 = 500e-6;

/// Tents kept on one side at most. Past it, the older half is thinned (every other tent of it
/// dropped): a time older than the newest tents is then bounded a little more widely (by the
/// rate bound times the spacing of the tents kept), never wrongly. 16,384 tents are tens of
/// seconds of bounds at a list every millisecond.
const MAX_TENTS: usize = if cfg!(gpu_event_pool_loom) { 8 } else { 1 << 14 };

/// [`RATE_BOUND`] as GPU nanoseconds per nanosecond of carry: 1 / 500 ppm.
const NS_PER_CARRY_NS: u64 = 2_000;
const _: () = assert!((1.0 / RATE_BOUND) as u64 == NS_PER_CARRY_NS);

/// How far (ns) a bound at one GPU time carries to another `distance` ns away: at least the
/// rate bound times the distance, in whole nanoseconds (never less: a bound carried less far
/// than the truth allows would be wrong), at most 1 ns more; 0 at the bound's own time.
/// Subadditive (`carry(x + y) <= carry(x) + carry(y)`), which is what lets a bound be carried
/// in steps and the nearest tents decide. Integer arithmetic only (a division by a constant):
/// the emitter carries two bounds per zone edge.
#[inline]
pub(crate) fn carry(distance: u64) -> i64 {
    if distance == 0 {
        return 0;
    }
    // At most u64::MAX / 2000 + 1: always fits.
    (distance / NS_PER_CARRY_NS + 1) as i64
}

/// What is known of the offset at one GPU time: host times read before the GPU reached it
/// (`lower`) and after (`upper`), as offsets (host time minus GPU time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PointBound {
    pub(crate) gpu: i64,
    pub(crate) lower: Option<i64>,
    pub(crate) upper: Option<i64>,
}

impl PointBound {
    /// The bounds of GPU time `gpu` from host times read before and after it.
    pub(crate) fn from_host(gpu: i64, before: Option<i64>, after: Option<i64>) -> Self {
        let offset = |host: i64| host.saturating_sub(gpu);
        Self { gpu, lower: before.map(offset), upper: after.map(offset) }
    }

    /// The same bounds for a GPU time known to within `uncertain` ns (the `f32` rounding of
    /// the reads that placed it): each widened by that much, since the offset is host time
    /// less GPU time, and by the carry over that distance (the bound sits that far off its
    /// true time).
    pub(crate) fn widened(self, uncertain: i64) -> Self {
        let uncertain = uncertain.max(0).saturating_add(carry(uncertain.max(0) as u64));

        Self {
            lower: self.lower.map(|l| l.saturating_sub(uncertain)),
            upper: self.upper.map(|u| u.saturating_add(uncertain)),
            ..self
        }
    }

    /// Whether some mapping within the rate bound fits both: each lower bound, carried to the
    /// other's time, under the other's upper bound.
    pub(crate) fn agrees(&self, other: &PointBound) -> bool {
        let carried = carry(self.gpu.abs_diff(other.gpu));
        let under = |lower: Option<i64>, upper: Option<i64>| match (lower, upper) {
            (Some(l), Some(u)) => i128::from(l) - i128::from(carried) <= i128::from(u),
            _ => true,
        };
        under(self.lower, other.upper) && under(other.lower, self.upper)
    }
}

/// A point bound: at GPU time `gpu`, the offset is at least `at` (or, negated, at most).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tent {
    pub(crate) gpu: i64,
    pub(crate) at: i64,
}

impl Tent {
    /// This tent's bound at GPU time `gpu`.
    #[inline]
    pub(crate) fn at(&self, gpu: i64) -> i64 {
        self.at.saturating_sub(carry(gpu.abs_diff(self.gpu)))
    }
}

/// The tents of one side, every one somewhere the highest, GPU times strictly increasing.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tents {
    tents: VecDeque<Tent>,
}

impl Tents {
    /// The best bound at `gpu` (`None`: no bound at all).
    pub(crate) fn at(&self, gpu: i64) -> Option<i64> {
        let after = self.tents.partition_point(|t| t.gpu <= gpu);
        let left = after.checked_sub(1).map(|i| self.tents[i].at(gpu));
        let right = self.tents.get(after).map(|t| t.at(gpu));
        left.max(right)
    }

    /// Adds the bound `at` at `gpu`; whether it was kept (false: another is at least as good
    /// everywhere). Tents it makes redundant go.
    pub(crate) fn insert(&mut self, gpu: i64, at: i64) -> bool {
        let new = Tent { gpu, at };
        let mut i = self.tents.partition_point(|t| t.gpu < gpu);
        // Dominated by a neighbour (then by no other: the neighbour is not dominated either,
        // and carrying is subadditive), or equal in time to a better one.
        let dominated = |t: &Tent| new.at <= t.at(gpu);
        if self.tents.get(i).is_some_and(dominated)
            || i.checked_sub(1).is_some_and(|j| dominated(&self.tents[j]))
        {
            return false;
        }
        while i > 0 && self.tents[i - 1].at <= new.at(self.tents[i - 1].gpu) {
            self.tents.remove(i - 1);
            i -= 1;
        }
        while self.tents.get(i).is_some_and(|t| t.at <= new.at(t.gpu)) {
            self.tents.remove(i);
        }
        self.tents.insert(i, new);
        if self.tents.len() > MAX_TENTS {
            self.thin();
        }
        true
    }

    /// Drops every other tent of the older half: bounds there only widen.
    fn thin(&mut self) {
        let half = self.tents.len() / 2;
        let mut k = 0;
        self.tents.retain(|_| {
            k += 1;
            k > half || k % 2 == 0
        });
    }

    /// The tents that decide the bound anywhere in `[first, last]`: those inside, and the
    /// nearest on each side. Appended to `out`.
    pub(crate) fn around(&self, first: i64, last: i64, out: &mut Vec<Tent>) {
        let from = self.tents.partition_point(|t| t.gpu < first).saturating_sub(1);
        let to = (self.tents.partition_point(|t| t.gpu <= last) + 1).min(self.tents.len());
        out.extend(self.tents.range(from..to));
    }

    /// Every tent, oldest first (tests).
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn all(&self) -> Vec<Tent> {
        self.tents.iter().copied().collect()
    }
}

/// The best bound at `gpu` among `tents` (`None` if there is none).
#[inline]
pub(crate) fn best_at(tents: &[Tent], gpu: i64) -> Option<i64> {
    tents.iter().map(|t| t.at(gpu)).max()
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    /// The best bound by brute force over every tent ever given.
    fn brute(given: &[Tent], gpu: i64) -> Option<i64> {
        best_at(given, gpu)
    }

    #[test]
    fn a_bound_carries_at_the_rate_bound_rounded_up() {
        assert_eq!(carry(0), 0);
        assert_eq!(carry(1), 1, "any distance: at least 1 ns");
        assert_eq!(carry(1_999), 1);
        assert_eq!(carry(2_000), 2, "500 ppm of 2 µs is 1 ns, and 1 for rounding");
        assert_eq!(carry(1_000_000), 501);
        assert_eq!(carry(u64::MAX), (u64::MAX / 2_000 + 1) as i64);
        for (x, y) in [(1, 1), (1_999, 1), (2_000, 2_000), (3_999, 3_999), (123_456, 7_890_123)] {
            assert!(carry(x + y) <= carry(x) + carry(y), "subadditive at {x} + {y}");
            assert!(carry(x) as f64 >= x as f64 * RATE_BOUND, "never below the rate bound");
        }
        let tent = Tent { gpu: 1_000_000, at: 5_000 };
        assert_eq!(tent.at(1_000_000), 5_000);
        assert_eq!(tent.at(3_000_000), 5_000 - 1_001);
        assert_eq!(tent.at(0), 5_000 - 501);
    }

    #[test]
    fn the_best_bound_is_the_highest_tent_whatever_the_order_bounds_come_in() {
        // xorshift: no dependency for a unit test.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..if cfg!(miri) { 5 } else { 200 } {
            let mut tents = Tents::default();
            let mut given = Vec::new();
            for _ in 0..40 {
                let gpu = next(50_000_000) as i64;
                let at = next(40_000) as i64 - 20_000;
                tents.insert(gpu, at);
                given.push(Tent { gpu, at });
                for probe in [0, gpu, gpu + 1, next(60_000_000) as i64 - 5_000_000] {
                    assert_eq!(tents.at(probe), brute(&given, probe), "at {probe}");
                }
            }
            let kept = tents.all();
            assert!(kept.windows(2).all(|w| w[0].gpu < w[1].gpu), "sorted, one per time");
            for (i, t) in kept.iter().enumerate() {
                let others: Vec<Tent> =
                    kept.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &t)| t).collect();
                assert!(best_at(&others, t.gpu).is_none_or(|b| b < t.at), "{t:?} is dominated but kept");
            }
            // The tents around a span decide every time in it.
            let (first, last) = (next(40_000_000) as i64, 0);
            let (first, last) = (first.min(last), first.max(last) + next(5_000_000) as i64);
            let mut around = Vec::new();
            tents.around(first, last, &mut around);
            for g in (first..=last).step_by(99_991) {
                assert_eq!(best_at(&around, g), brute(&given, g));
            }
        }
    }

    #[test]
    fn a_bound_no_better_than_a_kept_one_anywhere_is_not_kept() {
        let mut tents = Tents::default();
        assert!(tents.insert(1_000_000, 100));
        assert!(!tents.insert(1_000_000, 100), "the same bound");
        assert!(!tents.insert(3_000_000, 100 - 1_001), "what the first says there");
        assert!(tents.insert(3_000_000, 100 - 1_000), "better by 1 ns");
        assert!(tents.insert(2_000_000, 5_000), "better than both");
        assert_eq!(tents.all(), vec![Tent { gpu: 2_000_000, at: 5_000 }], "it makes both redundant");
    }

    #[test]
    fn a_bound_of_an_uncertain_gpu_time_is_wider_on_both_sides() {
        // 2 ms off: 2 ms less as a lower bound, 2 ms more as an upper one, and the carry over
        // 2 ms (1,001 ns) each, since the bound sits that far off its true time.
        let bound = PointBound::from_host(10_000_000, Some(10_000_100), Some(10_000_900));
        let widened = bound.widened(2_000_000);
        assert_eq!(
            widened,
            PointBound { gpu: 10_000_000, lower: Some(100 - 2_001_001), upper: Some(900 + 2_001_001) }
        );
        assert_eq!(bound.widened(-5), bound.widened(0), "a negative uncertainty is none");
        assert_eq!(bound.widened(0), bound, "nothing uncertain, nothing carried");
    }

    #[test]
    #[cfg_attr(miri, ignore = "fills the 16,384-tent table: safe arithmetic, hours under Miri")]
    fn thinning_only_ever_weakens_old_bounds() {
        let mut tents = Tents::default();
        let given: Vec<Tent> = (0..MAX_TENTS as i64 + 1).map(|k| Tent { gpu: k * 1_000, at: 0 }).collect();
        for t in &given {
            assert!(tents.insert(t.gpu, t.at), "exact bounds at any drift within the bound stay");
        }
        assert!(tents.all().len() <= MAX_TENTS);
        for g in (0..MAX_TENTS as i64 * 1_000).step_by(777) {
            let (kept, truth) = (tents.at(g).unwrap(), brute(&given, g).unwrap());
            assert!(kept <= truth, "never above what was given");
            assert!(truth - kept <= 2, "and no more than a carry of the spacing below: {g}");
        }
        // The newer half is kept whole: bounds near the newest times stay exact.
        for t in &given[given.len() / 2..] {
            assert_eq!(tents.at(t.gpu), Some(t.at), "a newer tent thinned: {}", t.gpu);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "fills the 16,384-tent table: safe arithmetic, hours under Miri")]
    fn a_full_table_is_kept_whole_and_one_more_drops_a_quarter() {
        let mut tents = Tents::default();
        for k in 0..MAX_TENTS as i64 {
            tents.insert(k * 1_000, 0);
        }
        assert_eq!(tents.all().len(), MAX_TENTS, "thinned before the table was over full");
        tents.insert(MAX_TENTS as i64 * 1_000, 0);
        // Every other tent of the older half goes: the even-numbered ones from the oldest.
        let len = MAX_TENTS + 1;
        let older = len / 2;
        assert_eq!(tents.all().len(), len - older / 2);
        assert_eq!(tents.all()[0].gpu, 1_000, "the oldest goes, the second stays");
    }

    #[test]
    fn the_tents_around_a_span_are_those_inside_and_one_each_side() {
        let mut tents = Tents::default();
        for k in 1..=6 {
            tents.insert(k * 1_000_000, 0);
        }
        let around = |first, last| {
            let mut out = Vec::new();
            tents.around(first, last, &mut out);
            out.iter().map(|t| t.gpu / 1_000_000).collect::<Vec<_>>()
        };
        assert_eq!(around(2_000_000, 4_000_000), [1, 2, 3, 4, 5], "ends on tents");
        assert_eq!(around(2_000_001, 3_999_999), [2, 3, 4], "ends between tents");
        assert_eq!(around(3_000_000, 3_000_000), [2, 3, 4], "a point on a tent");
        assert_eq!(around(0, 500_000), [1], "before every tent");
        assert_eq!(around(7_000_000, 8_000_000), [6], "after every tent");
    }
}
