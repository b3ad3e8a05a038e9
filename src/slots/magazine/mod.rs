//! Per-thread magazines of free slots in front of the shared freelist, which becomes their
//! depot (J. Bonwick and J. Adams, *Magazines and Vmem: Extending the Slab Allocator to Many
//! CPUs and Arbitrary Resources*, USENIX 2001; sharded-slab's per-thread shards and mimalloc's
//! thread-local free lists do the same for memory).
//!
//! A shared Treiber head serializes every thread on one cache line: each acquire and each
//! release moves that line. Here each thread keeps, for each pool it uses, a short chain of
//! free slots (its magazine) linked through the slots' own links, and acquires and releases
//! against it with plain loads and stores on lines no other thread writes. The depot is
//! touched once per chain:
//!
//! ```text
//!   thread A                    thread B                        collector, new pages
//!   [magazine: <= M slots]      [magazine: <= M slots]
//!     │ ▲                         │ ▲                              │
//!     │ │ refill: pop_chain        │ │ spill: push_chain            │ deposit: push_chain
//!     ▼ │ (one CAS, >= n)          ▼ │ (one CAS, the old contents)  ▼ (one CAS per chain)
//!   ══════════════════ depot: FreeList (tagged Treiber stack) ══════════════════
//! ```
//!
//! Every chain here is *segmented*, as on the depot ([`Segment`](super::freelist::Segment)):
//! slots move in whole segments (a list's batch, or what is left of one), found through one
//! word and one link each, never by walking the links inside a segment.
//!
//! - `acquire_between(min, max)` takes from `min` to `max` slots from the thread's magazine:
//!   whole segments while they fit in `max`, a segment cut only to make `min` (a list asks
//!   for what it lacks, up to a batch, and gets one whole segment); an empty magazine first
//!   refills with one `pop_chain(min)` (whole segments, at least `min`). `acquire(n)` takes
//!   exactly `n`.
//! - `release(chain)` splices the chain onto the magazine in O(1). If the magazine would hold
//!   more than `M`, its old contents go to the depot as one chain and the released chain
//!   becomes the magazine (a chain longer than `M` goes to the depot directly).
//! - **Starvation.** When the pool runs out, its owner calls [`Magazines::starve`]. While
//!   starved, magazines are bypassed: each thread empties its magazine onto the depot at its
//!   next acquire or release, and works on the depot directly. The first chain pushed onto a
//!   depot that is not empty (a slot came back before anyone needed it) ends the starvation.
//! - **Thread exit.** A thread-local destructor hands each of the thread's magazines back:
//!   the chain is kept with the pool, counted as free, and goes onto the depot the next time
//!   the depot is found empty or something is deposited. The magazine itself is then free for
//!   the next thread that uses the pool.
//!
//! Memory: at most `M` slots per thread per pool sit in magazines, plus those of exited
//! threads until the pool next needs them; one cache-padded magazine record per thread that
//! uses the pool at the same time (reused, freed with the pool's last user); one small entry
//! per pool in each thread's thread-local list (dropped when the thread next meets a new pool
//! after that pool is gone, or at exit).
//!
//! **The common call** (`acquire(n)` from a magazine holding `n`, `release` of a chain that
//! fits, the pool not starved) is inlined into the caller: one thread-local load and compare
//! finds the magazine, then a few loads and stores on its line and the chain's slots (one
//! word and one link per whole segment for an acquire, and the links up to a cut if it cuts
//! one; one link for a release). The magazine's
//! chain head and counts are the owner's own state, kept in atomics that others read but
//! only it writes, so there is no second copy to publish. Everything else is out of line.
//! `held.rs` finds the calling thread's magazine; `shared.rs` holds the depot, the magazine
//! records and the exited threads' chains.

mod free_slots;
mod held;

use self::free_slots::{FreeSlots, Magazine};
use super::freelist::{Chain, Links};
use crate::sync::{Arc, Ordering};

/// Flows that bypass every magazine, as `Tally` fields: slots deposited by the pool, and slots
/// handed out (less those taken back) to threads whose thread-locals are gone (exiting).
const DEPOSITED: usize = 0;
const HANDED_OUT: usize = 1;

/// Counts of a [`Magazines`] (each read on its own: exact only while no thread uses it).
///
/// The flows behind them are cumulative; each magazine publishes its share in 32 bits, so the
/// counts are exact modulo 2^32: exact for any pool of fewer than 2^31 slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MagazineCounts {
    /// Free slots: on the depot, in magazines, or returned by exited threads.
    pub free: usize,
    /// Of those, the slots in magazines, exited threads' included until they reach the depot.
    pub in_magazines: usize,
    /// Slots handed out by `acquire` less those taken back by `release` since the start,
    /// modulo 2^32 (add it to other counts, then read the sum as an `i32`).
    pub handed_out: u32,
    /// Magazines made: at most the number of threads that used these magazines at once.
    pub magazines: usize,
    /// Threads holding one of these magazines now (each until it exits).
    pub claimed: usize,
}

