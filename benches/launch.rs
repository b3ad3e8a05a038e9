//! `launch`: what recording each zone's launch (`Builder::record_launches`: two host clock
//! reads and a thread-local read per zone begun) costs the recording path, measured side by
//! side with it off in one run.
//!
//! One iteration: each of N threads records one list of 64 zones (a coarse zone around 63
//! adjacent dispatches, as in `record`) on a backend whose calls cost nothing (its host
//! clock is `Instant`, as CUDA's is), and drops it unsubmitted, so the figure is the
//! recording path alone. Three variants:
//!
//! - `launches_off`: the default: the switch is one bit of the byte every recording call
//!   loads;
//! - `launches_on`: `Builder::record_launches(true)`;
//! - `clock_pair`: for scale, only two `Instant::now()` reads per zone, no recording.
//!
//! Each record gives nanoseconds per zone per thread.

mod common;

use common::null_backend::NullBackend;
use common::results::{Record, Results};
use common::{criterion_estimate_ns, timed_threads};
use criterion::{BenchmarkId, Criterion, Throughput};
use gpu_event_pool::{location, SourceLocation, TracingContext, Verbosity};
use std::time::{Instant, SystemTime};

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

/// Only the clock reads a launch takes: two per zone.
fn clock_pairs() {
    for _ in 0..ZONES_PER_LIST {
        std::hint::black_box((Instant::now(), Instant::now()));
    }
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
    let mut group = c.benchmark_group("launch");
    for threads in thread_counts() {
        group.throughput(Throughput::Elements(threads as u64 * ZONES_PER_LIST));
        for variant in ["launches_off", "launches_on", "clock_pair"] {
            let backend = NullBackend::default();
            let ctx = TracingContext::builder(backend.clone())
                .capacity(1024, 64 * 1024)
                .record_launches(variant == "launches_on")
                .build()
                .expect("context");
            let since = SystemTime::now();
            group.bench_function(BenchmarkId::new(variant, threads), |b| {
                b.iter_custom(|iters| {
                    timed_threads(threads, |_| {
                        let stream = backend.stream();
                        for _ in 0..iters {
                            if variant == "clock_pair" {
                                clock_pairs();
                            } else {
                                record_list(&ctx, &stream);
                            }
                        }
                    })
                    .0
                })
            });
            assert_eq!(ctx.stats().dropped_zones, 0, "the pool is large enough for every list");
            if let Some(per_iter) = criterion_estimate_ns("launch", variant, &threads.to_string(), since) {
                results.push(Record {
                    group: "launch".to_owned(),
                    implementation: variant.to_owned(),
                    mode: "lists of 64 zones, dropped".to_owned(),
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
        results.write("launch");
    }
}
