//! One entry of the lane table: the lane it serves now, its places, its two locks, and who
//! holds its places (the module doc of `lanes/mod.rs` draws the layout).

use super::Holder;
use crate::sync::{spin_wait, AtomicBool, AtomicU64, Ordering, UnsafeCell};

/// Bit of an entry's `next` set while a thread holds the entry's place lock.
const PLACE_LOCKED: u64 = 1;

/// An entry of the table: the places of the lane it serves now (of each lane it served
/// before, too: its places go on counting from one lane to the next). Aligned to a cache
/// line: a first record touches its two locks and its holders in one line, and two entries
/// never share a line (packed, a 48-byte entry straddled two lines in some slots, and the first
/// zone's p99 in the `latency` bench rose by a fifth: docs/bench-results/HISTORY.md).
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct Entry {
    /// The lane's key (`key` in `mod.rs`), 0 while the entry has never served one. Changed
    /// from 0 by a first-level claim's CAS, else only by a thread holding the place lock,
    /// while the entry is idle.
    pub(super) key: AtomicU64,
    /// Bit 0: [`PLACE_LOCKED`]; bits 1..64: the next place.
    next: AtomicU64,
    /// Places the collector is done with (emitted, given up, or emitted late): written by the
    /// emitter only. The entry is idle when every place taken is done.
    done: AtomicU64,
    /// Set while a thread reads or writes `holders`.
    holders_locked: AtomicBool,
    /// Set while a thread claims an entry for a lane whose first-level home this is: lanes
    /// that hash here are added one at a time, so a lane is never added twice.
    claiming: AtomicBool,
    /// The places taken on this entry whose lists are not yet submitted or dropped, in place
    /// order. Read and written only by the thread holding `holders_locked`; its capacity is
    /// kept, so a lane in use allocates nothing.
    holders: UnsafeCell<Vec<(u64, Holder)>>,
}

// Safety: every field but `holders` is an atomic; `holders` is accessed only by the thread
// that holds `holders_locked` (taken with an Acquire CAS, released with a Release store), so no
// two threads ever access it at once, and each sees the last holder's writes.
unsafe impl Sync for Entry {}

/// An entry's place lock, held by this thread: unlocked on drop, keeping the next place as it
/// was (a first record that failed or panicked takes no place).
pub(super) struct PlaceLocked<'t> {
    pub(super) entry: &'t Entry,
    /// The next place when the lock was taken.
    pub(super) seq: u64,
}

impl PlaceLocked<'_> {
    /// Takes the next place and unlocks.
    pub(super) fn take_place(self) -> u64 {
        let seq = self.seq;
        // Release: the holder registered before is in `holders` for whoever sees the place
        // taken (the next first record, and through it the collector).
        self.entry.next.store((seq + 1) << 1, Ordering::Release);
        std::mem::forget(self);
        seq
    }

    /// Whether the collector is done with every place taken on the entry: no list of the lane
    /// it serves is being recorded, queued or waiting in the emitter. Stays true while the
    /// lock is held (no place can be taken, and `done` never passes `next`).
    pub(super) fn idle(&self) -> bool {
        // Acquire: pairs with the emitter's Release `settle`; a stale (lower) count only
        // makes the entry look busy.
        self.entry.done.load(Ordering::Acquire) == self.seq
    }

    /// Makes the idle entry serve the lane of `key` from now on, if it still serves the lane
    /// of `was` (0: none; an unused first-level entry may be claimed by its CAS meanwhile).
    /// Its next place stays as it was.
    pub(super) fn serve(&self, was: u64, key: u64) -> bool {
        // Relaxed: published by the place lock's releasing store, which a thread of the lane
        // that served the entry before must take before it believes the key (`lock_place_of`).
        self.entry.key.compare_exchange(was, key, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

impl Drop for PlaceLocked<'_> {
    fn drop(&mut self) {
        // Release: as in `take_place`; the place is not taken.
        self.entry.next.store(self.seq << 1, Ordering::Release);
    }
}

/// An entry's holders' lock, held by this thread: unlocked on drop.
pub(super) struct HoldersLocked<'t> {
    entry: &'t Entry,
}

