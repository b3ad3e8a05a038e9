//! The places in their lanes' order given up by lists dropped unsubmitted, until the emitter
//! takes them (it skips each when its turn comes).
//!
//! Sharded per thread like the recording path's counters (`slots/tally.rs`): a list dropped
//! unsubmitted locks its thread's shard only, so threads that discard lists at a high rate
//! (a runtime that records speculatively, or the `record_only` bench) do not all take one
//! lock. The emitter takes every shard's places once per emit phase, locking only the shards
//! that hold any.

use super::lanes::LaneSeq;
use crate::slots::tally::{shard, SHARDS};
use crate::sync::{lock, AtomicBool, Mutex, Ordering};
use crossbeam_utils::CachePadded;

/// One thread shard: its places, and whether it holds any (written under the lock, read
/// without it, so that the emitter skips empty shards without locking them).
#[derive(Debug)]
struct Shard {
    places: Mutex<Vec<LaneSeq>>,
    any: AtomicBool,
}

/// Places given up and not yet taken by the emitter, in per-thread shards.
#[derive(Debug)]
pub(crate) struct VoidPlaces {
    shards: Box<[CachePadded<Shard>]>,
}

impl VoidPlaces {
    pub(crate) fn new() -> Self {
        let shard =
            || CachePadded::new(Shard { places: Mutex::new(Vec::new()), any: AtomicBool::new(false) });
        Self { shards: (0..SHARDS).map(|_| shard()).collect() }
    }

    /// A list dropped on this thread gave up `place`.
    pub(crate) fn push(&self, place: LaneSeq) {
        let shard = &self.shards[shard()];
        let mut places = lock(&shard.places);
        places.push(place);
        // SeqCst, under the lock: set with the place it announces, before the lock is
        // released; read by `is_empty` on the collector's side of the seq-cst fence that
        // closes an emit loop (collect/mod.rs).
        shard.any.store(true, Ordering::SeqCst);
    }

    /// Every place given up so far and not taken yet (each once). A shard seen empty is
    /// not locked: a place pushed meanwhile is taken next time, as if pushed after this.
    pub(crate) fn take_all(&self) -> Vec<LaneSeq> {
        let mut all = Vec::new();
        for shard in self.shards.iter().filter(|shard| shard.any.load(Ordering::SeqCst)) {
            let mut places = lock(&shard.places);
            all.append(&mut places);
            shard.any.store(false, Ordering::SeqCst);
        }
        all
    }

    /// Whether no place waits to be taken (one load per shard, no lock).
    pub(crate) fn is_empty(&self) -> bool {
        !self.shards.iter().any(|shard| shard.any.load(Ordering::SeqCst))
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn places_given_up_on_many_threads_are_each_taken_once() {
        let voids = VoidPlaces::new();
        std::thread::scope(|s| {
            for t in 0..8u32 {
                let voids = &voids;
                s.spawn(move || {
                    for seq in 0..50 {
                        voids.push(LaneSeq { entry: t, seq });
                    }
                });
            }
        });
        assert!(!voids.is_empty());
        let mut taken: Vec<(u32, u64)> = voids.take_all().iter().map(|p| (p.entry, p.seq)).collect();
        taken.sort_unstable();
        let expected: Vec<(u32, u64)> = (0..8).flat_map(|t| (0..50).map(move |seq| (t, seq))).collect();
        assert_eq!(taken, expected);
        assert!(voids.is_empty());
        assert!(voids.take_all().is_empty());
    }
}
