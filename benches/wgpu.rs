//! `wgpu` (feature `wgpu`): the crate's wgpu backend against `wgpu-profiler` 0.28, the
//! profiler wgpu programs use, and against bare timestamp writes, on the same device in one
//! process (lavapipe here; any wgpu adapter, the first one found).
//!
//! ```text
//! cargo bench -p gpu-event-pool-benches --features wgpu --bench wgpu
//! ```
//!
//! Two groups, each in interleaved rounds (the variants take turns within one process, so
//! the ratios compare rounds run side by side on a shared machine):
//!
//! 1. **Per scope, one thread.** One frame is one encoder with 64 scopes, each begun and
//!    ended at once (two timestamps), timed for the recording only; the encoder is made
//!    before, and resolved, submitted and read back after, untimed (the device is waited for
//!    between frames, so lavapipe's own threads do not run during a timed window):
//!    - `crate_scope`: `WgpuList::scope` on the frame's `wgpu::CommandEncoder` (a guard; its
//!      begin and end each take a slot and a query and write `CommandEncoder::write_timestamp`);
//!    - `crate_zone_next`: `zone_begin`, 62 `zone_next`, `zone_end`: 64 adjacent zones in 65
//!      timestamps, the crate's own way of timing back-to-back work;
//!    - `wgpu_profiler`: `GpuProfiler::scope` (debug groups off, as lavapipe needs);
//!    - `bare_pair`: two `write_timestamp` into a query set made beforehand: the floor.
//! 2. **Scopes per second, 1, 2, 4, 8 threads.** Each thread records 4 encoders of 256
//!    scopes of its own; wgpu-profiler's one profiler is shared by `&self`, as its docs say it
//!    supports. Timed from a barrier until the last thread has recorded its scopes (resolving
//!    and submitting are not: wgpu-profiler resolves on one thread, with `&mut self`).
//!
//! `BENCH_WGPU_ROUNDS` sets the rounds (default 40 per variant and 12 per thread count). The
//! output is a table per group: each variant's minimum, 25th percentile and median round, and
//! the ratios at the 25th percentile. Without an adapter it says `SKIPPED` and returns.

use gpu_event_pool::backend::wgpu::{WgpuBackend, WgpuQueue};
use gpu_event_pool::{location, SourceLocation, TracingContext, WgpuList};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use wgpu_profiler::{GpuProfiler, GpuProfilerSettings};

const SCOPES_PER_FRAME: u32 = 64;
const FRAMES_PER_ROUND: usize = 20;
const THREAD_COUNTS: [usize; 4] = [1, 2, 4, 8];
const ENCODERS_PER_THREAD: usize = 4;
const SCOPES_PER_ENCODER: u32 = 256;

static SCOPE: &SourceLocation = location!("dispatch");

type Ctx = TracingContext<WgpuBackend>;

struct Bench {
    device: wgpu::Device,
    queue: wgpu::Queue,
    ctx: Ctx,
    lane: WgpuQueue,
    profiler: GpuProfiler,
    bare: wgpu::QuerySet,
    period: f32,
}

fn main() {
    let Some((device, queue, adapter)) = open() else {
        println!("SKIPPED: no wgpu adapter with TIMESTAMP_QUERY_INSIDE_ENCODERS");
        return;
    };
    let rounds: usize = std::env::var("BENCH_WGPU_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(40);
    let backend = WgpuBackend::new(&device, &queue).expect("backend");
    let lane = backend.queue();
    let ctx = TracingContext::builder(backend).capacity(4096, 1 << 20).build().expect("context");
    let settings = GpuProfilerSettings { enable_debug_groups: false, ..Default::default() };
    let profiler = GpuProfiler::new(&device, settings).expect("wgpu-profiler");
    let bare = device.create_query_set(&wgpu::QuerySetDescriptor {
        label: Some("bare"),
        ty: wgpu::QueryType::Timestamp,
        count: 2 * SCOPES_PER_FRAME,
    });
    let period = queue.get_timestamp_period();
    let mut bench = Bench { device, queue, ctx, lane, profiler, bare, period };
    println!("adapter: {adapter}; {} CPUs", std::thread::available_parallelism().map_or(0, |n| n.get()));

    // `BENCH_WGPU_VARIANT=crate_scope` (or another): that variant alone, for a profiler.
    if let Ok(only) = std::env::var("BENCH_WGPU_VARIANT") {
        let variant = VARIANTS.into_iter().find(|v| v.name() == only).expect("a variant's name");
        let ns: Vec<f64> = (0..rounds).map(|_| round(&mut bench, variant)).collect();
        println!("{only}: {:?} ns per scope (min, p25, median)", quartiles(ns));
        return;
    }
    per_scope(&mut bench, rounds);
    threads(&mut bench, rounds.div_ceil(3).max(3));
    let stats = bench.ctx.stats();
    println!(
        "\ncrate: {} zones emitted, {} dropped, {} lists failed",
        stats.zones_emitted, stats.dropped_zones, stats.lists_failed
    );
}

/// The first adapter with timestamps on encoders, and a device with every timestamp feature
/// it has.
fn open() -> Option<(wgpu::Device, wgpu::Queue, String)> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default())).ok()?;
    let wanted = GpuProfiler::ALL_WGPU_TIMER_FEATURES;
    if !adapter
        .features()
        .contains(wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    {
        return None;
    }
    let info = adapter.get_info();
    let descriptor =
        wgpu::DeviceDescriptor { required_features: adapter.features() & wanted, ..Default::default() };
    let (device, queue) = pollster::block_on(adapter.request_device(&descriptor)).ok()?;
    Some((device, queue, format!("{} ({:?}, driver {})", info.name, info.backend, info.driver_info)))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    CrateScope,
    CrateZoneNext,
    WgpuProfiler,
    BarePair,
}

