#![cfg(gpu_event_pool_loom)]
//! Loom models of the freelist (`TaggedFreeList`): the ABA interleaving, whole-chain pushes
//! and pops racing single ones, and a pop racing a thread that re-cuts the segments it pops
//! and pushes them back.
//!
//! Each slot has an atomic link and segment word (the freelist's) and a payload in a loom
//! `UnsafeCell`: a thread writes the payload of every slot it pops and reads what the
//! previous owner wrote, so loom also checks that a push's Release and a pop's Acquire order
//! the slot's contents.
//!
//! `blind_freelist_*` is the negative control: the same ABA model on a freelist with no tag
//! must fail, or the suite could not tell a correct freelist from a broken one.

mod common;

use gpu_event_pool::testing::freelist::{Chain, Links, Segment, TaggedFreeList, NIL};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Four slots A, B, C, D: the freelist's links and segment words, and each slot's payload.
struct Slots {
    links: [AtomicU32; 4],
    segments: [AtomicU64; 4],
    /// The last owner's mark, written only by the slot's owner.
    payload: [UnsafeCell<u32>; 4],
}

const A: u32 = 0;
const B: u32 = 1;
const C: u32 = 2;
const D: u32 = 3;

impl Links for Slots {
    fn link(&self, index: u32) -> &AtomicU32 {
        &self.links[index as usize]
    }

    fn segment(&self, index: u32) -> &AtomicU64 {
        &self.segments[index as usize]
    }
}

impl Slots {
    fn new() -> Self {
        Self {
            links: std::array::from_fn(|_| AtomicU32::new(NIL)),
            segments: std::array::from_fn(|_| AtomicU64::new(0)),
            payload: std::array::from_fn(|_| UnsafeCell::new(0)),
        }
    }

    /// Takes ownership of a popped slot: reads the previous owner's mark, writes ours. A
    /// slot handed out without a happens-before edge from its last push is a data race here.
    fn own(&self, index: u32, mark: u32) -> u32 {
        let cell = &self.payload[index as usize];
        // Safety: the freelist gave this thread the slot, so no other thread may touch its
        // payload until the slot is pushed back (which is exactly what loom checks).
        let previous = cell.with(|p| unsafe { *p });
        // Safety: as above.
        cell.with_mut(|p| unsafe { *p = mark });
        previous
    }
}

/// Pops one segment; its first slot.
fn pop<const TAG_BITS: u32>(list: &TaggedFreeList<TAG_BITS>, slots: &Slots) -> Option<u32> {
    list.pop_chain(slots, 1).map(|chain| chain.first)
}

/// A freelist holding `stack` (top first, a segment of one slot each) over fresh slots,
/// shared with the model's threads.
fn stack_of<const TAG_BITS: u32>(stack: &[u32]) -> Arc<(TaggedFreeList<TAG_BITS>, Slots)> {
    let shared = Arc::new((TaggedFreeList::<TAG_BITS>::new(), Slots::new()));
    for &index in stack.iter().rev() {
        shared.0.push(&shared.1, index);
    }
    shared
}

/// Pops everything left, top first, slot by slot.
fn drain<const TAG_BITS: u32>(list: &TaggedFreeList<TAG_BITS>, slots: &Slots) -> Vec<u32> {
    let chains = std::iter::from_fn(|| list.pop_chain(slots, 1)).take(8);
    chains
        .flat_map(|chain| {
            let mut slot = chain.first;
            let mut seen = vec![slot];
            while slot != chain.last && seen.len() < 8 {
                slot = slots.links[slot as usize].load(Ordering::Relaxed);
                seen.push(slot);
            }
            seen
        })
        .collect()
}

/// Every slot in `expected` is held by exactly one owner or on the freelist exactly once.
fn assert_each_slot_once(mut seen: Vec<u32>, expected: &[u32]) {
    seen.sort_unstable();
    assert_eq!(seen, expected, "a slot was lost or handed out twice");
}

/// The classic ABA race. The stack is A -> B -> C. Popper 1 pops one slot; popper 2 pops
/// two and, acting as the pusher, gives back the first. If popper 1 reads A and its link B,
/// then is preempted while popper 2 pops A, pops B and pushes A, the head is A again (over
/// C): without a tag popper 1's CAS succeeds and installs B, which popper 2 still owns.
fn aba_model<const TAG_BITS: u32>() {
    let shared = stack_of::<TAG_BITS>(&[A, B, C]);
    let popper = {
        let shared = shared.clone();
        thread::spawn(move || {
            let (list, slots) = &*shared;
            let x = pop(list, slots).expect("three slots, at most three pops");
            slots.own(x, 1);
            x
        })
    };
    let pusher = {
        let shared = shared.clone();
        thread::spawn(move || {
            let (list, slots) = &*shared;
            let a = pop(list, slots).expect("three slots, at most three pops");
            let b = pop(list, slots).expect("three slots, at most three pops");
            slots.own(a, 2);
            slots.own(b, 2);
            list.push(slots, a);
            b
        })
    };
    let x = popper.join().unwrap();
    let b = pusher.join().unwrap();
    let (list, slots) = &*shared;
    let mut seen = drain(list, slots);
    seen.extend([x, b]);
    assert_each_slot_once(seen, &[A, B, C]);
}

/// The crate's `FreeList` is `TaggedFreeList<40>`.
#[test]
fn tagged_freelist_survives_the_aba_interleaving() {
    common::exhaustive(aba_model::<40>);
}

