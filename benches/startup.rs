//! `startup`: context creation time and host memory per slot, ours (a first page of 64
//! events, more created on demand) against the seed's 16128 events created up front, on the
//! simulated GPU.
//!
//! Two backends:
//! - `sim`: [`SimBackend`] as it is (creating a simulated event is one small allocation).
//! - `sim+cuEventCreate`: the same, plus 568 ns of busy work per event created, the cost of
//!   `cuEventCreate` measured on the H200 machine (docs/design.md §4), so the figures show
//!   what eager creation costs on a real GPU without needing one.
//!
//! Memory is counted by a global allocator that tracks live heap bytes: bytes per slot is
//! what creating the context (or growing it) allocated, over its slots. The backend's own
//! memory per event (driver memory on CUDA) is not visible here.

mod common;

use common::criterion_estimate_ns;
use common::results::{Record, Results};
use common::seed_port::{SeedContext, SEED_QUERY_CAPACITY};
use criterion::{BenchmarkId, Criterion};
use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::{location, Backend, BackendError, TracingContext};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Counts live heap bytes.
struct CountingAlloc;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// Safety: every method forwards to the system allocator with the caller's arguments, whose
// contracts are the caller's; the counter is only bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // Safety: same contract as `GlobalAlloc::alloc`, upheld by our caller.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // Safety: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // Safety: same contract as `GlobalAlloc::realloc`, upheld by our caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// `cuEventCreate` on the H200 machine (docs/design.md §4).
const CU_EVENT_CREATE_NS: u64 = 568;

/// The simulated GPU, with event creation made as slow as `cuEventCreate` when asked.
#[derive(Debug, Clone)]
struct StartupBackend {
    sim: SimBackend,
    create_cost: Duration,
}

impl Backend for StartupBackend {
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "sim"
    }
    fn create_event(&self) -> Result<SimEvent, BackendError> {
        let start = Instant::now();
        let event = self.sim.create_event();
        while start.elapsed() < self.create_cost {
            std::hint::spin_loop();
        }
        event
    }
    fn create_stream(&self) -> Result<SimStream, BackendError> {
        self.sim.create_stream()
    }
    fn stream_key(&self, stream: &SimStream) -> u64 {
        self.sim.stream_key(stream)
    }
    fn graph_key(&self, graph: &SimGraph) -> u64 {
        self.sim.graph_key(graph)
    }
    fn record(&self, event: &SimEvent, stream: &SimStream) -> Result<(), BackendError> {
        self.sim.record(event, stream)
    }
    fn add_graph_record_node(
        &self,
        event: &SimEvent,
        graph: &SimGraph,
        dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        self.sim.add_graph_record_node(event, graph, dependencies)
    }
    fn is_complete(&self, event: &SimEvent) -> Result<bool, BackendError> {
        self.sim.is_complete(event)
    }
    fn wait(&self, event: &SimEvent) -> Result<(), BackendError> {
        self.sim.wait(event)
    }
    fn elapsed_ms(&self, start: &SimEvent, end: &SimEvent) -> Result<Option<f32>, BackendError> {
        self.sim.elapsed_ms(start, end)
    }
    fn host_now_ns(&self) -> i64 {
        self.sim.host_now_ns()
    }
}

fn backend(create_cost: Duration) -> StartupBackend {
    StartupBackend { sim: SimBackend::realtime(), create_cost }
}

fn ours(create_cost: Duration) -> TracingContext<StartupBackend> {
    TracingContext::new(backend(create_cost)).expect("context")
}

fn seed(create_cost: Duration) -> SeedContext<StartupBackend> {
    SeedContext::new(backend(create_cost), SEED_QUERY_CAPACITY).expect("seed context")
}

/// Times creation only: each context is dropped outside the measured section.
fn time_creation<C>(iters: u64, make: impl Fn() -> C) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        let ctx = make();
        total += start.elapsed();
        drop(ctx);
    }
    total
}

fn bench_creation(c: &mut Criterion, results: &mut Results) {
    for (mode, cost) in
        [("sim", Duration::ZERO), ("sim+cuEventCreate", Duration::from_nanos(CU_EVENT_CREATE_NS))]
    {
        let group_name = if cost.is_zero() { "startup_sim" } else { "startup_cuda_cost" };
        let mut group = c.benchmark_group(group_name);
        let since = SystemTime::now();
        group.bench_function(BenchmarkId::new("ours", "default"), |b| {
            b.iter_custom(|i| time_creation(i, || ours(cost)))
        });
        group.bench_function(BenchmarkId::new("seed_port", "16128"), |b| {
            b.iter_custom(|i| time_creation(i, || seed(cost)))
        });
        group.finish();
        for (implementation, parameter, slots) in [
            ("ours", "default", ours(cost).stats().capacity as u64),
            ("seed_port", "16128", u64::from(SEED_QUERY_CAPACITY)),
        ] {
            if let Some(ns) = criterion_estimate_ns(group_name, implementation, parameter, since) {
                results.push(Record {
                    group: "startup".to_owned(),
                    implementation: implementation.to_owned(),
                    mode: mode.to_owned(),
                    threads: 1,
                    ns_per_op: Some(ns),
                    slots: Some(slots),
                    note: "ns_per_op = one context created (events, base event recorded and waited for)"
                        .to_owned(),
                    ..Record::default()
                });
            }
        }
    }
}

/// Heap bytes per slot: of our context as built, of it grown to its maximum, and of the seed.
fn memory(results: &mut Results) {
    let mut push = |implementation: &str, mode: &str, bytes: isize, slots: usize, ns: Option<f64>| {
        let per_slot = bytes as f64 / slots as f64;
        println!(
            "startup/memory/{implementation}/{mode}: {bytes} bytes for {slots} slots = {per_slot:.1} B/slot"
        );
        results.push(Record {
            group: "startup_memory".to_owned(),
            implementation: implementation.to_owned(),
            mode: mode.to_owned(),
            threads: 1,
            ns_per_op: ns,
            bytes_per_slot: Some(per_slot),
            slots: Some(slots as u64),
            note: format!("{bytes} heap bytes in all"),
            ..Record::default()
        });
    };

    let before = live_bytes();
    let ctx = ours(Duration::ZERO);
    let built = live_bytes() - before;
    push("ours", "as built", built, ctx.stats().capacity, None);

    // Grow to the maximum by holding lists open (their own memory is reserved first).
    let stream = ctx.backend().create_stream().expect("stream");
    let max = ctx.stats().max_capacity;
    let mut lists = Vec::with_capacity(max);
    let grow_start = Instant::now();
    let before_growth = live_bytes();
    while ctx.stats().capacity < max {
        let mut list = ctx.list();
        let _ = list.zone_begin(&stream, location!("grow"));
        let _ = list.zone_end(&stream);
        lists.push(list);
    }
    let grow_ns = grow_start.elapsed().as_nanos() as f64;
    let grown = built + (live_bytes() - before_growth);
    push("ours", "grown to max", grown, ctx.stats().capacity, Some(grow_ns));
    drop(lists);
    drop(ctx);

    let before = live_bytes();
    let seed = seed(Duration::ZERO);
    push("seed_port", "as built", live_bytes() - before, seed.capacity(), None);
}

fn main() {
    let mut c = common::criterion();
    let mut results = Results::default();
    bench_creation(&mut c, &mut results);
    memory(&mut results);
    c.final_summary();
    if common::benchmarking() {
        results.write("startup");
    }
}
