//! The demo on CUPTI (`--backend cupti`): CUDA device 0 traced through CUPTI's activity
//! records rather than the event pool. Each command buffer is a user zone on its stream
//! (`CuptiContext::zone`), each dispatch a user zone inside it around one spin kernel launch,
//! which CUPTI reports as a kernel zone nested in the dispatch. The streams, the threads, the
//! kernels and their durations are the CUDA path's; CUPTI's context is process-wide and has
//! no pool, so `--devices` must be 1 and `--capacity`, `--initial-capacity` and `--window`
//! do not apply.

use super::{check_nesting, dispatch_location, Args, DemoResult, StopCollecting, KERNELS};
use cudarc::driver::CudaStream;
use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
use gpu_event_pool::backend::cupti::{CuptiBuilder, CuptiCollected, CuptiContext, CuptiStats, TracerConfig};
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Verbosity};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The device, its context and its streams, shared by the recording and collector threads.
struct Gpu {
    spin: SpinKernel,
    ctx: CuptiContext,
    /// A stream records one command buffer at a time, as in the CUDA path.
    streams: Vec<Mutex<Arc<CudaStream>>>,
}

/// Options of the other backends that CUPTI cannot honour: refused rather than ignored.
fn check_options(args: &Args) -> DemoResult<()> {
    if args.devices != 1 {
        return Err(format!(
            "--backend cupti runs on one device (CUDA device 0: CUPTI is process-wide), not --devices {}",
            args.devices
        )
        .into());
    }
    if args.cpu_spans() {
        return Err("--cpu-spans is not supported with --backend cupti".into());
    }
    Ok(())
}

/// The CUPTI buffers: `--cupti-buffers` and `--cupti-buffer-kib`, `TracerConfig`'s defaults
/// for what is not given.
fn tracer_config(args: &Args) -> TracerConfig {
    let default = CuptiBuilder::DEFAULT_TRACER;
    TracerConfig {
        buffer_size: args.cupti_buffer_kib.map_or(default.buffer_size, |kib| kib as usize * 1024),
        buffer_count: args.cupti_buffers.map_or(default.buffer_count, |n| n as usize),
    }
}

/// `--backend cupti`: the CUDA path's workload on one device, traced by a `CuptiContext`.
pub(super) fn run_cupti(args: &Args) -> DemoResult<()> {
    check_options(args)?;
    let cuda = CudaBackend::new(0).map_err(|e| format!("no CUDA device: {e}"))?;
    let spin =
        SpinKernel::load(&cuda).map_err(|e| format!("cannot load the spin kernel on CUDA device 0: {e}"))?;
    let trace = ChromeTrace::create(&args.trace)
        .map_err(|e| format!("cannot create trace file {}: {e}", args.trace.display()))?;
    let memory = MemorySink::new();
    let config = tracer_config(args);
    #[allow(unused_mut)]
    let mut builder =
        CuptiContext::builder().name("gpu 0").tracer(config).sink(trace.sink()).sink(memory.clone());
    #[cfg(feature = "tracy")]
    if args.tracy || args.tracy_wait.is_some() {
        // One Tracy GPU context per stream, on the CUPTI context's host clock (docs/tracy.md).
        builder = builder.sink(
            gpu_event_pool::sink::tracy::TracySink::new(gpu_event_pool::backend::cupti::host_now_ns)
                .with_plots(),
        );
    }
    let ctx = builder.build().map_err(|e| format!("cannot start CUPTI on CUDA device 0: {e}"))?;
    // The context's sink keeps the file open; it is closed when the context goes.
    drop(trace);
    let mut streams = Vec::new();
    for i in 0..args.streams {
        let stream = cuda.new_stream()?;
        ctx.name_stream(&stream, &format!("queue {i}"))?;
        streams.push(Mutex::new(stream));
    }
    let gpu = Gpu { spin, ctx, streams };
    #[cfg(feature = "tracy")]
    super::wait_for_tracy(args);

    let bar = ProgressBar::new(u64::from(args.threads) * u64::from(args.lists)).with_style(
        ProgressStyle::with_template("{spinner} recording {bar:40} {pos}/{len} command buffers  {msg}")?,
    );
    let recording = AtomicBool::new(true);
    let started = Instant::now();
    let (record_time, collects) = std::thread::scope(|s| -> DemoResult<(Duration, usize)> {
        let collectors: Vec<_> =
            (0..args.collectors).map(|_| s.spawn(|| collect_while_recording(&gpu.ctx, &recording))).collect();
        let stop = StopCollecting(&recording);
        let workers: Vec<_> = (0..args.threads)
            .map(|t| {
                let (gpu, bar) = (&gpu, &bar);
                std::thread::Builder::new()
                    .name(format!("recorder {t}"))
                    .spawn_scoped(s, move || record_thread(t, args, gpu, bar))
            })
            .collect::<Result<_, _>>()?;
        for worker in workers {
            worker.join().map_err(|_| "a recording thread panicked")??;
        }
        let record_time = started.elapsed();
        drop(stop);
        let mut collects = 0;
        for collector in collectors {
            collects += collector.join().map_err(|_| "a collector panicked")??;
        }
        bar.finish_with_message(format!("{collects} collects emitted zones while recording"));
        Ok((record_time, collects))
    })?;
    for (i, stream) in gpu.streams.iter().enumerate() {
        let stream = stream.lock().unwrap_or_else(|p| p.into_inner());
        stream.synchronize().map_err(|e| format!("cannot synchronize stream {i}: {e}"))?;
    }
    let flushed = gpu.ctx.flush().map_err(|e| format!("the final CUPTI flush failed: {e}"))?;
    let stats = gpu.ctx.stats();
    drop(gpu); // the context closes the trace file
    let zones = memory.zones();
    report(args, &Report { config, record_time, collects, flushed, stats, zones: &zones })
}