/// The negative control: with no tag, loom must find the ABA interleaving above.
#[test]
#[should_panic(expected = "a slot was lost or handed out twice")]
fn blind_freelist_loses_slots_to_the_aba_interleaving() {
    common::model(aba_model::<0>);
}

/// `push_chain` of the segment A -> B against a pop of one segment, on a stack holding C. The
/// popper gets C (before the push) or A (after it: the whole segment, never B alone), and
/// what is left is the rest in order.
#[test]
fn push_chain_against_pop_keeps_the_chain_whole() {
    common::exhaustive(|| {
        let shared = stack_of::<40>(&[C]);
        let pusher = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (list, slots) = &*shared;
                slots.own(A, 1);
                slots.own(B, 1);
                slots.links[A as usize].store(B, Ordering::Relaxed);
                list.push_chain(slots, Chain { first: A, last: B, len: 2 }.into_segment(slots));
            })
        };
        let popper = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (list, slots) = &*shared;
                let x = pop(list, slots).expect("C is there from the start");
                let previous = slots.own(x, 2);
                (x, previous)
            })
        };
        pusher.join().unwrap();
        let (x, previous) = popper.join().unwrap();
        let (list, slots) = &*shared;
        let rest = drain(list, slots);
        match x {
            C => assert_eq!((previous, rest), (0, vec![A, B])),
            A => assert_eq!((previous, rest), (1, vec![C]), "popped A -> B: saw the pusher's mark"),
            other => panic!("popped {other}: only C or the segment's first slot can be on top"),
        }
    });
}

/// `pop_chain(2)` against `push(D)`, on a stack A -> B -> C. The chain is two distinct slots
/// linked first to last, and every slot ends up exactly once: held or on the stack.
#[test]
fn pop_chain_against_push_takes_a_linked_chain() {
    common::exhaustive(|| {
        let shared = stack_of::<40>(&[A, B, C]);
        let pusher = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (list, slots) = &*shared;
                slots.own(D, 1);
                list.push(slots, D);
            })
        };
        let popper = {
            let shared = shared.clone();
            thread::spawn(move || {
                let (list, slots) = &*shared;
                let chain = list.pop_chain(slots, 2).expect("three slots there from the start");
                assert_eq!(chain.len, 2);
                assert_eq!(slots.links[chain.first as usize].load(Ordering::Relaxed), chain.last);
                let marks = [slots.own(chain.first, 2), slots.own(chain.last, 2)];
                (chain, marks)
            })
        };
        pusher.join().unwrap();
        let (chain, marks) = popper.join().unwrap();
        let (list, slots) = &*shared;
        match (chain.first, chain.last) {
            (A, B) => assert_eq!(marks, [0, 0]),
            (D, A) => assert_eq!(marks, [1, 0], "popped D: saw the pusher's mark"),
            other => panic!("popped chain {other:?}: only A -> B or D -> A can be on top"),
        }
        let mut seen = drain(list, slots);
        seen.extend([chain.first, chain.last]);
        assert_each_slot_once(seen, &[A, B, C, D]);
    });
}

/// A pop of one segment against a thread that pops the segment A -> B, cuts it into A and B
/// (rewriting both words, as a magazine cutting a batch does), keeps B and pushes A back, on
/// the stack [A -> B] [C]. A popper that read A's old word (A -> B, 2 slots) and B's link (C)
/// before the cut finds A on top again; it must not take A -> B, B being the cutter's: the
/// tag makes its CAS fail. Every slot ends up exactly once: held or on the stack.
fn re_cut_model<const TAG_BITS: u32>() {
    let shared = Arc::new((TaggedFreeList::<TAG_BITS>::new(), Slots::new()));
    {
        let (list, slots) = &*shared;
        list.push(slots, C);
        slots.links[A as usize].store(B, Ordering::Relaxed);
        list.push_chain(slots, Chain { first: A, last: B, len: 2 }.into_segment(slots));
    }
    let cutter = {
        let shared = shared.clone();
        thread::spawn(move || {
            let (list, slots) = &*shared;
            let chain = list.pop_chain(slots, 1).expect("two segments, two pops");
            slots.own(chain.first, 1);
            if chain.len == 1 {
                list.push_chain(slots, chain);
                return Vec::new();
            }
            slots.own(chain.last, 1);
            Segment { last: A, len: 1 }.write(slots, A);
            Segment { last: B, len: 1 }.write(slots, B);
            list.push(slots, A);
            vec![B]
        })
    };
    let popper = {
        let shared = shared.clone();
        thread::spawn(move || {
            let (list, slots) = &*shared;
            let chain = list.pop_chain(slots, 1).expect("two segments, two pops");
            slots.own(chain.first, 2);
            let mut held = vec![chain.first];
            if chain.len == 2 {
                slots.own(chain.last, 2);
                held.push(chain.last);
            }
            held
        })
    };
    let mut seen = cutter.join().unwrap();
    seen.extend(popper.join().unwrap());
    let (list, slots) = &*shared;
    seen.extend(drain(list, slots));
    assert_each_slot_once(seen, &[A, B, C]);
}

#[test]
fn a_pop_racing_a_re_cut_of_its_segment_takes_whole_segments_only() {
    common::exhaustive(re_cut_model::<40>);
}

/// The negative control: with no tag, loom must find the popper taking A -> B after the cut.
#[test]
#[should_panic(expected = "a slot was lost or handed out twice")]
fn blind_freelist_hands_out_a_re_cut_slot_twice() {
    common::model(re_cut_model::<0>);
}
