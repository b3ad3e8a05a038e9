//! A Treiber stack of slot indices (R. K. Treiber, *Systems Programming: Coping with
//! Parallelism*, IBM RJ 5118, 1986), with an ABA tag and whole-chain operations.
//!
//! The stack holds no nodes of its own: it threads a chain through one `AtomicU32` link per
//! slot, owned by whoever holds the slot array (the pool). The head is one `AtomicU64`
//! holding the top slot's index and a tag (`Head` packs and unpacks it):
//!
//! ```text
//!  63                                        24 23                      0
//! +--------------------------------------------+------------------------+
//! |  tag (40 bits): +1 on every successful CAS  |  index of the top slot |
//! |  (push / pop), wraps after 2^40             |  or NIL = 2^24 - 1     |
//! +--------------------------------------------+------------------------+
//! ```
//!
//! The tag defeats ABA: a thread that read head `(t, A)` and A's link `B`, then slept while
//! others popped A, popped B, and pushed A back, finds head `(t+3, A)` and its CAS fails,
//! instead of installing the stale `B`. To be fooled, exactly a multiple of 2^40 successful
//! CASes must happen between one thread's load and its CAS: about 57 minutes of a thread
//! doing nothing but pop and push, at the 3.1 ns per CAS measured on the 2-core dev machine
//! (docs/design.md, section 3, has the arithmetic). The index takes the other 24 bits, and
//! [`NIL`] is their all-ones value: slot indices are below it, so a freelist holds at most
//! 2^24 - 1 slots, and the head and the links hold the same values (packing is a shift and
//! a mask, nothing to translate).
//!
//! **Segments.** Every chain on the stack is cut into *segments*: runs of slots whose first
//! slot's segment word names the run's last slot and length ([`Segment`]); the slot after a
//! segment (its last slot's link) heads the next one:
//!
//! ```text
//!  head ─► [A: segment {last: C, len: 3}] ─► B ─► C ─► [D: segment {last: D, len: 1}] ─► NIL
//! ```
//!
//! `push_chain(chain)` puts a whole segmented chain on top in one CAS; `pop_chain(n)` takes
//! whole segments until it has `n` slots, also in one CAS, reading one word and one link per
//! segment where a split at slot `n` reads the `n` links before it. Links are the slots'
//! own, so each is a cache line the popper may not have: taking 64 slots by their links cost
//! 3 to 10 µs when other threads had last written them (measured on the H200). Contention is one CAS
//! per chain, not per slot.
//!
//! [`TaggedFreeList`] takes the tag width as a const parameter only so the verification
//! suite can build a deliberately blind one (`TAG_BITS = 0`) and show loom catching the ABA
//! bug; the crate uses [`FreeList`] (40 bits).
//!
//! This module is public and supported: the stack works on any slot array that gives it
//! links ([`Links`]), and the verification suite (`loom-tests/`) drives it directly.

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// The index that means "no slot": the end of a chain, or an empty stack. It is 2^24 - 1,
/// the largest value of the head's 24-bit index field: every slot index is below it.
pub const NIL: u32 = Head::INDEX_MASK as u32;

/// Gives the freelist the link and the segment word of a slot. Both are atomics because a
/// thread that read a stale head may read them while the slot's new owner writes them; that
/// read must not be a data race (the tag makes the stale value harmless).
pub trait Links {
    /// The link of slot `index`: a slot index (below [`NIL`]) or NIL. `index` comes from a
    /// link, a segment word or the head, so it is either a live slot, or (for a stale reader
    /// only) a slot not yet visible to this thread: then the implementation returns any link
    /// holding [`NIL`], and the reader's CAS will fail.
    fn link(&self, index: u32) -> &AtomicU32;

    /// The segment word of slot `index` ([`Segment`]), meaningful while the slot heads a
    /// segment of a free chain. For an `index` not visible to this thread, as for
    /// [`link`](Self::link): any word (its reader's CAS fails).
    fn segment(&self, index: u32) -> &AtomicU64;
}

/// Links and segment words for slots that keep neither themselves: the slots of a test or a
/// benchmark, numbered from 0.
///
/// ```
/// use gpu_event_pool::testing::freelist::{FreeList, LinkTable};
/// let links = LinkTable::new(4);
/// let free = FreeList::new();
/// (0..4).for_each(|i| free.push(&links, i));
/// assert_eq!(free.pop_chain(&links, 3).map(|chain| chain.len), Some(3));
/// ```
#[derive(Debug)]
pub struct LinkTable {
    links: Box<[AtomicU32]>,
    segments: Box<[AtomicU64]>,
}

