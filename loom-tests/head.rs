//! Loom models of the list hand-offs of `slots/head.rs` on their own: a batch of lists
//! (`HeadBatch`) cut into pieces and claimed by the collector that took the lists and by one
//! that finds the batch published, every list's head record and launch cell touched by one
//! owner at a time (`ListHead`, `OwnedSlot`), and the claimed lists pushed back on one queue
//! by both collectors at once (`ListStack`).
//!
//! Built into the crate's own tests (`slots::loom_head`), not as a test target of its own:
//! the handles can be made only inside slots/ (holding one is owning the list), which is the
//! invariant these models check. Empty unless built with `--cfg gpu_event_pool_loom`:
//!
//! ```sh
//! RUSTFLAGS="--cfg gpu_event_pool_loom" cargo test --release --lib loom_head
//! ```
//!
//! The collectors publish the batch as `ReadShare` does (collect/events/read.rs): under a mutex,
//! with a count read Relaxed to skip the lock when nothing is published. The negative
//! control publishes it with a Relaxed store and no lock: loom must then report a causality
//! violation (the first access with no edge from the taker: the batch's claim counter, then
//! the head records).

#[path = "common/mod.rs"]
#[allow(unreachable_pub, reason = "the loom runners are shared with the loom-tests targets")]
mod common;

use super::head::{HeadBatch, ListHead, Piece};
use super::pool::Pool;
use super::runs::Runs;
use super::submit::{ListStack, SubmissionQueue};
use crate::launch::Launch;
use crate::sync::{lock, Arc, AtomicPtr, AtomicUsize, Mutex, Ordering};
use loom::thread;
use std::sync::atomic::AtomicBool;

/// A list's head record, as the models' owners write it: its group (a lane) and order (its
/// place), and how many collectors read it.
#[derive(Debug, Default)]
struct Record {
    group: u32,
    order: u64,
    reads: u32,
}

type Slots = Pool<(), Record>;

/// Lists per piece: the first group's two lists make one piece, the second group's one list
/// another.
const PIECE_LISTS: usize = 2;

/// The lists, as (group, order): submitted in this order.
const LISTS: [(u32, u64); 3] = [(0, 0), (0, 1), (1, 0)];

/// The launch a list's recorder writes into its slot: its slot and group, so that a collector
/// reading another slot's launch, or none, sees a different one.
fn launch_of(slot: u32, group: u32) -> Launch {
    Launch::new(i64::from(slot) + 1, i64::from(slot) + 2, u64::from(group) + 1)
}

/// A pool of one slot per list, each list recorded and submitted as a list is: its slot taken
/// from its owner's runs (`OwnedSlot`, through which the launch is written), its head record
/// written through the `ListHead` the runs hand on, and the head pushed on `queue`. On a
/// thread of its own, waited for until its magazine is back: no loom object stays in the
/// model thread's thread-locals, where a failing execution (the negative control) would drop
/// it outside the model.
fn submitted_lists() -> Arc<(Slots, SubmissionQueue)> {
    let lists =
        Arc::new((Slots::new(4, 4, 1, || Ok(())).expect("a pool of 4 slots"), SubmissionQueue::new()));
    let recorder = {
        let lists = Arc::clone(&lists);
        thread::spawn(move || {
            let (pool, queue) = &*lists;
            let mut runs = Runs::EMPTY;
            runs.append(pool, pool.acquire(3, 3, || Ok(())).expect("3 free slots"));
            for (group, order) in LISTS {
                let (slot, owned) = runs.take(pool);
                owned.set_launch(launch_of(slot, group));
                runs.commit(pool, slot, 1);
                let (used, spare) = runs.take_chains(pool);
                let (mut head, _) = used.expect("one slot recorded");
                head.write(pool, |r| *r = Record { group, order, reads: 0 });
                queue.push(pool, head);
                if let Some(spare) = spare {
                    runs.append(pool, spare);
                }
            }
        })
    };
    recorder.join().unwrap();
    while lists.0.counts().threads_with_magazines > 0 {
        thread::yield_now();
    }
    lists
}

/// How the collector that took the lists shows its batch to the others.
#[derive(Debug)]
enum Share {
    /// As `ReadShare`: a `Vec` behind a mutex, and its length, read Relaxed to skip the lock.
    Locked { batches: Mutex<Vec<Arc<HeadBatch>>>, published: AtomicUsize },
    /// The negative control: a pointer stored and loaded Relaxed, no lock (the batch is
    /// leaked by the taker and reclaimed after both threads joined).
    Unsynchronized(AtomicPtr<HeadBatch>),
}

impl Share {
    fn publish(&self, batch: &Arc<HeadBatch>) {
        match self {
            Share::Locked { batches, published } => {
                let mut batches = lock(batches);
                batches.push(Arc::clone(batch));
                published.store(batches.len(), Ordering::Relaxed);
            }
            Share::Unsynchronized(at) => {
                at.store(Arc::into_raw(Arc::clone(batch)).cast_mut(), Ordering::Relaxed);
            }
        }
    }

    fn retire(&self, batch: &Arc<HeadBatch>) {
        if let Share::Locked { batches, published } = self {
            let mut batches = lock(batches);
            batches.retain(|b| !Arc::ptr_eq(b, batch));
            published.store(batches.len(), Ordering::Relaxed);
        }
    }

