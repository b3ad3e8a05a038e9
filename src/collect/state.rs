//! The collector's state word (`Collector::state`: readers inside, flushes waiting, a flush
//! keeping readers out) and its hand-over word (`Collector::handover`), their bits, and the
//! guards that undo what a reader, a waiting flush, a flush or the emitter's holder did, also
//! when it unwinds (`mod.rs` holds the protocol that uses them). A leaf: it knows no emitter.

use crate::sync::{AtomicU64, MutexGuard, Ordering};

/// `Collector::state`: set while a flush keeps new readers out.
pub(super) const FLUSHING: u64 = 1 << 63;
/// `Collector::state`: a `collect` came while a flush kept readers out; the flush collects
/// once more for it before returning.
pub(super) const MISSED: u64 = 1 << 62;
/// `Collector::state`, bits 32..62: one unit per flush waiting for the emitter. While one
/// waits, a `collect` leaves what it read to it (the flush waits for every reader inside, then
/// takes the read lists), and the emitter's holder stops at the end of its round.
pub(super) const FLUSH_WAITER: u64 = 1 << 32;
/// `Collector::state`: the flushes waiting for the emitter.
pub(super) const FLUSH_WAITERS: u64 = MISSED - FLUSH_WAITER;
/// `Collector::state`, bits 0..32: the collectors in their read phase now.
pub(super) const READERS: u64 = FLUSH_WAITER - 1;

/// `Collector::handover`: set for the last round of a holder of the emitter, which will not
/// look at the read queue after it (low bits: rounds begun, wrapping).
pub(super) const LAST_ROUND: u64 = 1 << 63;
/// `Collector::handover`: the count of rounds begun.
pub(super) const ROUND_COUNT: u64 = LAST_ROUND - 1;
/// Rounds one holder of the emitter emits in one call: its own, then, while callers that
/// found it busy left read lists behind, more. The last is announced (`LAST_ROUND`): a caller
/// that finds the emitter busy then waits for the round to end (or for the next round to
/// begin) instead of returning at once, so that no read list is left behind without a
/// producer's collects keeping any one call running.
pub(super) const ROUNDS: u32 = if cfg!(gpu_event_pool_loom) { 2 } else { 4 };

crate::sync::const_thread_local! {
    /// The emitters this thread holds now (their addresses): a sink that calls `collect`
    /// never waits for the last round of its own caller, and one that calls `flush` on its
    /// own context gets an error instead of waiting for itself.
    static HOLDING: std::cell::RefCell<Vec<usize>> = std::cell::RefCell::new(Vec::new());
}

/// Whether this thread holds an emitter now.
pub(super) fn holding_any() -> bool {
    HOLDING.with(|held| !held.borrow().is_empty())
}

/// Whether this thread holds the emitter of the collector at `owner` (its address).
pub(super) fn holds(owner: usize) -> bool {
    HOLDING.with(|held| held.borrow().contains(&owner))
}

/// The emitter, held by this thread (counted in [`HOLDING`] until dropped).
pub(super) struct Held<'a, T>(MutexGuard<'a, T>);

impl<'a, T> Held<'a, T> {
    /// The emitter of the collector at `owner` (its address), held by this thread.
    pub(super) fn new(owner: usize, guard: MutexGuard<'a, T>) -> Self {
        HOLDING.with(|held| held.borrow_mut().push(owner));
        Self(guard)
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        HOLDING.with(|held| held.borrow_mut().pop());
    }
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A flush announced as waiting for the emitter ([`FLUSH_WAITER`]): withdrawn when dropped,
/// also if locking unwinds (a flush called from a sink, on the emitting thread).
pub(super) struct Waiting<'a>(pub(super) &'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(FLUSH_WAITER, Ordering::SeqCst);
    }
}

/// A collector in its read phase: leaves it (`state` minus one reader) when dropped, also if
/// a backend or an allocation unwinds through the read.
pub(super) struct ReadPhase<'a>(pub(super) &'a AtomicU64);

impl Drop for ReadPhase<'_> {
    fn drop(&mut self) {
        // Release: the lists this reader pushed are visible to the flush that sees the count
        // drop (its SeqCst read-modify-write acquires).
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A flush keeping readers out: lets them in again when dropped, also if the flush unwinds.
pub(super) struct Flushing<'a>(pub(super) &'a AtomicU64);

impl Flushing<'_> {
    /// Lets readers in again; whether a `collect` was turned away meanwhile.
    pub(super) fn end(self) -> bool {
        let missed = self.0.fetch_and(!(FLUSHING | MISSED), Ordering::SeqCst) & MISSED != 0;
        std::mem::forget(self);
        missed
    }
}

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.0.fetch_and(!(FLUSHING | MISSED), Ordering::SeqCst);
    }
}
