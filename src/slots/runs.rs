//! The slots an owner holds while it records (a list, in the layer above): the run of its
//! recorded events followed by its reservation, one chain that is always segmented
//! ([`Segment`]), so that it goes back to the free slots whole, and taking a slot never
//! walks links:
//!
//! ```text
//!   used: recorded, in order, cut into segments        spare: reserved, taken from the front
//!   [head ─► .. (segment_len)] ─► .. ─► [head ─► .. last] ─► first ─► .. ─► [head ─► ..] ─► last
//!                                        └ open segment: its    └ front: what is left of the
//!                                          word written when      segment being taken from
//!                                          the run is handed on   (its word stale)
//! ```
//!
//! The owner takes every reserved slot through its link and records into it, so it reads
//! each slot's line once anyway; the runs add one segment word read per segment taken and one
//! written per segment recorded, on lines the owner touches anyway. Recording a slot writes
//! no link: the used run's last slot already links to the spare's first, which is the slot
//! taken next.

use super::freelist::{Chain, Links, Segment, NIL};
use super::head::{ListHead, OwnedSlot};
use super::pool::Pool;
use crate::sync::Ordering;

/// A recording owner's slots: the used run (`first` linked through to `used_last`, `used`
/// slots) and the spare run (`spare_first` through `spare_last`, `spare` slots).
///
/// Invariants:
/// - both runs are linked first to last, and while both hold slots, `used_last` links to
///   `spare_first`;
/// - the used run is cut into segments of at most `segment_len` slots (the length the owner
///   passes to [`commit`](Self::commit)): every one but the open one (from `head`,
///   `head_len` slots, to `used_last`) has its word written;
/// - every segment of the spare run has its word written but the first: while `front` is
///   `Some`, what is left of that segment is `spare_first` through `front.last`, `front.len`
///   slots, and `spare_first`'s word is stale; while it is `None`, `spare_first` heads a
///   segment whose word holds (or the spare run is empty).
///
/// The list's handle on its slots: not `Clone`, so that one owner takes each slot
/// ([`OwnedSlot`]) and hands the used run on once ([`ListHead`]).
#[derive(Debug)]
pub(crate) struct Runs {
    first: u32,
    used_last: u32,
    used: u32,
    head: u32,
    head_len: u32,
    spare_first: u32,
    spare_last: u32,
    spare: u32,
    front: Option<Segment>,
}

impl Runs {
    pub(crate) const EMPTY: Runs = Runs {
        first: NIL,
        used_last: NIL,
        used: 0,
        head: NIL,
        head_len: 0,
        spare_first: NIL,
        spare_last: NIL,
        spare: 0,
        front: None,
    };

    /// How many slots the used run holds.
    #[inline]
    pub(crate) fn used(&self) -> u32 {
        self.used
    }

    /// How many slots the spare run holds.
    #[inline]
    pub(crate) fn spare(&self) -> u32 {
        self.spare
    }

    /// Appends `chain` (a segmented chain the owner took from the pool) to the spare run.
    pub(crate) fn append(&mut self, links: &(impl Links + ?Sized), chain: Chain) {
        // Relaxed: the owner's own slots; published by whichever Release CAS hands them on.
        if self.spare == 0 {
            self.spare_first = chain.first;
            self.front = None;
            if self.used > 0 {
                links.link(self.used_last).store(chain.first, Ordering::Relaxed);
            }
        } else {
            links.link(self.spare_last).store(chain.first, Ordering::Relaxed);
        }
        self.spare_last = chain.last;
        self.spare += chain.len;
    }

