//! The slots: one backend event each, in pages created on demand and never freed while the
//! pool lives.
//!
//! ```text
//! slot index:  0 .. c      c .. 3c        3c .. 7c            ...   (c = initial page size,
//! page:        [ page 0 ]  [  page 1   ]  [      page 2     ]  ...   rounded up to 2^k;
//!              c slots     2c slots       4c slots                   the last page is cut
//!                                                                    to max_capacity)
//! ```
//!
//! Page `k` starts at slot `c * (2^k - 1)`, so a slot's page is `log2(index / c + 1)`: two
//! shifts, no table walk. A page is published by storing its pointer (Release) before any of
//! its slots reaches the freelist, so whoever pops a slot also sees its page.
//!
//! The pool is also the one place that moves slots between states and counts them:
//! Free -> Owned ([`Pool::acquire`]), Owned -> Free ([`Pool::release_owned`]),
//! Owned -> Submitted ([`Pool::mark_submitted`]), Submitted -> Free ([`Pool::release_submitted`]).
//! Free slots sit in the calling threads' magazines or on the freelist behind them
//! ([`Magazines`]): lists acquire from and release to their thread's magazine; the collector
//! and new pages go to the freelist (the depot).

use super::freelist::{cut_front, Chain, Links, Segment, NIL};
use super::magazine::Magazines;
use super::tally::Tally;
use crate::backend::BackendError;
use crate::launch::Launch;
use crate::limits::{MAGAZINE_SLOTS, MAX_PAGES};
use crate::sync::{
    spin_wait, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, UnsafeCell,
};
use crossbeam_utils::CachePadded;

/// One pool slot.
#[derive(Debug)]
pub(crate) struct Slot<E, R> {
    /// Freelist link while Free; next event of the same list while Owned or Submitted.
    pub(super) link: AtomicU32,
    /// While the slot heads a segment of a free chain, or of a list's runs: the segment's
    /// last slot and length ([`Segment`](super::freelist::Segment)); stale otherwise.
    pub(super) segment: AtomicU64,
    /// On a submitted list's first slot: the first slot of the list submitted before it.
    pub(super) next_submitted: AtomicU32,
    /// The backend event: created with the page, never changed, destroyed with the pool.
    pub(super) event: E,
    /// Written only by the slot's owner: the list (Owned) or the collector (Submitted),
    /// through a [`ListHead`](super::head::ListHead) (`head.rs`). The pool never reads it:
    /// what a record holds is the layer above's business (`R`).
    pub(super) record: UnsafeCell<R>,
    /// Where and when the host recorded the zone begun at this event, written by the slot's
    /// owner when it records the event, only while its context records launches
    /// (`launch.rs`): kept apart from the event's record so that a record written with
    /// launches off is no longer. Reached through an [`OwnedSlot`](super::head::OwnedSlot)
    /// or a [`ListHead`](super::head::ListHead) only (`head.rs`).
    pub(super) launch: UnsafeCell<Launch>,
}

/// Holds the pool's `growing` flag; clears it when dropped, also during a panic.
struct GrowingFlag<'a>(&'a AtomicBool);

impl Drop for GrowingFlag<'_> {
    fn drop(&mut self) {
        // Release: publishes the new page (if any) to the next grower.
        self.0.store(false, Ordering::Release);
    }
}

/// Why the pool could not hand out a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireError {
    /// Empty, and at the maximum capacity.
    Exhausted,
    /// Growing failed: the backend could not create the new page's events.
    Backend(BackendError),
}

/// Slot counts per state, each changed by the transition that moves slots, so that their sum
/// against `capacity` checks the bookkeeping rather than restating it. Free slots, and the
/// slots lists acquire and release, are counted by the magazines (each thread on its own
/// magazine's line); the rest change per list or per collect, sharded per thread ([`Tally`]).
#[derive(Debug)]
struct Counters {
    /// OWNED: slots owned other than through the magazines (kept from a new page, less those
    /// submitted); SUBMITTED.
    states: Tally<2>,
    capacity: AtomicUsize,
    /// The most slots seen in use, sampled when the pool grows (the moment it is full),
    /// on every collect and on every `stats()`.
    high_water: AtomicUsize,
    grows: AtomicUsize,
    /// Calls of `release_submitted`: grows whenever submitted slots come back.
    releases: AtomicU64,
}

