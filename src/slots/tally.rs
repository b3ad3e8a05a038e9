//! Counters that recording threads bump without sharing a cache line.
//!
//! The statistics the recording path keeps (slots free, owned and submitted; lists and
//! events submitted) used to be single atomics: every list and every batch then bounced
//! their cache lines between all recording threads, several times more often than the one
//! CAS per batch the freelist needs. A `Tally` gives each thread a shard of its own (a
//! cache line holding all of the tally's fields), picked once per thread; a read sums the
//! shards. Each field's sum is exact whenever no update is in flight, so the accounting
//! invariant (`free + owned + submitted == capacity`) holds at quiescence as before, and
//! `free` is still checked against a walk of the freelist.

use crate::sync::{AtomicI64, Ordering};
use crossbeam_utils::CachePadded;

/// Shards per tally: a power of two. One under loom (the models are about the algorithm,
/// not about counter placement).
pub(crate) const SHARDS: usize = if cfg!(gpu_event_pool_loom) { 1 } else { 16 };

/// The shard of the calling thread (also used to shard other per-thread state, such as the
/// void places).
#[inline]
pub(crate) fn shard() -> usize {
    #[cfg(gpu_event_pool_loom)]
    {
        0
    }
    #[cfg(not(gpu_event_pool_loom))]
    {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS;
        }
        SHARD.with(|s| *s)
    }
}

/// `N` signed counters, sharded per thread.
#[derive(Debug)]
pub(crate) struct Tally<const N: usize> {
    shards: Box<[CachePadded<[AtomicI64; N]>]>,
}

impl<const N: usize> Tally<N> {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicI64::new(0))))
                .collect(),
        }
    }

    /// Adds `n` (possibly negative) to `field`. Relaxed: statistics, never used to
    /// synchronize.
    #[inline]
    pub(crate) fn add(&self, field: usize, n: i64) {
        self.shards[shard()][field].fetch_add(n, Ordering::Relaxed);
    }

    /// The sum of `field` over all shards (exact when no update is in flight).
    pub(crate) fn sum(&self, field: usize) -> i64 {
        self.shards.iter().map(|s| s[field].load(Ordering::Relaxed)).sum()
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::Tally;

    #[test]
    fn sums_add_up_across_threads() {
        let tally = Tally::<2>::new();
        std::thread::scope(|s| {
            for t in 0..8 {
                let tally = &tally;
                s.spawn(move || {
                    for _ in 0..1000 {
                        tally.add(0, 3);
                        tally.add(1, -1);
                    }
                    tally.add(0, t);
                });
            }
        });
        assert_eq!(tally.sum(0), 8 * 3000 + 28);
        assert_eq!(tally.sum(1), -8000);
    }
}
