//! `latency`: how long one `zone_begin` takes on recording threads (p50, p99, p99.9) while
//! a collector waits on a slow simulated GPU, ours against `seed_port`; and the same
//! recorders with no collection running (`idle`).
//!
//! The GPU is [`SimBackend::realtime`]: every dispatch is a 20 µs kernel on the recording
//! thread's stream, so events complete well after they are recorded. Each of 4 recording
//! threads records lists of 16 dispatch zones inside a coarse zone, submits them, and keeps
//! at most about two lists of GPU work queued (it sleeps while its stream has more), as a
//! runtime waiting on its submissions would. Every `zone_begin` is timed with `Instant`.
//!
//! - `collecting`: a collector thread collects continuously. Ours checks completion and
//!   returns; the seed's waits for every submitted event while holding the one lock its
//!   recorders need.
//! - `idle`: no collection overlaps recording: recorders record a round of 4 lists each,
//!   stop at a barrier, and the main thread collects everything before the next round.
//!
//! `BENCH_LATENCY_BATCH` sets ours's `Builder::batch` (default 16, the crate's default).
//!
//! Each mode is reported whole and in two parts: `first_zone` (a list's first `zone_begin`,
//! which also takes the list's place on its lane and its record buffer) and `other_zones`.
//!
//! Percentiles are nearest-rank over every timed call (HdrHistogram-like: all samples kept
//! and sorted). Criterion is not used here: it reports means, and its iteration scaling
//! assumes the measured time is the wall time, which sleeping recorders break. The clock's
//! own cost is measured and reported (`timer_overhead`).

mod common;

use common::results::{percentile, Record, Results};
use common::seed_port::{SeedContext, SEED_QUERY_CAPACITY};
use common::{Ours, Seed, Tracer};
use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::{location, SourceLocation, TracingContext, Verbosity};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

const RECORDERS: usize = 4;
const DISPATCHES_PER_LIST: usize = 16;
const KERNEL_NS: i64 = 20_000;
const LIST_GPU_NS: i64 = KERNEL_NS * DISPATCHES_PER_LIST as i64;
/// Lists each recorder records between two collections in `idle` mode.
const ROUND_LISTS: usize = 4;

static COARSE: &SourceLocation = location!("command buffer", Verbosity::Coarse);
static DISPATCH: &SourceLocation = location!("dispatch");

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Collecting,
    Idle,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Collecting => "collecting",
            Mode::Idle => "idle",
        }
    }
}

/// Records one list, timing each `zone_begin` into `samples`; then waits while the stream
/// has more than one list of work queued.
fn record_list<T: Tracer<Stream = SimStream>>(
    tracer: &T,
    sim: &SimBackend,
    stream: &SimStream,
    samples: &mut Vec<u64>,
) {
    let mut list = tracer.list();
    // Each sample is its time in ns shifted left by one, the low bit set for a list's first
    // zone (which also takes the list's place on its lane): `split` separates them.
    let timed_begin = |list: &mut T::List, location, first: bool, samples: &mut Vec<u64>| {
        let start = Instant::now();
        tracer.begin(list, stream, location);
        samples.push((start.elapsed().as_nanos() as u64) << 1 | u64::from(first));
    };
    timed_begin(&mut list, COARSE, true, samples);
    for _ in 0..DISPATCHES_PER_LIST {
        timed_begin(&mut list, DISPATCH, false, samples);
        sim.launch(stream, KERNEL_NS);
        tracer.end(&mut list, stream);
    }
    tracer.end(&mut list, stream);
    tracer.submit(list);
    let queued = sim.pending_ns(stream);
    if queued > LIST_GPU_NS {
        std::thread::sleep(Duration::from_nanos((queued - LIST_GPU_NS) as u64));
    }
}

/// Every timed `zone_begin` (ns), sorted, and apart: lists' first zones, and the others.
struct Samples {
    all: Vec<u64>,
    first: Vec<u64>,
    other: Vec<u64>,
}

fn split(tagged: Vec<u64>) -> Samples {
    let (first, other): (Vec<u64>, Vec<u64>) = tagged.iter().partition(|&&t| t & 1 == 1);
    let untag = |mut v: Vec<u64>| {
        v.iter_mut().for_each(|t| *t >>= 1);
        v.sort_unstable();
        v
    };
    Samples { all: untag(tagged), first: untag(first), other: untag(other) }
}