const VARIANTS: [Variant; 4] =
    [Variant::CrateScope, Variant::CrateZoneNext, Variant::WgpuProfiler, Variant::BarePair];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::CrateScope => "crate_scope",
            Self::CrateZoneNext => "crate_zone_next",
            Self::WgpuProfiler => "wgpu_profiler",
            Self::BarePair => "bare_pair",
        }
    }
}

/// One round of `FRAMES_PER_ROUND` frames of `variant`: nanoseconds of recording per scope.
fn round(bench: &mut Bench, variant: Variant) -> f64 {
    let mut recording = Duration::ZERO;
    for _ in 0..FRAMES_PER_ROUND {
        match variant {
            Variant::CrateScope | Variant::CrateZoneNext => {
                let mut encoder = bench.device.create_command_encoder(&Default::default());
                let mut list = bench.ctx.wgpu_list(&bench.lane);
                let started = Instant::now();
                if variant == Variant::CrateScope {
                    for _ in 0..SCOPES_PER_FRAME {
                        drop(list.scope(&mut encoder, SCOPE));
                    }
                } else {
                    zone_next_frame(&mut list, &mut encoder);
                }
                recording += started.elapsed();
                list.resolve(&mut encoder).expect("resolve");
                bench.ctx.queue_submit(&bench.lane, [encoder.finish()], [list]).expect("queue_submit");
                wait(&bench.device);
                bench.ctx.collect().expect("collect");
            }
            Variant::WgpuProfiler => {
                let mut encoder = bench.device.create_command_encoder(&Default::default());
                let started = Instant::now();
                for _ in 0..SCOPES_PER_FRAME {
                    drop(bench.profiler.scope("dispatch", &mut encoder));
                }
                recording += started.elapsed();
                bench.profiler.resolve_queries(&mut encoder);
                bench.queue.submit([encoder.finish()]);
                bench.profiler.end_frame().expect("end_frame");
                wait(&bench.device);
                while bench.profiler.process_finished_frame(bench.period).is_some() {}
            }
            Variant::BarePair => {
                let mut encoder = bench.device.create_command_encoder(&Default::default());
                let started = Instant::now();
                for i in 0..SCOPES_PER_FRAME {
                    encoder.write_timestamp(&bench.bare, 2 * i);
                    encoder.write_timestamp(&bench.bare, 2 * i + 1);
                }
                recording += started.elapsed();
                bench.queue.submit([encoder.finish()]);
                wait(&bench.device);
            }
        }
    }
    recording.as_nanos() as f64 / (FRAMES_PER_ROUND as f64 * f64::from(SCOPES_PER_FRAME))
}

fn zone_next_frame(list: &mut WgpuList, encoder: &mut wgpu::CommandEncoder) {
    let _ = list.zone_begin(encoder, SCOPE);
    for _ in 1..SCOPES_PER_FRAME {
        let _ = list.zone_next(encoder, SCOPE);
    }
    let _ = list.zone_end(encoder);
}

fn wait(device: &wgpu::Device) {
    let _ = device.poll(wgpu::PollType::wait_indefinitely());
}

/// Minimum, 25th percentile and median.
fn quartiles(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    [v[0], v[(v.len() - 1) / 4], v[(v.len() - 1) / 2]]
}