impl HoldersLocked<'_> {
    /// The entry's holders. Only the lock's holder gets here.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Vec<(u64, Holder)>) -> R) -> R {
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

/// The claiming lock of a first-level entry, held by this thread: unlocked on drop.
pub(super) struct Claiming<'t>(&'t AtomicBool);

impl Drop for Claiming<'_> {
    fn drop(&mut self) {
        // Release: the key this thread stored is seen by the next claimer of the home.
        self.0.store(false, Ordering::Release);
    }
}

impl Entry {
    pub(super) fn new() -> Self {
        Self {
            key: AtomicU64::new(0),
            next: AtomicU64::new(0),
            done: AtomicU64::new(0),
            holders_locked: AtomicBool::new(false),
            claiming: AtomicBool::new(false),
            holders: UnsafeCell::new(Vec::new()),
        }
    }

    /// Takes the place lock, spinning while another thread holds it.
    pub(super) fn lock_place(&self) -> PlaceLocked<'_> {
        loop {
            if let Some(locked) = self.lock_place_while(|| true) {
                return locked;
            }
        }
    }

    /// Takes the place lock for the lane of `key`, spinning while another thread holds it
    /// (a first record of the lane, or a claim: a few instructions); `None` once the entry
    /// serves another lane (it was idle, and a new lane took it over: look the lane up
    /// again). So a first record never waits for another lane's backend call.
    pub(super) fn lock_place_of(&self, key: u64) -> Option<PlaceLocked<'_>> {
        // Relaxed while spinning: only says when to stop; the check under the lock decides.
        let locked = self.lock_place_while(|| self.key.load(Ordering::Relaxed) == key)?;
        // The lock's Acquire pairs with the Release that unlocked after a claim: the key is
        // the one the entry serves now. (The drop guard unlocks if it is not ours.)
        (self.key.load(Ordering::Relaxed) == key).then_some(locked)
    }

    /// Takes the place lock if no thread holds it now; `None` if one does. One CAS.
    pub(super) fn try_lock_place(&self) -> Option<PlaceLocked<'_>> {
        // Relaxed: a guess at the unlocked word; the CAS checks it.
        let expected = self.next.load(Ordering::Relaxed) & !PLACE_LOCKED;
        self.next
            .compare_exchange(expected, expected | PLACE_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| PlaceLocked { entry: self, seq: expected >> 1 })
    }

    /// Takes the place lock, spinning while another thread holds it and `wait()` says to go
    /// on waiting; `None` when it says to stop.
    fn lock_place_while(&self, wait: impl Fn() -> bool) -> Option<PlaceLocked<'_>> {
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
                Ok(_) => return Some(PlaceLocked { entry: self, seq: expected >> 1 }),
                Err(actual) => {
                    if actual & PLACE_LOCKED != 0 {
                        if !wait() {
                            return None;
                        }
                        spin_wait();
                    }
                    expected = actual & !PLACE_LOCKED;
                }
            }
        }
    }

    /// Takes the holders' lock if no thread holds it now; `None` if one does. One CAS, no
    /// waiting.
    pub(super) fn try_lock_holders(&self) -> Option<HoldersLocked<'_>> {
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
    pub(super) fn lock_holders(&self) -> HoldersLocked<'_> {
        loop {
            if let Some(locked) = self.try_lock_holders() {
                return locked;
            }
            spin_wait();
        }
    }

    /// Takes the claiming lock, spinning while another thread claims an entry for a lane of
    /// the same home (a few instructions, or the allocation of a level; never a backend call).
    pub(super) fn lock_claiming(&self) -> Claiming<'_> {
        loop {
            // Acquire: pairs with the Release unlock: the previous claimer's key is seen.
            if self.claiming.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Claiming(&self.claiming);
            }
            spin_wait();
        }
    }

    /// `n` more places are done (the emitter).
    pub(super) fn settle(&self, n: u64) {
        // Release: pairs with `idle`'s Acquire. The emitter is the only writer.
        self.done.fetch_add(n, Ordering::Release);
    }
}