impl LinkTable {
    /// Links (all [`NIL`]) and segment words for slots `0..len`.
    pub fn new(len: u32) -> Self {
        Self {
            links: (0..len).map(|_| AtomicU32::new(NIL)).collect(),
            segments: (0..len).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Links for LinkTable {
    fn link(&self, index: u32) -> &AtomicU32 {
        &self.links[index as usize]
    }

    fn segment(&self, index: u32) -> &AtomicU64 {
        &self.segments[index as usize]
    }
}

/// A segment of a free chain, as its first slot's segment word holds it: lower 32 bits the
/// segment's last slot, upper 32 bits its length (at least 1; the slots are linked from the
/// first through to `last`). Only the word of a slot that heads a segment means anything;
/// every other slot's word is left as it was, stale.
///
/// Words are written by the slots' owner and published like their links: by the Release CAS
/// that pushes them, or by whatever hands the owner's slots on (a magazine is one thread's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The segment's last slot.
    pub last: u32,
    /// How many slots it has.
    pub len: u32,
}

impl Segment {
    /// The segment slot `first` heads (whatever its word holds if it heads none).
    #[inline]
    pub fn read(links: &(impl Links + ?Sized), first: u32) -> Self {
        // Relaxed: ordered like the links (see the type's docs); a stale reader's CAS fails.
        Self::from_word(links.segment(first).load(Ordering::Relaxed))
    }

    /// The segment a word holds: lower 32 bits `last`, upper 32 bits `len`.
    #[inline]
    pub(crate) fn from_word(word: u64) -> Self {
        Self { last: word as u32, len: (word >> 32) as u32 }
    }

    /// Makes slot `first`, the caller's, head this segment.
    #[inline]
    pub fn write(self, links: &(impl Links + ?Sized), first: u32) {
        debug_assert!(self.len >= 1);
        // Relaxed: published by whatever hands the slots on (see the type's docs).
        links.segment(first).store(self.word(), Ordering::Relaxed);
    }

    /// The segment's word ([`from_word`](Self::from_word) reads it back).
    #[inline]
    pub(crate) fn word(self) -> u64 {
        u64::from(self.len) << 32 | u64::from(self.last)
    }
}

/// Cuts the front off the segmented chain that starts at `first` and has `len` slots (the
/// caller's; `1 <= min <= len`, `min <= max`): whole segments while fewer than `min` slots
/// are taken and the next segment fits in `max`; a segment that does not fit is cut so that
/// exactly `min` are taken, both its parts made segments (two words written). Returns the slots taken, a segmented chain, and the first slot of what is left
/// (`NIL` when nothing is).
///
/// Reads one word and one link per whole segment taken, and the links up to the cut in a
/// segment that is cut: with `max` a batch and `min` what a list lacks, a cut walks only the
/// few slots the list lacks.
pub fn cut_front(links: &(impl Links + ?Sized), first: u32, len: u32, min: u32, max: u32) -> (Chain, u32) {
    debug_assert!(1 <= min && min <= len && min <= max);
    let mut taken = 0;
    let mut head = first;
    loop {
        let segment = Segment::read(links, head);
        debug_assert!(1 <= segment.len && taken + segment.len <= len, "{segment:?} in {len}");
        // Relaxed: the caller's own slots (see the callers for how they got them).
        if taken + segment.len > max {
            let keep = min - taken;
            let mut last = head;
            for _ in 1..keep {
                last = links.link(last).load(Ordering::Relaxed);
            }
            let rest = links.link(last).load(Ordering::Relaxed);
            Segment { last, len: keep }.write(links, head);
            Segment { last: segment.last, len: segment.len - keep }.write(links, rest);
            return (Chain { first, last, len: min }, rest);
        }
        taken += segment.len;
        if taken >= min {
            let rest = if taken < len { links.link(segment.last).load(Ordering::Relaxed) } else { NIL };
            return (Chain { first, last: segment.last, len: taken }, rest);
        }
        head = links.link(segment.last).load(Ordering::Relaxed);
    }
}

/// Counts the slots of a segmented chain from `first`, segment by segment, stopping at the
/// chain's end (a NIL link), after `limit` slots, or at the first segment whose word does
/// not match its links (its length runs past NIL, past `limit`, or does not end at its last
/// slot): that segment is not counted, so an audit that compares this count with what it
/// expects sees a broken segmentation as missing slots. Exact only when no other thread uses
/// the slots; for audits and tests.
pub fn count_segmented(links: &(impl Links + ?Sized), first: u32, limit: usize) -> usize {
    let mut count = 0;
    let mut head = first;
    // At most `limit` segments (each holds a slot at least): the walk ends after them whatever
    // the links and words hold, even if `count` were wrong.
    for _ in 0..limit {
        if head == NIL {
            break;
        }
        let segment = Segment::read(links, head);
        let len = segment.len as usize;
        if len == 0 || count + len > limit {
            return count;
        }
        // Acquire: an audit may follow slots that another thread released before it.
        let mut slot = head;
        for _ in 1..len {
            slot = links.link(slot).load(Ordering::Acquire);
            if slot == NIL {
                return count;
            }
        }
        if slot != segment.last {
            return count;
        }
        count += len;
        head = links.link(slot).load(Ordering::Acquire);
    }
    count
}

/// A chain of slots taken from or given to a freelist: `first`, linked through to `last`,
/// `len` slots in all. The link of `last` is not part of the chain (it may point anywhere).
///
/// A chain a freelist hands out or takes is *segmented*: `first` heads a [`Segment`], and
/// the slot after each segment heads the next, up to the one that ends at `last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// The first slot.
    pub first: u32,
    /// The last slot.
    pub last: u32,
    /// How many slots.
    pub len: u32,
}

impl Chain {
    /// The chain of slot `index` alone, made a segment (the slot is the caller's).
    pub fn single(links: &(impl Links + ?Sized), index: u32) -> Self {
        Self { first: index, last: index, len: 1 }.into_segment(links)
    }

