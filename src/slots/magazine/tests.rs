//! Unit tests of the magazines (one thread; the loom models cover the concurrent paths).

use super::*;

use crate::slots::freelist::{count_segmented, LinkTable};
use crate::sync::Ordering;
use std::cell::RefCell;

/// `slots` slots deposited in segments of `segment` slots (the last one shorter), linked in
/// index order, slot 0 on top.
fn stocked_in(slots: u32, segment: u32, size: u32) -> (LinkTable, Magazines) {
    let links = LinkTable::new(slots);
    let magazines = Magazines::new(size);
    let firsts: Vec<u32> = (0..slots).step_by(segment as usize).collect();
    for &first in firsts.iter().rev() {
        let last = (first + segment).min(slots) - 1;
        (first..last).for_each(|i| links.link(i).store(i + 1, Ordering::Relaxed));
        magazines.deposit(&links, Chain { first, last, len: last - first + 1 }.into_segment(&links));
    }
    (links, magazines)
}

/// Runs `f` on a thread of its own and joins it: a join returns once the thread's
/// thread-local destructors (its magazine handed back) have run, which a scope's end does not
/// wait for.
fn on_a_thread_that_exits(f: impl FnOnce() + Send) {
    std::thread::scope(|s| s.spawn(f).join().unwrap());
}

/// `slots` slots deposited one by one (segments of one slot), slot 0 on top.
fn stocked(slots: u32, size: u32) -> (LinkTable, Magazines) {
    stocked_in(slots, 1, size)
}

#[test]
fn an_empty_magazine_refills_whole_segments_in_one_pop_and_a_short_one_is_topped_up() {
    let (links, m) = stocked_in(32, 4, 8);
    let one = m.acquire_between(&links, 1, 4).unwrap();
    assert_eq!((one.first, one.last, one.len), (0, 3, 4), "a whole segment");
    let c = m.counts();
    assert_eq!((c.free, c.in_magazines, c.handed_out), (28, 0, 4), "one segment popped, all handed out");
    assert_eq!(m.shared.depot.count_quiescent(&links, 100), 28);
    let five = m.acquire_between(&links, 5, 8).unwrap();
    assert_eq!((five.first, five.last, five.len), (4, 11, 8), "two whole segments make five");
    m.release(&links, one);
    assert_eq!(m.counts().in_magazines, 4);
    let six = m.acquire_between(&links, 6, 8).unwrap();
    assert_eq!((six.first, six.last, six.len), (0, 15, 8), "the magazine's 4, topped up with a segment");
    assert_eq!((m.counts().in_magazines, m.shared.depot.count_quiescent(&links, 100)), (0, 16));
    m.release(&links, five);
    m.release(&links, six);
    assert_eq!(m.count_quiescent(&links, 100), 32, "the topped-up chain is linked whole, in segments");
}

#[test]
fn a_segment_is_cut_only_to_make_the_least_asked_for_and_its_rest_stays_a_segment() {
    let (links, m) = stocked_in(16, 4, 8);
    let three = m.acquire_between(&links, 3, 3).unwrap();
    assert_eq!((three.first, three.last, three.len), (0, 2, 3), "cut: a whole segment is above the most");
    assert_eq!(count_segmented(&links, three.first, 3), 3);
    assert_eq!(m.counts().in_magazines, 1, "the rest of the segment stays in the magazine");
    let more = m.acquire_between(&links, 2, 6).unwrap();
    assert_eq!(
        (more.first, more.last, more.len),
        (3, 7, 5),
        "the cut segment's rest, then a whole one that fits"
    );
    assert_eq!(count_segmented(&links, more.first, 5), 5);
    m.release(&links, more);
    m.release(&links, three);
    assert_eq!(m.count_quiescent(&links, 100), 16);
}

#[test]
fn releases_fill_the_magazine_and_spill_its_old_contents_past_the_size() {
    let (links, m) = stocked(32, 4);
    let a = m.acquire(&links, 3).unwrap();
    let b = m.acquire(&links, 3).unwrap();
    assert_eq!(m.counts().in_magazines, 0);
    m.release(&links, a);
    assert_eq!(m.counts().in_magazines, 3);
    m.release(&links, b);
    let c = m.counts();
    assert_eq!((c.in_magazines, c.free, c.handed_out), (3, 32, 0), "the old 3 spilled, b kept");
    assert_eq!(m.count_quiescent(&links, 100), 32);
    let again = m.acquire(&links, 3).unwrap();
    assert_eq!(again, b, "the magazine hands back what it holds first");
}