    /// Takes the spare run's first slot, which must exist: its index and the slot itself,
    /// found once for both the run and the owner. The owner then either
    /// [`commit`](Self::commit)s it or [`untake`](Self::untake)s it, before anything else.
    #[inline]
    pub(crate) fn take<'p, E, R>(&mut self, pool: &'p Pool<E, R>) -> (u32, OwnedSlot<'p, E, R>) {
        debug_assert!(self.spare > 0);
        let index = self.spare_first;
        let slot = pool.slot(index);
        // The word and the link are on the slot's own line, which the owner records into now.
        // Relaxed: the owner's own slots (its reservation came with the pool's Acquire).
        let front = match self.front {
            Some(front) => front,
            None => Segment::from_word(slot.segment.load(Ordering::Relaxed)),
        };
        debug_assert!(1 <= front.len && front.len <= self.spare, "{front:?}, {} spare", self.spare);
        self.spare -= 1;
        if self.spare > 0 {
            self.spare_first = slot.link.load(Ordering::Relaxed);
        }
        // The segment's last slot taken: `spare_first` (its link) heads the next segment.
        self.front = (front.len > 1).then_some(Segment { last: front.last, len: front.len - 1 });
        (index, OwnedSlot::new(slot))
    }

    /// Appends `index`, the slot [`take`](Self::take) just returned, to the used run, which
    /// starts a new segment once its open one has `segment_len` slots.
    #[inline]
    pub(crate) fn commit(&mut self, links: &(impl Links + ?Sized), index: u32, segment_len: u32) {
        if self.used == 0 {
            self.first = index;
            self.head = index;
            self.head_len = 1;
        } else if self.head_len >= segment_len {
            // The head's line was recorded into `segment_len` slots ago.
            Segment { last: self.used_last, len: self.head_len }.write(links, self.head);
            self.head = index;
            self.head_len = 1;
        } else {
            self.head_len += 1;
        }
        // No link to write: the used run's last slot links to `index` (taken from the front
        // of the spare run), and `index` to the spare run's new first.
        self.used_last = index;
        self.used += 1;
    }

    /// Puts back `index`, the slot [`take`](Self::take) just returned, in front of the spare
    /// run, as a segment of its own.
    pub(crate) fn untake(&mut self, links: &(impl Links + ?Sized), index: u32) {
        if self.spare == 0 {
            self.spare_last = index;
        } else {
            self.settle_front(links);
        }
        // `index` still links to the spare run's first, and the used run's last to `index`.
        self.spare_first = index;
        self.spare += 1;
        self.front = Some(Segment { last: index, len: 1 });
    }

    /// The used run as a segmented chain (its open segment's word written), with the head
    /// of the list it holds, which the owner hands on with it; and the spare run likewise
    /// (its first segment's word written), leaving both empty.
    pub(crate) fn take_chains(
        &mut self,
        links: &(impl Links + ?Sized),
    ) -> (Option<(ListHead, Chain)>, Option<Chain>) {
        let used = (self.used > 0).then(|| {
            Segment { last: self.used_last, len: self.head_len }.write(links, self.head);
            (ListHead::new(self.first), Chain { first: self.first, last: self.used_last, len: self.used })
        });
        let spare = (self.spare > 0).then(|| {
            self.settle_front(links);
            Chain { first: self.spare_first, last: self.spare_last, len: self.spare }
        });
        *self = Self::EMPTY;
        (used, spare)
    }

    /// Both runs as one segmented chain, used then spare, leaving both empty.
    pub(crate) fn take_all(&mut self, links: &(impl Links + ?Sized)) -> Option<Chain> {
        match self.take_chains(links) {
            // Already linked: the used run's last slot links to the spare run's first.
            (Some((_, used)), Some(spare)) => {
                Some(Chain { first: used.first, last: spare.last, len: used.len + spare.len })
            }
            (used, spare) => used.map(|(_, used)| used).or(spare),
        }
    }

    /// Writes what is left of the spare run's first segment into `spare_first`'s word, if
    /// it is stale.
    fn settle_front(&mut self, links: &(impl Links + ?Sized)) {
        if let Some(front) = self.front.take() {
            front.write(links, self.spare_first);
        }
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;
    use crate::slots::freelist::count_segmented;

    /// A pool of 16 slots, all taken, for the runs to use as they like.
    fn pool() -> (Pool<(), ()>, Chain) {
        let pool = Pool::new(16, 16, 16, || Ok(())).expect("16 slots");
        let all = pool.acquire(16, 16, || Ok(())).expect("16 free slots");
        (pool, all)
    }

    /// Slots `first..first + len` as segments of `segment` slots, linked in index order.
    fn segments(links: &Pool<(), ()>, first: u32, len: u32, segment: u32) -> Chain {
        let mut runs = Runs::EMPTY;
        (first..first + len - 1).for_each(|i| links.link(i).store(i + 1, Ordering::Relaxed));
        runs.append(links, Chain { first, last: first + len - 1, len }.into_segment(links));
        (0..len).for_each(|_| {
            let (index, _) = runs.take(links);
            runs.commit(links, index, segment);
        });
        runs.take_chains(links).0.expect("not empty").1
    }

    #[test]
    fn a_used_run_is_cut_into_segments_of_the_given_length() {
        let (links, _) = pool();
        let chain = segments(&links, 0, 7, 3);
        assert_eq!(chain, Chain { first: 0, last: 6, len: 7 });
        let words: Vec<Segment> = [0, 3, 6].iter().map(|&i| Segment::read(&links, i)).collect();
        assert_eq!(
            words,
            [Segment { last: 2, len: 3 }, Segment { last: 5, len: 3 }, Segment { last: 6, len: 1 }]
        );
        assert_eq!(count_segmented(&links, 0, 7), 7);
    }

    #[test]
    fn slots_taken_committed_and_untaken_leave_both_runs_segmented_and_linked() {
        let (links, _) = pool();
        let mut runs = Runs::EMPTY;
        runs.append(&links, segments(&links, 0, 5, 4));
        runs.append(&links, segments(&links, 8, 4, 4));
        for _ in 0..2 {
            let (index, _) = runs.take(&links);
            runs.commit(&links, index, 2);
        }
        let (untaken, _) = runs.take(&links);
        runs.untake(&links, untaken);
        assert_eq!((untaken, runs.used(), runs.spare()), (2, 2, 7));
        let (used, spare) = runs.take_chains(&links);
        assert_eq!(
            (used.map(|(_, used)| used), spare),
            (Some(Chain { first: 0, last: 1, len: 2 }), Some(Chain { first: 2, last: 11, len: 7 }))
        );
        assert_eq!(count_segmented(&links, 2, 7), 7, "[2] [3] [4] [8 9 10 11]");

        // The spare run back, then through the end of a segment and into the next.
        runs.append(&links, spare.unwrap());
        let taken: Vec<u32> = (0..4)
            .map(|_| {
                let (index, _) = runs.take(&links);
                runs.commit(&links, index, 2);
                index
            })
            .collect();
        assert_eq!(taken, [2, 3, 4, 8]);
        let all = runs.take_all(&links).expect("7 slots");
        assert_eq!((all.first, all.last, all.len), (2, 11, 7));
        assert_eq!(count_segmented(&links, 2, 7), 7, "[2 3] [4 8] [9 10 11]: used then spare, linked");
        assert!(runs.take_all(&links).is_none());
    }
}