/// What the run left for the summary.
struct Report<'a> {
    config: TracerConfig,
    record_time: Duration,
    collects: usize,
    flushed: CuptiCollected,
    stats: CuptiStats,
    zones: &'a [Zone],
}

/// Prints the summary; fails when the zones do not nest or the context did not account for
/// every zone.
fn report(args: &Args, r: &Report<'_>) -> DemoResult<()> {
    let stats = &r.stats;
    let lists = u64::from(args.threads) * u64::from(args.lists);
    let per_list = |level: Verbosity, n: u32| if args.verbosity.records(level) { u64::from(n) } else { 0 };
    let expected_user = lists * (per_list(Verbosity::Coarse, 1) + per_list(Verbosity::Fine, args.zones));
    let expected_kernels = lists * u64::from(args.zones);
    let emitted = stats.user_zones + stats.activities;
    println!();
    println!(
        "backend            cupti (CUPTI activity records, CUDA device 0), {} collector thread(s){}",
        args.collectors,
        if args.recorders_collect {
            ", and every recording thread collects after each command buffer"
        } else {
            ""
        }
    );
    println!(
        "workload           {} threads x {} command buffers x {} dispatches, {} streams, verbosity {:?}",
        args.threads, args.lists, args.zones, args.streams, args.verbosity
    );
    println!(
        "zones              {emitted} emitted ({} user zones of {expected_user}, {} activities of {expected_kernels} kernels), {} dropped ({} buffer requests refused), {} empty user zones, {} records without times",
        stats.user_zones,
        stats.activities,
        stats.records_dropped,
        stats.buffers_refused,
        stats.empty_zones,
        stats.records_incomplete
    );
    println!(
        "recording          {:.1} ms, {:.0} zones/s",
        r.record_time.as_secs_f64() * 1e3,
        emitted as f64 / r.record_time.as_secs_f64()
    );
    println!(
        "collection         {} collects by the collector threads emitted zones; the final flush emitted {} user zones and {} activities; {} pending after it",
        r.collects, r.flushed.user_zones, r.flushed.activities, stats.pending
    );
    println!(
        "cupti              {} buffers x {} KiB, clock {:?}, {} sink failures, {} late batches (records CUPTI held back)",
        r.config.buffer_count,
        r.config.buffer_size / 1024,
        stats.clock,
        stats.sink_failures,
        stats.late_batches
    );
    let nesting = check_nesting(r.zones);
    match &nesting {
        Ok(lanes) => {
            println!("nesting            ok: {} zones on {lanes} streams nest properly", r.zones.len())
        }
        Err(e) => println!("nesting            BROKEN: {e}"),
    }
    println!();
    print_durations(r.zones);
    println!();
    println!(
        "trace              {}: one process for the device, a track per stream (open in https://ui.perfetto.dev or chrome://tracing)",
        args.trace.display()
    );
    if let Err(e) = nesting {
        return Err(format!("zones do not nest: {e}").into());
    }
    if stats.sink_failures != 0 {
        return Err(format!(
            "{} sink(s) failed and were dropped: the trace or the counts miss zones",
            stats.sink_failures
        )
        .into());
    }
    if stats.pending != 0 {
        return Err(
            format!("{} records or user zones still pending after the final flush", stats.pending).into()
        );
    }
    if r.zones.len() as u64 != emitted {
        return Err(
            format!("the sinks got {} zones, the context counts {emitted} emitted", r.zones.len()).into()
        );
    }
    Ok(())
}

