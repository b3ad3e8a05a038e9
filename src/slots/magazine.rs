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

use super::freelist::{Chain, FreeList, Links, NIL};
use super::tally::Tally;
use crate::sync::{
    lock, thread_local, Arc, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering,
    UnsafeCell,
};
use crossbeam_utils::CachePadded;
use std::cell::{Cell, RefCell};

/// What the owner of a magazine knows of it.
#[derive(Debug, Clone, Copy)]
struct Stock {
    /// The chain: `first` linked through to `last` (both meaningless when `len` is 0).
    first: u32,
    last: u32,
    len: u32,
    /// Slots handed out by this magazine's owners, less those they took back, since the
    /// magazine was made.
    handed_out: i64,
}

impl Stock {
    /// Takes the whole chain out, if any.
    #[inline]
    fn take_all(&mut self) -> Option<Chain> {
        let chain = (self.len > 0).then_some(Chain { first: self.first, last: self.last, len: self.len });
        self.len = 0;
        chain
    }

    /// Makes `chain` the whole contents.
    #[inline]
    fn put(&mut self, chain: Chain) {
        (self.first, self.last, self.len) = (chain.first, chain.last, chain.len);
    }
}

/// One thread's magazine for one pool: a chain of free slots linked through the slots' own
/// links. Only the thread that has claimed it (`claimed`, handed from one thread to the next
/// with Release/Acquire) touches `stock`; it publishes what statistics and audits read with
/// plain stores, so that its common path has no atomic read-modify-write.
#[derive(Debug)]
struct Magazine {
    /// The owner's own view.
    stock: UnsafeCell<Stock>,
    /// What statistics read, in one word: upper 32 bits the stock's `len`, lower 32 bits its
    /// `handed_out` modulo 2^32 (sums of these stay exact modulo 2^32; see `counts`).
    published: AtomicU64,
    /// The stock's `first`, for audits.
    first: AtomicU32,
    /// Held by a live thread.
    claimed: AtomicBool,
    /// The next magazine of the same pool: written before this one is published, then fixed.
    next: AtomicPtr<CachePadded<Magazine>>,
}

