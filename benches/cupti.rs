//! Host cost of timing kernels: bare launches, against the event path (a `TracingContext` on a
//! `CudaBackend`, a zone around each launch) and the CUPTI path (the same `TracingContext` on a
//! `CuptiBackend`: every launch becomes a zone from CUPTI's activity records, with no event
//! recorded), in one run of one process.
//!
//! Each recording thread has its own stream and launches the crate's spin kernel for 0 ns
//! (the cheapest real kernel), in lists of `LAUNCHES_PER_LIST`:
//!
//! - `untraced`: the bare `cuLaunchKernel` calls.
//! - `events`: a `TracingContext` (as `ours` in `benches/cuda.rs`), one zone per launch:
//!   `zone_begin` before the list's first launch, `zone_next` before each later one, one
//!   `zone_end` after the last; then submit, `collect()` (it returns at once when another
//!   thread is collecting); no backpressure of its own but the crate's (a thread that finds
//!   the pool exhausted collects before it drops a zone).
//! - `cupti`: a context on a `CuptiBackend` with no sink (only its counters), one zone around
//!   each list of launches, submitted; a collector thread calls `ctx.collect()` every
//!   millisecond while the threads record (the recording threads do not collect: CUPTI hands
//!   its buffers over on its own period).
//!
//! CUPTI is process-wide and slows every launch while it is on, so `untraced` and `events`
//! run first at every thread count; then the `CuptiBackend` is made, `cupti` runs at every
//! thread count, and the context is dropped. After each run's loops every stream is
//! synchronized (the GPU wait, not host work), then the context is flushed (`events`: the
//! context), and the counters are checked: every launch a
//! zone (`cupti`: activities == launches and no record dropped); a failed check prints a
//! `WARNING` line and is noted in the results.
//!
//! Reported for each implementation and thread count (each configuration runs `RUNS` times
//! after a short warm-up; the row is the run with the most launches per second, both its
//! figures from that run, and every run goes to the JSON): host nanoseconds per launch per
//! thread (the recording loops: launches, zones, submits and collects), and launches (= GPU
//! zones) per second end to end (all threads, from the start to the end of the final flush,
//! the GPU wait included). Then the goals as ratios of this run's figures:
//! `cupti/untraced` host cost per launch at 1 thread (goal <= 1.3), `cupti/untraced` launch
//! rate at 16 threads (goal >= 0.90), `cupti/events` zones per second at 16 threads (goal
//! >= 2.0).
//!
//! Then the same goals from rounds that take turns in one process (`BENCH_CUPTI_ROUNDS`,
//! default 5; 0 skips them): each round runs `untraced` and `events` with CUPTI off, then
//! makes a `CuptiBackend`, runs `cupti` and drops it, at 1 and 16 threads; every ratio is of
//! one round's figures (host time and launch rate from the same runs), and the medians and
//! the rounds that met each goal are printed.
//!
//! Without a CUDA device it prints `SKIPPED: no CUDA device (...)` and exits successfully;
//! when the `CuptiBackend` cannot be made (no libcupti, another CUPTI client, no permission
//! to profile) it prints `SKIPPED: ...` with the error after the untraced and events rows, and
//! exits successfully. `BENCH_CUPTI_LISTS` sets the lists per thread (default 300);
//! `BENCH_CUPTI_THREADS` (e.g. `1,16`) runs some of the thread counts; `BENCH_CUPTI_BUFFERS`
//! and `BENCH_CUPTI_BUFFER_MB` set the CUPTI tracer's buffer count and size (default
//! `CuptiConfig::default()`'s). Results also go to `$BENCH_RESULTS_DIR/cupti.json` (see
//! `benches/common/results.rs`).

#[path = "common/results.rs"]
mod results;

use cudarc::driver::CudaStream;
use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
use gpu_event_pool::backend::cupti::{CuptiBackend, CuptiConfig, TracerConfig};
use gpu_event_pool::ErrorKind;
use gpu_event_pool::{location, Config, Stats, TracingContext};
use results::{Record, Results};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const LAUNCHES_PER_LIST: usize = 64;
const THREADS: [usize; 3] = [1, 4, 16];
/// Each configuration runs this many times; the run with the most launches per second is the
/// row (both of its figures), every run is in the JSON.
const RUNS: usize = 3;
/// The spin kernel's duration: 0 ns, the cheapest real kernel.
const SPIN_NS: u64 = 0;
/// How often the `cupti` collector thread collects.
const COLLECT_PERIOD: Duration = Duration::from_millis(1);