#[test]
fn a_chain_longer_than_a_magazine_goes_to_the_depot() {
    let (links, m) = stocked(32, 4);
    let big = m.acquire(&links, 10).unwrap();
    assert_eq!(big.len, 10);
    m.release(&links, big);
    assert_eq!(m.counts().in_magazines, 0);
    assert_eq!(m.shared.depot.count_quiescent(&links, 100), 32);
}

#[test]
fn a_starved_pool_bypasses_magazines_until_a_slot_comes_back_to_a_nonempty_depot() {
    let (links, m) = stocked(4, 4);
    let a = m.acquire(&links, 1).unwrap();
    let b = m.acquire(&links, 2).unwrap();
    let c = m.acquire(&links, 2).unwrap();
    assert_eq!((a.len, b.len, c.len), (1, 2, 1), "b topped up from the depot, c got the last");
    assert!(m.acquire(&links, 1).is_none());
    m.release(&links, b);
    assert_eq!(m.counts().in_magazines, 2);
    m.starve();
    let x = m.acquire(&links, 1).unwrap();
    assert_eq!(m.counts().in_magazines, 0, "the magazine went to the depot first");
    let y = m.acquire(&links, 1).unwrap();
    m.release(&links, a);
    assert_eq!(m.counts().in_magazines, 0, "a starved pool's releases go to the depot");
    assert!(m.is_starved(), "the depot was empty when the slot came back");
    m.release(&links, c);
    assert!(!m.is_starved(), "slots came back while the depot had one");
    m.release(&links, x);
    m.release(&links, y);
    assert_eq!(m.counts().in_magazines, 2);
    assert_eq!(m.count_quiescent(&links, 10), 4);
}

#[test]
fn an_exiting_thread_returns_its_magazine_and_the_next_thread_reuses_the_record() {
    let (links, m) = stocked(16, 8);
    // An explicit join waits for the thread-local destructors; the scope's end may not.
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            let chain = m.acquire(&links, 1).unwrap();
            m.release(&links, chain);
        });
        thread.join().unwrap();
    });
    let c = m.counts();
    assert_eq!((c.free, c.in_magazines, c.magazines), (16, 1, 1), "kept with the pool, as free");
    assert_eq!(m.count_quiescent(&links, 100), 16);
    assert_eq!(m.shared.depot.count_quiescent(&links, 100), 15);
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            let all = m.acquire(&links, 16).unwrap();
            assert_eq!(all.len, 16, "the depot's 15, topped up with the exited thread's one");
            assert!(m.acquire(&links, 1).is_none());
            m.release(&links, all);
        });
        thread.join().unwrap();
    });
    let c = m.counts();
    assert_eq!((c.free, c.magazines, c.handed_out), (16, 1, 0), "one record, reused");
    assert_eq!(m.count_quiescent(&links, 100), 16);
}

/// `acquire(links, 0)` takes nothing, in every build: before, release builds handed out an
/// empty chain and left the magazine claiming a slot it had given away (so that slot was
/// later handed out twice, and another lost).
#[test]
fn acquiring_zero_slots_takes_nothing_and_leaves_the_magazine_whole() {
    let (links, m) = stocked(16, 8);
    let one = m.acquire(&links, 1).unwrap();
    let zero = m.acquire(&links, 0);
    let mut held = vec![one];
    // At most one more than there are: a magazine that hands slots out for ever (broken
    // links) fails the count below, not the memory.
    while let Some(chain) = m.acquire(&links, 1).filter(|_| held.len() <= 16) {
        held.push(chain);
    }
    let mut seen: Vec<u32> = held.iter().map(|chain| chain.first).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 16, "every slot handed out exactly once: {held:?}");
    assert_eq!(zero, None, "zero slots asked for, none taken");
    for chain in held {
        m.release(&links, chain);
    }
    assert_eq!((m.counts().free, m.count_quiescent(&links, 100)), (16, 16));
}

