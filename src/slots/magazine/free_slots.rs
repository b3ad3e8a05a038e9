//! What the pool and every thread holding one of its magazines share: the depot, the
//! magazine records (one per thread using the pool at once, reused), and the chains of
//! exited threads.

use crate::slots::freelist::{count_segmented, cut_front, Chain, FreeList, Links, NIL};
use crate::slots::tally::Tally;
use crate::sync::{
    lock, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell,
};
use crossbeam_utils::CachePadded;
use std::ptr::NonNull;

/// One thread's magazine for one pool: a chain of free slots linked through the slots' own
/// links.
///
/// Only the thread that has claimed it (`claimed`, handed from one thread to the next with
/// Release/Acquire) writes it. The chain's `first` and `counts` are atomics because
/// statistics and audits read them from other threads, but they are the owner's own state,
/// not copies of it: the owner reads and writes them with relaxed loads and stores (plain
/// moves), so its common path is a handful of moves on a line no other thread writes, with
/// no atomic read-modify-write.
#[derive(Debug)]
pub(super) struct Magazine {
    /// The chain's first slot (meaningless while the chain is empty).
    first: AtomicU32,
    /// The chain's length and the slots handed out, as [`Counts`].
    counts: AtomicU64,
    /// The chain's last slot (meaningless while the chain is empty): the owner alone reads it.
    last: UnsafeCell<u32>,
    /// Held by a live thread.
    claimed: AtomicBool,
    /// The next magazine of the same pool: written before this one is published, then fixed.
    next: AtomicPtr<CachePadded<Magazine>>,
}

/// A magazine's counts, in one word so that a reader never sees one changed without the
/// other (a thread that exits empties its chain without changing what it handed out):
/// lower 32 bits the chain's length, upper 32 bits the slots handed out by the magazine's
/// owners less those released to them, modulo 2^32 (sums of these stay exact modulo 2^32).
#[derive(Debug, Clone, Copy)]
pub(super) struct Counts(u64);

impl Counts {
    fn new(len: u32, handed_out: u32) -> Self {
        Self((u64::from(handed_out) << 32) | u64::from(len))
    }

    #[inline]
    pub(super) fn len(self) -> u32 {
        self.0 as u32
    }

