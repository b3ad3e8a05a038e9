//! Who may touch a slot's `record` and `launch` cells: the one owner of the slot's list, and
//! only through the handles made here, where a list changes hands.
//!
//! A list's slots have exactly one owner at a time, and only the owner touches their cells:
//!
//! ```text
//!   recording list ──submit──> submission queue ──take_all──> reader ──ListStack──> read/retry
//!   (Runs: OwnedSlot,          (nobody: the Release  (ListHead; a piece   queue (nobody)
//!    then ListHead)             push, Acquire take)    of a HeadBatch)          │ take_all
//!                                                                               v
//!                                                          emitter (ListHead) ──> pool (Free)
//! ```
//!
//! - while it records, the list holds its slots in its [`Runs`](super::runs::Runs): a slot
//!   it takes comes as an [`OwnedSlot`], through which it writes the slot's launch;
//! - at submit, [`Runs::take_chains`](super::runs::Runs::take_chains) turns the used run
//!   into a [`ListHead`], through which the list writes its head record before
//!   [`SubmissionQueue::push`] gives the head up;
//! - a collector gets a `ListHead` for each list it takes off a queue
//!   ([`SubmissionQueue::take_all`]: one swap hands each list to exactly one taker), or
//!   for each list of a piece of a [`HeadBatch`] it claims (one `fetch_add` hands each piece
//!   to exactly one claimer), and gives it up again by pushing it on a queue (`ListStack`, submit.rs)
//!   or releasing its slots.
//!
//! Neither handle is `Clone`, and neither can be made outside this folder: holding one is
//! being the owner. This is the argument behind `unsafe impl Sync for Pool` (`pool.rs`), and
//! the `unsafe` blocks below are the only accesses to the cells.

use super::freelist::{Chain, Links, NIL};
use super::pool::{Pool, Slot};
use crate::launch::Launch;
use crate::sync::{AtomicUsize, Ordering};

/// A list's head slot (its first), held by the list's one owner: its head record, and the
/// launches of the list's slots, are reached only through it.
///
/// Made only where a list changes hands (this module's doc), given up by value; not `Clone`.
/// It names a slot of the pool that made it: every method takes that pool.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ListHead {
    first: u32,
}

impl ListHead {
    /// The handle for the list at `first`, made by a hand-off in this folder.
    #[inline]
    pub(super) fn new(first: u32) -> Self {
        debug_assert_ne!(first, NIL);
        Self { first }
    }

    /// The list's first slot.
    #[inline]
    pub(crate) fn first(&self) -> u32 {
        self.first
    }

    /// Reads the head record.
    #[inline]
    pub(crate) fn read<E, R, T>(&self, pool: &Pool<E, R>, f: impl FnOnce(&R) -> T) -> T {
        // Safety: the holder of the list's one `ListHead` owns its slots (module doc): no
        // other thread writes the record while this handle lives.
        pool.slot(self.first).record.with(|r| f(unsafe { &*r }))
    }

    /// Reads or writes the head record.
    #[inline]
    pub(crate) fn write<E, R, T>(&mut self, pool: &Pool<E, R>, f: impl FnOnce(&mut R) -> T) -> T {
        // Safety: as in `read`; `&mut self` keeps this access the only one.
        pool.slot(self.first).record.with_mut(|r| f(unsafe { &mut *r }))
    }

    /// The launch recorded with the list's event in `slot` (one of the list's slots, as its
    /// records name them), written by the list while it recorded.
    #[inline]
    pub(crate) fn launch<E, R>(&self, pool: &Pool<E, R>, slot: u32) -> Launch {
        // Safety: as in `read`: the list's slots are the holder's, and their launches were
        // written before the list was submitted (published by the queue's Release push).
        pool.slot(slot).launch.with(|l| unsafe { *l })
    }
}