/// How one configuration launches and times its kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Implementation {
    Untraced,
    Events,
    Cupti,
}

impl Implementation {
    fn name(self) -> &'static str {
        match self {
            Self::Untraced => "untraced",
            Self::Events => "events",
            Self::Cupti => "cupti",
        }
    }

    fn mode(self) -> &'static str {
        match self {
            Self::Untraced => "bare launches",
            Self::Events => "TracingContext, zone per launch",
            Self::Cupti => "TracingContext on CuptiBackend, zone per list",
        }
    }
}

/// One measured run.
#[derive(Debug, Clone)]
struct Run {
    /// From the common start until the last recording thread finished its loop.
    loop_wall: Duration,
    /// Then waiting for the GPU to run everything (not host work).
    gpu_wait: Duration,
    /// Then the final flush of the context (none untraced).
    read: Duration,
    /// Kernels launched, all threads.
    launches: usize,
    /// Backpressure flushes (`events`).
    flushes: usize,
    /// What the counters said was wrong (a zone missing, a record dropped), if anything.
    problem: Option<String>,
}

impl Run {
    /// Host time per launch, per thread: the recording loops.
    fn host_ns_per_launch(&self, threads: usize) -> f64 {
        self.loop_wall.as_nanos() as f64 * threads as f64 / self.launches as f64
    }

    /// Launches (GPU zones) per second from the start to the end of the final flush, all
    /// threads together.
    fn launches_per_sec(&self) -> f64 {
        self.launches as f64 / (self.loop_wall + self.gpu_wait + self.read).as_secs_f64()
    }
}