/// Any mix of acquires and releases, of one slot or many, through the common path and the
/// refills, top-ups and spills behind it: after each step the counts match what the test
/// holds, no magazine holds more than its size, and every slot is either held by the test or
/// walks as free, once.
#[test]
fn any_mix_of_acquires_and_releases_keeps_the_counts_exact_and_each_slot_in_one_place() {
    const SLOTS: u32 = 64;
    let (links, m) = stocked_in(SLOTS, 3, 8);
    let mut held: Vec<Chain> = Vec::new();
    // A fixed pseudo-random sequence (xorshift), so that a failure reproduces.
    let mut state = 0x2545_f491_u32;
    let mut next = move |below: u32| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state % below
    };
    let steps = if cfg!(miri) { 300 } else { 20_000 };
    for _ in 0..steps {
        if held.is_empty() || next(2) == 0 {
            // Mostly single slots, as the common path serves them; sometimes a list's batch.
            let n = if next(4) == 0 { 1 + next(20) } else { 1 };
            let free = m.counts().free as u32;
            if let Some(chain) = m.acquire(&links, n) {
                assert!(chain.len >= n.min(free), "{n} asked, {free} free, {} taken", chain.len);
                assert!(chain.len < n + 3, "whole segments of at most 3 slots: {}", chain.len);
                assert_eq!(count_segmented(&links, chain.first, chain.len as usize), chain.len as usize);
                held.push(chain);
            }
        } else {
            let chain = held.swap_remove(next(held.len() as u32) as usize);
            m.release(&links, chain);
        }
        let out: u32 = held.iter().map(|chain| chain.len).sum();
        let c = m.counts();
        assert_eq!((c.free, c.handed_out), ((SLOTS - out) as usize, out), "{c:?}");
        assert!(c.in_magazines <= 8, "{c:?}");
    }
    let mut seen = vec![false; SLOTS as usize];
    for chain in &held {
        let mut index = chain.first;
        for i in 0..chain.len {
            assert!(!std::mem::replace(&mut seen[index as usize], true), "slot {index} held twice");
            if i + 1 < chain.len {
                index = links.link(index).load(Ordering::Relaxed);
            }
        }
        assert_eq!(index, chain.last);
    }
    let out = seen.iter().filter(|&&s| s).count();
    assert_eq!(m.count_quiescent(&links, 1000), SLOTS as usize - out);
    for chain in held {
        m.release(&links, chain);
    }
    assert_eq!((m.counts().free, m.count_quiescent(&links, 1000)), (SLOTS as usize, SLOTS as usize));
}

/// A thread-local's destructor may release slots after this thread's magazines were handed
/// back: the chain then goes to the depot and is counted there, never lost.
#[test]
fn a_release_from_a_thread_local_destructor_after_the_magazines_are_gone_is_never_lost() {
    /// The slots' links and their magazines.
    type Pool = Arc<(LinkTable, Magazines)>;
    struct ReleaseAtExit(RefCell<Option<(Pool, Chain)>>);
    impl Drop for ReleaseAtExit {
        fn drop(&mut self) {
            if let Some((shared, chain)) = self.0.take() {
                shared.1.release(&shared.0, chain);
            }
        }
    }
    thread_local! {
        static PENDING: ReleaseAtExit = const { ReleaseAtExit(RefCell::new(None)) };
    }
    let shared = Arc::new(stocked(16, 8));
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            // Registered before this thread's magazines: destructors run in the reverse order
            // (std on Linux; the order is unspecified, and the other one must lose nothing
            // either), so this one releases after the magazines were handed back.
            PENDING.with(|_| {});
            let chain = shared.1.acquire(&shared.0, 1).unwrap();
            PENDING.with(|pending| *pending.0.borrow_mut() = Some((Arc::clone(&shared), chain)));
        });
        thread.join().unwrap();
    });
    let (links, m) = &*shared;
    let c = m.counts();
    assert_eq!((c.free, c.handed_out, c.claimed), (16, 0, 0), "{c:?}");
    assert_eq!(m.count_quiescent(links, 100), 16);
}

