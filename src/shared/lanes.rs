//! Per-lane sequence numbers, taken when a list first records: the GPU order of the lists of
//! one stream, known without asking the GPU.
//!
//! Events recorded on one stream run in the order they were recorded, so the order in which
//! lists begin recording on a lane is the order the GPU runs them. Each list takes a
//! sequence number from its *home lane* (the lane of its first event) right after that first
//! record; the collector emits the lists of a lane strictly in sequence order, whatever order
//! they were submitted in and from whichever threads.
//!
//! The table is fixed-size open addressing, lock-free and insert-only:
//!
//! ```text
//!  entry i:  key: AtomicU64   0 = empty, else a 64-bit hash of the lane (never 0)
//!            next: AtomicU64  the sequence number the next list on this entry takes
//! ```
//!
//! A lane probes up to [`PROBES`] entries from its hash; it claims an empty one with one CAS.
//! When every probed entry belongs to other lanes (the table filled up with lanes that came
//! and went, such as a new graph per step), the lane *shares* its first probed entry. Sharing
//! is always safe: the collector then orders the two lanes' lists together, as if they were
//! one stream. It only costs head-of-line blocking between the two (one waits while the
//! other's list is incomplete); a lane that shares with a dead lane loses nothing.

use crate::backend::Lane;
use crate::sync::{AtomicU64, Ordering};

/// Entries in a table. A power of two.
pub(crate) const ENTRIES: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 1024 };
/// Entries a lane looks at before it shares one.
const PROBES: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 16 };

/// Where a list sits in its home lane's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneSeq {
    /// The table entry of the home lane.
    pub(crate) entry: u32,
    /// The list's place on that entry: 0, 1, 2, ... with no gap.
    pub(crate) seq: u64,
}

#[derive(Debug)]
struct Entry {
    key: AtomicU64,
    next: AtomicU64,
}

/// The table of lanes of one context.
#[derive(Debug)]
pub(crate) struct LaneTable {
    entries: Box<[Entry]>,
}

/// A lane's key: a 64-bit mix of its kind and backend key, never 0 (0 marks an empty entry).
fn key(lane: Lane) -> u64 {
    let (kind, raw) = match lane {
        Lane::Stream(k) => (0x9e37_79b9_7f4a_7c15u64, k),
        Lane::Graph(k) => (0xc2b2_ae3d_27d4_eb4fu64, k),
    };
    // splitmix64's finalizer: consecutive keys and pointer-aligned keys spread evenly.
    let mut z = raw ^ kind;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.max(1)
}

impl LaneTable {
    pub(crate) fn new() -> Self {
        Self {
            entries: (0..ENTRIES)
                .map(|_| Entry { key: AtomicU64::new(0), next: AtomicU64::new(0) })
                .collect(),
        }
    }

    /// The entry of `lane`, claiming one if the lane is new.
    fn entry(&self, lane: Lane) -> usize {
        let key = key(lane);
        let home = key as usize & (ENTRIES - 1);
        for probe in 0..PROBES {
            let i = (home + probe) & (ENTRIES - 1);
            let entry = &self.entries[i];
            // Relaxed: the key only names the entry; the sequence number is the entry's
            // own atomic, and no other data is published through the key.
            let found = entry.key.load(Ordering::Relaxed);
            if found == key {
                return i;
            }
            if found == 0 {
                match entry.key.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return i,
                    Err(other) if other == key => return i,
                    Err(_) => {}
                }
            }
        }
        home
    }

    /// Takes the next place in `lane`'s order.
    pub(crate) fn next(&self, lane: Lane) -> LaneSeq {
        let entry = self.entry(lane);
        // Relaxed: the number itself is the only thing handed over; the list carries it to
        // the collector through the submission queue's Release/Acquire.
        let seq = self.entries[entry].next.fetch_add(1, Ordering::Relaxed);
        LaneSeq { entry: entry as u32, seq }
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_lane_counts_its_own_lists_from_zero() {
        let table = LaneTable::new();
        let (a, b) = (Lane::Stream(1), Lane::Stream(2));
        assert_eq!(table.next(a).seq, 0);
        assert_eq!(table.next(a).seq, 1);
        assert_eq!(table.next(b).seq, 0);
        assert_eq!(table.next(a).seq, 2);
        assert_ne!(table.next(a).entry, table.next(b).entry);
        assert_ne!(table.next(Lane::Graph(1)).entry, table.next(a).entry, "kinds are distinct lanes");
    }

    #[test]
    fn a_full_table_shares_entries_and_keeps_numbering_gapless() {
        let table = LaneTable::new();
        for k in 0..(4 * ENTRIES as u64) {
            table.next(Lane::Graph(k));
        }
        let lane = Lane::Stream(7);
        let first = table.next(lane);
        let second = table.next(lane);
        assert_eq!(first.entry, second.entry);
        assert_eq!(second.seq, first.seq + 1, "a shared entry still numbers without gaps");
    }

    #[test]
    fn concurrent_lists_on_one_lane_get_distinct_gapless_numbers() {
        let table = LaneTable::new();
        let mut seqs: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..500).map(|_| table.next(Lane::Stream(3)).seq).collect::<Vec<_>>()))
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        seqs.sort_unstable();
        assert_eq!(seqs, (0..2000).collect::<Vec<_>>());
    }
}
