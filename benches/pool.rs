//! `pool`: acquire+release throughput of the slot freelist against the usual alternatives,
//! at 1, 2, 4, 8 and 16 threads, one slot at a time and in batches of 16 (the way an
//! `EventList` reserves its slots).
//!
//! Every thread hammers one shared freelist of 4096 slots: it acquires, then releases, as
//! fast as it can. One operation is one slot acquired and released; in batch mode 16 slots
//! move at once (ours: one `pop_chain` CAS and one `push_chain` CAS; the mutexes: 16 pops
//! under one lock and 16 pushes under another; `ArrayQueue`: 16 pops and 16 pushes, since it
//! has no batch operation).
//!
//! Criterion reports time per iteration (every thread does one acquire+release of `batch`
//! slots) and throughput in slots per second; the JSON has nanoseconds per slot, all
//! threads together (the inverse of the throughput).

mod common;

use common::results::{Record, Results};
use common::{criterion_estimate_ns, timed_threads, THREADS};
use criterion::{BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use gpu_event_pool::freelist::{FreeList, NIL};
use std::hint::black_box;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;
use std::time::SystemTime;

const SLOTS: u32 = 4096;
const BATCH: u32 = 16;

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

/// Ours: the crate's Treiber freelist over a links array.
struct Ours {
    free: FreeList,
    links: Vec<AtomicU32>,
}

impl SlotSet for Ours {
    const NAME: &'static str = "ours";
    fn full() -> Self {
        let links: Vec<AtomicU32> = (0..SLOTS).map(|_| AtomicU32::new(NIL)).collect();
        let free = FreeList::new();
        for i in (0..SLOTS).rev() {
            free.push(&links, i);
        }
        Self { free, links }
    }
    #[inline]
    fn cycle_one(&self) {
        if let Some(slot) = self.free.pop(&self.links) {
            self.free.push(&self.links, black_box(slot));
        }
    }
    #[inline]
    fn cycle_batch(&self, _scratch: &mut Vec<u32>) {
        if let Some(chain) = self.free.pop_chain(&self.links, BATCH) {
            self.free.push_chain(&self.links, black_box(chain));
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
        bench_set::<StdMutex>(&mut c, &mut results, mode);
        bench_set::<ParkingLot>(&mut c, &mut results, mode);
        bench_set::<Queue>(&mut c, &mut results, mode);
    }
    c.final_summary();
    if common::benchmarking() {
        results.write("pool");
    }
}
