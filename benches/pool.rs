//! `pool`: acquire+release throughput of the crate's free slots against the usual
//! alternatives, at 1, 2, 4, 8 and 16 threads, one slot at a time and in batches of 16 (the
//! way an `EventList` reserves its slots).
//!
//! Every thread hammers one shared pool of 4096 slots: it acquires, then releases, as fast
//! as it can. One operation is one slot acquired and released; in batch mode 16 slots move
//! at once. How each implementation is driven:
//! - `ours`: `Magazines` (the crate's pool: per-thread magazines of up to 128 slots, the size
//!   a default context gets, over the Treiber freelist; the slots deposited in segments of
//!   16, as a context's pages are): `acquire(1)` / `release`, or `acquire(16)` and `release`
//!   of the chain.
//! - `treiber`: the bare Treiber freelist (the crate's pool before magazines), its slots
//!   pushed one by one (segments of one slot): one `pop_chain(1)` and one `push` CAS, or one
//!   `pop_chain(16)` (16 segments) and one `push_chain` CAS.
//! - `std_mutex`, `parking_lot`: a `Vec<u32>` of free indices behind the lock; a batch is 16
//!   pops under one lock and 16 pushes under another.
//! - `array_queue`: `crossbeam_queue::ArrayQueue<u32>` holding the free indices: 16 pops and
//!   16 pushes per batch (it has no batch operation).
//! - `sharded_slab`: `sharded_slab::Slab<u32>`: acquire = `insert` (a slot of the calling
//!   thread's shard), release = `remove(key)`; a batch is 16 of each.
//! - `lockfree_object_pool`: `lockfree_object_pool::LinearObjectPool<u32>`: acquire = `pull`
//!   (a guard), release = dropping the guard; a batch holds 16 guards, then drops them.
//!
//! Criterion reports time per iteration (every thread does one acquire+release of `batch`
//! slots) and throughput in slots per second; the JSON has nanoseconds per slot, all
//! threads together (the inverse of the throughput).

mod common;