/// A popped segment that leaves exactly a magazine's size behind stays in the magazine; only
/// more than that goes back to the depot.
#[test]
fn a_refill_that_leaves_exactly_the_magazine_size_keeps_it_all() {
    let (links, m) = stocked_in(10, 5, 4);
    let one = m.acquire(&links, 1).unwrap();
    assert_eq!((one.first, one.len), (0, 1));
    let c = m.counts();
    assert_eq!((c.free, c.in_magazines), (9, 4), "the segment's other four stay in the magazine");
    m.release(&links, one);
}

/// A released chain exactly a magazine's size long becomes the magazine (its old contents go
/// to the depot); only a longer one goes to the depot whole.
#[test]
fn a_released_chain_of_exactly_the_magazine_size_becomes_the_magazine() {
    let (links, m) = stocked(8, 4);
    let one = m.acquire(&links, 1).unwrap();
    let four = m.acquire(&links, 4).unwrap();
    m.release(&links, one);
    assert_eq!(m.counts().in_magazines, 1);
    m.release(&links, four);
    let c = m.counts();
    assert_eq!((c.free, c.in_magazines), (8, 4), "the four are the magazine now, the one on the depot");
}

/// A pool that is dropped is forgotten by every thread that used it the next time that
/// thread meets another pool: its shared part is not kept alive by their entries.
#[test]
fn a_thread_forgets_a_dropped_pool_when_it_meets_another() {
    let (links, m) = stocked(4, 2);
    let one = m.acquire(&links, 1).unwrap();
    m.release(&links, one);
    let shared = Arc::clone(&m.shared);
    assert_eq!(Arc::strong_count(&shared), 3, "the pool's, this thread's entry and this test's");
    drop(m);
    let (other_links, other) = stocked(4, 2);
    let one = other.acquire(&other_links, 1).unwrap();
    other.release(&other_links, one);
    assert_eq!(Arc::strong_count(&shared), 1, "this thread's entry for the dropped pool is gone");
}

/// A starved pool hands out slots straight from the depot: what a popped segment had beyond
/// the request goes back onto the depot as a segment of its own, none lost.
#[test]
fn a_starved_take_of_part_of_a_segment_leaves_the_rest_on_the_depot() {
    let (links, m) = stocked_in(4, 4, 8);
    m.starve();
    let one = m.acquire(&links, 1).unwrap();
    assert_eq!((one.first, one.len), (0, 1));
    assert_eq!((m.counts().free, m.count_quiescent(&links, 100)), (3, 3), "the other three, one segment");
    let three = m.acquire(&links, 3).unwrap();
    assert_eq!((three.first, three.last, three.len), (1, 3, 3));
    m.release(&links, one);
    m.release(&links, three);
}

/// A magazine left by an exited thread is claimed by one thread at a time: two threads alive
/// at once after it hold two magazines, never the same one.
#[test]
fn two_threads_alive_at_once_never_share_a_magazine_left_by_an_exited_one() {
    let (links, m) = stocked(16, 4);
    on_a_thread_that_exits(|| {
        let one = m.acquire(&links, 1).unwrap();
        m.release(&links, one);
    });
    assert_eq!(m.counts().magazines, 1);
    let both_hold = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let one = m.acquire(&links, 1).unwrap();
                both_hold.wait();
                m.release(&links, one);
            });
        }
    });
    assert_eq!(m.counts().magazines, 2, "the exited thread's magazine, and one more");
}

/// The slots in an exiting thread's magazine are handed back with the pool: a thread that
/// already has a magazine of its own (so it will not claim the exited thread's) still gets
/// them once the depot is empty.
#[test]
fn slots_left_in_an_exiting_threads_magazine_reach_a_thread_with_its_own() {
    let (links, m) = stocked(4, 4);
    let mine = m.acquire(&links, 1).unwrap();
    on_a_thread_that_exits(|| {
        let three = m.acquire(&links, 3).unwrap();
        m.release(&links, three);
    });
    let three = m.acquire(&links, 3).expect("the exited thread's three");
    assert_eq!(three.len, 3);
    assert_eq!(m.counts().magazines, 2);
    m.release(&links, three);
    m.release(&links, mine);
}