/// Runs one scenario for `duration`; returns every timed `zone_begin`, sorted.
fn run<T: Tracer<Stream = SimStream>>(
    tracer: &T,
    sim: &SimBackend,
    mode: Mode,
    duration: Duration,
) -> Vec<u64> {
    let all = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let round_end = Barrier::new(RECORDERS + 1);
    let round_start = Barrier::new(RECORDERS + 1);
    let deadline = Instant::now() + duration;
    std::thread::scope(|s| {
        for _ in 0..RECORDERS {
            let (all, stop, round_end, round_start) = (&all, &stop, &round_end, &round_start);
            s.spawn(move || {
                let stream = tracer.stream();
                let mut samples = Vec::with_capacity(1 << 20);
                loop {
                    for _ in 0..ROUND_LISTS {
                        record_list(tracer, sim, &stream, &mut samples);
                    }
                    if mode == Mode::Idle {
                        round_end.wait();
                        round_start.wait();
                    }
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                }
                all.lock().unwrap().extend(samples);
            });
        }
        match mode {
            Mode::Collecting => {
                while Instant::now() < deadline {
                    if tracer.collect() == 0 {
                        std::thread::yield_now();
                    }
                }
                stop.store(true, Ordering::Release);
            }
            Mode::Idle => loop {
                round_end.wait();
                tracer.flush();
                let done = Instant::now() >= deadline;
                stop.store(done, Ordering::Release);
                round_start.wait();
                if done {
                    break;
                }
            },
        }
    });
    tracer.flush();
    all.into_inner().unwrap()
}

/// The cost of timing an empty section with `Instant` (p50 of many).
fn timer_overhead() -> Vec<u64> {
    let mut samples: Vec<u64> = (0..100_000)
        .map(|_| {
            let start = Instant::now();
            start.elapsed().as_nanos() as u64
        })
        .collect();
    samples.sort_unstable();
    samples
}

fn report(results: &mut Results, implementation: &str, mode: &str, sorted: &[u64], dropped: usize) {
    let p = |q| percentile(sorted, q);
    let mean = sorted.iter().sum::<u64>() as f64 / sorted.len().max(1) as f64;
    println!(
        "latency/{implementation}/{mode:<11} zone_begin  p50 {:>8.0} ns  p99 {:>10.0} ns  p99.9 {:>10.0} ns  max {:>10.0} ns  mean {mean:>8.0} ns  ({} samples, {dropped} dropped)",
        p(50.0),
        p(99.0),
        p(99.9),
        sorted.last().copied().unwrap_or(0) as f64,
        sorted.len(),
    );
    results.push(Record {
        group: "latency".to_owned(),
        implementation: implementation.to_owned(),
        mode: mode.to_owned(),
        threads: if mode == "timer_overhead" { 1 } else { RECORDERS },
        ns_per_op: Some(mean),
        p50_ns: Some(p(50.0)),
        p99_ns: Some(p(99.0)),
        p999_ns: Some(p(99.9)),
        max_ns: sorted.last().map(|&m| m as f64),
        samples: Some(sorted.len() as u64),
        note: format!(
            "{RECORDERS} recorders + 1 collector; {DISPATCHES_PER_LIST} x {} us kernels per list; dropped zones: {dropped}",
            KERNEL_NS / 1000
        ),
        ..Record::default()
    });
}

/// The whole population's record, then each part's line and record (`mode` suffixed
/// `/first_zone` and `/other_zones`).
fn report_split(results: &mut Results, implementation: &str, mode: &str, samples: &Samples, dropped: usize) {
    report(results, implementation, mode, &samples.all, dropped);
    report(results, implementation, &format!("{mode}/first_zone"), &samples.first, dropped);
    report(results, implementation, &format!("{mode}/other_zones"), &samples.other, dropped);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let duration = if !common::benchmarking() {
        Duration::from_millis(50)
    } else if args.iter().any(|a| a == "--quick") {
        Duration::from_millis(1500)
    } else {
        Duration::from_secs(4)
    };
    let filters: Vec<&String> = args.iter().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let mut results = Results::default();
    // Slots a list takes from its thread's magazine per refill (16, the default, unless
    // `BENCH_LATENCY_BATCH` says otherwise): a refill is what the p99 of `other_zones` times.
    let batch: u32 = std::env::var("BENCH_LATENCY_BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(16);

    report(&mut results, "instant", "timer_overhead", &timer_overhead(), 0);
    for mode in [Mode::Idle, Mode::Collecting] {
        if wanted(&format!("latency/ours/{}", mode.name())) {
            let sim = SimBackend::realtime();
            let ours = Ours {
                ctx: TracingContext::builder(sim.clone())
                    .capacity(1024, 64 * 1024)
                    .batch(batch)
                    .build()
                    .expect("context"),
                collect_after_submit: false,
            };
            let samples = split(run(&ours, &sim, mode, duration));
            report_split(&mut results, "ours", mode.name(), &samples, ours.dropped());
        }
        if wanted(&format!("latency/seed_port/{}", mode.name())) {
            let sim = SimBackend::realtime();
            let seed = Seed::new(SeedContext::new(sim.clone(), SEED_QUERY_CAPACITY).expect("seed context"));
            let samples = split(run(&seed, &sim, mode, duration));
            report_split(&mut results, "seed_port", mode.name(), &samples, seed.dropped());
        }
    }
    if common::benchmarking() {
        results.write("latency");
    }
}
