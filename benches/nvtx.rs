//! `nvtx` (feature `nvtx`): what the NVTX ranges around zones cost the recording path with
//! no tool attached (no `NVTX_INJECTION64_PATH`), measured side by side in one run.
//!
//! One iteration: each of N threads records one list of 64 zones (a coarse zone around 63
//! adjacent dispatches, as in `record`) on a backend whose calls cost nothing, and drops it
//! unsubmitted, so the figure is the recording path alone. Three variants:
//!
//! - `ranges_off`: the feature is built in, the run-time switch is off
//!   (`Builder::nvtx_ranges(false)`): one relaxed load per zone, shared with the other switches;
//! - `ranges_on`: the switch on (the default): every zone pushes an NVTX range in the
//!   `gpu-event-pool` domain and pops it when it ends;
//! - `nvtx_crate_pair`: for scale, only a push and a pop per zone with the `nvtx` crate's
//!   plainest call, `nvtx::LocalRange::new(c"dispatch")` (which copies the name each time),
//!   and no recording at all.
//!
//! Each record gives nanoseconds per zone per thread.

mod common;

use common::null_backend::NullBackend;
use common::results::{Record, Results};
use common::{criterion_estimate_ns, timed_threads};
use criterion::{BenchmarkId, Criterion, Throughput};
use gpu_event_pool::{location, SourceLocation, TracingContext, Verbosity};
use std::time::SystemTime;

const ZONES_PER_LIST: u64 = 64;

static COARSE: &SourceLocation = location!("command buffer", Verbosity::Coarse);
static DISPATCH: &SourceLocation = location!("dispatch");

/// Records one list of 64 zones and drops it (its slots go back with one CAS).
fn record_list(ctx: &TracingContext<NullBackend>, stream: &common::null_backend::NullStream) {
    let mut list = ctx.list();
    let _ = list.zone_begin(stream, COARSE);
    let _ = list.zone_begin(stream, DISPATCH);
    for _ in 1..ZONES_PER_LIST - 1 {
        let _ = list.zone_next(stream, DISPATCH);
    }
    let _ = list.zone_end(stream);
    let _ = list.zone_end(stream);
    drop(list);
}

/// Only NVTX: one push and one pop per zone, nested as the list's zones are.
fn nvtx_pairs() {
    let outer = nvtx::LocalRange::new(c"command buffer");
    for _ in 0..ZONES_PER_LIST - 1 {
        drop(nvtx::LocalRange::new(c"dispatch"));
    }
    drop(outer);
}

fn thread_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts = vec![1];
    if cores > 1 {
        counts.push(cores);
    }
    counts
}

fn main() {
    let mut c: Criterion = common::criterion();
    let mut results = Results::default();
    let mut group = c.benchmark_group("nvtx");
    for threads in thread_counts() {
        group.throughput(Throughput::Elements(threads as u64 * ZONES_PER_LIST));
        for variant in ["ranges_off", "ranges_on", "nvtx_crate_pair"] {
            let backend = NullBackend::default();
            let ctx = TracingContext::builder(backend.clone())
                .capacity(1024, 64 * 1024)
                .nvtx_ranges(variant == "ranges_on")
                .build()
                .expect("context");
            let since = SystemTime::now();
            group.bench_function(BenchmarkId::new(variant, threads), |b| {
                b.iter_custom(|iters| {
                    timed_threads(threads, |_| {
                        let stream = backend.stream();
                        for _ in 0..iters {
                            if variant == "nvtx_crate_pair" {
                                nvtx_pairs();
                            } else {
                                record_list(&ctx, &stream);
                            }
                        }
                    })
                    .0
                })
            });
            assert_eq!(ctx.stats().dropped_zones, 0, "the pool is large enough for every list");
            if let Some(per_iter) = criterion_estimate_ns("nvtx", variant, &threads.to_string(), since) {
                results.push(Record {
                    group: "nvtx".to_owned(),
                    implementation: variant.to_owned(),
                    mode: "lists of 64 zones, dropped; no NVTX tool attached".to_owned(),
                    threads,
                    ns_per_op: Some(per_iter / ZONES_PER_LIST as f64),
                    zones_per_sec: Some(threads as f64 * ZONES_PER_LIST as f64 * 1e9 / per_iter),
                    ..Record::default()
                });
            }
        }
    }
    group.finish();
    c.final_summary();
    if common::benchmarking() {
        results.write("nvtx");
    }
}