const OWNED: usize = 0;
const SUBMITTED: usize = 1;

/// A snapshot of the pool's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolCounts {
    pub(crate) capacity: usize,
    pub(crate) max_capacity: usize,
    pub(crate) pages: usize,
    pub(crate) free: usize,
    pub(crate) in_magazines: usize,
    pub(crate) threads_with_magazines: usize,
    pub(crate) owned: usize,
    pub(crate) submitted: usize,
    pub(crate) high_water: usize,
    pub(crate) grows: usize,
}

/// The pool of slots.
pub(crate) struct Pool<E, R> {
    /// The free slots: the threads' magazines and the freelist behind them.
    free: Magazines,
    /// Page k's first slot, or null until page k is created.
    pages: [AtomicPtr<Slot<E, R>>; MAX_PAGES],
    /// Pages created so far (only the growing thread writes it).
    page_count: AtomicUsize,
    /// Set while one thread creates a page.
    growing: CachePadded<AtomicBool>,
    /// log2 of page 0's size.
    shift: u32,
    pub(super) max: u32,
    /// Most slots in a segment of a new page (the context's batch): lists make their runs'
    /// segments this long too ([`segment_len`](Self::segment_len)).
    segment: u32,
    /// Handed to stale freelist readers asking for a slot whose page they cannot see yet.
    stale_link: AtomicU32,
    stale_segment: AtomicU64,
    counters: Counters,
}

// Safety: slots are shared between threads; every field is an atomic, the event (Send +
// Sync by the `Backend` bound on `E` here), or one of the `record` and `launch` cells. Those
// are private to slots/ and touched only through the handles of `head.rs` (`ListHead`,
// `OwnedSlot`), which only the hand-off points make and which are not `Clone`: whoever holds
// a list's handle is its slots' one owner (the invariant, argued in `head.rs`'s module doc
// and docs/design.md), so no two threads touch a cell at once.
unsafe impl<E: Send + Sync, R: Send> Sync for Pool<E, R> {}
// Safety: as above; the pool owns its pages.
unsafe impl<E: Send + Sync, R: Send> Send for Pool<E, R> {}

impl<E, R> std::fmt::Debug for Pool<E, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("counts", &self.counts()).finish()
    }
}

impl<E, R> Links for Pool<E, R> {
    #[inline]
    fn link(&self, index: u32) -> &AtomicU32 {
        match self.try_slot(index) {
            Some(slot) => &slot.link,
            None => &self.stale_link,
        }
    }

    #[inline]
    fn segment(&self, index: u32) -> &AtomicU64 {
        match self.try_slot(index) {
            Some(slot) => &slot.segment,
            None => &self.stale_segment,
        }
    }
}

impl<E, R> Pool<E, R> {
    /// Number of pages needed to reach `max` slots from a first page of `1 << shift`.
    pub(crate) fn pages_needed(shift: u32, max: u32) -> Option<usize> {
        (0..MAX_PAGES).find(|&k| Self::page_start_for(shift, k + 1) >= u64::from(max)).map(|k| k + 1)
    }

    /// The largest maximum reachable from a first page of `1 << shift`.
    pub(crate) fn max_reachable(shift: u32) -> u64 {
        Self::page_start_for(shift, MAX_PAGES).min(u64::from(NIL - 1))
    }

    fn page_start_for(shift: u32, k: usize) -> u64 {
        ((1u64 << k) - 1) << shift
    }

