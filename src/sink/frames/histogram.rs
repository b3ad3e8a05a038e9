//! Log-linear buckets of durations (HdrHistogram's layout, Tene 2012, at a fixed precision):
//! 32 buckets per power of two, so a bucket `[lo, lo + w)` has `w <= lo / 32`, and its middle
//! is within `lo / 64` of any duration in it. Durations below 64 ns have a bucket each.
//!
//! ```text
//!  bucket b < 64:   the duration b, exactly
//!  bucket b >= 64:  shift = b / 32 - 1, mantissa = b - 32 * shift (32..64)
//!                   durations [mantissa << shift, (mantissa + 1) << shift)
//!  1920 buckets in all (the top one ends at 2^64): 60 blocks of 32
//! ```

/// Buckets per power of two, as bits.
const SUB_BITS: u32 = 5;
/// Buckets per power of two.
const SUB: usize = 1 << SUB_BITS;
/// Buckets in all: two blocks of exact durations (0 to 63), then one block per power of two
/// from 2^6 to 2^63.
pub(crate) const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;
/// Blocks of `SUB` buckets.
const BLOCKS: usize = BUCKETS / SUB;

/// The bucket of a duration in nanoseconds.
pub(crate) fn bucket(ns: u64) -> u16 {
    if ns < 2 * SUB as u64 {
        return ns as u16;
    }
    let shift = 63 - ns.leading_zeros() - SUB_BITS;
    // In 32..64: the duration's top six bits.
    let mantissa = ns >> shift;
    (shift as u64 * SUB as u64 + mantissa) as u16
}

/// The durations of bucket `b`: its lowest, and how many (a power of two).
fn bounds(b: u16) -> (u64, u64) {
    let b = u64::from(b);
    if b < 2 * SUB as u64 {
        return (b, 1);
    }
    let shift = b / SUB as u64 - 1;
    let mantissa = b - shift * SUB as u64;
    (mantissa << shift, 1 << shift)
}

/// The duration reported for bucket `b`: its middle (its duration, for one of width 1).
pub(crate) fn middle(b: u16) -> u64 {
    let (lo, width) = bounds(b);
    lo + width / 2
}

/// Counts per bucket, each block of 32 allocated when a duration first falls in it.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    blocks: Vec<Option<Box<[u64; SUB]>>>,
}

impl Histogram {
    /// Adds `count` durations in bucket `b`.
    pub(crate) fn add(&mut self, b: u16, count: u64) {
        if self.blocks.is_empty() {
            self.blocks.resize_with(BLOCKS, || None);
        }
        let block = self.blocks[usize::from(b) / SUB].get_or_insert_with(|| Box::new([0; SUB]));
        block[usize::from(b) % SUB] += count;
    }

    /// Removes `count` durations of bucket `b` (added before).
    pub(crate) fn remove(&mut self, b: u16, count: u64) {
        if let Some(Some(block)) = self.blocks.get_mut(usize::from(b) / SUB) {
            let slot = &mut block[usize::from(b) % SUB];
            debug_assert!(*slot >= count, "removing durations never added");
            *slot = slot.saturating_sub(count);
        }
    }

    /// The bucket of the `rank`-th smallest duration (1-based), if there are that many.
    pub(crate) fn bucket_of_rank(&self, rank: u64) -> Option<u16> {
        let mut seen = 0;
        for (index, block) in self.blocks.iter().enumerate() {
            let Some(block) = block else { continue };
            for (offset, &count) in block.iter().enumerate() {
                seen += count;
                if seen >= rank {
                    return Some((index * SUB + offset) as u16);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{bounds, bucket, middle, BUCKETS};

    #[test]
    fn every_duration_is_in_its_bucket_and_the_middle_is_within_a_64th() {
        let mut samples: Vec<u64> = (0..5000).collect();
        for shift in 0..64 {
            for delta in [0u64, 1, 2, 3] {
                samples.push((1u64 << shift).wrapping_sub(delta));
                samples.push((1u64 << shift).saturating_add(delta));
                samples.push(((1u64 << shift) / 3).saturating_mul(5).saturating_sub(delta));
            }
        }
        samples.push(u64::MAX);
        for ns in samples {
            let b = bucket(ns);
            assert!(usize::from(b) < BUCKETS, "{ns}: bucket {b}");
            let (lo, width) = bounds(b);
            assert!(lo <= ns && ns - lo < width, "{ns} not in bucket {b} [{lo}, +{width})");
            assert!(width == 1 || width <= lo / 32, "{ns}: width {width} at {lo}");
            assert!(middle(b).abs_diff(ns) <= ns / 64, "{ns}: middle {} too far", middle(b));
        }
        assert_eq!(usize::from(bucket(u64::MAX)), BUCKETS - 1);
    }

    #[test]
    fn buckets_are_in_the_order_of_their_durations() {
        let mut last = 0;
        for b in 1..BUCKETS as u16 {
            let (lo, _) = bounds(b);
            assert!(lo > last, "bucket {b}");
            assert_eq!(bucket(lo), b);
            last = lo;
        }
    }
}
