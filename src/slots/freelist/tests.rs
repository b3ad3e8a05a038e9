//! Unit tests of the freelist (one thread but for the stress test; the loom models cover the
//! concurrent paths).

use super::*;

fn links(n: u32) -> LinkTable {
    LinkTable::new(n)
}

/// Pops one segment at a time: the first slot of each.
fn pop(f: &FreeList, l: &LinkTable) -> Option<u32> {
    f.pop_chain(l, 1).map(|chain| chain.first)
}

/// Links `first..first + len` in index order and makes them one segment.
fn run(l: &LinkTable, first: u32, len: u32) -> Chain {
    (first..first + len - 1).for_each(|i| l.link(i).store(i + 1, Ordering::Relaxed));
    Chain { first, last: first + len - 1, len }.into_segment(l)
}

#[test]
fn pop_returns_pushed_slots_last_in_first_out() {
    let l = links(3);
    let f = FreeList::new();
    assert_eq!(pop(&f, &l), None);
    f.push(&l, 0);
    f.push(&l, 2);
    assert_eq!(pop(&f, &l), Some(2));
    assert_eq!(pop(&f, &l), Some(0));
    assert_eq!(pop(&f, &l), None);
}

#[test]
fn pop_chain_takes_whole_segments_until_it_has_n_in_stack_order() {
    let l = links(9);
    let f = FreeList::new();
    for (first, len) in [(0, 2), (2, 3), (5, 1), (6, 3)] {
        f.push_chain(&l, run(&l, first, len));
    }
    // The stack: [6 7 8] [5] [2 3 4] [0 1].
    let c = f.pop_chain(&l, 2).unwrap();
    assert_eq!((c.first, c.last, c.len), (6, 8, 3), "one segment is enough: it is not cut");
    let c = f.pop_chain(&l, 2).unwrap();
    assert_eq!((c.first, c.last, c.len), (5, 4, 4), "a second segment makes up the rest");
    assert_eq!(l.link(5).load(Ordering::Relaxed), 2, "linked in stack order");
    let c = f.pop_chain(&l, 10).unwrap();
    assert_eq!((c.first, c.last, c.len), (0, 1, 2), "what is left");
    assert!(f.pop_chain(&l, 1).is_none());
}

/// A segment that makes exactly `n` ends the walk, though more segments would fit the
/// bound on segments.
#[test]
fn pop_chain_stops_at_a_segment_that_makes_exactly_n() {
    let l = links(4);
    let f = FreeList::new();
    f.push(&l, 3);
    f.push(&l, 2);
    f.push_chain(&l, run(&l, 0, 2));
    // The stack: [0 1] [2] [3].
    let c = f.pop_chain(&l, 2).unwrap();
    assert_eq!((c.first, c.last, c.len), (0, 1, 2));
    let c = f.pop_chain(&l, 3).unwrap();
    assert_eq!((c.first, c.last, c.len), (2, 3, 2), "what is left, two segments of one");
}

/// A cut that takes the whole chain has no rest, wherever its last slot's link points
/// (not part of the chain); one that takes less hands on the slot after what it took.
#[test]
fn cut_front_of_a_whole_chain_leaves_no_rest_whatever_its_last_link_holds() {
    let l = links(6);
    let chain = run(&l, 0, 3);
    l.link(2).store(5, Ordering::Relaxed);
    assert_eq!(cut_front(&l, chain.first, chain.len, 3, 3), (Chain { first: 0, last: 2, len: 3 }, NIL));
    let chain = run(&l, 0, 3);
    assert_eq!(cut_front(&l, chain.first, chain.len, 2, 2), (Chain { first: 0, last: 1, len: 2 }, 2));
}

#[test]
fn push_chain_returns_a_whole_chain_in_one_operation() {
    let l = links(4);
    let f = FreeList::new();
    f.push(&l, 3);
    f.push_chain(&l, run(&l, 0, 3));
    assert_eq!(f.count_quiescent(&l, 100), 4);
    assert_eq!(f.pop_chain(&l, 4), Some(Chain { first: 0, last: 3, len: 4 }));
}

#[test]
fn a_segment_whose_word_does_not_match_its_links_ends_the_count() {
    let l = links(6);
    let f = FreeList::new();
    f.push_chain(&l, run(&l, 3, 3));
    f.push_chain(&l, run(&l, 0, 3));
    assert_eq!(f.count_quiescent(&l, 100), 6);
    Segment { last: 1, len: 2 }.write(&l, 0);
    assert_eq!(f.count_quiescent(&l, 100), 2, "[0 1 2] says it is [0 1]: 2 heads no segment");
    Segment { last: 2, len: 3 }.write(&l, 0);
    Segment { last: 5, len: 4 }.write(&l, 3);
    assert_eq!(f.count_quiescent(&l, 100), 3, "[3 4 5] says it has a fourth slot");
    Segment { last: 4, len: 3 }.write(&l, 3);
    assert_eq!(f.count_quiescent(&l, 100), 3, "[3 4 5] says it ends at 4");
}