/// Each lock and each step of an entry on its own, from one thread, with no call that waits:
/// a lock that is never given back, a place that does not move on or an entry never idle
/// fails one of these at once, where the table's tests would spin on it for ever.
#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn places_are_taken_in_order_and_a_lock_not_used_takes_none() {
        let entry = Entry::new();
        for expected in 0..3 {
            let locked = entry.try_lock_place().expect("no other thread holds it");
            assert_eq!(locked.seq, expected);
            assert!(entry.try_lock_place().is_none(), "held until taken or dropped");
            assert_eq!(locked.take_place(), expected);
        }
        let unused = entry.try_lock_place().expect("unlocked by `take_place`");
        assert_eq!(unused.seq, 3);
        drop(unused);
        assert_eq!(entry.try_lock_place().map(|l| l.seq), Some(3), "unlocked on drop, no place taken");
    }

    #[test]
    fn an_entry_is_idle_once_every_place_taken_is_settled() {
        let entry = Entry::new();
        assert!(entry.try_lock_place().unwrap().idle(), "no place taken");
        entry.try_lock_place().unwrap().take_place();
        entry.try_lock_place().unwrap().take_place();
        entry.settle(1);
        assert!(!entry.try_lock_place().unwrap().idle(), "one place still open");
        entry.settle(1);
        assert!(entry.try_lock_place().unwrap().idle());
    }

    #[test]
    fn the_place_lock_of_a_lane_is_had_only_while_the_entry_serves_it() {
        let entry = Entry::new();
        entry.key.store(7, Ordering::Relaxed);
        let locked = entry.lock_place_of(7).expect("the entry serves lane 7");
        assert!(locked.serve(7, 8), "idle, serving 7: taken over by 8");
        drop(locked);
        assert!(entry.lock_place_of(7).is_none(), "it serves 8 now: look again");
        assert!(entry.lock_place_of(8).is_some());
    }

    #[test]
    fn the_holders_and_claiming_locks_are_given_back_on_drop() {
        let entry = Entry::new();
        let holders = entry.try_lock_holders().expect("unlocked");
        assert!(entry.try_lock_holders().is_none());
        drop(holders);
        assert!(entry.try_lock_holders().is_some());
        drop(entry.lock_claiming());
        assert!(!entry.claiming.load(Ordering::Relaxed), "unlocked on drop");
    }

    /// A waiter that found the lock held takes it once it is given back. Bounded, so that a
    /// waiter that can never take it (a wrong guess at the unlocked word) fails this test
    /// rather than hanging it; the bound is far past any scheduling delay.
    #[test]
    fn a_waiter_takes_the_place_lock_once_it_is_given_back() {
        let entry = std::sync::Arc::new(Entry::new());
        entry.try_lock_place().unwrap().take_place();
        let held = entry.try_lock_place().unwrap();
        let waiting = std::sync::Arc::new(AtomicBool::new(false));
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn({
            let (entry, waiting) = (entry.clone(), waiting.clone());
            move || {
                let seq = entry
                    .lock_place_while(|| {
                        waiting.store(true, Ordering::Relaxed);
                        true
                    })
                    .map(|locked| locked.take_place());
                let _ = sender.send(seq);
            }
        });
        while !waiting.load(Ordering::Relaxed) {
            if let Ok(seq) = receiver.try_recv() {
                panic!("the waiter came back with {seq:?} while the lock was held");
            }
            std::thread::yield_now();
        }
        assert_eq!(held.take_place(), 1);
        let seq = receiver.recv_timeout(Duration::from_secs(60)).expect("the waiter took the lock");
        assert_eq!(seq, Some(2));
    }
}