/// The per-thread magazines of one pool and their depot (see the [module](self) docs).
///
/// The slots are indices (below [`NIL`](super::freelist::NIL)) whose links and segment
/// words the caller provides ([`Links`]), as for [`FreeList`](super::freelist::FreeList);
/// every chain given to them must be segmented, and every chain they hand out is. Every
/// thread that acquires or releases gets its own magazine on first use.
///
/// ```
/// use gpu_event_pool::testing::freelist::{Chain, LinkTable};
/// use gpu_event_pool::testing::magazine::Magazines;
///
/// let links = LinkTable::new(64);
/// let slots = Magazines::new(16);
/// for i in 0..64 {
///     slots.deposit(&links, Chain::single(&links, i)); // 64 segments of one slot
/// }
/// let chain = slots.acquire(&links, 4).unwrap(); // one CAS: 4 segments from the depot
/// assert_eq!(chain.len, 4);
/// slots.release(&links, chain); // back into this thread's magazine: no atomic RMW
/// assert_eq!(slots.counts().free, 64);
/// assert_eq!(slots.count_quiescent(&links, 100), 64);
/// ```
pub struct Magazines {
    shared: Arc<FreeSlots>,
}

impl std::fmt::Debug for Magazines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Magazines").field("size", &self.shared.size).finish_non_exhaustive()
    }
}

impl Magazines {
    /// Magazines of at most `size` slots each (at least 2), over an empty depot.
    pub fn new(size: u32) -> Self {
        Self { shared: Arc::new(FreeSlots::new(size.max(2))) }
    }

    /// Takes `n` free slots (fewer only when that is all there is) as a segmented chain: from
    /// this thread's magazine, refilled from the depot when empty and topped up from it when
    /// short ([`acquire_between`](Self::acquire_between) with `n` and `n`). `None` if `n` is 0
    /// (in every build: nothing is taken), or if the magazine, the depot and the exited
    /// threads' magazines are all empty (other live threads' magazines are not searched: see
    /// [`starve`](Self::starve)).
    #[inline]
    pub fn acquire(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        self.acquire_between(links, n, n)
    }

    /// Takes from `min` to `max` free slots (`min <= max`; fewer than `min` only when that is
    /// all there is) as a segmented chain, as [`acquire`](Self::acquire) does: whole segments
    /// while they fit in `max`, a segment cut only to make `min`
    /// ([`cut_front`](super::freelist::cut_front)). A list asks for what it lacks, up to a
    /// batch: it gets a whole segment (a batch, or what is left of one) without a walk.
    #[inline]
    pub fn acquire_between(&self, links: &(impl Links + ?Sized), min: u32, max: u32) -> Option<Chain> {
        debug_assert!(min <= max);
        // The common case, inlined into the caller: the magazine holds `min`.
        if let Some(magazine) = held::own(&self.shared) {
            let counts = magazine.counts();
            // 1 <= min <= len; `min == 0` wraps around to the slow path, which takes nothing.
            if min.wrapping_sub(1) < counts.len() && !self.shared.is_starved() {
                return Some(magazine.take_front(links, min, max, counts));
            }
        }
        self.acquire_slow(links, min, max)
    }

