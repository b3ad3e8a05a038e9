//! The submission queue: many producers (threads submitting lists), consumers that take
//! everything at once (collectors). A Treiber-style push of each list's first slot, and a
//! take-all swap. The collector uses the same structure twice more, for lists it found
//! incomplete (`retry`) and for lists whose times were read (`read`): a list is on at most
//! one of the three at a time, so they share the `next_submitted` link.
//!
//! ```text
//!  head ──> list C ──> list B ──> list A ──> NIL     (newest first, linked through
//!           first slot  first slot  first slot         `next_submitted`)
//! ```
//!
//! Push is one CAS. `take_all` swaps the head with NIL and reverses the chain, giving the
//! lists in submission order (FIFO). There is no ABA hazard: the consumer never pops single
//! nodes, it takes the whole stack, so a producer's CAS can only fail because another
//! producer pushed, and then it simply retries with the new head.

use super::freelist::NIL;
use super::head::ListHead;
use super::pool::Pool;
use crate::sync::{AtomicU32, Ordering};
use crossbeam_utils::CachePadded;

/// Gives the queue a slot's `next_submitted` link.
pub(crate) trait SubmissionLinks {
    fn next_submitted(&self, index: u32) -> &AtomicU32;
    /// How many slots there can be: no stack of lists is longer (each list has a first slot).
    fn slots(&self) -> usize;
}

impl<E, R> SubmissionLinks for Pool<E, R> {
    fn next_submitted(&self, index: u32) -> &AtomicU32 {
        &self.slot(index).next_submitted
    }

    fn slots(&self) -> usize {
        self.max as usize
    }
}

/// The MPSC queue of submitted lists, by their first slot.
#[derive(Debug)]
pub(crate) struct SubmissionQueue {
    /// The first slot of the newest submitted list, or NIL.
    head: CachePadded<AtomicU32>,
}

impl SubmissionQueue {
    pub(crate) fn new() -> Self {
        Self { head: CachePadded::new(AtomicU32::new(NIL)) }
    }

    /// Pushes the list of `head`, giving the head up. Everything the producer wrote to the
    /// list's slots before this call is visible to the consumer that takes it.
    pub(crate) fn push(&self, links: &impl SubmissionLinks, head: ListHead) {
        self.push_chain(links, head.first(), head.first());
    }

    /// Pushes several lists at once (one CAS): `first` is linked through `next_submitted` to
    /// `last`, newest first, as `take_all` expects. The caller gave up their heads
    /// ([`ListStack`]).
    pub(super) fn push_chain(&self, links: &impl SubmissionLinks, first: u32, last: u32) {
        // Relaxed: the value is only stored into our own slot's link.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            links.next_submitted(last).store(head, Ordering::Relaxed);
            // Release: the lists' slots (links, records) happen-before the consumer's
            // Acquire swap that takes them.
            match self.head.compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Takes every submitted list, oldest first, appending their heads to `out`: the swap
    /// hands each list to this caller alone, who owns it from here.
    pub(crate) fn take_all(&self, links: &impl SubmissionLinks, out: &mut Vec<ListHead>) {
        // Acquire: pairs with every producer's Release CAS (each later push's CAS reads the
        // earlier one's value, so all of them form one release sequence we synchronize with).
        // Release: a `mark` that comes after this swap (pushes between are RMWs: the release
        // sequence goes on) sees what the taker did before it (a flush's pass count).
        let mut index = self.head.swap(NIL, Ordering::AcqRel);
        let start = out.len();
        while index != NIL {
            // The walk's bound, stated: a stack that loops (a slot heading two lists) fails
            // here, not by filling memory.
            debug_assert!(out.len() - start < links.slots(), "a stack of more lists than slots");
            out.push(ListHead::new(index));
            index = links.next_submitted(index).load(Ordering::Relaxed);
        }
        out[start..].reverse();
    }

    /// A read-modify-write of the head that changes nothing (AcqRel): every push that
    /// happened before it comes before it in the head's modification order, and it
    /// synchronizes with every `take_all` before it. A flush marks its start this way
    /// (`Collector::flush`, docs/design.md section 4: a pass begun after the mark takes every
    /// list pushed before it).
    pub(crate) fn mark(&self) {
        self.head.fetch_or(0, Ordering::AcqRel);
    }

    /// Whether nothing is waiting now, read with a read-modify-write (SeqCst), which sees the
    /// latest push: the emitter's hand-off check (`collect/mod.rs`) relies on it.
    pub(crate) fn is_empty_now(&self) -> bool {
        self.head.fetch_or(0, Ordering::SeqCst) == NIL
    }
}

/// Lists being linked through `next_submitted` for one push onto a submission queue: takes
/// their heads, and gives them up with the push.
#[derive(Debug, Default)]
pub(crate) struct ListStack {
    newest: Option<u32>,
    oldest: u32,
    len: usize,
}

impl ListStack {
    /// Adds the list of `head`, newest first.
    pub(crate) fn add(&mut self, links: &impl SubmissionLinks, head: ListHead) {
        // The head is given up here: the list is linked for the push.
        let first = head.first();
        match self.newest {
            None => self.oldest = first,
            // Relaxed: published by the Release CAS of `push_chain`.
            Some(newest) => links.next_submitted(first).store(newest, Ordering::Relaxed),
        }
        self.newest = Some(first);
        self.len += 1;
    }

    /// How many lists were added.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Pushes the lists onto `queue` (one CAS), handing them to its next taker.
    pub(crate) fn push_onto(self, queue: &SubmissionQueue, links: &impl SubmissionLinks) {
        if let Some(newest) = self.newest {
            queue.push_chain(links, newest, self.oldest);
        }
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    struct Links(Vec<AtomicU32>);
    impl SubmissionLinks for Links {
        fn next_submitted(&self, index: u32) -> &AtomicU32 {
            &self.0[index as usize]
        }

        fn slots(&self) -> usize {
            self.0.len()
        }
    }

    #[test]
    fn take_all_returns_lists_in_submission_order() {
        let links = Links((0..4).map(|_| AtomicU32::new(NIL)).collect());
        let q = SubmissionQueue::new();
        for i in [2, 0, 3] {
            q.push(&links, ListHead::new(i));
        }
        let mut out = vec![ListHead::new(9)];
        q.take_all(&links, &mut out);
        assert_eq!(out.iter().map(ListHead::first).collect::<Vec<_>>(), vec![9, 2, 0, 3]);
        assert!(q.is_empty_now());
        q.push(&links, ListHead::new(1));
        out.clear();
        q.take_all(&links, &mut out);
        assert_eq!(out.iter().map(ListHead::first).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn concurrent_producers_lose_nothing_and_keep_their_own_order() {
        // Fewer under Miri, which runs this about 10^4 times slower.
        const PER: u32 = if cfg!(miri) { 50 } else { 500 };
        let links = Links((0..4 * PER).map(|_| AtomicU32::new(NIL)).collect());
        let q = SubmissionQueue::new();
        let mut taken = Vec::new();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (q, links) = (&q, &links);
                s.spawn(move || (0..PER).for_each(|i| q.push(links, ListHead::new(t * PER + i))));
            }
            for _ in 0..50 {
                q.take_all(&links, &mut taken);
            }
        });
        q.take_all(&links, &mut taken);
        assert_eq!(taken.len(), (4 * PER) as usize);
        for t in 0..4 {
            let mine: Vec<u32> = taken.iter().map(ListHead::first).filter(|i| i / PER == t).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "producer {t} out of order");
        }
    }
}