    /// The batches published now.
    fn published(&self) -> Vec<Arc<HeadBatch>> {
        match self {
            Share::Locked { batches, published } => {
                if published.load(Ordering::Relaxed) == 0 {
                    return Vec::new();
                }
                lock(batches).clone()
            }
            Share::Unsynchronized(at) => {
                let batch = at.load(Ordering::Relaxed);
                if batch.is_null() {
                    return Vec::new();
                }
                // Safety: `publish` stored a pointer from `Arc::into_raw` whose count it kept
                // (one strong reference, dropped by `reclaim` after both threads joined).
                unsafe {
                    Arc::increment_strong_count(batch);
                    vec![Arc::from_raw(batch)]
                }
            }
        }
    }

    /// Drops the reference `publish` leaked for the negative control.
    fn reclaim(&self) {
        if let Share::Unsynchronized(at) = self {
            let batch = at.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !batch.is_null() {
                // Safety: as in `published`: the reference `publish` kept, dropped once.
                drop(unsafe { Arc::from_raw(batch) });
            }
        }
    }
}

/// What a collector does with a piece it claimed (read.rs, `Reader::read_piece`): reads each
/// list's head record and launch, counts its read in the record, and pushes the piece's lists
/// on `read` in one push. How many lists it read.
fn read_piece(pool: &Slots, read: &SubmissionQueue, piece: Piece<'_>) -> usize {
    let group = piece.group();
    let mut lists = ListStack::default();
    let mut last = None;
    for mut head in piece {
        let (own_group, order) = head.read(pool, |r| (r.group, r.order));
        assert_eq!(Some(own_group), group, "a piece holds lists of one group");
        assert!(last < Some(order), "a piece holds its lists in order");
        last = Some(order);
        assert_eq!(head.launch(pool, head.first()), launch_of(head.first(), own_group), "the launch written");
        head.write(pool, |r| r.reads += 1);
        lists.add(pool, head);
    }
    let n = lists.len();
    lists.push_onto(read, pool);
    n
}

/// Claims and reads pieces of `batch` until none is left.
fn read_batch(pool: &Slots, read: &SubmissionQueue, batch: &HeadBatch) -> usize {
    let mut n = 0;
    while let Some(piece) = batch.claim() {
        n += read_piece(pool, read, piece);
    }
    n
}

/// The collector that takes the lists (read.rs, `read_phase`): takes the queue, keys the lists
/// by their head records, cuts them into a batch, publishes it, claims pieces until none is
/// left, retires it. How many lists it read.
fn take_and_share(pool: &Slots, queue: &SubmissionQueue, read: &SubmissionQueue, share: &Share) -> usize {
    let mut taken = Vec::new();
    queue.take_all(pool, &mut taken);
    let mut keyed: Vec<(u32, u64, ListHead)> = taken
        .into_iter()
        .map(|head| {
            let (group, order) = head.read(pool, |r| (r.group, r.order));
            (group, order, head)
        })
        .collect();
    keyed.sort_unstable();
    let batch = Arc::new(HeadBatch::new(keyed, PIECE_LISTS));
    assert_eq!(batch.pieces(), 2, "one piece per group of at most {PIECE_LISTS} lists");
    share.publish(&batch);
    let n = read_batch(pool, read, &batch);
    share.retire(&batch);
    n
}

/// A collector entering its read phase meanwhile: claims pieces of whatever is published.
fn help(pool: &Slots, read: &SubmissionQueue, share: &Share) -> usize {
    share.published().iter().map(|batch| read_batch(pool, read, batch)).sum()
}

/// One execution: the taker and the helper race over the three lists; then every list is on
/// `read` exactly once, read once, and the two counts add up. Whether the helper read any.
fn race(share: Share) -> bool {
    let lists = submitted_lists();
    let shared = Arc::new((lists, SubmissionQueue::new(), share));
    let taker = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || {
            let ((pool, queue), read, share) = (&*shared.0, &shared.1, &shared.2);
            take_and_share(pool, queue, read, share)
        })
    };
    let helper = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || {
            let (pool, read, share) = (&shared.0 .0, &shared.1, &shared.2);
            help(pool, read, share)
        })
    };
    let (taken, helped) = (taker.join().unwrap(), helper.join().unwrap());
    let (pool, read, share) = (&shared.0 .0, &shared.1, &shared.2);
    share.reclaim();
    assert_eq!(taken + helped, LISTS.len(), "every list read once");
    let mut back = Vec::new();
    read.take_all(pool, &mut back);
    let mut firsts: Vec<u32> = back.iter().map(ListHead::first).collect();
    firsts.sort_unstable();
    firsts.dedup();
    assert_eq!(firsts.len(), LISTS.len(), "every list on `read` once: {back:?}");
    for head in &back {
        assert_eq!(head.read(pool, |r| r.reads), 1, "list {} read once", head.first());
    }
    helped > 0
}

#[test]
fn a_batch_shared_by_two_collectors_hands_each_list_to_one_reader() {
    static HELPED: AtomicBool = AtomicBool::new(false);
    static ALONE: AtomicBool = AtomicBool::new(false);
    common::model(|| {
        let share = Share::Locked { batches: Mutex::new(Vec::new()), published: AtomicUsize::new(0) };
        let flag = if race(share) { &HELPED } else { &ALONE };
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(
        HELPED.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving let the helper claim a piece"
    );
    assert!(ALONE.load(std::sync::atomic::Ordering::Relaxed), "no interleaving left the taker alone");
}

/// The negative control: the batch handed to the helper with a Relaxed store and load. Loom
/// reports the first access the helper makes without a happens-before edge from the taker
/// (the batch's claim counter, made by the taker, then the head records the taker read).
#[test]
#[should_panic(expected = "Causality violation")]
fn a_batch_published_without_the_lock_is_a_race() {
    common::model(|| {
        race(Share::Unsynchronized(AtomicPtr::new(std::ptr::null_mut())));
    });
}