    /// Out of line, so that what `acquire_between` inlines stays small.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self, links: &(impl Links + ?Sized), min: u32, max: u32) -> Option<Chain> {
        if min == 0 {
            return None;
        }
        match held::own(&self.shared) {
            Some(magazine) => self.take(magazine, links, min, max),
            None => {
                let chain = self.shared.pop_depot_between(links, min, max)?;
                self.shared.bypass.add(HANDED_OUT, i64::from(chain.len));
                Some(chain)
            }
        }
    }

    /// `acquire_between` from this thread's magazine once the common case failed: it is
    /// short, or the pool is starved.
    fn take(&self, magazine: &Magazine, links: &(impl Links + ?Sized), min: u32, max: u32) -> Option<Chain> {
        let shared = &*self.shared;
        if shared.is_starved() {
            if let Some(held) = magazine.take_all() {
                shared.push_depot(links, held);
            }
            let chain = shared.pop_depot_between(links, min, max)?;
            magazine.count_past_chain(chain.len, 0);
            return Some(chain);
        }
        let mut held = match magazine.take_all() {
            Some(held) => held,
            // Whole segments, at least `min`: usually one (a list's batch). More would read
            // two more cache lines per segment now, for slots this thread may not need soon.
            None => shared.pop_depot(links, min)?,
        };
        if min > held.len {
            // Top a short magazine up from the depot: a list that got less than its batch
            // would come back for more and keep the rest as a spare, a slot that another
            // list may need (the pool is small, or nearly exhausted).
            if let Some(more) = shared.pop_depot(links, min - held.len) {
                // Relaxed: these slots are this thread's (its magazine's, or just popped with
                // an Acquire CAS); the link is published by whichever Release CAS hands them on.
                links.link(held.last).store(more.first, Ordering::Relaxed);
                held = Chain { first: held.first, last: more.last, len: held.len + more.len };
            }
        }
        magazine.put(held);
        let taken = magazine.take_front(links, min.min(held.len), max, magazine.counts());
        // A popped segment longer than `M` (a batch above the magazine size) leaves more
        // than `M` behind: that goes back to the depot.
        if magazine.counts().len() > shared.size {
            if let Some(rest) = magazine.take_all() {
                shared.push_depot(links, rest);
            }
        }
        Some(taken)
    }

    /// Gives back a segmented chain of slots that came from [`acquire`](Self::acquire) (from
    /// any thread): onto this thread's magazine, spilling to the depot past the magazine size.
    #[inline]
    pub fn release(&self, links: &(impl Links + ?Sized), chain: Chain) {
        debug_assert!(chain.len >= 1);
        // The common case, inlined into the caller: the magazine has room for the chain.
        if let Some(magazine) = held::own(&self.shared) {
            let counts = magazine.counts();
            if chain.len <= self.shared.size - counts.len() && !self.shared.is_starved() {
                magazine.push_front(links, chain, counts);
                return;
            }
        }
        self.release_slow(links, chain);
    }

    /// Out of line, so that what `release` inlines stays small.
    #[cold]
    #[inline(never)]
    fn release_slow(&self, links: &(impl Links + ?Sized), chain: Chain) {
        let shared = &*self.shared;
        let Some(magazine) = held::own(&self.shared) else {
            shared.bypass.add(HANDED_OUT, -i64::from(chain.len));
            shared.push_depot(links, chain);
            return;
        };
        // A starved pool bypasses the magazine, emptied first; a chain longer than a magazine
        // goes to the depot whole.
        let starved = shared.is_starved();
        if starved {
            if let Some(held) = magazine.take_all() {
                shared.push_depot(links, held);
            }
        }
        if starved || chain.len > shared.size {
            magazine.count_past_chain(0, chain.len);
            shared.push_depot(links, chain);
            return;
        }
        // No room (unless a starvation ended since the common case looked): the old contents
        // go to the depot and the released chain becomes the magazine.
        if chain.len > shared.size - magazine.counts().len() {
            if let Some(held) = magazine.take_all() {
                shared.push_depot(links, held);
            }
        }
        magazine.push_front(links, chain, magazine.counts());
    }

    /// Adds a segmented chain of free slots straight to the depot (new slots, or slots coming
    /// back from elsewhere than `acquire`, such as collected lists); also moves the exited
    /// threads' magazines there.
    pub fn deposit(&self, links: &(impl Links + ?Sized), chain: Chain) {
        self.shared.bypass.add(DEPOSITED, i64::from(chain.len));
        self.shared.push_depot(links, chain);
        self.shared.reclaim_returned(links);
    }

    /// Says that the pool ran out while `acquire` found nothing: until a slot comes back to a
    /// depot that still holds others, every thread empties its magazine onto the depot at its
    /// next acquire or release, and bypasses it.
    pub fn starve(&self) {
        self.shared.starve();
    }

    /// Whether magazines are bypassed now (see [`starve`](Self::starve)).
    pub fn is_starved(&self) -> bool {
        self.shared.is_starved()
    }

    /// A snapshot of the counts.
    pub fn counts(&self) -> MagazineCounts {
        let shared = &*self.shared;
        let (mut in_magazines, mut handed_out, mut magazines) =
            (0u64, shared.bypass.sum(HANDED_OUT) as u32, 0);
        // One load per magazine: the collector samples these on every collect.
        shared.each_magazine(|magazine| {
            let counts = magazine.counts();
            in_magazines += u64::from(counts.len());
            handed_out = handed_out.wrapping_add(counts.handed_out());
            magazines += 1;
        });
        let free = (shared.bypass.sum(DEPOSITED) as u32).wrapping_sub(handed_out) as i32;
        MagazineCounts {
            free: free.max(0) as usize,
            in_magazines: in_magazines as usize + shared.returned_slots(),
            handed_out,
            magazines,
            // Every reference but this one is a thread's entry, dropped last in its
            // thread-local destructor.
            claimed: Arc::strong_count(&self.shared) - 1,
        }
    }

    /// Counts the free slots by walking the depot (at most `limit`), every magazine's chain
    /// and the exited threads' chains. Exact only while no thread uses the magazines; meant
    /// for audits and tests.
    pub fn count_quiescent(&self, links: &(impl Links + ?Sized), limit: usize) -> usize {
        self.shared.count_quiescent(links, limit)
    }
}

impl Drop for Magazines {
    fn drop(&mut self) {
        // Threads only use it to forget their entries for these magazines.
        self.shared.close();
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
