//! `record`: end to end on a backend whose calls cost nothing ([`NullBackend`]), so the
//! figure is the tracing design's own cost: N threads record command-buffer lists of 64
//! zones and submit them while one collector thread drains, ours against `seed_port`.
//!
//! A list is what a runtime records for a command buffer: one coarse zone around 63
//! adjacent dispatch zones. Ours records it with `zone_begin`, `zone_next` between
//! dispatches and `zone_end` (66 events); the seed has no shared event, so each dispatch
//! is an end and a begin (128 events, each under the context's one mutex).
//!
//! A second group, `record_no_collector`, isolates the recording side: the same lists are
//! recorded and then discarded unsubmitted (ours: dropped, one CAS returns the slots; the
//! seed: `free`d, which walks the list under the lock), with no collector at all.
//!
//! Ours runs twice: `ours` drains with the one collector thread alone (its reads are serial,
//! like the seed's), and `ours_sharing` also has every recorder call `collect()` right
//! after each submit, so the time reads are shared by all threads and only the emitter
//! (placing lists, building zones, releasing slots) stays serial: its cost per zone,
//! `Stats::emitter_ns / zones_emitted`, is in the note of each `ours*` record.
//!
//! A third group, `record_zone_cost`, is one thread recording one such list and dropping it
//! (no collector), against the same loop with no recording call (`bare_loop`): what a zone
//! costs its thread. Built without this package's default feature `enable`, which turns on
//! the crate's (`cargo bench -p gpu-event-pool-benches --no-default-features --bench
//! record`), recording is compiled out: the list
//! is `ours_compiled_out`, `ours_compiled_out_zones_only` is the zone calls alone on one list
//! made once, and only this group runs (results in `record_compiled_out.json`).
//!
//! One iteration: every recording thread records and submits one list. The clock runs from
//! the start signal until the collector has collected everything (the last flush is
//! included), so zones per second is what the whole pipeline sustains. Like a runtime with
//! a bounded number of command buffers in flight, a recorder waits (yields) while more than
//! 256 lists are submitted and not yet collected: without that backpressure a recorder
//! that outruns a starved collector exhausts either pool (the seed's unfair mutex lets
//! recorders starve its collector). Zones dropped anyway are reported, not hidden.

mod common;

use common::null_backend::NullBackend;
use common::results::{Record, Results};
use common::seed_port::SeedContext;
use common::{criterion_estimate_ns, Ours, Seed, Tracer, THREADS};
use criterion::{BenchmarkId, Criterion, Throughput};
use gpu_event_pool::Stats;
use gpu_event_pool::{location, SourceLocation, TracingContext, Verbosity, ENABLED};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime};

const ZONES_PER_LIST: u64 = 64;
/// Pool size for both designs: far more than the lists in flight, so neither exhausts.
const CAPACITY: u32 = 64 * 1024;
/// Lists submitted and not yet collected above which recorders wait: 256 lists of the
/// seed's 128 events fill half its pool.
const MAX_LISTS_IN_FLIGHT: usize = 256;

static COARSE: &SourceLocation = location!("command buffer", Verbosity::Coarse);
static DISPATCH: &SourceLocation = location!("dispatch");

/// Records one list of 64 zones (a coarse zone around 63 adjacent dispatches) and submits
/// it, or discards it when `submit` is false.
fn record_list<T: Tracer>(tracer: &T, stream: &T::Stream, submit: bool) {
    let mut list = tracer.list();
    tracer.begin(&mut list, stream, COARSE);
    tracer.begin(&mut list, stream, DISPATCH);
    for _ in 1..ZONES_PER_LIST - 1 {
        tracer.next(&mut list, stream, DISPATCH);
    }
    tracer.end(&mut list, stream);
    tracer.end(&mut list, stream);
    if submit {
        tracer.submit(list);
    } else {
        tracer.discard(list);
    }
}

