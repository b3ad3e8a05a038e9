//! The places in their lanes' order given up by lists dropped unsubmitted, until the emitter
//! takes them (it skips each when its turn comes).
//!
//! Sharded per thread like the recording path's counters (`slots/tally.rs`): a list dropped
//! unsubmitted locks its thread's shard only, so threads that discard lists at a high rate
//! (a runtime that records speculatively, or the `record_only` bench) do not all take one
//! lock. The emitter takes every shard's places once per emit phase.

use super::lanes::LaneSeq;
use crate::slots::tally::{shard, SHARDS};
use crate::sync::{lock, Mutex};
use crossbeam_utils::CachePadded;

/// Places given up and not yet taken by the emitter, in per-thread shards.
#[derive(Debug)]
pub(crate) struct VoidPlaces {
    shards: Box<[CachePadded<Mutex<Vec<LaneSeq>>>]>,
}

impl VoidPlaces {
    pub(crate) fn new() -> Self {
        Self { shards: (0..SHARDS).map(|_| CachePadded::new(Mutex::new(Vec::new()))).collect() }
    }

    /// A list dropped on this thread gave up `place`.
    pub(crate) fn push(&self, place: LaneSeq) {
        lock(&self.shards[shard()]).push(place);
    }

    /// Every place given up so far and not taken yet (each once).
    pub(crate) fn take_all(&self) -> Vec<LaneSeq> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            all.append(&mut lock(shard));
        }
        all
    }

    /// Whether no place waits to be taken (each shard is checked under its lock).
    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|shard| lock(shard).is_empty())
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