    /// Makes a pool whose first page holds `initial` (rounded up to a power of two, cut to
    /// `max`) events made by `create`, its free slots in segments of at most `segment` (at
    /// least 1). The caller has validated the capacities.
    pub(crate) fn new(
        initial: u32,
        max: u32,
        segment: u32,
        create: impl FnMut() -> Result<E, BackendError>,
    ) -> Result<Self, BackendError>
    where
        R: Default,
    {
        let shift = initial.next_power_of_two().trailing_zeros();
        debug_assert!(Self::pages_needed(shift, max).is_some());
        let pool = Self {
            free: Magazines::new(Self::magazine_size(max)),
            pages: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            page_count: AtomicUsize::new(0),
            growing: CachePadded::new(AtomicBool::new(false)),
            shift,
            max,
            segment: segment.max(1),
            stale_link: AtomicU32::new(NIL),
            stale_segment: AtomicU64::new(0),
            counters: Counters {
                states: Tally::new(),
                capacity: AtomicUsize::new(0),
                high_water: AtomicUsize::new(0),
                grows: AtomicUsize::new(0),
                releases: AtomicU64::new(0),
            },
        };
        let chain = pool.add_page(create)?;
        pool.free.deposit(&pool, chain);
        Ok(pool)
    }

    /// Slots one thread's magazine may hold: 1/16 of the maximum, between 2 and
    /// `MAGAZINE_SLOTS` (128), so that a few threads cannot hold most of a small pool.
    pub(crate) fn magazine_size(max: u32) -> u32 {
        (max / 16).clamp(2, MAGAZINE_SLOTS)
    }

    /// Most slots in a segment of a new page, and in a segment of a list's recorded run.
    #[inline]
    pub(crate) fn segment_len(&self) -> u32 {
        self.segment
    }

    fn page_start(&self, k: usize) -> u64 {
        Self::page_start_for(self.shift, k)
    }

    fn page_len(&self, k: usize) -> usize {
        let start = self.page_start(k);
        let end = self.page_start(k + 1).min(u64::from(self.max));
        (end - start) as usize
    }

    /// The slot at `index`, or `None` if its page is not visible to this thread.
    #[inline]
    fn try_slot(&self, index: u32) -> Option<&Slot<E, R>> {
        if index >= self.max {
            return None;
        }
        let k = ((index >> self.shift) + 1).ilog2() as usize;
        let offset = (u64::from(index) - self.page_start(k)) as usize;
        // Acquire: pairs with the Release store in `add_page`, so the page's contents are
        // visible before we touch them.
        let page = self.pages[k].load(Ordering::Acquire);
        if page.is_null() {
            return None;
        }
        debug_assert!(offset < self.page_len(k));
        // Safety: `page` points at a live page of `page_len(k)` slots (pages are freed only
        // when the pool drops), and `offset < page_len(k)` by the page layout.
        Some(unsafe { &*page.add(offset) })
    }

    /// The backend event of the slot at `index`: created with its page and never changed,
    /// so reading it needs no ownership, only that the slot exists (the caller owns it or
    /// holds its list's [`ListHead`](super::head::ListHead), so its page is visible).
    #[inline]
    pub(crate) fn event(&self, index: u32) -> &E {
        &self.slot(index).event
    }

    /// The slot at `index`. The caller owns it (or is the collector), so its page is visible.
    /// Private to slots/: its cells and links change only through the hand-off types.
    #[inline]
    pub(super) fn slot(&self, index: u32) -> &Slot<E, R> {
        match self.try_slot(index) {
            Some(slot) => slot,
            None => unreachable!("slot {index} is owned, so its page was published before it"),
        }
    }

