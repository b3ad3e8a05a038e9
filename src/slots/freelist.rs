//! A Treiber stack of slot indices (R. K. Treiber, *Systems Programming: Coping with
//! Parallelism*, IBM RJ 5118, 1986), with an ABA tag and whole-chain operations.
//!
//! The stack holds no nodes of its own: it threads a chain through one `AtomicU32` link per
//! slot, owned by whoever holds the slot array (the pool). The head is one `AtomicU64`:
//!
//! ```text
//!  63                          32 31                           0
//! +------------------------------+------------------------------+
//! |  tag: bumped on every        |  index of the top slot,      |
//! |  successful CAS (push / pop) |  or NIL (u32::MAX) if empty  |
//! +------------------------------+------------------------------+
//! ```
//!
//! The tag defeats ABA: a thread that read head `(t, A)` and A's link `B`, then slept while
//! others popped A, popped B, and pushed A back, finds head `(t+3, A)` and its CAS fails,
//! instead of installing the stale `B`. A 32-bit tag would need exactly 2^32 successful CASes
//! between one thread's load and its CAS to be fooled.
//!
//! `pop_chain(n)` takes up to `n` slots in one CAS and `push_chain(first, last)` returns a
//! whole chain in one CAS: contention is one CAS per batch, not per slot.
//!
//! [`TaggedFreeList`] takes the tag width as a const parameter only so the verification
//! suite can build a deliberately blind one (`TAG_BITS = 0`) and show loom catching the ABA
//! bug; the crate uses [`FreeList`] (32 bits).
//!
//! This module is public and supported: the stack works on any slot array that gives it
//! links ([`Links`]), and the verification suite (`loom-tests/`) drives it directly.

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// The index that means "no slot": the end of a chain, or an empty stack.
pub const NIL: u32 = u32::MAX;

/// Gives the freelist the link of a slot. Links are atomics because a thread that read a
/// stale head may read the link of a slot whose new owner is writing it; that read must not
/// be a data race (the tag makes the stale value harmless).
pub trait Links {
    /// The link of slot `index`. `index` comes from a link or the head, so it is either a
    /// live slot, or (for a stale reader only) a slot not yet visible to this thread: then
    /// the implementation returns any link holding [`NIL`], and the reader's CAS will fail.
    fn link(&self, index: u32) -> &AtomicU32;
}

impl Links for [AtomicU32] {
    fn link(&self, index: u32) -> &AtomicU32 {
        &self[index as usize]
    }
}

impl<const N: usize> Links for [AtomicU32; N] {
    fn link(&self, index: u32) -> &AtomicU32 {
        &self[index as usize]
    }
}

impl Links for Vec<AtomicU32> {
    fn link(&self, index: u32) -> &AtomicU32 {
        &self[index as usize]
    }
}

/// A chain of slots taken from or given to a freelist: `first`, linked through to `last`,
/// `len` slots in all. The link of `last` is not part of the chain (it may point anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// The first slot.
    pub first: u32,
    /// The last slot.
    pub last: u32,
    /// How many slots.
    pub len: u32,
}

/// The freelist the crate uses: a Treiber stack with a 32-bit ABA tag.
pub type FreeList = TaggedFreeList<32>;

/// A Treiber stack of slot indices whose head carries a `TAG_BITS`-bit ABA tag (0 to 32).
/// Use [`FreeList`]; narrower tags exist for the verification suite's negative control.
#[derive(Debug)]
pub struct TaggedFreeList<const TAG_BITS: u32> {
    /// Lower 32 bits: index of the top slot (or NIL); upper 32 bits: tag, bumped on every
    /// successful CAS and kept to `TAG_BITS` bits.
    head: CachePadded<AtomicU64>,
}

impl<const TAG_BITS: u32> Default for TaggedFreeList<TAG_BITS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const TAG_BITS: u32> TaggedFreeList<TAG_BITS> {
    const TAG_MASK: u64 = if TAG_BITS >= 32 { u32::MAX as u64 } else { (1u64 << TAG_BITS) - 1 };

    /// An empty stack.
    pub fn new() -> Self {
        Self { head: CachePadded::new(AtomicU64::new(Self::pack(0, NIL))) }
    }

    #[inline]
    fn pack(tag: u64, index: u32) -> u64 {
        ((tag & Self::TAG_MASK) << 32) | u64::from(index)
    }

    #[inline]
    fn index(word: u64) -> u32 {
        word as u32
    }

    #[inline]
    fn next_word(word: u64, index: u32) -> u64 {
        Self::pack((word >> 32).wrapping_add(1), index)
    }

    /// Pops one slot, or `None` if the stack is empty.
    #[inline]
    pub fn pop(&self, links: &(impl Links + ?Sized)) -> Option<u32> {
        self.pop_chain(links, 1).map(|chain| chain.first)
    }