/// A collector thread: collects until recording stops; sleeps 500 µs after a collect that
/// emitted nothing (or found another thread collecting). Returns the collects that emitted.
fn collect_while_recording(ctx: &CuptiContext, recording: &AtomicBool) -> DemoResult<usize> {
    let mut collects = 0;
    while recording.load(Ordering::Acquire) {
        let collected = ctx.collect().map_err(|e| format!("CUPTI collect failed: {e}"))?;
        if collected.user_zones + collected.activities > 0 {
            collects += 1;
        } else {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    Ok(collects)
}

/// One recording thread: command buffers on the streams in turn (the CUDA path's order), each
/// a coarse user zone holding `--zones` dispatch zones, each around one spin kernel of the
/// CUDA path's random durations.
fn record_thread(thread: u32, args: &Args, gpu: &Gpu, bar: &ProgressBar) -> DemoResult<()> {
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(thread);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let command_buffer = location!("command buffer", Verbosity::Coarse);
    for i in 0..args.lists as usize {
        let turn = thread as usize + i;
        let stream = gpu.streams[turn % gpu.streams.len()].lock().unwrap_or_else(|p| p.into_inner());
        {
            let _list =
                args.verbosity.records(command_buffer.level).then(|| gpu.ctx.zone(&stream, command_buffer));
            for _ in 0..args.zones {
                let kernel = (next() % KERNELS.len() as u64) as usize;
                let location = dispatch_location(kernel);
                let _dispatch =
                    args.verbosity.records(location.level).then(|| gpu.ctx.zone(&stream, location));
                let base = KERNELS[kernel].1;
                let ns = base / 2 + (next() % base as u64) as i64;
                gpu.spin.launch(&stream, ns.max(0) as u64)?;
            }
        }
        // The zones are closed: the next command buffer on this stream may begin.
        drop(stream);
        if args.recorders_collect {
            gpu.ctx.collect().map_err(|e| format!("CUPTI collect failed on a recording thread: {e}"))?;
        }
        bar.inc(1);
    }
    Ok(())
}

/// Per zone name, the GPU durations of every zone the run emitted (count, mean, p50, p99, max):
/// the table the other backends print from `FrameStats`, over the whole run (CUPTI's context
/// marks no frames).
fn print_durations(zones: &[Zone]) {
    let mut by_name: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for z in zones {
        by_name.entry(z.location.name()).or_default().push(z.gpu_end_ns - z.gpu_begin_ns);
    }
    println!("zone durations over the whole run (from the MemorySink)");
    println!(
        "{:<16} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "zone", "count", "mean µs", "p50 µs", "p99 µs", "max µs"
    );
    let mut rows: Vec<_> = by_name.into_iter().collect();
    rows.sort_by_key(|(_, ns)| std::cmp::Reverse(ns.len()));
    for (name, mut ns) in rows {
        ns.sort_unstable();
        let us = |ns: i64| ns as f64 / 1e3;
        let at = |p: f64| ns[((ns.len() - 1) as f64 * p).round() as usize];
        println!(
            "{:<16} {:>8} {:>12.3} {:>12.3} {:>12.3} {:>12.3}",
            name,
            ns.len(),
            ns.iter().sum::<i64>() as f64 / ns.len() as f64 / 1e3,
            us(at(0.5)),
            us(at(0.99)),
            us(ns[ns.len() - 1])
        );
    }
}