    /// This chain (the caller's, linked first to last) made one segment: writes its first
    /// slot's segment word.
    pub fn into_segment(self, links: &(impl Links + ?Sized)) -> Self {
        Segment { last: self.last, len: self.len }.write(links, self.first);
        self
    }
}

/// The freelist's head word, the only place that knows its layout: lower 24 bits the index
/// of the top slot or [`NIL`] (all ones); upper 40 bits the tag, bumped on every successful
/// CAS. Both in one word, so one 64-bit CAS swaps them together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head(u64);

impl Head {
    /// Width of the index field.
    const INDEX_BITS: u32 = 24;
    /// The index field; its all-ones value is [`NIL`].
    const INDEX_MASK: u64 = (1 << Self::INDEX_BITS) - 1;
    /// Width of the tag: the rest of the word.
    const TAG_BITS: u32 = u64::BITS - Self::INDEX_BITS;

    /// Head `(tag, index)`. `tag` must fit [`Self::TAG_BITS`] bits; `index` is a slot or
    /// NIL. Bits of `index` above NIL's are dropped, so that a link holding anything else
    /// cannot reach the tag: only a stale popper could read one, and its CAS fails.
    #[inline]
    fn new(tag: u64, index: u32) -> Self {
        debug_assert!(tag >> Self::TAG_BITS == 0);
        Self((tag << Self::INDEX_BITS) | (u64::from(index) & Self::INDEX_MASK))
    }

    #[inline]
    fn index(self) -> u32 {
        (self.0 & Self::INDEX_MASK) as u32
    }

    #[inline]
    fn tag(self) -> u64 {
        self.0 >> Self::INDEX_BITS
    }
}

/// The freelist the crate uses: a Treiber stack with a 40-bit ABA tag.
pub type FreeList = TaggedFreeList<40>;

/// A Treiber stack of slot indices whose head carries a `TAG_BITS`-bit ABA tag (0 to 40).
/// Use [`FreeList`]; narrower tags exist for the verification suite's negative control.
#[derive(Debug)]
pub struct TaggedFreeList<const TAG_BITS: u32> {
    /// A [`Head`]: lower 24 bits the index of the top slot or NIL (all ones); upper 40 bits
    /// the tag, bumped on every successful CAS and kept to `TAG_BITS` bits.
    head: CachePadded<AtomicU64>,
}

impl<const TAG_BITS: u32> Default for TaggedFreeList<TAG_BITS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const TAG_BITS: u32> TaggedFreeList<TAG_BITS> {
    const TAG_MASK: u64 = {
        assert!(TAG_BITS <= Head::TAG_BITS, "the head has room for a 40-bit tag at most");
        (1 << TAG_BITS) - 1
    };

    /// An empty stack.
    pub fn new() -> Self {
        Self::with_tag(0)
    }

    /// An empty stack whose tag starts at `tag` (the tests start it near a wrap).
    fn with_tag(tag: u64) -> Self {
        Self { head: CachePadded::new(AtomicU64::new(Head::new(tag & Self::TAG_MASK, NIL).0)) }
    }

    /// Replaces `seen`, if it is still the head, with `index` on top and the tag bumped.
    /// On failure (the head moved, or a spurious failure) returns the head found.
    #[inline]
    fn replace(&self, seen: Head, index: u32, success: Ordering, failure: Ordering) -> Result<(), Head> {
        let next = Head::new((seen.tag() + 1) & Self::TAG_MASK, index);
        self.head.compare_exchange_weak(seen.0, next.0, success, failure).map(drop).map_err(Head)
    }