/// `threads` recorders each record `lists` lists while a collector drains; returns the wall
/// time from the first recorder's start until everything is collected. Without
/// `collector`, lists are discarded instead and the time ends with the last recorder.
fn run<T: Tracer>(tracer: &T, threads: usize, lists: u64, collector: bool) -> Duration {
    let barrier = Barrier::new(threads + usize::from(collector));
    let done = AtomicBool::new(false);
    let recorded = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let recorders: Vec<_> = (0..threads)
            .map(|_| {
                let (barrier, done, recorded) = (&barrier, &done, &recorded);
                s.spawn(move || {
                    let stream = tracer.stream();
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..lists {
                        // Without a collector nothing is in flight (lists are discarded): no
                        // check, which would read the shared statistics once per list.
                        while collector && tracer.lists_in_flight() >= MAX_LISTS_IN_FLIGHT {
                            std::thread::yield_now();
                        }
                        record_list(tracer, &stream, collector);
                    }
                    // Release: the last recorder's submissions happen-before the collector
                    // sees `done`.
                    if recorded.fetch_add(1, Ordering::AcqRel) + 1 == threads {
                        done.store(true, Ordering::Release);
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        let drained = collector.then(|| {
            s.spawn(|| {
                barrier.wait();
                while !done.load(Ordering::Acquire) {
                    if tracer.collect() == 0 {
                        std::thread::yield_now();
                    }
                }
                tracer.flush();
                Instant::now()
            })
        });
        let spans: Vec<(Instant, Instant)> =
            recorders.into_iter().map(|r| r.join().expect("recorder panicked")).collect();
        let first = spans.iter().map(|s| s.0).min().expect("at least one recorder");
        let last = match drained {
            Some(c) => c.join().expect("collector panicked"),
            None => spans.iter().map(|s| s.1).max().expect("at least one recorder"),
        };
        last.saturating_duration_since(first)
    })
}

fn bench_tracer<T: Tracer>(c: &mut Criterion, results: &mut Results, collector: bool, make: impl Fn() -> T) {
    let name = if collector { "record" } else { "record_no_collector" };
    let mut group = c.benchmark_group(name);
    for threads in THREADS {
        let tracer = make();
        let dropped_before = tracer.dropped();
        let stats_before = tracer.stats();
        let since = SystemTime::now();
        group.throughput(Throughput::Elements(threads as u64 * ZONES_PER_LIST));
        group.bench_function(BenchmarkId::new(tracer.name(), threads), |b| {
            b.iter_custom(|iters| run(&tracer, threads, iters, collector))
        });
        if let Some(per_iter) = criterion_estimate_ns(name, tracer.name(), &threads.to_string(), since) {
            let zones_per_sec = threads as f64 * ZONES_PER_LIST as f64 * 1e9 / per_iter;
            results.push(Record {
                group: name.to_owned(),
                implementation: tracer.name().to_owned(),
                mode: if collector {
                    "lists of 64 zones, 1 collector"
                } else {
                    "lists of 64 zones, discarded"
                }
                .to_owned(),
                threads,
                ns_per_op: Some(1e9 / zones_per_sec),
                zones_per_sec: Some(zones_per_sec),
                note: note(tracer.dropped() - dropped_before, stats_before, tracer.stats()),
                ..Record::default()
            });
        }
    }
    group.finish();
}

/// The record's note: zones dropped, and for ours the emitter's nanoseconds per zone.
fn note(dropped: usize, before: Option<Stats>, after: Option<Stats>) -> String {
    match before.zip(after) {
        Some((before, after)) if after.zones_emitted > before.zones_emitted => {
            let zones = (after.zones_emitted - before.zones_emitted) as f64;
            let serial = (after.emitter_ns - before.emitter_ns) as f64 / zones;
            format!("dropped zones: {dropped}; serial (emitter) ns per zone: {serial:.1}")
        }
        _ => format!("dropped zones: {dropped}"),
    }
}

/// One thread: a list of 64 zones recorded and dropped, against the same loop without the
/// recording calls (`bare_loop`). Each iteration makes the list (`ctx.list()`) and drops it.
fn bench_zone_cost(c: &mut Criterion, results: &mut Results) {
    let name = "record_zone_cost";
    let ctx =
        TracingContext::builder(NullBackend::default()).capacity(1024, CAPACITY).build().expect("context");
    let backend = ctx.backend().clone();
    let stream = gpu_event_pool::Backend::create_stream(&backend).expect("stream");
    let ours = if ENABLED { "ours" } else { "ours_compiled_out" };
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(ZONES_PER_LIST));
    let since = SystemTime::now();
    group.bench_function(BenchmarkId::new("bare_loop", 1), |b| {
        b.iter(|| {
            for _ in 0..ZONES_PER_LIST + 2 {
                black_box(&stream);
            }
        })
    });
    group.bench_function(BenchmarkId::new(ours, 1), |b| {
        b.iter(|| {
            let mut list = ctx.list();
            let _ = list.zone_begin(black_box(&stream), COARSE);
            let _ = list.zone_begin(black_box(&stream), DISPATCH);
            for _ in 1..ZONES_PER_LIST - 1 {
                let _ = list.zone_next(black_box(&stream), DISPATCH);
            }
            let _ = list.zone_end(black_box(&stream));
            let _ = list.zone_end(black_box(&stream));
            drop(list);
        })
    });
    // Compiled out, the zone calls alone on one list made once: they should cost what the
    // bare loop does (in the default build the list would fill the pool).
    let zones_only = "ours_compiled_out_zones_only";
    if !ENABLED {
        let mut list = ctx.list();
        group.bench_function(BenchmarkId::new(zones_only, 1), |b| {
            b.iter(|| {
                let _ = list.zone_begin(black_box(&stream), COARSE);
                let _ = list.zone_begin(black_box(&stream), DISPATCH);
                for _ in 1..ZONES_PER_LIST - 1 {
                    let _ = list.zone_next(black_box(&stream), DISPATCH);
                }
                let _ = list.zone_end(black_box(&stream));
                let _ = list.zone_end(black_box(&stream));
            })
        });
    }
    group.finish();
    let implementations: &[&str] =
        if ENABLED { &["bare_loop", ours] } else { &["bare_loop", ours, zones_only] };
    for &implementation in implementations {
        if let Some(per_iter) = criterion_estimate_ns(name, implementation, "1", since) {
            results.push(Record {
                group: name.to_owned(),
                implementation: implementation.to_owned(),
                mode: "a list of 64 zones recorded and dropped, one thread".to_owned(),
                threads: 1,
                ns_per_op: Some(per_iter / ZONES_PER_LIST as f64),
                note: "ns per zone, the list's making and dropping included".to_owned(),
                ..Record::default()
            });
        }
    }
}

fn main() {
    let mut c = common::criterion();
    let mut results = Results::default();
    bench_zone_cost(&mut c, &mut results);
    // Compiled out, nothing else records anything.
    let collectors: &[bool] = if ENABLED { &[true, false] } else { &[] };
    for &collector in collectors {
        // Sharing the reads only means something with a collector to share them with.
        let sharing: &[bool] = if collector { &[false, true] } else { &[false] };
        for &collect_after_submit in sharing {
            bench_tracer(&mut c, &mut results, collector, || Ours {
                ctx: TracingContext::builder(NullBackend::default())
                    .capacity(1024, CAPACITY)
                    .batch(16)
                    .build()
                    .expect("context"),
                collect_after_submit,
            });
        }
        bench_tracer(&mut c, &mut results, collector, || {
            Seed::new(SeedContext::new(NullBackend::default(), CAPACITY).expect("seed context"))
        });
    }
    c.final_summary();
    if common::benchmarking() {
        results.write(if ENABLED { "record" } else { "record_compiled_out" });
    }
}
