//! Per-lane sequence numbers, taken when a list first records: the GPU order of the lists of
//! one stream, known without asking the GPU; and who holds each place still being recorded.
//!
//! Events recorded on one stream run in the order they were recorded, so the order in which
//! lists begin recording on a lane is the order the GPU runs them. Each list takes a
//! sequence number from its *home lane* (the lane of its first event) in the same step as
//! that first record: the lane's place lock is taken, the event recorded, the number taken,
//! the lock released. Two threads starting lists on one lane at once therefore take their
//! numbers in the order their first events reach the GPU (a two-step version let a thread
//! record after another and take its number first). The collector emits the lists of a lane
//! strictly in sequence order, whatever order they were submitted in and from whichever
//! threads.
//!
//! The table is fixed-size open addressing, insert-only. Each entry has two spin locks, so
//! that nothing but another first record waits for a backend call:
//!
//! ```text
//!  entry i:  key: AtomicU64   0 = empty, else a 64-bit hash of the lane (never 0)
//!            next: AtomicU64  bit 0: the place lock, held around a first record (one backend
//!                             call); bits 1..64: the sequence number the next list takes
//!            holders_locked: AtomicBool   the holders' lock, held only to read or change
//!                             `holders` (never across a backend call)
//!            holders: UnsafeCell<Vec<(seq, Holder)>>   the places taken and not yet handed
//!                             to the collector (list submitted or dropped)
//! ```
//!
//! | who | place lock | holders' lock |
//! | --- | --- | --- |
//! | a list's first record ([`LaneTable::record_first`]) | spins for it, holds it around the record | spins for it after the record, to register its holder |
//! | submit or drop of a list ([`LaneTable::release`]) | never | spins for it, to remove its holder |
//! | the collector ([`LaneTable::try_holder`]) | never | tries once; busy means "ask later" |
//!
//! So a first record waits for another first record on its entry, backend call included (a
//! list starting on the same lane at the same moment, which the one-list-per-stream rule
//! excludes, or a lane that shares the entry); a holder change (a first record's after its
//! call, a submit, a drop) waits only for another holder change: a few instructions and, at
//! worst, the growth of a `Vec`, never a backend call. Neither lock is taken per zone.
//!
//! A lane probes up to [`PROBES`] entries from its hash; it claims an empty one with one CAS.
//! When every probed entry belongs to other lanes (the table filled up with lanes that came
//! and went, such as a new graph per step), the lane *shares* its first probed entry. Sharing
//! is always safe: the collector then orders the two lanes' lists together, as if they were
//! one stream. It only costs head-of-line blocking between the two (one waits while the
//! other's list is incomplete) and their first records taking turns; a lane that shares with
//! a dead lane loses nothing.

use crate::backend::Lane;
use crate::location::Location;
use crate::sync::{spin_wait, AtomicBool, AtomicU64, Ordering, UnsafeCell};

/// Entries in a table. A power of two.
pub(crate) const ENTRIES: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 1024 };
/// Entries a lane looks at before it shares one.
const PROBES: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 16 };

/// Bit of an entry's `next` set while a thread holds the entry's place lock.
const PLACE_LOCKED: u64 = 1;

/// Where a list sits in its home lane's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneSeq {
    /// The table entry of the home lane.
    pub(crate) entry: u32,
    /// The list's place on that entry: 0, 1, 2, ... with no gap.
    pub(crate) seq: u64,
}

/// The list holding a place on a lane while it is being recorded: what a collector stalled
/// on that place can tell the application.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    /// The list's id.
    pub(crate) list_id: u64,
    /// The lane it holds a place on.
    pub(crate) lane: Lane,
    /// Where its first zone begins.
    pub(crate) location: Location,
    /// The backend's host clock when it took the place.
    pub(crate) started_ns: i64,
}

/// One lane's entry (or several lanes' that share it). Aligned to a cache line: a first
/// record touches its two locks and its holders in one line, and two lanes' entries never
/// share a line (packed, a 48-byte entry straddled two lines in some slots, and the first
/// zone's p99 in the `latency` bench rose by a fifth: docs/bench-results/HISTORY.md). 64 KB per context.
#[derive(Debug)]
#[repr(align(64))]
struct Entry {
    key: AtomicU64,
    /// Bit 0: [`PLACE_LOCKED`]; bits 1..64: the next place.
    next: AtomicU64,
    /// Set while a thread reads or writes `holders`.
    holders_locked: AtomicBool,
    /// The places taken on this entry whose lists are not yet submitted or dropped, in place
    /// order. Read and written only by the thread holding `holders_locked`; its capacity is
    /// kept, so a lane in use allocates nothing.
    holders: UnsafeCell<Vec<(u64, Holder)>>,
}