/// Runs `work(stream)` on `threads` threads at once, each on a stream of its own. Measures the
/// loops, waits for the GPU, then runs `finish` (measured: the final flush) while the streams
/// are still alive. Returns the run (`launches` from the threads' counts, `flushes` summed)
/// and what `finish` returned.
fn on_threads<F>(
    cuda: &CudaBackend,
    threads: usize,
    work: impl Fn(&Arc<CudaStream>) -> (usize, usize) + Sync,
    finish: impl FnOnce() -> F,
) -> (Run, F) {
    let streams: Vec<_> = (0..threads).map(|_| cuda.new_stream().expect("stream")).collect();
    let barrier = Barrier::new(threads + 1);
    let (loop_wall, outputs) = std::thread::scope(|s| {
        let workers: Vec<_> = streams
            .iter()
            .map(|stream| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    work(stream)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let outputs: Vec<_> = workers.into_iter().map(|w| w.join().expect("worker")).collect();
        (start.elapsed(), outputs)
    });
    let start = Instant::now();
    for stream in &streams {
        stream.synchronize().expect("synchronize");
    }
    let gpu_wait = start.elapsed();
    let start = Instant::now();
    let finished = finish();
    let read = start.elapsed();
    let run = Run {
        loop_wall,
        gpu_wait,
        read,
        launches: outputs.iter().map(|o| o.0).sum(),
        flushes: outputs.iter().map(|o| o.1).sum(),
        problem: None,
    };
    (run, finished)
}

/// Bare launches.
fn untraced(cuda: &CudaBackend, spin: &SpinKernel, threads: usize, lists: usize) -> Run {
    let (run, ()) = on_threads(
        cuda,
        threads,
        |stream| {
            for _ in 0..lists * LAUNCHES_PER_LIST {
                spin.launch(stream, SPIN_NS).expect("launch");
            }
            (lists * LAUNCHES_PER_LIST, 0)
        },
        || (),
    );
    run
}

/// The event path: one zone per launch (`zone_begin`, then `zone_next`, one `zone_end`),
/// submit and collect after each list (as `ours` in `benches/cuda.rs`).
fn events(
    cuda: &CudaBackend,
    spin: &SpinKernel,
    ctx: &TracingContext<CudaBackend>,
    threads: usize,
    lists: usize,
) -> Run {
    let before = ctx.stats();
    let (mut run, after) = on_threads(
        cuda,
        threads,
        |stream| {
            for _ in 0..lists {
                let mut list = ctx.list();
                list.zone_begin(stream, location!("launch")).expect("begin");
                spin.launch(stream, SPIN_NS).expect("launch");
                for _ in 1..LAUNCHES_PER_LIST {
                    list.zone_next(stream, location!("launch")).expect("next");
                    spin.launch(stream, SPIN_NS).expect("launch");
                }
                list.zone_end(stream).expect("end");
                ctx.submit(list).expect("submit");
                ctx.collect().expect("collect");
            }
            (lists * LAUNCHES_PER_LIST, 0)
        },
        || {
            ctx.flush().expect("flush");
            ctx.stats()
        },
    );
    run.problem = events_problem(&before, &after, run.launches);
    run
}

/// What the `TracingContext`'s counters say went wrong in a run of `launches` zones, if
/// anything.
fn events_problem(before: &Stats, after: &Stats, launches: usize) -> Option<String> {
    let zones = after.zones_emitted - before.zones_emitted;
    let dropped = after.dropped_zones - before.dropped_zones;
    let failed = after.lists_failed - before.lists_failed;
    let ok = zones == launches && dropped == 0 && failed == 0 && after.in_use == 0;
    (!ok).then(|| {
        format!(
            "zones emitted {zones} of {launches} launches, dropped {dropped}, lists failed {failed}, \
             slots still in use {}",
            after.in_use
        )
    })
}

/// The CUPTI path: one zone around each list of launches, submitted; a collector thread calls
/// `collect()` every `COLLECT_PERIOD` while the threads record (CUPTI hands its buffers over
/// on its own period, so there is nothing for the recording threads to do); the final
/// `flush()` after the GPU wait.
fn cupti(
    cuda: &CudaBackend,
    spin: &SpinKernel,
    ctx: &TracingContext<CuptiBackend>,
    threads: usize,
    lists: usize,
) -> Run {
    let before = ctx.stats();
    let recording = AtomicBool::new(true);
    let (mut run, after) = std::thread::scope(|s| {
        let collector = s.spawn(|| {
            while recording.load(Ordering::Acquire) {
                ctx.collect().expect("collect");
                std::thread::sleep(COLLECT_PERIOD);
            }
        });
        let out = on_threads(
            cuda,
            threads,
            |stream| {
                for _ in 0..lists {
                    let mut list = ctx.list();
                    {
                        let _zone = list.zone(stream, location!("list"));
                        for _ in 0..LAUNCHES_PER_LIST {
                            spin.launch(stream, SPIN_NS).expect("launch");
                        }
                    }
                    ctx.submit(list).expect("submit");
                }
                (lists * LAUNCHES_PER_LIST, 0)
            },
            || {
                recording.store(false, Ordering::Release);
                ctx.flush().expect("flush");
                ctx.stats()
            },
        );
        collector.join().expect("collector");
        out
    });
    run.problem = cupti_problem(&before, &after, run.launches, threads * lists);
    run
}

/// What the CUPTI context's counters say went wrong in a run of `launches` launches in
/// `lists` zones, if anything.
fn cupti_problem(before: &Stats, after: &Stats, launches: usize, lists: usize) -> Option<String> {
    let (a, b) = (&after.activity, &before.activity);
    let activities = a.activities - b.activities;
    let zones = after.zones_emitted - before.zones_emitted - activities;
    let dropped = a.losses.records_dropped - b.losses.records_dropped;
    let refused = a.losses.buffers_refused - b.losses.buffers_refused;
    let empty = a.empty_zones - b.empty_zones;
    let incomplete = a.losses.records_incomplete - b.losses.records_incomplete;
    let partial = a.lists_partial - b.lists_partial;
    let ok = activities == launches
        && dropped == 0
        && zones == lists
        && empty == 0
        && incomplete == 0
        && partial == 0
        && after.in_use == 0;
    (!ok).then(|| {
        format!(
            "activity zones {activities} of {launches} launches, records dropped {dropped}, buffers refused \
             {refused}, zones {zones} of {lists} lists, empty zones {empty}, records without times \
             {incomplete}, lists without every record {partial}, slots still in use {}",
            after.in_use
        )
    })
}

/// The lists per thread and the thread counts to run, from the environment.
fn settings() -> (usize, Vec<usize>) {
    let lists = std::env::var("BENCH_CUPTI_LISTS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let threads = match std::env::var("BENCH_CUPTI_THREADS") {
        Ok(v) => v
            .split(',')
            .map(|t| t.trim().parse().expect("BENCH_CUPTI_THREADS: thread counts, e.g. 1,16"))
            .collect(),
        Err(_) => THREADS.to_vec(),
    };
    (lists, threads)
}

/// `CuptiConfig::default()`'s buffers, with `BENCH_CUPTI_BUFFERS` buffers of
/// `BENCH_CUPTI_BUFFER_MB` MiB where set.
fn tracer_config() -> TracerConfig {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let mut config = CuptiConfig::default().buffers;
    if let Some(count) = var("BENCH_CUPTI_BUFFERS") {
        config.buffer_count = count;
    }
    if let Some(mb) = var("BENCH_CUPTI_BUFFER_MB") {
        config.buffer_size = mb << 20;
    }
    config
}

/// The best figures of one configuration's runs.
#[derive(Debug, Clone, Copy)]
struct Best {
    host_ns: f64,
    per_sec: f64,
    /// Of the run with the most launches per second (the rest below too).
    gpu_wait: Duration,
    read: Duration,
    launches: usize,
    flushes: usize,
}

/// Runs one configuration: a warm-up of a tenth of the lists, then `RUNS` runs. Prints its row
/// and a `WARNING` line for each run whose counters were wrong; records it in `out`.
fn measure(
    implementation: Implementation,
    threads: usize,
    lists: usize,
    device: &str,
    out: &mut Results,
    run_once: impl Fn(usize) -> Run,
) -> (Best, bool) {
    let mut problems = Vec::new();
    let mut check = |label: String, run: &Run| {
        if let Some(problem) = &run.problem {
            let line = format!(
                "WARNING !!! {} at {threads} threads, {label}: NOT every launch became a zone: {problem}",
                implementation.name()
            );
            println!("{line}");
            eprintln!("{line}");
            problems.push(format!("{label}: {problem}"));
        }
    };
    check("warm-up".to_owned(), &run_once(lists / 10 + 1));
    let runs: Vec<Run> = (0..RUNS).map(|_| run_once(lists)).collect();
    for (i, run) in runs.iter().enumerate() {
        check(format!("run {}", i + 1), run);
    }
    let fastest =
        runs.iter().max_by(|a, b| a.launches_per_sec().total_cmp(&b.launches_per_sec())).expect("runs");
    for (i, run) in runs.iter().enumerate() {
        out.push(Record {
            group: "cupti_launch_runs".to_owned(),
            implementation: implementation.name().to_owned(),
            mode: format!("run {}", i + 1),
            threads,
            ns_per_op: Some(run.host_ns_per_launch(threads)),
            zones_per_sec: Some(run.launches_per_sec()),
            samples: Some(run.launches as u64),
            note: format!("one run: host ns per launch per thread, e2e launches/s; device {device}"),
            ..Record::default()
        });
    }
    let best = Best {
        host_ns: fastest.host_ns_per_launch(threads),
        per_sec: fastest.launches_per_sec(),
        gpu_wait: fastest.gpu_wait,
        read: fastest.read,
        launches: fastest.launches,
        flushes: fastest.flushes,
    };
    let ok = problems.is_empty();
    println!(
        "{:<9} {:>7} {:>15.0} {:>16.0} {:>12.1} {:>13.2} {:>8} {:>11}",
        implementation.name(),
        threads,
        best.host_ns,
        best.per_sec,
        best.gpu_wait.as_secs_f64() * 1e3,
        best.read.as_secs_f64() * 1e3,
        best.flushes,
        if ok { "yes" } else { "NO" }
    );
    out.push(Record {
        group: "cupti_launch".to_owned(),
        implementation: implementation.name().to_owned(),
        mode: implementation.mode().to_owned(),
        threads,
        ns_per_op: Some(best.host_ns),
        zones_per_sec: Some(best.per_sec),
        samples: Some(best.launches as u64),
        note: format!(
            "the run of {RUNS} with the most e2e launches (GPU zones)/s, and its host ns per launch per \
             thread (recording loops); its GPU wait {:.1} ms, final flush {:.2} ms, backpressure flushes {}; \
             every launch a zone: {}; device {device}",
            best.gpu_wait.as_secs_f64() * 1e3,
            best.read.as_secs_f64() * 1e3,
            best.flushes,
            if ok { "yes".to_owned() } else { format!("NO ({})", problems.join("; ")) }
        ),
        ..Record::default()
    });
    (best, ok)
}

fn main() {
    let cuda = match CudaBackend::new(0) {
        Ok(cuda) => cuda,
        Err(e) if e.kind() == Some(ErrorKind::NoDevice) => {
            eprintln!("SKIPPED: no CUDA device ({e}): benches/cupti.rs measures nothing here");
            return;
        }
        Err(e) => panic!("the CUDA driver is present but unusable: {e}"),
    };
    let spin = SpinKernel::load(&cuda).expect("load the spin kernel");
    let (lists, thread_counts) = settings();
    let device = cuda.context().name().unwrap_or_else(|_| "unknown".to_owned());
    println!(
        "device: {device}; {} CPU cores; spin kernel of {SPIN_NS} ns; {LAUNCHES_PER_LIST} launches per list; \
         {lists} lists per thread; best of {RUNS}",
        results::cores_available()
    );
    println!(
        "{:<9} {:>7} {:>15} {:>16} {:>12} {:>13} {:>8} {:>11}",
        "impl",
        "threads",
        "host ns/launch",
        "e2e launches/s",
        "GPU wait ms",
        "final flush ms",
        "flushes",
        "all zones"
    );

    let mut out = Results::default();
    let mut best: HashMap<(Implementation, usize), (Best, bool)> = HashMap::new();
    for &threads in &thread_counts {
        let figures = measure(Implementation::Untraced, threads, lists, &device, &mut out, |n| {
            untraced(&cuda, &spin, threads, n)
        });
        best.insert((Implementation::Untraced, threads), figures);
    }
    let mut events_config = Config::default();
    events_config.initial_capacity = 1024;
    let events_ctx = TracingContext::builder(cuda.clone()).config(events_config).build().expect("context");
    for &threads in &thread_counts {
        let figures = measure(Implementation::Events, threads, lists, &device, &mut out, |n| {
            events(&cuda, &spin, &events_ctx, threads, n)
        });
        best.insert((Implementation::Events, threads), figures);
    }

    // CUPTI last: it slows every launch in the process while it is on.
    let started = Instant::now();
    let tracer = tracer_config();
    // `BENCH_CUPTI_CALLBACK=0`: no launch callback (a diagnostic: what the callback costs; the
    // user zones then get no work and the check reports them empty).
    let callback = std::env::var("BENCH_CUPTI_CALLBACK").map_or(true, |v| v != "0");
    let config = CuptiConfig { buffers: tracer, launch_callback: callback, ..CuptiConfig::default() };
    let backend = match CuptiBackend::with_config(cuda.clone(), config) {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("SKIPPED: cupti: the CuptiBackend could not be made ({e}): no cupti rows");
            out.write("cupti");
            return;
        }
    };
    let ctx = TracingContext::builder(backend).name("gpu0").build().expect("context");
    println!(
        "CuptiBackend made in {:.1} ms ({} buffers of {} MiB)",
        started.elapsed().as_secs_f64() * 1e3,
        tracer.buffer_count,
        tracer.buffer_size >> 20
    );
    for &threads in &thread_counts {
        let figures = measure(Implementation::Cupti, threads, lists, &device, &mut out, |n| {
            cupti(&cuda, &spin, &ctx, threads, n)
        });
        best.insert((Implementation::Cupti, threads), figures);
    }
    let stats = ctx.stats();
    println!("CUPTI context at the end: {stats:?}");
    let started = Instant::now();
    drop(ctx);
    println!("CUPTI context dropped in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);

    goals(&best, &mut out);
    interleaved(&cuda, &spin, &events_ctx, &thread_counts, lists, config, &mut out);
    out.write("cupti");
}

/// Rounds of the interleaved part: `BENCH_CUPTI_ROUNDS`, default 5 (0 skips it).
fn rounds() -> usize {
    std::env::var("BENCH_CUPTI_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5)
}

/// The goals again, from rounds that take turns in this process: each round runs `untraced`
/// and `events` (CUPTI off), then makes a `CuptiBackend` and its context, warms it up, runs
/// `cupti`, and drops them (CUPTI off again), at 1 and 16 threads (those of
/// `BENCH_CUPTI_THREADS`). Every ratio is of figures from the same round; each round's
/// ratios are printed and recorded, then their medians and how many rounds met each goal.
fn interleaved(
    cuda: &CudaBackend,
    spin: &SpinKernel,
    events_ctx: &TracingContext<CudaBackend>,
    thread_counts: &[usize],
    lists: usize,
    config: CuptiConfig,
    out: &mut Results,
) {
    let rounds = rounds();
    let threads: Vec<usize> = [1, 16].into_iter().filter(|t| thread_counts.contains(t)).collect();
    if rounds == 0 || threads.is_empty() {
        return;
    }
    println!(
        "interleaved: {rounds} rounds, each untraced, events, then a CuptiBackend made, warmed up, cupti, \
         dropped, at {threads:?} threads; ratios of the same round's figures"
    );
    println!(
        "{:>5} {:>7} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12} {:>11} {:>11} {:>11}",
        "round",
        "threads",
        "untr ns",
        "events ns",
        "cupti ns",
        "untr /s",
        "events /s",
        "cupti /s",
        "cupti/untr",
        "cupti/untr",
        "cupti/evt"
    );
    println!("{:>5} {:>7} {:>98}", "", "", "host ns     launches/s  zones/s");
    let mut ratios: [Vec<f64>; 3] = Default::default();
    for round in 1..=rounds {
        let mut runs: HashMap<(Implementation, usize), Run> = HashMap::new();
        for &t in &threads {
            runs.insert((Implementation::Untraced, t), untraced(cuda, spin, t, lists));
            runs.insert((Implementation::Events, t), events(cuda, spin, events_ctx, t, lists));
        }
        let backend = match CuptiBackend::with_config(cuda.clone(), config) {
            Ok(backend) => backend,
            Err(e) => {
                println!(
                    "interleaved: round {round}: the CuptiBackend could not be made again ({e}): stopped"
                );
                return;
            }
        };
        let ctx = TracingContext::builder(backend).name("gpu0").build().expect("context");
        let _ = cupti(cuda, spin, &ctx, threads[0], lists / 10 + 1);
        for &t in &threads {
            runs.insert((Implementation::Cupti, t), cupti(cuda, spin, &ctx, t, lists));
        }
        drop(ctx);
        for &t in &threads {
            let run = |i| &runs[&(i, t)];
            let (u, e, c) =
                (run(Implementation::Untraced), run(Implementation::Events), run(Implementation::Cupti));
            for (i, r) in [u, e, c].into_iter().enumerate() {
                if let Some(problem) = &r.problem {
                    let name =
                        [Implementation::Untraced, Implementation::Events, Implementation::Cupti][i].name();
                    println!("WARNING !!! interleaved round {round}, {name} at {t} threads: {problem}");
                }
            }
            let host = c.host_ns_per_launch(t) / u.host_ns_per_launch(t);
            let rate = c.launches_per_sec() / u.launches_per_sec();
            let vs_events = c.launches_per_sec() / e.launches_per_sec();
            println!(
                "{round:>5} {t:>7} {:>10.0} {:>10.0} {:>10.0} {:>12.0} {:>12.0} {:>12.0} {host:>11.3} {rate:>11.3} {vs_events:>11.3}",
                u.host_ns_per_launch(t),
                e.host_ns_per_launch(t),
                c.host_ns_per_launch(t),
                u.launches_per_sec(),
                e.launches_per_sec(),
                c.launches_per_sec(),
            );
            if t == 1 {
                ratios[0].push(host);
            }
            if t == 16 {
                ratios[1].push(rate);
                ratios[2].push(vs_events);
            }
            for (what, value) in [
                ("cupti/untraced host ns per launch", host),
                ("cupti/untraced launches/s e2e", rate),
                ("cupti/events zones/s e2e", vs_events),
            ] {
                out.push(Record {
                    group: "cupti_interleaved".to_owned(),
                    implementation: "cupti".to_owned(),
                    mode: format!("round {round}: {what}"),
                    threads: t,
                    ns_per_op: Some(value),
                    samples: Some(c.launches as u64),
                    note: format!(
                        "ratio (in ns_per_op) of round {round}'s runs: untraced {:.0} ns/launch {:.0}/s, events \
                         {:.0} ns/launch {:.0}/s, cupti {:.0} ns/launch {:.0}/s",
                        u.host_ns_per_launch(t),
                        u.launches_per_sec(),
                        e.host_ns_per_launch(t),
                        e.launches_per_sec(),
                        c.host_ns_per_launch(t),
                        c.launches_per_sec()
                    ),
                    ..Record::default()
                });
            }
        }
    }
    println!("interleaved goals (the median of the rounds; rounds that met the goal):");
    let goals = [
        ("cupti/untraced host ns per launch", 1, true, 1.3),
        ("cupti/untraced launches/s e2e", 16, false, 0.90),
        ("cupti/events zones/s e2e", 16, false, 2.0),
    ];
    for ((what, threads, at_most, goal), values) in goals.into_iter().zip(ratios.iter_mut()) {
        if values.is_empty() {
            println!("{what:<36} {threads:>7}  not measured (threads not run)");
            continue;
        }
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        let met = values.iter().filter(|&&v| if at_most { v <= goal } else { v >= goal }).count();
        let goal_text = format!("{} {goal:.2}", if at_most { "<=" } else { ">=" });
        println!(
            "{what:<36} {threads:>7} median {median:>6.3} {goal_text:>8}  met in {met} of {} rounds (range {:.3} to {:.3})",
            values.len(),
            values[0],
            values[values.len() - 1]
        );
        out.push(Record {
            group: "cupti_interleaved_goals".to_owned(),
            implementation: "cupti".to_owned(),
            mode: what.to_owned(),
            threads,
            ns_per_op: Some(median),
            note: format!("median of {} rounds (in ns_per_op), goal {goal_text}: met in {met}", values.len()),
            ..Record::default()
        });
    }
}

/// The goals, as ratios of this run's figures: a table with verdicts.
fn goals(best: &HashMap<(Implementation, usize), (Best, bool)>, out: &mut Results) {
    use Implementation::{Cupti, Events, Untraced};
    type Figure = fn(&Best) -> f64;
    let host: Figure = |b| b.host_ns;
    let rate: Figure = |b| b.per_sec;
    // (what, threads, numerator, denominator, figure, at most (else at least), goal)
    let rows: [(&str, usize, Implementation, Implementation, Figure, bool, f64); 3] = [
        ("cupti/untraced host ns per launch", 1, Cupti, Untraced, host, true, 1.3),
        ("cupti/untraced launches/s e2e", 16, Cupti, Untraced, rate, false, 0.90),
        ("cupti/events zones/s e2e", 16, Cupti, Events, rate, false, 2.0),
    ];
    println!("goals (ratios of this run's figures):");
    println!("{:<36} {:>7} {:>7} {:>8}  verdict", "ratio", "threads", "value", "goal");
    for (what, threads, num, den, figure, at_most, goal) in rows {
        let goal_text = format!("{} {goal:.2}", if at_most { "<=" } else { ">=" });
        let (Some(&(a, a_ok)), Some(&(b, b_ok))) = (best.get(&(num, threads)), best.get(&(den, threads)))
        else {
            println!("{what:<36} {threads:>7} {:>7} {goal_text:>8}  not measured (threads not run)", "-");
            continue;
        };
        let ratio = figure(&a) / figure(&b);
        let met = if at_most { ratio <= goal } else { ratio >= goal };
        let mut verdict = if met { "met" } else { "not met" }.to_owned();
        if !(a_ok && b_ok) {
            verdict.push_str(" (but not every launch became a zone: see WARNING)");
        }
        println!("{what:<36} {threads:>7} {ratio:>7.3} {goal_text:>8}  {verdict}");
        out.push(Record {
            group: "cupti_goals".to_owned(),
            implementation: num.name().to_owned(),
            mode: what.to_owned(),
            threads,
            ns_per_op: Some(ratio),
            note: format!("ratio (in ns_per_op) {ratio:.3}, goal {goal_text}: {verdict}"),
            ..Record::default()
        });
    }
}
