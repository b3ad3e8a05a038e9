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
//!     ▼ │ (one CAS, max(n, M/2))   ▼ │ (one CAS, the old contents)  ▼ (one CAS per chain)
//!   ══════════════════ depot: FreeList (tagged Treiber stack) ══════════════════
//! ```
//!
//! - `acquire(n)` takes up to `n` slots from the thread's magazine; an empty magazine first
//!   refills with one `pop_chain` of `max(n, M/2)` slots.
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
//! finds the magazine, then a few loads and stores on its line and the chain's links (`n`
//! loads for an acquire, one store for a release). The magazine's chain head and counts are
//! the owner's own state, kept in atomics that others read but only it writes, so there is
//! no second copy to publish. Everything else is out of line. `held.rs` finds the calling thread's magazine; `shared.rs` holds the depot, the
//! magazine records and the exited threads' chains.

mod held;
mod shared;

use self::shared::{Magazine, Shared};
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
/// The slots are indices whose links the caller provides ([`Links`]), as for
/// [`FreeList`](super::freelist::FreeList). Every thread that acquires or releases gets its
/// own magazine on first use.
///
/// ```
/// use gpu_event_pool::freelist::{Chain, NIL};
/// use gpu_event_pool::magazine::Magazines;
/// use std::sync::atomic::AtomicU32;
///
/// let links: Vec<AtomicU32> = (0..64).map(|_| AtomicU32::new(NIL)).collect();
/// let slots = Magazines::new(16);
/// for i in 0..64 {
///     slots.deposit(&links, Chain { first: i, last: i, len: 1 });
/// }
/// let chain = slots.acquire(&links, 4).unwrap(); // one CAS refills this thread's magazine
/// assert_eq!(chain.len, 4);
/// slots.release(&links, chain); // back into this thread's magazine: no atomic RMW
/// assert_eq!(slots.counts().free, 64);
/// assert_eq!(slots.count_quiescent(&links, 100), 64);
/// ```
pub struct Magazines {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Magazines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Magazines").field("size", &self.shared.size).finish_non_exhaustive()
    }
}

impl Magazines {
    /// Magazines of at most `size` slots each (at least 2), over an empty depot.
    pub fn new(size: u32) -> Self {
        Self { shared: Arc::new(Shared::new(size.max(2))) }
    }

    /// Most slots one magazine holds.
    pub fn magazine_size(&self) -> u32 {
        self.shared.size
    }

    /// Takes up to `n` free slots as a chain: from this thread's magazine, refilled from the
    /// depot when empty and topped up from it when short. `None` if `n` is 0 (in every build:
    /// nothing is taken), or if the magazine, the depot and the exited threads' magazines are
    /// all empty (other live threads' magazines are not searched: see [`starve`](Self::starve)).
    #[inline]
    pub fn acquire(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        // The common case, inlined into the caller: the magazine holds `n`.
        if let Some(magazine) = held::own(&self.shared) {
            let counts = magazine.counts();
            // 1 <= n <= len; `n == 0` wraps around to the slow path, which takes nothing.
            if n.wrapping_sub(1) < counts.len() && !self.shared.is_starved() {
                return Some(magazine.take_front(links, n, counts));
            }
        }
        self.acquire_slow(links, n)
    }

    /// Out of line, so that what `acquire` inlines stays small.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        if n == 0 {
            return None;
        }
        match held::own(&self.shared) {
            Some(magazine) => self.take(magazine, links, n),
            None => {
                let chain = self.shared.pop_depot(links, n)?;
                self.shared.bypass.add(HANDED_OUT, i64::from(chain.len));
                Some(chain)
            }
        }
    }

    /// `acquire` from this thread's magazine once the common case failed: it is short, or
    /// the pool is starved.
    fn take(&self, magazine: &Magazine, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        let shared = &*self.shared;
        if shared.is_starved() {
            if let Some(held) = magazine.take_all() {
                shared.push_depot(links, held);
            }
            let chain = shared.pop_depot(links, n)?;
            magazine.count_past_chain(chain.len, 0);
            return Some(chain);
        }
        let mut held = match magazine.take_all() {
            Some(held) => held,
            None => shared.pop_depot(links, n.max(shared.size / 2))?,
        };
        if n > held.len {
            // Top a short magazine up from the depot: a list that got less than its batch
            // would come back for more and keep the rest as a spare, a slot that another
            // list may need (the pool is small, or nearly exhausted).
            if let Some(more) = shared.pop_depot(links, n - held.len) {
                // Relaxed: these slots are this thread's (its magazine's, or just popped with
                // an Acquire CAS); the link is published by whichever Release CAS hands them on.
                links.link(held.last).store(more.first, Ordering::Relaxed);
                held = Chain { first: held.first, last: more.last, len: held.len + more.len };
            }
        }
        // At most `M` stay: `held` is longer only if `n` is, and then all of it goes.
        magazine.put(held);
        Some(magazine.take_front(links, n.min(held.len), magazine.counts()))
    }

    /// Gives back a chain of slots that came from [`acquire`](Self::acquire) (from any
    /// thread): onto this thread's magazine, spilling to the depot past the magazine size.
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

    /// Adds free slots straight to the depot (new slots, or slots coming back from
    /// elsewhere than `acquire`, such as collected lists); also moves the exited threads'
    /// magazines there.
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