// Safety: `key`, `next` and `holders_locked` are atomics; `holders` is accessed only by the
// thread that holds `holders_locked` (taken with an Acquire CAS, released with a Release
// store), so no two threads ever access it at once, and each sees the last holder's writes.
unsafe impl Sync for Entry {}

/// An entry's place lock, held by this thread: unlocked on drop, keeping the next place as it
/// was (a first record that failed or panicked takes no place).
struct PlaceLocked<'t> {
    entry: &'t Entry,
    /// The next place when the lock was taken.
    seq: u64,
}

impl PlaceLocked<'_> {
    /// Takes the next place and unlocks.
    fn take_place(self) -> u64 {
        let seq = self.seq;
        // Release: the holder registered before is in `holders` for whoever sees the place
        // taken (the next first record, and through it the collector).
        self.entry.next.store((seq + 1) << 1, Ordering::Release);
        std::mem::forget(self);
        seq
    }
}

impl Drop for PlaceLocked<'_> {
    fn drop(&mut self) {
        // Release: as in `take_place`; the place is not taken.
        self.entry.next.store(self.seq << 1, Ordering::Release);
    }
}

/// An entry's holders' lock, held by this thread: unlocked on drop.
struct HoldersLocked<'t> {
    entry: &'t Entry,
}

impl HoldersLocked<'_> {
    /// The entry's holders. Only the lock's holder gets here.
    fn with<R>(&self, f: impl FnOnce(&mut Vec<(u64, Holder)>) -> R) -> R {
        // Safety: this thread holds `holders_locked` (`Entry`'s Sync impl says why that makes
        // the access exclusive); the borrow ends before the lock is released.
        self.entry.holders.with_mut(|holders| f(unsafe { &mut *holders }))
    }
}

impl Drop for HoldersLocked<'_> {
    fn drop(&mut self) {
        // Release: this thread's changes to `holders` are seen by the next to lock.
        self.entry.holders_locked.store(false, Ordering::Release);
    }
}