/// The limit counts slots: a segment that would run past it is not counted, nor is one
/// whose word says it holds no slot; a chain that loops ends at the limit.
#[test]
fn the_count_stops_before_a_segment_past_the_limit_or_of_no_slot() {
    let l = links(6);
    let f = FreeList::new();
    f.push_chain(&l, run(&l, 3, 3));
    f.push_chain(&l, run(&l, 0, 3));
    assert_eq!((f.count_quiescent(&l, 6), f.count_quiescent(&l, 5)), (6, 3));
    assert_eq!((f.count_quiescent(&l, 3), f.count_quiescent(&l, 2)), (3, 0));
    l.segment(3).store(Segment { last: 5, len: 0 }.word(), Ordering::Relaxed);
    assert_eq!(f.count_quiescent(&l, 100), 3, "[3 4 5] says it holds no slot");
    Segment { last: 5, len: 3 }.write(&l, 3);
    l.link(5).store(0, Ordering::Relaxed);
    assert_eq!(f.count_quiescent(&l, 10), 9, "[0 1 2] [3 4 5] [0 1 2] again, and no more: 12 is past 10");
}

#[test]
fn the_tag_counts_on_past_32_bits() {
    let l = links(2);
    let f = FreeList::with_tag((1 << 32) - 2);
    let tag = |f: &FreeList| Head(f.head.load(Ordering::Relaxed)).tag();
    f.push(&l, 0);
    f.push(&l, 1);
    assert_eq!(tag(&f), 1 << 32, "wrapped to {}", tag(&f));
    assert_eq!((pop(&f, &l), pop(&f, &l), pop(&f, &l)), (Some(1), Some(0), None));
    assert_eq!(tag(&f), (1 << 32) + 2);
}

/// A popper read head `(t, A)` and A's link `B` off the stack A -> B -> C, then paused
/// while other threads made 2^32 successful CASes: 2^32 - 3 that each popped A and pushed
/// it back (leaving the stack as it was), then a pop of A, a pop of B and a push of A. The
/// stack is A -> C with the tag 2^32 above `t`: a 32-bit tag would read `(t, A)` again and
/// let the popper install B, which another thread owns. The test builds A -> B -> C with
/// the tag where the first 2^32 - 3 CASes leave it, and forges the word the popper read.
#[test]
fn a_head_read_2_pow_32_cases_ago_is_refused() {
    const A: u32 = 0;
    const B: u32 = 1;
    const C: u32 = 2;
    let l = links(3);
    let t = 7;
    let f = FreeList::with_tag(t + (1 << 32) - 3 - 3);
    for slot in [C, B, A] {
        f.push(&l, slot);
    }
    let seen = Head::new(t, A);
    let next = l.link(A).load(Ordering::Relaxed);
    assert_eq!(next, B);

    assert_eq!((pop(&f, &l), pop(&f, &l)), (Some(A), Some(B)));
    f.push(&l, A);
    assert_eq!(Head(f.head.load(Ordering::Relaxed)).index(), A);

    // A weak CAS may fail spuriously; it then returns the head it expected.
    let refused = f.replace(seen, next, Ordering::Acquire, Ordering::Acquire);
    assert!(matches!(refused, Err(current) if current != seen), "the stale CAS installed B: {refused:?}");
    assert_eq!((pop(&f, &l), pop(&f, &l), pop(&f, &l)), (Some(A), Some(C), None));
}

#[test]
fn the_head_holds_every_index_and_nil() {
    for index in [0, 1, NIL / 2, NIL - 1, NIL] {
        for tag in [0, 1, (1 << 40) - 1] {
            let head = Head::new(tag, index);
            assert_eq!((head.tag(), head.index()), (tag, index));
        }
    }
}

#[test]
#[should_panic(expected = "does not fit the freelist's head")]
fn pushing_a_slot_the_head_cannot_hold_panics() {
    let l = links(1);
    FreeList::new().push(&l, NIL);
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
    // At most one more than there are: a list that loops (broken links) fails, not hangs.
    let mut seen: Vec<u32> = std::iter::from_fn(|| pop(&f, &l)).take(SLOTS as usize + 1).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..SLOTS).collect::<Vec<_>>());
}