    /// Pops up to `n` (at least 1) slots in one CAS, as a chain linked in stack order.
    pub fn pop_chain(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        debug_assert!(n >= 1);
        // Acquire: pairs with the Release CAS of the push that installed this head, so the
        // links of the chain (written before that push) are visible to the walk below.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let first = Self::index(head);
            if first == NIL {
                return None;
            }
            // Relaxed link loads: the Acquire above already orders them after the pusher's
            // writes. If another thread pops these slots meanwhile, what we read may be
            // stale, but then the head's tag has moved and the CAS below fails.
            let mut last = first;
            let mut len = 1;
            let mut next = links.link(last).load(Ordering::Relaxed);
            while len < n && next != NIL {
                last = next;
                len += 1;
                next = links.link(last).load(Ordering::Relaxed);
            }
            // Success Acquire: we now own the chain and will read and write its slots after
            // the previous owner's release (the push's Release CAS heads the release
            // sequence this RMW continues). Failure Acquire: we walk the new head's links.
            match self.head.compare_exchange_weak(
                head,
                Self::next_word(head, next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(Chain { first, last, len }),
                Err(current) => head = current,
            }
        }
    }

    /// Pushes one slot.
    #[inline]
    pub fn push(&self, links: &(impl Links + ?Sized), index: u32) {
        self.push_chain(links, Chain { first: index, last: index, len: 1 });
    }

    /// Pushes a whole chain (`first` linked through to `last`) in one CAS.
    pub fn push_chain(&self, links: &(impl Links + ?Sized), chain: Chain) {
        debug_assert!(chain.first != NIL && chain.last != NIL && chain.len >= 1);
        // Relaxed: we only copy the index into our own slot's link; nothing is read through it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            links.link(chain.last).store(Self::index(head), Ordering::Relaxed);
            // Success Release: everything the owner wrote to these slots (links, records)
            // happens-before any thread that pops them (its Acquire load or CAS).
            match self.head.compare_exchange_weak(
                head,
                Self::next_word(head, chain.first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Whether the stack is empty at this instant. Only a hint: other threads may push or pop
    /// right after; nothing may be concluded from it about any slot.
    #[inline]
    pub fn looks_empty(&self) -> bool {
        // Relaxed: a hint, never followed by a read of any slot.
        Self::index(self.head.load(Ordering::Relaxed)) == NIL
    }

    /// Counts the slots on the stack by walking it, stopping after `limit`. Exact only when
    /// no other thread is using the stack; meant for audits and tests.
    pub fn count_quiescent(&self, links: &(impl Links + ?Sized), limit: usize) -> usize {
        let mut index = Self::index(self.head.load(Ordering::Acquire));
        let mut count = 0;
        while index != NIL && count < limit {
            count += 1;
            index = links.link(index).load(Ordering::Acquire);
        }
        count
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    fn links(n: u32) -> Vec<AtomicU32> {
        (0..n).map(|_| AtomicU32::new(NIL)).collect()
    }

    #[test]
    fn pop_returns_pushed_slots_last_in_first_out() {
        let l = links(3);
        let f = FreeList::new();
        assert_eq!(f.pop(&l), None);
        f.push(&l, 0);
        f.push(&l, 2);
        assert_eq!(f.pop(&l), Some(2));
        assert_eq!(f.pop(&l), Some(0));
        assert_eq!(f.pop(&l), None);
    }

    #[test]
    fn pop_chain_takes_at_most_n_in_stack_order() {
        let l = links(5);
        let f = FreeList::new();
        for i in 0..5 {
            f.push(&l, i);
        }
        let c = f.pop_chain(&l, 3).unwrap();
        assert_eq!((c.first, c.last, c.len), (4, 2, 3));
        assert_eq!(l[4].load(Ordering::Relaxed), 3);
        let c = f.pop_chain(&l, 10).unwrap();
        assert_eq!((c.first, c.last, c.len), (1, 0, 2));
        assert!(f.pop_chain(&l, 1).is_none());
    }

    #[test]
    fn push_chain_returns_a_whole_chain_in_one_operation() {
        let l = links(4);
        let f = FreeList::new();
        f.push(&l, 3);
        l[0].store(1, Ordering::Relaxed);
        l[1].store(2, Ordering::Relaxed);
        f.push_chain(&l, Chain { first: 0, last: 2, len: 3 });
        assert_eq!(f.count_quiescent(&l, 100), 4);
        let order: Vec<u32> = std::iter::from_fn(|| f.pop(&l)).collect();
        assert_eq!(order, vec![0, 1, 2, 3]);
    }

    #[test]
    fn concurrent_pop_and_push_never_lose_or_duplicate_slots() {
        const SLOTS: u32 = 64;
        let l = links(SLOTS);
        let f = FreeList::new();
        for i in 0..SLOTS {
            f.push(&l, i);
        }
        // Miri runs this about 10^4 times slower: fewer rounds still interleave the threads.
        let rounds = if cfg!(miri) { 100 } else { 2_000u32 };
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (f, l) = (&f, &l);
                s.spawn(move || {
                    for round in 0..rounds {
                        let n = 1 + (t + round) % 4;
                        if let Some(c) = f.pop_chain(l, n) {
                            f.push_chain(l, c);
                        }
                    }
                });
            }
        });
        let mut seen: Vec<u32> = std::iter::from_fn(|| f.pop(&l)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..SLOTS).collect::<Vec<_>>());
    }
}