/// A slot a recording list took from its reservation ([`Runs::take`](super::runs::Runs::take)):
/// its event, and its launch cell, which only the list writes while it owns the slot. Not
/// `Clone`, and not `Send` (the list records on one thread).
#[derive(Debug)]
pub(crate) struct OwnedSlot<'p, E, R> {
    slot: &'p Slot<E, R>,
}

impl<'p, E, R> OwnedSlot<'p, E, R> {
    /// The slot taken from a list's reservation, made by `Runs::take` only.
    #[inline]
    pub(super) fn new(slot: &'p Slot<E, R>) -> Self {
        Self { slot }
    }

    /// The slot's backend event.
    #[inline]
    pub(crate) fn event(&self) -> &'p E {
        &self.slot.event
    }

    /// Writes the launch of the zone begun at this slot's event.
    #[inline]
    pub(crate) fn set_launch(&self, launch: Launch) {
        // Safety: the slot is Owned by the list that took it (module doc): no other thread
        // reads or writes its launch until the list is submitted or dropped, and this handle
        // does not leave the list's thread.
        self.slot.launch.with_mut(|l| unsafe { *l = launch });
    }
}

/// Lists taken by one collector, cut into pieces that every collector at hand claims, each
/// piece once: `(group, order, first slot)`, a piece being consecutive lists of one group,
/// at most `piece_lists` of them.
#[derive(Debug)]
pub(crate) struct HeadBatch {
    lists: Vec<(u32, u64, u32)>,
    /// Where each piece starts in `lists`, then `lists.len()`.
    starts: Vec<usize>,
    /// The next piece to claim.
    next: AtomicUsize,
}

impl HeadBatch {
    /// Takes the lists' heads, in the order they are to be claimed.
    pub(crate) fn new(lists: Vec<(u32, u64, ListHead)>, piece_lists: usize) -> Self {
        let lists: Vec<(u32, u64, u32)> =
            lists.into_iter().map(|(group, order, head)| (group, order, head.first)).collect();
        let mut starts = Vec::new();
        for (i, &(group, _, _)) in lists.iter().enumerate() {
            let start = starts.last().copied();
            let same_group = start.is_some_and(|s: usize| lists[s].0 == group && i - s < piece_lists);
            if !same_group {
                starts.push(i);
            }
        }
        starts.push(lists.len());
        Self { lists, starts, next: AtomicUsize::new(0) }
    }

    /// How many pieces.
    pub(crate) fn pieces(&self) -> usize {
        self.starts.len() - 1
    }

    /// Claims the next piece, if one is left: its lists' heads are the claimer's.
    pub(crate) fn claim(&self) -> Option<Piece<'_>> {
        // Relaxed: the batch's lists were published with it (the collectors' lock); the
        // counter only makes each claim unique.
        let piece = self.next.fetch_add(1, Ordering::Relaxed);
        (piece < self.pieces())
            .then(|| Piece { lists: &self.lists[self.starts[piece]..self.starts[piece + 1]] })
    }
}

/// A claimed piece of a [`HeadBatch`]: yields its lists' heads, once each.
#[derive(Debug)]
pub(crate) struct Piece<'a> {
    lists: &'a [(u32, u64, u32)],
}

impl Piece<'_> {
    /// The group of the piece's lists.
    pub(crate) fn group(&self) -> Option<u32> {
        self.lists.first().map(|&(group, _, _)| group)
    }
}

impl Iterator for Piece<'_> {
    type Item = ListHead;

    #[inline]
    fn next(&mut self) -> Option<ListHead> {
        let (&(_, _, first), rest) = self.lists.split_first()?;
        self.lists = rest;
        Some(ListHead::new(first))
    }
}

impl Chain {
    /// This chain with `next` linked after its last slot (both the caller's).
    #[inline]
    pub(crate) fn then(self, links: &(impl Links + ?Sized), next: Chain) -> Chain {
        // Relaxed: published by the Release CAS of the push that hands the chain on.
        links.link(self.last).store(next.first, Ordering::Relaxed);
        Chain { first: self.first, last: next.last, len: self.len + next.len }
    }
}