use common::results::{Record, Results};
use common::{criterion_estimate_ns, timed_threads, THREADS};
use criterion::{BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use gpu_event_pool::testing::freelist::{Chain, FreeList, LinkTable, Links};
use gpu_event_pool::testing::magazine::Magazines;
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::SystemTime;

const SLOTS: u32 = 4096;
const BATCH: u32 = 16;
/// The magazine size a context with the default maximum (16384 slots) gets.
const MAGAZINE: u32 = 128;

/// A shared set of free slot indices.
trait SlotSet: Sync {
    /// Name in reports.
    const NAME: &'static str;
    /// A set holding slots `0..SLOTS`.
    fn full() -> Self;
    /// Acquires one slot and releases it.
    fn cycle_one(&self);
    /// Acquires `BATCH` slots at once and releases them at once. `scratch` is the thread's
    /// own buffer (the designs without chains need somewhere to hold the indices).
    fn cycle_batch(&self, scratch: &mut Vec<u32>);
}

/// Ours: the crate's per-thread magazines over its Treiber freelist.
struct Ours {
    slots: Magazines,
    links: LinkTable,
}

impl SlotSet for Ours {
    const NAME: &'static str = "ours";
    fn full() -> Self {
        let links = LinkTable::new(SLOTS);
        let slots = Magazines::new(MAGAZINE);
        for first in (0..SLOTS).step_by(BATCH as usize) {
            let last = first + BATCH - 1;
            (first..last).for_each(|i| links.link(i).store(i + 1, Ordering::Relaxed));
            slots.deposit(&links, Chain { first, last, len: BATCH }.into_segment(&links));
        }
        Self { slots, links }
    }
    #[inline]
    fn cycle_one(&self) {
        if let Some(slot) = self.slots.acquire(&self.links, 1) {
            self.slots.release(&self.links, opaque(slot));
        }
    }
    #[inline]
    fn cycle_batch(&self, _scratch: &mut Vec<u32>) {
        if let Some(chain) = self.slots.acquire(&self.links, BATCH) {
            self.slots.release(&self.links, opaque(chain));
        }
    }
}

/// `black_box` on each of a chain's fields, as the other implementations' `black_box` on their
/// index. Not on the whole `Chain`: the compiler writes a 12-byte chain to the stack field by
/// field and `black_box` copies it with an 8-byte load of two 4-byte stores, a failed
/// store-to-load forward (about 10 ns a pair on the 2-core dev machine, a third of the loop's
/// time) that a caller keeping the chain's fields never pays.
#[inline]
fn opaque(chain: Chain) -> Chain {
    Chain { first: black_box(chain.first), last: black_box(chain.last), len: black_box(chain.len) }
}

/// The crate's Treiber freelist alone (its pool before magazines).
struct Treiber {
    free: FreeList,
    links: LinkTable,
}

impl SlotSet for Treiber {
    const NAME: &'static str = "treiber";
    fn full() -> Self {
        let links = LinkTable::new(SLOTS);
        let free = FreeList::new();
        for i in (0..SLOTS).rev() {
            free.push(&links, i);
        }
        Self { free, links }
    }
    #[inline]
    fn cycle_one(&self) {
        if let Some(chain) = self.free.pop_chain(&self.links, 1) {
            self.free.push_chain(&self.links, opaque(chain));
        }
    }
    #[inline]
    fn cycle_batch(&self, _scratch: &mut Vec<u32>) {
        if let Some(chain) = self.free.pop_chain(&self.links, BATCH) {
            self.free.push_chain(&self.links, opaque(chain));
        }
    }
}

/// Moves the top `BATCH` indices of `v` into `scratch`.
fn take_batch(v: &mut Vec<u32>, scratch: &mut Vec<u32>) {
    let at = v.len().saturating_sub(BATCH as usize);
    scratch.extend_from_slice(&v[at..]);
    v.truncate(at);
}

struct StdMutex(Mutex<Vec<u32>>);

impl SlotSet for StdMutex {
    const NAME: &'static str = "std_mutex";
    fn full() -> Self {
        Self(Mutex::new((0..SLOTS).collect()))
    }
    #[inline]
    fn cycle_one(&self) {
        let slot = self.0.lock().unwrap().pop();
        if let Some(slot) = slot {
            self.0.lock().unwrap().push(black_box(slot));
        }
    }
    #[inline]
    fn cycle_batch(&self, scratch: &mut Vec<u32>) {
        take_batch(&mut self.0.lock().unwrap(), scratch);
        black_box(&scratch);
        self.0.lock().unwrap().extend_from_slice(scratch);
        scratch.clear();
    }
}

struct ParkingLot(parking_lot::Mutex<Vec<u32>>);

impl SlotSet for ParkingLot {
    const NAME: &'static str = "parking_lot";
    fn full() -> Self {
        Self(parking_lot::Mutex::new((0..SLOTS).collect()))
    }
    #[inline]
    fn cycle_one(&self) {
        let slot = self.0.lock().pop();
        if let Some(slot) = slot {
            self.0.lock().push(black_box(slot));
        }
    }
    #[inline]
    fn cycle_batch(&self, scratch: &mut Vec<u32>) {
        take_batch(&mut self.0.lock(), scratch);
        black_box(&scratch);
        self.0.lock().extend_from_slice(scratch);
        scratch.clear();
    }
}

struct Queue(ArrayQueue<u32>);

impl SlotSet for Queue {
    const NAME: &'static str = "array_queue";
    fn full() -> Self {
        let q = ArrayQueue::new(SLOTS as usize);
        for i in 0..SLOTS {
            q.push(i).expect("room for every slot");
        }
        Self(q)
    }
    #[inline]
    fn cycle_one(&self) {
        if let Some(slot) = self.0.pop() {
            // Cannot fail: the slot came out of this queue.
            let _ = self.0.push(black_box(slot));
        }
    }
    #[inline]
    fn cycle_batch(&self, scratch: &mut Vec<u32>) {
        scratch.extend(std::iter::from_fn(|| self.0.pop()).take(BATCH as usize));
        black_box(&scratch);
        for &slot in scratch.iter() {
            let _ = self.0.push(slot);
        }
        scratch.clear();
    }
}

struct ShardedSlab(sharded_slab::Slab<u32>);

impl SlotSet for ShardedSlab {
    const NAME: &'static str = "sharded_slab";
    fn full() -> Self {
        Self(sharded_slab::Slab::new())
    }
    #[inline]
    fn cycle_one(&self) {
        if let Some(key) = self.0.insert(0) {
            self.0.remove(black_box(key));
        }
    }
    #[inline]
    fn cycle_batch(&self, _scratch: &mut Vec<u32>) {
        let keys: [Option<usize>; BATCH as usize] = std::array::from_fn(|_| self.0.insert(0));
        for key in black_box(keys).into_iter().flatten() {
            self.0.remove(key);
        }
    }
}

struct LockfreeObjectPool(lockfree_object_pool::LinearObjectPool<u32>);

impl SlotSet for LockfreeObjectPool {
    const NAME: &'static str = "lockfree_object_pool";
    fn full() -> Self {
        Self(lockfree_object_pool::LinearObjectPool::new(|| 0, |_| {}))
    }
    #[inline]
    fn cycle_one(&self) {
        drop(black_box(self.0.pull()));
    }
    #[inline]
    fn cycle_batch(&self, _scratch: &mut Vec<u32>) {
        let held: [_; BATCH as usize] = std::array::from_fn(|_| self.0.pull());
        drop(black_box(held));
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Single,
    Batch,
}

impl Mode {
    fn group(self) -> &'static str {
        match self {
            Mode::Single => "pool_single",
            Mode::Batch => "pool_batch16",
        }
    }
    fn slots(self) -> u32 {
        match self {
            Mode::Single => 1,
            Mode::Batch => BATCH,
        }
    }
}

fn bench_set<S: SlotSet>(c: &mut Criterion, results: &mut Results, mode: Mode) {
    let mut group = c.benchmark_group(mode.group());
    for threads in THREADS {
        let set = S::full();
        let mut cpus = Vec::new();
        let since = SystemTime::now();
        group.throughput(Throughput::Elements(threads as u64 * u64::from(mode.slots())));
        group.bench_function(BenchmarkId::new(S::NAME, threads), |b| {
            b.iter_custom(|iters| {
                let (elapsed, seen) = timed_threads(threads, |_| {
                    let mut scratch = Vec::with_capacity(BATCH as usize);
                    for _ in 0..iters {
                        match mode {
                            Mode::Single => set.cycle_one(),
                            Mode::Batch => set.cycle_batch(&mut scratch),
                        }
                    }
                });
                cpus = seen;
                elapsed
            })
        });
        if let Some(per_iter) = criterion_estimate_ns(mode.group(), S::NAME, &threads.to_string(), since) {
            let ns_per_op = per_iter / (threads as f64 * f64::from(mode.slots()));
            results.push(Record {
                group: mode.group().to_owned(),
                implementation: S::NAME.to_owned(),
                mode: if mode.slots() == 1 { "single".to_owned() } else { format!("batch{BATCH}") },
                threads,
                ns_per_op: Some(ns_per_op),
                ops_per_sec: Some(1e9 / ns_per_op),
                cpus_seen: std::mem::take(&mut cpus),
                note: "op = one slot acquired and released; ns_per_op = wall time / (threads x slots)"
                    .to_owned(),
                ..Record::default()
            });
        }
    }
    group.finish();
}

fn main() {
    let mut c = common::criterion();
    let mut results = Results::default();
    for mode in [Mode::Single, Mode::Batch] {
        bench_set::<Ours>(&mut c, &mut results, mode);
        bench_set::<Treiber>(&mut c, &mut results, mode);
        bench_set::<StdMutex>(&mut c, &mut results, mode);
        bench_set::<ParkingLot>(&mut c, &mut results, mode);
        bench_set::<Queue>(&mut c, &mut results, mode);
        bench_set::<ShardedSlab>(&mut c, &mut results, mode);
        bench_set::<LockfreeObjectPool>(&mut c, &mut results, mode);
    }
    c.final_summary();
    if common::benchmarking() {
        results.write("pool");
    }
}
