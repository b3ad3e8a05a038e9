//! Device ticks to nanoseconds, exactly, for the backends that read absolute timestamp ticks
//! (Vulkan's `timestampPeriod`, wgpu's `Queue::get_timestamp_period`).

/// Device ticks to nanoseconds, exactly: `timestampPeriod` (an `f32`) is `mantissa * 2^exp`,
/// so `ns(t) = floor(t * mantissa * 2^exp)` is computed in 128-bit integers, and distances are
/// differences of such floors: chained distances add up without any rounding drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TickScale {
    /// `2^timestampValidBits - 1`.
    pub(crate) mask: u64,
    mantissa: u64,
    exp: i32,
}

impl TickScale {
    /// `None` if the period is not a positive finite number or the valid bits are 0.
    pub(crate) fn new(period: f32, valid_bits: u32) -> Option<Self> {
        if !(period.is_finite() && period > 0.0) || valid_bits == 0 {
            return None;
        }
        let bits = period.to_bits();
        let (raw_exp, fraction) = ((bits >> 23) & 0xff, u64::from(bits & 0x7f_ffff));
        let (mantissa, exp) = match raw_exp {
            0 => (fraction, -149),
            e => (fraction | 0x80_0000, e as i32 - 150),
        };
        let mask = if valid_bits >= 64 { u64::MAX } else { (1u64 << valid_bits) - 1 };
        Some(Self { mask, mantissa, exp })
    }

    fn ns(&self, ticks: u128) -> u128 {
        let product = ticks * u128::from(self.mantissa);
        if self.exp >= 0 {
            product << self.exp
        } else {
            product >> (-self.exp).min(127)
        }
    }

    /// Nanoseconds from `start` to `end` (ticks masked to the valid bits). A counter that
    /// wrapped between them is unwrapped; `end` more than half the counter's range ahead
    /// reads as behind (negative).
    pub(crate) fn elapsed_ns(&self, start: u64, end: u64) -> i64 {
        let forward = end.wrapping_sub(start) & self.mask;
        let (from, span, sign) = if forward <= self.mask / 2 {
            (start, forward, 1)
        } else {
            (end, start.wrapping_sub(end) & self.mask, -1)
        };
        let from = u128::from(from);
        let ns = self.ns(from + u128::from(span)) - self.ns(from);
        sign * i64::try_from(ns).unwrap_or(i64::MAX)
    }

    /// Ticks to nanoseconds (for a calibrated time).
    #[cfg(feature = "vulkan")]
    pub(crate) fn ticks_ns(&self, ticks: u64) -> u128 {
        self.ns(u128::from(ticks & self.mask))
    }
}

#[cfg(test)]
mod tests {
    use super::TickScale;

    #[test]
    fn a_period_of_one_is_the_identity() {
        let scale = TickScale::new(1.0, 64).unwrap();
        assert_eq!(scale.elapsed_ns(1_000, 3_500), 2_500);
        assert_eq!(scale.elapsed_ns(3_500, 1_000), -2_500);
        assert_eq!(scale.elapsed_ns(u64::MAX - 5, 4), 10, "a 64-bit wrap is unwrapped");
    }

    #[test]
    fn fractional_periods_telescope_without_drift() {
        let period = 52.083_332_f32;
        let scale = TickScale::new(period, 64).unwrap();
        let ticks = [0u64, 3, 7, 1_000_003, 1_000_004, 99_999_999_999];
        let chained: i64 = ticks.windows(2).map(|w| scale.elapsed_ns(w[0], w[1])).sum();
        assert_eq!(chained, scale.elapsed_ns(ticks[0], ticks[5]), "steps sum to the whole");
        let exact = (99_999_999_999f64 * f64::from(period)).floor() as i64;
        assert!((chained - exact).abs() <= 1, "{chained} vs {exact}");
    }

    #[test]
    fn valid_bits_bound_the_counter() {
        let scale = TickScale::new(1.0, 36).unwrap();
        let top = (1u64 << 36) - 1;
        assert_eq!(scale.elapsed_ns(top - 1, 3), 5, "a 36-bit wrap is unwrapped");
        assert!(TickScale::new(0.0, 64).is_none());
        assert!(TickScale::new(1.0, 0).is_none());
    }
}