impl Entry {
    /// Takes the place lock, spinning while another thread holds it (it is recording a list's
    /// first event on this entry).
    fn lock_place(&self) -> PlaceLocked<'_> {
        // Relaxed: a guess at the unlocked word; the CAS checks it.
        let mut expected = self.next.load(Ordering::Relaxed) & !PLACE_LOCKED;
        loop {
            // Acquire: pairs with the Release store that unlocked, so the first records of
            // one entry happen one after another, in place order. A CAS, not a `fetch_or`: a
            // failed CAS writes nothing, so waiting threads add no stores of their own
            // (loom, which orders a plain store only against what its thread has seen, would
            // otherwise let a waiter read its own "locked" forever).
            match self.next.compare_exchange_weak(
                expected,
                expected | PLACE_LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return PlaceLocked { entry: self, seq: expected >> 1 },
                Err(actual) => {
                    if actual & PLACE_LOCKED != 0 {
                        spin_wait();
                    }
                    expected = actual & !PLACE_LOCKED;
                }
            }
        }
    }

    /// Takes the holders' lock if no thread holds it now; `None` if one does. One CAS, no
    /// waiting.
    fn try_lock_holders(&self) -> Option<HoldersLocked<'_>> {
        // Acquire: pairs with the Release store that unlocked: the holders written under the
        // lock before are visible. A strong CAS: a spurious failure would only send the
        // caller away for nothing.
        self.holders_locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| HoldersLocked { entry: self })
    }

    /// Takes the holders' lock, spinning while another thread holds it (it is adding,
    /// removing or reading one holder).
    fn lock_holders(&self) -> HoldersLocked<'_> {
        loop {
            if let Some(locked) = self.try_lock_holders() {
                return locked;
            }
            spin_wait();
        }
    }
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
                .map(|_| Entry {
                    key: AtomicU64::new(0),
                    next: AtomicU64::new(0),
                    holders_locked: AtomicBool::new(false),
                    holders: UnsafeCell::new(Vec::new()),
                })
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

    /// Records a list's first event on `lane` and takes the lane's next place, as one step:
    /// no other list of the lane can record its first event between the two, so places
    /// follow the GPU order of first events. The place is registered as held by `holder()`
    /// until [`release`](Self::release). If `record` fails (or unwinds), no place is taken.
    ///
    /// Waits while another first record on the lane's entry is under way (the place lock),
    /// then, after `record`, while a holder of the entry is being added or removed.
    pub(crate) fn record_first<R, E>(
        &self,
        lane: Lane,
        record: impl FnOnce() -> Result<R, E>,
        holder: impl FnOnce() -> Holder,
    ) -> Result<(LaneSeq, R), E> {
        let index = self.entry(lane);
        let entry = &self.entries[index];
        let place = entry.lock_place();
        let out = record()?;
        let holder = holder();
        entry.lock_holders().with(|holders| holders.push((place.seq, holder)));
        let seq = place.take_place();
        Ok((LaneSeq { entry: index as u32, seq }, out))
    }

    /// The list at `place` was submitted or dropped: it no longer holds its place. Waits only
    /// while another holder of the entry is being added, removed or read, never for a first
    /// record's backend call.
    pub(crate) fn release(&self, place: LaneSeq) {
        self.entries[place.entry as usize].lock_holders().with(|holders| {
            if let Some(i) = holders.iter().position(|(seq, _)| *seq == place.seq) {
                holders.remove(i);
            }
        });
    }

    /// The list holding `place`, if it is still being recorded (not yet submitted or
    /// dropped); `None` once it was handed to the collector, or for a place not taken yet.
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn holder(&self, place: LaneSeq) -> Option<Holder> {
        let locked = self.entries.get(place.entry as usize)?.lock_holders();
        Self::holder_of(&locked, place)
    }

    /// [`holder`](Self::holder) without waiting, for the collector: `None` when a recorder
    /// holds the entry's holders' lock now (it is registering or giving up a place: ask
    /// again later), else the answer. A collector never spins on a lock recorders take.
    pub(crate) fn try_holder(&self, place: LaneSeq) -> Option<Option<Holder>> {
        let Some(entry) = self.entries.get(place.entry as usize) else { return Some(None) };
        let locked = entry.try_lock_holders()?;
        Some(Self::holder_of(&locked, place))
    }

    fn holder_of(locked: &HoldersLocked<'_>, place: LaneSeq) -> Option<Holder> {
        locked.with(|holders| {
            holders.iter().find(|(seq, _)| *seq == place.seq).map(|(_, holder)| holder.clone())
        })
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    fn holder(list_id: u64) -> Holder {
        Holder {
            list_id,
            lane: Lane::Stream(9),
            location: crate::location!("first zone").into(),
            started_ns: 7,
        }
    }

    /// Takes the next place of `lane` for a list whose first record succeeds.
    fn take(table: &LaneTable, lane: Lane) -> LaneSeq {
        table.record_first(lane, || Ok::<_, ()>(()), || holder(0)).unwrap().0
    }

    #[test]
    fn each_lane_counts_its_own_lists_from_zero() {
        let table = LaneTable::new();
        let (a, b) = (Lane::Stream(1), Lane::Stream(2));
        assert_eq!(take(&table, a).seq, 0);
        assert_eq!(take(&table, a).seq, 1);
        assert_eq!(take(&table, b).seq, 0);
        assert_eq!(take(&table, a).seq, 2);
        assert_ne!(take(&table, a).entry, take(&table, b).entry);
        assert_ne!(take(&table, Lane::Graph(1)).entry, take(&table, a).entry, "kinds are distinct lanes");
    }

    #[test]
    fn a_full_table_shares_entries_and_keeps_numbering_gapless() {
        let table = LaneTable::new();
        for k in 0..(4 * ENTRIES as u64) {
            take(&table, Lane::Graph(k));
        }
        let lane = Lane::Stream(7);
        let first = take(&table, lane);
        let second = take(&table, lane);
        assert_eq!(first.entry, second.entry);
        assert_eq!(second.seq, first.seq + 1, "a shared entry still numbers without gaps");
    }

    #[test]
    fn concurrent_lists_on_one_lane_get_distinct_gapless_numbers() {
        let table = LaneTable::new();
        let mut seqs: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..500)
                            .map(|_| {
                                let place = take(&table, Lane::Stream(3));
                                table.release(place);
                                place.seq
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        seqs.sort_unstable();
        assert_eq!(seqs, (0..2000).collect::<Vec<_>>());
        let entry = take(&table, Lane::Stream(3)).entry as usize;
        let holders = table.entries[entry].lock_holders().with(|h| h.len());
        assert_eq!(holders, 1, "released places hold nothing; the last still does");
    }

    #[test]
    fn a_failed_or_panicking_first_record_takes_no_place_and_unlocks() {
        let table = LaneTable::new();
        let lane = Lane::Stream(5);
        assert_eq!(table.record_first(lane, || Err::<(), _>("failed"), || holder(1)).unwrap_err(), "failed");
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            table.record_first(lane, || -> Result<(), ()> { panic!("boom") }, || holder(2))
        }));
        assert!(unwound.is_err());
        let place = take(&table, lane);
        assert_eq!(place.seq, 0, "neither took a place, and the lane is not left locked");
        assert!(table.holder(LaneSeq { entry: place.entry, seq: 1 }).is_none(), "not taken yet");
    }

    #[test]
    fn a_place_is_held_by_its_list_until_released() {
        let table = LaneTable::new();
        let lane = Lane::Stream(9);
        let (first, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(41)).unwrap();
        let (second, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(42)).unwrap();
        let held = table.holder(first).expect("held while being recorded");
        assert_eq!((held.list_id, held.location.name(), held.started_ns), (41, "first zone", 7));
        assert_eq!(table.holder(second).map(|h| h.list_id), Some(42));
        table.release(first);
        assert!(table.holder(first).is_none(), "submitted or dropped: no longer held");
        assert_eq!(table.holder(second).map(|h| h.list_id), Some(42), "the others stay");
        table.release(second);
        assert!(table.holder(second).is_none());
    }

    #[test]
    fn try_holder_answers_unless_a_recorder_changes_the_holders_now() {
        let table = LaneTable::new();
        let lane = Lane::Stream(9);
        let (place, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(41)).unwrap();
        assert_eq!(table.try_holder(place).map(|h| h.map(|h| h.list_id)), Some(Some(41)));
        let busy = table.entries[place.entry as usize].lock_holders();
        assert!(table.try_holder(place).is_none(), "the holders are locked: no answer, no wait");
        drop(busy);
        let first_record = table.entries[place.entry as usize].lock_place();
        assert_eq!(
            table.try_holder(place).map(|h| h.map(|h| h.list_id)),
            Some(Some(41)),
            "a first record under way does not keep the collector from an answer"
        );
        drop(first_record);
        table.release(place);
        assert_eq!(table.try_holder(place).map(|h| h.is_some()), Some(false), "handed to the collector");
    }

    /// A list's first record holds its lane's place lock for the whole backend call: a list
    /// of that lane submitted or dropped meanwhile gives its place up without waiting for it.
    /// The record waits for the release (up to a patience that a release waiting for the
    /// record would use up).
    #[test]
    fn a_release_does_not_wait_for_a_first_record_under_way_on_its_lane() {
        let table = LaneTable::new();
        let lane = Lane::Stream(4);
        let (earlier, ()) = table.record_first(lane, || Ok::<_, ()>(()), || holder(1)).unwrap();
        let (recording, recording_rx) = std::sync::mpsc::channel();
        let (released, released_rx) = std::sync::mpsc::channel::<()>();
        let later = std::thread::scope(|s| {
            let table = &table;
            let later = s.spawn(move || {
                table.record_first(
                    lane,
                    || {
                        recording.send(()).unwrap();
                        released_rx.recv_timeout(std::time::Duration::from_secs(5)).map_err(|_| "waited")
                    },
                    || holder(2),
                )
            });
            recording_rx.recv().unwrap();
            table.release(earlier);
            released.send(()).unwrap();
            later.join().unwrap()
        });
        let (later, ()) = later.expect("the release returned while the first record was in its call");
        assert!(table.holder(earlier).is_none());
        assert_eq!((later.seq, table.holder(later).map(|h| h.list_id)), (1, Some(2)));
    }
}