    /// Free -> Owned: takes from `min` to `max` slots (`1 <= min <= max`; fewer only when that
    /// is all the pool has) as a segmented chain from the calling thread's magazine (refilled
    /// from the freelist: [`Magazines::acquire_between`]), growing the pool if both are empty
    /// and it is below its maximum. Only the
    /// thread that grows waits for the backend; others keep trying, and wait only if the
    /// freelist is empty while a page is being made. At the maximum, before reporting
    /// exhaustion, it starves the magazines ([`Magazines::starve`]).
    pub(crate) fn acquire(
        &self,
        min: u32,
        max: u32,
        create: impl FnMut() -> Result<E, BackendError>,
    ) -> Result<Chain, AcquireError>
    where
        R: Default,
    {
        let mut create = create;
        loop {
            if let Some(chain) = self.free.acquire_between(self, min, max) {
                return Ok(chain);
            }
            // Acquire: pairs with the Release store that ends a growth, so the pages and
            // counters it wrote are visible.
            if self.growing.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                spin_wait();
                continue;
            }
            // Cleared however the growth ends: a `create` that panics must not leave every
            // later acquire spinning on the flag.
            let _growing = GrowingFlag(&self.growing);
            return self.grow_locked(min, max, &mut create);
        }
    }

    /// With the growth flag held: tries again (slots may have come back), else adds a page
    /// and keeps from `min` to `max` of its slots, as the magazines would hand them out.
    fn grow_locked(
        &self,
        min: u32,
        max: u32,
        create: &mut impl FnMut() -> Result<E, BackendError>,
    ) -> Result<Chain, AcquireError>
    where
        R: Default,
    {
        if let Some(chain) = self.free.acquire_between(self, min, max) {
            return Ok(chain);
        }
        if self.counters.capacity.load(Ordering::Relaxed) >= self.max as usize {
            self.free.starve();
            // Out of slots at the maximum: the peak in use is now (a rare path: the full
            // count, magazines included, is affordable here).
            let counts = self.counts();
            self.counters.high_water.fetch_max(counts.owned + counts.submitted, Ordering::Relaxed);
            return Err(AcquireError::Exhausted);
        }
        // The freelist is empty: every slot is in use. Record that peak before growing.
        let full = self.counters.capacity.load(Ordering::Relaxed);
        self.counters.high_water.fetch_max(full, Ordering::Relaxed);
        let page = self.add_page(create).map_err(AcquireError::Backend)?;
        self.counters.grows.fetch_add(1, Ordering::Relaxed);
        // The page is the grower's until it deposits the rest.
        let (kept, rest) = cut_front(self, page.first, page.len, min.min(page.len), max);
        if kept.len < page.len {
            self.free.deposit(self, Chain { first: rest, last: page.last, len: page.len - kept.len });
        }
        self.counters.states.add(OWNED, i64::from(kept.len));
        Ok(kept)
    }

    /// Creates the next page's events and publishes the page; returns its slots as a chain
    /// linked in index order, in segments of `segment` slots from its first (the last one
    /// shorter). On a backend failure the pool is left as it was.
    fn add_page(&self, mut create: impl FnMut() -> Result<E, BackendError>) -> Result<Chain, BackendError>
    where
        R: Default,
    {
        let k = self.page_count.load(Ordering::Relaxed);
        debug_assert!(k < MAX_PAGES);
        let len = self.page_len(k);
        let start = self.page_start(k) as u32;
        let mut slots = Vec::new();
        // A page too large for memory is an error, not an abort (`with_capacity` aborts).
        slots.try_reserve_exact(len).map_err(|e| {
            let bytes = len.saturating_mul(std::mem::size_of::<Slot<E, R>>());
            BackendError::new("allocate event page", format!("{len} slots ({bytes} bytes): {e}"))
        })?;
        for i in 0..len as u32 {
            let next = if i + 1 < len as u32 { start + i + 1 } else { NIL };
            // Every `segment`-th slot heads a segment that runs to the next head or the end.
            let head = (i % self.segment == 0).then(|| {
                let last = (i + self.segment).min(len as u32) - 1;
                Segment { last: start + last, len: last - i + 1 }
            });
            slots.push(Slot {
                link: AtomicU32::new(next),
                segment: AtomicU64::new(head.map_or(0, Segment::word)),
                next_submitted: AtomicU32::new(NIL),
                event: create()?,
                record: UnsafeCell::new(R::default()),
                launch: UnsafeCell::new(Launch::default()),
            });
        }
        let page = Box::into_raw(slots.into_boxed_slice()) as *mut Slot<E, R>;
        // Release: the page's slots are initialized before anyone can load the pointer.
        self.pages[k].store(page, Ordering::Release);
        self.page_count.store(k + 1, Ordering::Release);
        self.counters.capacity.fetch_add(len, Ordering::Relaxed);
        Ok(Chain { first: start, last: start + len as u32 - 1, len: len as u32 })
    }

    /// Calls `f` with the event of each slot of `chain` (the caller's: owned, or submitted
    /// and collected), first to last.
    pub(crate) fn for_each_event(&self, chain: &Chain, mut f: impl FnMut(&E)) {
        let mut index = chain.first;
        for i in 0..chain.len {
            f(&self.slot(index).event);
            if i + 1 < chain.len {
                // Relaxed: the chain is the caller's; its links were written by this thread
                // or published to it with the chain.
                index = self.slot(index).link.load(Ordering::Relaxed);
            }
        }
    }

    /// Owned -> Free: a list returns slots it did not submit (a segmented chain), to the
    /// calling thread's magazine (no atomic read-modify-write unless the magazine spills: then
    /// one CAS).
    pub(crate) fn release_owned(&self, chain: Chain) {
        self.free.release(self, chain);
    }

    /// Owned -> Submitted.
    pub(crate) fn mark_submitted(&self, len: u32) {
        self.counters.states.add(OWNED, -i64::from(len));
        self.counters.states.add(SUBMITTED, i64::from(len));
    }

    /// Submitted -> Free: the collector returns collected lists (their runs linked one after
    /// another: a segmented chain), to the freelist (one CAS for all of them). Chains of
    /// exited threads' magazines go there too.
    pub(crate) fn release_submitted(&self, chain: Chain) {
        self.counters.states.add(SUBMITTED, -i64::from(chain.len));
        self.free.deposit(self, chain);
        // Relaxed: a recording thread at the maximum reads it only to tell whether slots came
        // back while it collected (`Collector::relieve`); a late read costs one more pass.
        self.counters.releases.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times submitted slots came back ([`release_submitted`](Self::release_submitted)
    /// calls) since the pool was made.
    #[cfg_attr(gpu_event_pool_loom, allow(dead_code))]
    pub(crate) fn releases(&self) -> u64 {
        self.counters.releases.load(Ordering::Relaxed)
    }

    /// Folds the slots submitted now into the high-water mark: a lower bound of the slots in
    /// use, cheap enough for every collect (it reads no thread's magazine; `counts` folds the
    /// exact figure).
    pub(crate) fn sample_high_water(&self) {
        let submitted = self.counters.states.sum(SUBMITTED).max(0) as usize;
        Self::raise_high_water(&self.counters.high_water, submitted);
    }

    /// Raises the high-water mark to `in_use`, writing (a read-modify-write on a line every
    /// statistics reader shares) only when it is higher.
    fn raise_high_water(high_water: &AtomicUsize, in_use: usize) {
        // Relaxed: a statistic.
        if in_use > high_water.load(Ordering::Relaxed) {
            high_water.fetch_max(in_use, Ordering::Relaxed);
        }
    }

    /// A snapshot of the counters (each read separately: exact when the pool is quiescent).
    pub(crate) fn counts(&self) -> PoolCounts {
        let free = self.free.counts();
        let c = &self.counters;
        let in_use = c.capacity.load(Ordering::Relaxed).saturating_sub(free.free);
        Self::raise_high_water(&c.high_water, in_use);
        PoolCounts {
            capacity: c.capacity.load(Ordering::Relaxed),
            max_capacity: self.max as usize,
            pages: self.page_count.load(Ordering::Relaxed),
            free: free.free,
            in_magazines: free.in_magazines,
            threads_with_magazines: free.claimed,
            owned: (free.handed_out.wrapping_add(c.states.sum(OWNED) as u32) as i32).max(0) as usize,
            submitted: c.states.sum(SUBMITTED).max(0) as usize,
            high_water: c.high_water.load(Ordering::Relaxed),
            grows: c.grows.load(Ordering::Relaxed),
        }
    }

    /// Walks the freelist and every magazine: the number of slots really free. Exact only
    /// when quiescent.
    pub(crate) fn free_slots_walked(&self) -> usize {
        self.free.count_quiescent(self, self.max as usize + 1)
    }
}

impl<E, R> Drop for Pool<E, R> {
    fn drop(&mut self) {
        for k in 0..self.page_count.load(Ordering::Relaxed) {
            let page = self.pages[k].load(Ordering::Relaxed);
            let len = self.page_len(k);
            // Safety: page k was made by `Box::into_raw` of a boxed slice of exactly
            // `page_len(k)` slots, and nothing can reach it once the pool is dropped.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(page, len)) });
        }
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    fn counter() -> impl FnMut() -> Result<u32, BackendError> {
        let mut n = 0;
        move || {
            n += 1;
            Ok(n)
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri stops at an allocation this large instead of failing it")]
    fn a_page_too_large_for_memory_is_an_error_not_an_abort() {
        // 2^31 slots of over 128 KiB: over 256 TiB, more than a 48-bit address space holds
        // (and than any machine's memory), so the allocation fails before any event is made.
        type Big = [u8; 1 << 17];
        let never = || -> Result<Big, BackendError> { Err(BackendError::new("create", "not reached")) };
        let error = Pool::<Big, ()>::new(1 << 31, 1 << 31, 16, never).map(|_| ()).unwrap_err();
        assert_eq!(error.call, "allocate event page");
        assert!(error.code.starts_with("2147483648 slots"), "{}", error.code);
    }

    #[test]
    fn pages_double_from_the_initial_size_up_to_the_maximum() {
        // Segments of one slot: each acquire(1) takes exactly one.
        let pool = Pool::<u32, ()>::new(3, 20, 1, counter()).unwrap();
        assert_eq!(pool.counts().capacity, 4, "initial size rounds up to a power of two");
        let mut held = Vec::new();
        // At most one more than the maximum: a pool that hands out slots for ever fails below.
        for _ in 0..=20 {
            let Ok(chain) = pool.acquire(1, 1, counter()) else { break };
            held.push(chain.first);
        }
        let c = pool.counts();
        assert_eq!((c.capacity, c.pages, c.grows), (20, 3, 2), "4 + 8 + 8 (cut to the max)");
        held.sort_unstable();
        assert_eq!(held, (0..20).collect::<Vec<_>>());
        assert_eq!(pool.acquire(1, 1, counter()), Err(AcquireError::Exhausted));
    }

    #[test]
    fn a_failed_growth_leaves_the_pool_as_it_was() {
        let pool = Pool::<u32, ()>::new(2, 8, 1, counter()).unwrap();
        let a = pool.acquire(2, 2, counter()).unwrap();
        let mut made = 0;
        let failing = || {
            made += 1;
            if made == 2 {
                Err(BackendError::new("create", "boom"))
            } else {
                Ok(0)
            }
        };
        assert!(matches!(pool.acquire(1, 1, failing), Err(AcquireError::Backend(_))));
        let c = pool.counts();
        assert_eq!((c.capacity, c.pages, c.owned, c.free), (2, 1, 2, 0));
        pool.release_owned(a);
        assert_eq!(pool.acquire(1, 1, counter()).unwrap().len, 1);
    }

    #[test]
    fn a_panic_while_growing_leaves_the_pool_able_to_grow() {
        let pool = Pool::<u32, ()>::new(2, 8, 1, counter()).unwrap();
        let held = pool.acquire(2, 2, counter()).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = pool.acquire(1, 1, || -> Result<u32, BackendError> { panic!("backend bug") });
        }));
        assert!(panicked.is_err());
        // Would spin forever on a growth flag left set.
        assert_eq!(pool.acquire(1, 1, counter()).unwrap().len, 1);
        assert_eq!(pool.counts().capacity, 6);
        pool.release_owned(held);
    }

    #[test]
    fn slots_map_to_their_pages() {
        let pool = Pool::<u32, ()>::new(4, 100, 3, counter()).unwrap();
        // Every take gets a slot at least: a pool that hands out slots for ever fails here.
        let taken: u32 = (0..=100).map_while(|_| pool.acquire(7, 7, counter()).ok()).map(|c| c.len).sum();
        assert_eq!(taken, 100);
        for i in 0..100 {
            let event = pool.slot(i).event;
            assert!(event >= 1);
        }
        assert_eq!(pool.counts().pages, 5);
    }
}