    #[inline]
    pub(super) fn handed_out(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

// The owner's accessors: only the thread that claimed the magazine may call those that write,
// and those that read `last` (ordering between owners: `claimed`'s Release store and Acquire
// CAS). Relaxed throughout: the owner reads its own last writes, and other threads read them
// only as statistics, or in audits once the owner is quiet.
impl Magazine {
    fn claimed_empty() -> Self {
        Self {
            first: AtomicU32::new(NIL),
            counts: AtomicU64::new(Counts::new(0, 0).0),
            last: UnsafeCell::new(NIL),
            claimed: AtomicBool::new(true),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    #[inline]
    pub(super) fn first(&self) -> u32 {
        self.first.load(Ordering::Relaxed)
    }

    #[inline]
    pub(super) fn counts(&self) -> Counts {
        Counts(self.counts.load(Ordering::Relaxed))
    }

    #[inline]
    fn set_counts(&self, counts: Counts) {
        self.counts.store(counts.0, Ordering::Relaxed);
    }

    #[inline]
    fn set_last(&self, last: u32) {
        // Safety: only the claiming thread touches `last` (the callers are its own acquire,
        // release and exit), and successive owners are ordered by `claimed`.
        self.last.with_mut(|own| unsafe { *own = last });
    }

    /// Hands out the front of the chain: whole segments, from `min` to `max` slots, a segment
    /// cut only to make `min` ([`cut_front`]); `1 <= min <= ` the chain's length, `min <= max`;
    /// `counts` are the magazine's.
    #[inline]
    pub(super) fn take_front(
        &self,
        links: &(impl Links + ?Sized),
        min: u32,
        max: u32,
        counts: Counts,
    ) -> Chain {
        debug_assert!(counts.0 == self.counts().0);
        // The slots are this thread's (in its magazine): their words and links were written
        // by this thread, or before the push whose chain it popped with an Acquire CAS.
        let (taken, rest) = cut_front(links, self.first(), counts.len(), min, max);
        // When the chain is all taken, `rest` is NIL: `first` is meaningless then.
        self.first.store(rest, Ordering::Relaxed);
        self.set_counts(Counts::new(counts.len() - taken.len, counts.handed_out().wrapping_add(taken.len)));
        taken
    }

    /// Takes `chain` back in front of the chain, which has room for it; `counts` are the
    /// magazine's.
    #[inline]
    pub(super) fn push_front(&self, links: &(impl Links + ?Sized), chain: Chain, counts: Counts) {
        debug_assert!(counts.0 == self.counts().0);
        // Relaxed: these slots are this thread's; the link is published by whichever Release
        // CAS later hands them on. When the chain was empty, `first` is meaningless, and so is
        // the link of `chain.last`, which ends the chain.
        links.link(chain.last).store(self.first(), Ordering::Relaxed);
        if counts.len() == 0 {
            self.set_last(chain.last);
        }
        self.first.store(chain.first, Ordering::Relaxed);
        self.set_counts(Counts::new(counts.len() + chain.len, counts.handed_out().wrapping_sub(chain.len)));
    }

    /// Takes the whole chain out, if any (still free: nothing is handed out).
    pub(super) fn take_all(&self) -> Option<Chain> {
        let counts = self.counts();
        if counts.len() == 0 {
            return None;
        }
        // Safety: as in `set_last`.
        let last = self.last.with(|own| unsafe { *own });
        self.set_counts(Counts::new(0, counts.handed_out()));
        Some(Chain { first: self.first(), last, len: counts.len() })
    }

    /// Makes free `chain` the whole contents of the empty magazine.
    pub(super) fn put(&self, chain: Chain) {
        let counts = self.counts();
        debug_assert!(counts.len() == 0);
        self.set_last(chain.last);
        self.first.store(chain.first, Ordering::Relaxed);
        self.set_counts(Counts::new(chain.len, counts.handed_out()));
    }

    /// Counts slots handed out (`out`) and released (`back`) past the chain.
    pub(super) fn count_past_chain(&self, out: u32, back: u32) {
        let counts = self.counts();
        self.set_counts(Counts::new(counts.len(), counts.handed_out().wrapping_add(out).wrapping_sub(back)));
    }
}

/// What the pool and every thread holding one of its magazines share.
pub(super) struct FreeSlots {
    /// The depot: free slots not in any magazine.
    pub(super) depot: FreeList,
    /// Set when the pool ran out; magazines are bypassed while it is set.
    starved: CachePadded<AtomicBool>,
    /// Every magazine of this pool: a push-only list, freed when `FreeSlots` drops.
    magazines: AtomicPtr<CachePadded<Magazine>>,
    /// Chains of magazines whose threads exited, not yet on the depot.
    returned: Mutex<Vec<Chain>>,
    /// Slots in `returned` (checked without the lock).
    returned_slots: AtomicUsize,
    /// DEPOSITED, HANDED_OUT.
    pub(super) bypass: Tally<2>,
    /// `M`: most slots one magazine holds.
    pub(super) size: u32,
    /// The `Magazines` is gone: threads forget their entries for it.
    closed: AtomicBool,
}

impl FreeSlots {
    pub(super) fn new(size: u32) -> Self {
        Self {
            depot: FreeList::new(),
            starved: CachePadded::new(AtomicBool::new(false)),
            magazines: AtomicPtr::new(std::ptr::null_mut()),
            returned: Mutex::new(Vec::new()),
            returned_slots: AtomicUsize::new(0),
            bypass: Tally::new(),
            size,
            closed: AtomicBool::new(false),
        }
    }

    /// Whether magazines are bypassed now.
    #[inline]
    pub(super) fn is_starved(&self) -> bool {
        // Relaxed: a hint that chooses a path; nothing is read through it.
        self.starved.load(Ordering::Relaxed)
    }

    pub(super) fn starve(&self) {
        self.starved.store(true, Ordering::Relaxed);
    }

    /// Whether the `Magazines` is gone.
    pub(super) fn is_closed(&self) -> bool {
        // Relaxed: `closed` is only ever set, and a pool whose entry survives a pass over a
        // thread's entries is simply forgotten on a later one.
        self.closed.load(Ordering::Relaxed)
    }

    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Pushes a chain onto the depot, ending a starvation if the depot already had slots.
    pub(super) fn push_depot(&self, links: &(impl Links + ?Sized), chain: Chain) {
        if self.is_starved() && !self.depot.looks_empty() {
            self.starved.store(false, Ordering::Relaxed);
        }
        self.depot.push_chain(links, chain);
    }

    /// Pops whole segments, at least `n` slots while there are that many, from the depot;
    /// if it is empty, first moves the chains of exited threads' magazines onto it.
    pub(super) fn pop_depot(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        if let Some(chain) = self.depot.pop_chain(links, n) {
            return Some(chain);
        }
        if !self.reclaim_returned(links) {
            return None;
        }
        self.depot.pop_chain(links, n)
    }

    /// Takes from `min` to `max` slots from the depot (as [`cut_front`] takes them: fewer
    /// only when that is all there is), pushing back what a popped segment had beyond them.
    pub(super) fn pop_depot_between(
        &self,
        links: &(impl Links + ?Sized),
        min: u32,
        max: u32,
    ) -> Option<Chain> {
        let chain = self.pop_depot(links, min)?;
        let (taken, rest) = cut_front(links, chain.first, chain.len, min.min(chain.len), max);
        if taken.len < chain.len {
            self.push_depot(links, Chain { first: rest, last: chain.last, len: chain.len - taken.len });
        }
        Some(taken)
    }

    /// Moves the chains of exited threads' magazines onto the depot; false if there were none.
    pub(super) fn reclaim_returned(&self, links: &(impl Links + ?Sized)) -> bool {
        // Relaxed: a hint; the lock below orders the chains' links.
        if self.returned_slots.load(Ordering::Relaxed) == 0 {
            return false;
        }
        // The lock orders the exiting thread's writes to these slots before our push.
        let chains = std::mem::take(&mut *lock(&self.returned));
        for &chain in &chains {
            self.depot.push_chain(links, chain);
            self.returned_slots.fetch_sub(chain.len as usize, Ordering::Relaxed);
        }
        !chains.is_empty()
    }

    /// Slots in the exited threads' chains (statistics).
    pub(super) fn returned_slots(&self) -> usize {
        self.returned_slots.load(Ordering::Relaxed)
    }

    /// A magazine for the calling thread: one left by an exited thread, else a new one.
    pub(super) fn claim(&self) -> NonNull<CachePadded<Magazine>> {
        let mut cursor = self.magazines.load(Ordering::Acquire);
        while !cursor.is_null() {
            // Safety: magazines are published fully built (Release CAS below, Acquire loads
            // here) and freed only when `FreeSlots` drops, which `&self` rules out.
            let magazine = unsafe { &*cursor };
            // Acquire: pairs with the Release in `retire`: we see what the last owner left.
            if !magazine.claimed.load(Ordering::Relaxed)
                && magazine
                    .claimed
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return NonNull::from(magazine);
            }
            cursor = magazine.next.load(Ordering::Acquire);
        }
        let fresh = Box::into_raw(Box::new(CachePadded::new(Magazine::claimed_empty())));
        // Safety: `Box::into_raw` never returns null.
        let claimed = unsafe { NonNull::new_unchecked(fresh) };
        let mut head = self.magazines.load(Ordering::Relaxed);
        loop {
            // Safety: `fresh` is not published yet: this thread alone can reach it.
            unsafe { &*fresh }.next.store(head, Ordering::Relaxed);
            // Release: the magazine is built before anyone can reach it.
            match self.magazines.compare_exchange_weak(head, fresh, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return claimed,
                Err(current) => head = current,
            }
        }
    }

    /// The thread that claimed `magazine` is exiting: keep its chain with the pool (as free
    /// slots) and free the magazine for the next thread.
    pub(super) fn retire(&self, magazine: &Magazine) {
        if magazine.counts().len() > 0 {
            // The lock publishes the chain's links to whoever reclaims it, and makes the move
            // from the magazine to `returned` one step for audits (`count_quiescent`).
            let mut returned = lock(&self.returned);
            if let Some(chain) = magazine.take_all() {
                if !self.is_closed() {
                    returned.push(chain);
                    self.returned_slots.fetch_add(chain.len as usize, Ordering::Relaxed);
                }
            }
        }
        // Release: the next owner (Acquire in `claim`) sees the magazine empty and its counters.
        magazine.claimed.store(false, Ordering::Release);
    }

    /// Calls `f` on every magazine made so far.
    pub(super) fn each_magazine(&self, mut f: impl FnMut(&Magazine)) {
        let mut cursor = self.magazines.load(Ordering::Acquire);
        while !cursor.is_null() {
            // Safety: as in `claim`.
            let magazine = unsafe { &*cursor };
            f(magazine);
            cursor = magazine.next.load(Ordering::Acquire);
        }
    }

    /// Counts the free slots by walking the depot (at most `limit`), every magazine's chain
    /// and the exited threads' chains, segment by segment (a segment whose word does not
    /// match its links is not counted). Exact only while no thread uses the magazines.
    pub(super) fn count_quiescent(&self, links: &(impl Links + ?Sized), limit: usize) -> usize {
        // A magazine's chain ends at its length (the link of its last slot is meaningless).
        let walk =
            |(first, len): (u32, u32)| if len == 0 { 0 } else { count_segmented(links, first, len as usize) };
        // Under the lock, an exiting thread's chain is counted once: in its magazine or in
        // `returned`.
        let returned = lock(&self.returned);
        let mut count = self.depot.count_quiescent(links, limit);
        self.each_magazine(|magazine| count += walk((magazine.first(), magazine.counts().len())));
        count += returned.iter().map(|chain| walk((chain.first, chain.len))).sum::<usize>();
        count
    }
}

impl Drop for FreeSlots {
    fn drop(&mut self) {
        let mut cursor = self.magazines.load(Ordering::Relaxed);
        while !cursor.is_null() {
            // Safety: every magazine was made by `Box::into_raw` in `claim` and is reachable
            // only through this list and threads' entries, which hold an `Arc` of `self`:
            // nobody else can reach it any more.
            let magazine = unsafe { Box::from_raw(cursor) };
            cursor = magazine.next.load(Ordering::Relaxed);
        }
    }
}