impl Magazine {
    fn claimed_empty() -> Self {
        Self {
            stock: UnsafeCell::new(Stock { first: NIL, last: NIL, len: 0, handed_out: 0 }),
            published: AtomicU64::new(0),
            first: AtomicU32::new(NIL),
            claimed: AtomicBool::new(true),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The owner's stock. Only the claiming thread may call this.
    #[inline]
    fn stock(&self) -> Stock {
        // Safety: only the thread that claimed this magazine reads or writes `stock` (the
        // callers are that thread's own acquire, release and exit), and successive owners are
        // ordered by `claimed`'s Release store and Acquire CAS.
        self.stock.with(|stock| unsafe { *stock })
    }

    /// Replaces the owner's stock and publishes it. Only the claiming thread may call this.
    #[inline]
    fn update(&self, stock: Stock) {
        // Safety: as in `stock`.
        self.stock.with_mut(|own| unsafe { *own = stock });
        // Relaxed: read only by statistics, and by audits once the owner is quiet.
        self.published
            .store((u64::from(stock.len) << 32) | u64::from(stock.handed_out as u32), Ordering::Relaxed);
        self.first.store(stock.first, Ordering::Relaxed);
    }

    /// The published length and `handed_out` modulo 2^32.
    fn published(&self) -> (u32, u32) {
        let word = self.published.load(Ordering::Relaxed);
        ((word >> 32) as u32, word as u32)
    }
}

/// Flows that bypass every magazine, as `Tally` fields: slots deposited by the pool, and slots
/// handed out (less those taken back) to threads whose thread-locals are gone (exiting).
const DEPOSITED: usize = 0;
const HANDED_OUT: usize = 1;

/// What the pool and every thread holding one of its magazines share.
struct Shared {
    /// The depot: free slots not in any magazine.
    depot: FreeList,
    /// Set when the pool ran out; magazines are bypassed while it is set.
    starved: CachePadded<AtomicBool>,
    /// Every magazine of this pool: a push-only list, freed when `Shared` drops.
    magazines: AtomicPtr<CachePadded<Magazine>>,
    /// Chains of magazines whose threads exited, not yet on the depot.
    returned: Mutex<Vec<Chain>>,
    /// Slots in `returned` (checked without the lock).
    returned_slots: AtomicUsize,
    /// DEPOSITED, HANDED_OUT.
    bypass: Tally<2>,
    /// `M`: most slots one magazine holds.
    size: u32,
    /// The `Magazines` is gone: threads forget their entries for it.
    closed: AtomicBool,
}

impl Shared {
    /// Pushes a chain onto the depot, ending a starvation if the depot already had slots.
    fn push_depot(&self, links: &(impl Links + ?Sized), chain: Chain) {
        if self.starved.load(Ordering::Relaxed) && !self.depot.looks_empty() {
            self.starved.store(false, Ordering::Relaxed);
        }
        self.depot.push_chain(links, chain);
    }

    /// Pops up to `n` slots from the depot; if it is empty, first moves the chains of exited
    /// threads' magazines onto it.
    fn pop_depot(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        if let Some(chain) = self.depot.pop_chain(links, n) {
            return Some(chain);
        }
        if !self.reclaim_returned(links) {
            return None;
        }
        self.depot.pop_chain(links, n)
    }

    /// Moves the chains of exited threads' magazines onto the depot; false if there were none.
    fn reclaim_returned(&self, links: &(impl Links + ?Sized)) -> bool {
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

    /// A magazine for the calling thread: one left by an exited thread, else a new one.
    fn claim(&self) -> *const CachePadded<Magazine> {
        let mut cursor = self.magazines.load(Ordering::Acquire);
        while !cursor.is_null() {
            // Safety: magazines are published fully built (Release CAS below, Acquire loads
            // here) and freed only when `Shared` drops, which `&self` rules out.
            let magazine = unsafe { &*cursor };
            // Acquire: pairs with the Release in `retire`: we see what the last owner left.
            if !magazine.claimed.load(Ordering::Relaxed)
                && magazine
                    .claimed
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return cursor;
            }
            cursor = magazine.next.load(Ordering::Acquire);
        }
        let fresh = Box::into_raw(Box::new(CachePadded::new(Magazine::claimed_empty())));
        let mut head = self.magazines.load(Ordering::Relaxed);
        loop {
            // Safety: `fresh` is not published yet: this thread alone can reach it.
            unsafe { &*fresh }.next.store(head, Ordering::Relaxed);
            // Release: the magazine is built before anyone can reach it.
            match self.magazines.compare_exchange_weak(head, fresh, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return fresh,
                Err(current) => head = current,
            }
        }
    }

    /// The thread that claimed `magazine` is exiting: keep its chain with the pool (as free
    /// slots) and free the magazine for the next thread.
    fn retire(&self, magazine: &Magazine) {
        let mut stock = magazine.stock();
        if let Some(chain) = stock.take_all() {
            // The lock publishes the chain's links to whoever reclaims it, and makes the move
            // from the magazine to `returned` one step for audits (`count_quiescent`).
            let mut returned = lock(&self.returned);
            if !self.closed.load(Ordering::Relaxed) {
                returned.push(chain);
                self.returned_slots.fetch_add(chain.len as usize, Ordering::Relaxed);
            }
            magazine.update(stock);
        }
        // Release: the next owner (Acquire in `claim`) sees the magazine empty and its counters.
        magazine.claimed.store(false, Ordering::Release);
    }

    /// Calls `f` on every magazine made so far.
    fn each_magazine(&self, mut f: impl FnMut(&Magazine)) {
        let mut cursor = self.magazines.load(Ordering::Acquire);
        while !cursor.is_null() {
            // Safety: as in `claim`.
            let magazine = unsafe { &*cursor };
            f(magazine);
            cursor = magazine.next.load(Ordering::Acquire);
        }
    }
}

impl Drop for Shared {
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

/// One pool's magazine held by this thread.
struct Entry {
    shared: Arc<Shared>,
    magazine: *const CachePadded<Magazine>,
}

/// The magazines this thread holds, one per pool it has used.
struct Held {
    /// The entry used last, as (key, magazine): the common case skips the search. Key 0 is none.
    last: Cell<(usize, *const CachePadded<Magazine>)>,
    entries: RefCell<Vec<Entry>>,
}

impl Held {
    fn new() -> Self {
        Self { last: Cell::new((0, std::ptr::null())), entries: RefCell::new(Vec::new()) }
    }

    /// This thread's magazine for the pool whose shared part is `shared` (at address `key`),
    /// claiming one on first use. Forgets the entries of pools that are gone.
    #[cold]
    fn find_or_claim(&self, shared: &Arc<Shared>, key: usize) -> *const CachePadded<Magazine> {
        let mut entries = self.entries.borrow_mut();
        // Relaxed: `closed` is only ever set, and a pool whose entry survives this pass is
        // simply forgotten on a later one.
        entries.retain(|entry| !entry.shared.closed.load(Ordering::Relaxed));
        let magazine = match entries.iter().find(|entry| Arc::as_ptr(&entry.shared) as usize == key) {
            Some(entry) => entry.magazine,
            None => {
                let magazine = shared.claim();
                entries.push(Entry { shared: Arc::clone(shared), magazine });
                magazine
            }
        };
        self.last.set((key, magazine));
        magazine
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.last.set((0, std::ptr::null()));
        for entry in self.entries.get_mut().drain(..) {
            // Safety: the entry's `Arc` keeps its `Shared`, and so the magazine, alive.
            entry.shared.retire(unsafe { &*entry.magazine });
        }
    }
}

thread_local! {
    static HELD: Held = Held::new();
}

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
/// The slots are indices whose links the caller provides ([`Links`]), as for [`FreeList`].
/// Every thread that acquires or releases gets its own magazine on first use.
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
        Self {
            shared: Arc::new(Shared {
                depot: FreeList::new(),
                starved: CachePadded::new(AtomicBool::new(false)),
                magazines: AtomicPtr::new(std::ptr::null_mut()),
                returned: Mutex::new(Vec::new()),
                returned_slots: AtomicUsize::new(0),
                bypass: Tally::new(),
                size: size.max(2),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// Most slots one magazine holds.
    pub fn magazine_size(&self) -> u32 {
        self.shared.size
    }

    /// Runs `f` on the calling thread's magazine; `None` once this thread's thread-locals are
    /// being destroyed.
    #[inline]
    fn with_own<R>(&self, f: impl FnOnce(&Magazine) -> R) -> Option<R> {
        let key = Arc::as_ptr(&self.shared) as usize;
        HELD.try_with(|held| {
            let (last_key, last) = held.last.get();
            let magazine = if last_key == key { last } else { held.find_or_claim(&self.shared, key) };
            // Safety: this thread's entry for `key` holds an `Arc` of the `Shared` that owns
            // the magazine (entries are dropped only by this thread, which then resets
            // `last`), and the magazine is claimed by this thread alone.
            f(unsafe { &*magazine })
        })
        .ok()
    }

    /// Takes up to `n` free slots as a chain: from this thread's magazine, refilled from the
    /// depot when empty and topped up from it when short. `None` if `n` is 0 (in every build:
    /// nothing is taken), or if the magazine, the depot and the exited threads' magazines are
    /// all empty (other live threads' magazines are not searched: see [`starve`](Self::starve)).
    #[inline]
    pub fn acquire(&self, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        if n == 0 {
            return None;
        }
        let taken = self.with_own(|magazine| {
            let mut stock = magazine.stock();
            let taken = self.take(&mut stock, links, n);
            stock.handed_out += taken.map_or(0, |chain| i64::from(chain.len));
            magazine.update(stock);
            taken
        });
        match taken {
            Some(taken) => taken,
            None => {
                let chain = self.shared.pop_depot(links, n)?;
                self.shared.bypass.add(HANDED_OUT, i64::from(chain.len));
                Some(chain)
            }
        }
    }

    #[inline]
    fn take(&self, stock: &mut Stock, links: &(impl Links + ?Sized), n: u32) -> Option<Chain> {
        let shared = &*self.shared;
        if shared.starved.load(Ordering::Relaxed) {
            if let Some(held) = stock.take_all() {
                shared.push_depot(links, held);
            }
            return shared.pop_depot(links, n);
        }
        let mut held = match stock.take_all() {
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
        if n >= held.len {
            return Some(held);
        }
        // The slots are this thread's (in its magazine, or just popped with an Acquire CAS):
        // their links were written by this thread or before the push it synchronized with.
        let mut last = held.first;
        for _ in 1..n {
            last = links.link(last).load(Ordering::Relaxed);
        }
        let rest = links.link(last).load(Ordering::Relaxed);
        stock.put(Chain { first: rest, last: held.last, len: held.len - n });
        Some(Chain { first: held.first, last, len: n })
    }

    /// Gives back a chain of slots that came from [`acquire`](Self::acquire) (from any
    /// thread): onto this thread's magazine, spilling to the depot past the magazine size.
    #[inline]
    pub fn release(&self, links: &(impl Links + ?Sized), chain: Chain) {
        debug_assert!(chain.len >= 1);
        let released = self.with_own(|magazine| {
            let mut stock = magazine.stock();
            stock.handed_out -= i64::from(chain.len);
            self.put(&mut stock, links, chain);
            magazine.update(stock);
        });
        if released.is_none() {
            self.shared.bypass.add(HANDED_OUT, -i64::from(chain.len));
            self.shared.push_depot(links, chain);
        }
    }

    #[inline]
    fn put(&self, stock: &mut Stock, links: &(impl Links + ?Sized), chain: Chain) {
        let shared = &*self.shared;
        if shared.starved.load(Ordering::Relaxed) {
            if let Some(held) = stock.take_all() {
                shared.push_depot(links, held);
            }
            shared.push_depot(links, chain);
            return;
        }
        if chain.len > shared.size {
            shared.push_depot(links, chain);
            return;
        }
        match stock.take_all() {
            Some(held) if held.len + chain.len > shared.size => {
                stock.put(chain);
                shared.push_depot(links, held);
            }
            Some(held) => {
                // Relaxed: these slots are this thread's; the link is published by whichever
                // Release CAS later hands them on.
                links.link(chain.last).store(held.first, Ordering::Relaxed);
                stock.put(Chain { first: chain.first, last: held.last, len: held.len + chain.len });
            }
            None => stock.put(chain),
        }
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
        self.shared.starved.store(true, Ordering::Relaxed);
    }

    /// Whether magazines are bypassed now (see [`starve`](Self::starve)).
    pub fn is_starved(&self) -> bool {
        self.shared.starved.load(Ordering::Relaxed)
    }

    /// A snapshot of the counts.
    pub fn counts(&self) -> MagazineCounts {
        let shared = &*self.shared;
        let (mut in_magazines, mut handed_out, mut magazines) =
            (0u64, shared.bypass.sum(HANDED_OUT) as u32, 0);
        // One load per magazine: the collector samples these on every collect.
        shared.each_magazine(|magazine| {
            let (len, handed) = magazine.published();
            in_magazines += u64::from(len);
            handed_out = handed_out.wrapping_add(handed);
            magazines += 1;
        });
        let free = (shared.bypass.sum(DEPOSITED) as u32).wrapping_sub(handed_out) as i32;
        MagazineCounts {
            free: free.max(0) as usize,
            in_magazines: in_magazines as usize + shared.returned_slots.load(Ordering::Relaxed),
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
        let shared = &*self.shared;
        let walk = |(first, len): (u32, u32)| {
            let mut index = first;
            let mut seen = 0;
            while seen < len && index != NIL {
                seen += 1;
                index = links.link(index).load(Ordering::Acquire);
            }
            seen as usize
        };
        // Under the lock, an exiting thread's chain is counted once: in its magazine or in
        // `returned`.
        let returned = lock(&shared.returned);
        let mut count = shared.depot.count_quiescent(links, limit);
        shared.each_magazine(|magazine| {
            count += walk((magazine.first.load(Ordering::Relaxed), magazine.published().0));
        });
        count += returned.iter().map(|chain| walk((chain.first, chain.len))).sum::<usize>();
        count
    }
}

impl Drop for Magazines {
    fn drop(&mut self) {
        // Relaxed: threads only use it to forget their entries for these magazines.
        self.shared.closed.store(true, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