    /// Pops whole segments, at least `n` (at least 1) slots while the stack has them, in one
    /// CAS: a segmented chain in stack order. Reads one segment word and one link per segment
    /// taken, never the links inside a segment.
    pub fn pop_chain(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        debug_assert!(n >= 1);
        // Acquire: pairs with the Release CAS of the push that installed this head, so the
        // words and links of the chain (written before that push) are visible below.
        let mut head = Head(self.head.load(Ordering::Acquire));
        loop {
            let first = head.index();
            if first == NIL {
                return None;
            }
            // Relaxed word and link loads: the Acquire above already orders them after the
            // pusher's writes. If another thread pops these slots meanwhile, what we read may
            // be stale (any value), but then the head's tag has moved and the CAS below fails;
            // `segments` bounds the walk even then (every true segment has a slot or more).
            let mut segment = Segment::read(links, first);
            let mut len = segment.len;
            let mut next = links.link(segment.last).load(Ordering::Relaxed);
            let mut segments = 1;
            while len < n && next != NIL && segments < n {
                // The walk's bound, stated: a condition weakened by an edit fails here at
                // once, not by a walk past the chain's end that may never return.
                debug_assert!(next != NIL && segments < n, "a pop walked past its bound");
                segment = Segment::read(links, next);

                len = len.saturating_add(segment.len);
                next = links.link(segment.last).load(Ordering::Relaxed);
                segments += 1;
            }
            // Success Acquire: we now own the chain and will read and write its slots after
            // the previous owner's release (the push's Release CAS heads the release
            // sequence this RMW continues). Failure Acquire: we read the new head's segments.
            match self.replace(head, next, Ordering::Acquire, Ordering::Acquire) {
                Ok(()) => return Some(Chain { first, last: segment.last, len }),
                Err(current) => head = current,
            }
        }
    }

    /// Pushes one slot (an index below [`NIL`], the caller's), as a segment of its own.
    ///
    /// # Panics
    ///
    /// If `index` is not below [`NIL`], as [`push_chain`](Self::push_chain).
    #[inline]
    pub fn push(&self, links: &(impl Links + ?Sized), index: u32) {
        if index >= NIL {
            slot_out_of_range(index);
        }
        self.push_chain(links, Chain::single(links, index));
    }

    /// Pushes a whole segmented chain (`first` linked through to `last`, its segment words
    /// written) in one CAS. Every slot of it must be below [`NIL`].
    ///
    /// # Panics
    ///
    /// If `chain.first` is not below [`NIL`]: the head could not hold it.
    pub fn push_chain(&self, links: &(impl Links + ?Sized), chain: Chain) {
        // Not only a debug check: the head would keep the index's lower 24 bits, and hand out
        // another slot, one that may be in use.
        if chain.first >= NIL {
            slot_out_of_range(chain.first);
        }
        debug_assert!(chain.last < NIL && chain.len >= 1);
        // Relaxed: we only copy the index into our own slot's link; nothing is read through it.
        let mut head = Head(self.head.load(Ordering::Relaxed));
        loop {
            // Relaxed: published by the Release CAS below.
            links.link(chain.last).store(head.index(), Ordering::Relaxed);
            // Success Release: everything the owner wrote to these slots (links, records)
            // happens-before any thread that pops them (its Acquire load or CAS).
            match self.replace(head, chain.first, Ordering::Release, Ordering::Relaxed) {
                Ok(()) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Whether the stack is empty at this instant. Only a hint: other threads may push or pop
    /// right after; nothing may be concluded from it about any slot.
    #[inline]
    pub fn looks_empty(&self) -> bool {
        // Relaxed: a hint, never followed by a read of any slot.
        Head(self.head.load(Ordering::Relaxed)).index() == NIL
    }

    /// Counts the slots on the stack by walking it segment by segment ([`count_segmented`]:
    /// a broken segment ends the count), stopping after `limit`. Exact only when no other
    /// thread is using the stack; meant for audits and tests.
    pub fn count_quiescent(&self, links: &(impl Links + ?Sized), limit: usize) -> usize {
        count_segmented(links, Head(self.head.load(Ordering::Acquire)).index(), limit)
    }
}

/// Out of line, and given the index by value, so that `push_chain` keeps the chain in
/// registers: formatting it in place made every push store it to the stack, and a locked
/// CAS waits for earlier stores to drain (a nanosecond per push and pop on the dev machine).
#[cold]
#[inline(never)]
#[track_caller]
fn slot_out_of_range(index: u32) -> ! {
    panic!("slot {index} does not fit the freelist's head (indices are below {NIL})")
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