fn per_scope(bench: &mut Bench, rounds: usize) {
    // Warm-up: pools, chunks, the driver.
    for variant in VARIANTS {
        round(bench, variant);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    for _ in 0..rounds {
        for (i, variant) in VARIANTS.into_iter().enumerate() {
            ns[i].push(round(bench, variant));
        }
    }
    println!("\nper scope, 1 thread, ns of recording ({rounds} rounds of {FRAMES_PER_ROUND} frames x {SCOPES_PER_FRAME} scopes each)");
    println!("| variant | min | p25 | median | p25 / bare_pair | p25 / wgpu_profiler |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let q: Vec<[f64; 3]> = ns.into_iter().map(quartiles).collect();
    let bare = q[3][1];
    let profiler = q[2][1];
    for (variant, [min, p25, median]) in VARIANTS.into_iter().zip(&q) {
        println!(
            "| {} | {min:.0} | {p25:.0} | {median:.0} | {:.2} | {:.2} |",
            variant.name(),
            p25 / bare,
            p25 / profiler
        );
    }
}

/// Scopes recorded per second by `threads` threads at once, each on encoders of its own.
fn thread_round(bench: &mut Bench, threads: usize, profiler: bool) -> f64 {
    let shared: &Bench = bench;
    let barrier = Barrier::new(threads + 1);
    let (elapsed, recorded) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (barrier, bench) = (&barrier, shared);
                s.spawn(move || {
                    // Each thread's own start, after the barrier: the window runs from the
                    // first start to the last end.
                    let mut encoders = Vec::new();
                    let mut lists = Vec::new();
                    if profiler {
                        let mut raw: Vec<wgpu::CommandEncoder> = (0..ENCODERS_PER_THREAD)
                            .map(|_| bench.device.create_command_encoder(&Default::default()))
                            .collect();
                        barrier.wait();
                        let start = Instant::now();
                        for encoder in &mut raw {
                            for _ in 0..SCOPES_PER_ENCODER {
                                drop(bench.profiler.scope("dispatch", encoder));
                            }
                        }
                        (start, Instant::now(), raw, encoders, lists)
                    } else {
                        for _ in 0..ENCODERS_PER_THREAD {
                            encoders.push(bench.device.create_command_encoder(&Default::default()));
                            lists.push(bench.ctx.wgpu_list(&bench.lane));
                        }
                        barrier.wait();
                        let start = Instant::now();
                        for (encoder, list) in encoders.iter_mut().zip(&mut lists) {
                            for _ in 0..SCOPES_PER_ENCODER {
                                drop(list.scope(encoder, SCOPE));
                            }
                        }
                        (start, Instant::now(), Vec::new(), encoders, lists)
                    }
                })
            })
            .collect();
        barrier.wait();
        let results: Vec<_> = workers.into_iter().map(|w| w.join().expect("worker")).collect();
        let first = results.iter().map(|r| r.0).min().expect("a thread");
        let last = results.iter().map(|r| r.1).max().expect("a thread");
        (last - first, results)
    });
    // Untimed: resolve, submit, read back.
    let mut command_buffers = Vec::new();
    let mut all_lists = Vec::new();
    let mut raw_encoders = Vec::new();
    for (_, _, raw, encoders, lists) in recorded {
        raw_encoders.extend(raw);
        for (mut encoder, mut list) in encoders.into_iter().zip(lists) {
            list.resolve(&mut encoder).expect("resolve");
            command_buffers.push(encoder.finish());
            all_lists.push(list);
        }
    }
    if profiler {
        // wgpu-profiler resolves with `&mut self`: on one thread, after the others, into an
        // encoder submitted after theirs.
        let mut resolve = bench.device.create_command_encoder(&Default::default());
        bench.profiler.resolve_queries(&mut resolve);
        command_buffers.extend(raw_encoders.into_iter().map(|e| e.finish()));
        command_buffers.push(resolve.finish());
        bench.queue.submit(command_buffers);
        bench.profiler.end_frame().expect("end_frame");
        wait(&bench.device);
        while bench.profiler.process_finished_frame(bench.period).is_some() {}
    } else {
        bench.ctx.queue_submit(&bench.lane, command_buffers, all_lists).expect("queue_submit");
        wait(&bench.device);
        bench.ctx.collect().expect("collect");
    }
    let scopes = threads * ENCODERS_PER_THREAD * SCOPES_PER_ENCODER as usize;
    scopes as f64 / elapsed.as_secs_f64()
}

fn threads(bench: &mut Bench, rounds: usize) {
    for threads in THREAD_COUNTS {
        thread_round(bench, threads, true);
        thread_round(bench, threads, false);
    }
    println!(
        "\nscopes per second, {rounds} rounds per thread count, each thread {ENCODERS_PER_THREAD} encoders x {SCOPES_PER_ENCODER} scopes"
    );
    println!("| threads | wgpu_profiler min / p25 / median | crate min / p25 / median | crate / wgpu_profiler at the median |");
    println!("| ---: | ---: | ---: | ---: |");
    for threads in THREAD_COUNTS {
        let (mut theirs, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            theirs.push(thread_round(bench, threads, true));
            ours.push(thread_round(bench, threads, false));
        }
        let [t0, t1, t2] = quartiles(theirs).map(|v| v / 1e6);
        let [o0, o1, o2] = quartiles(ours).map(|v| v / 1e6);
        println!(
            "| {threads} | {t0:.2}M / {t1:.2}M / {t2:.2}M | {o0:.2}M / {o1:.2}M / {o2:.2}M | {:.2} |",
            o2 / t2
        );
    }
}
