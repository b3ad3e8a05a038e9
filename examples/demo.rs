//! The demo workload: many threads record command buffers on a GPU (simulated by default)
//! while a collector thread drains them; prints a summary and writes a Chrome/Perfetto trace.
//!
//! ```text
//! cargo run --release --example demo -- --threads 8 --lists 500 --zones 32 --trace out.json
//! ```

use clap::Parser;
use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTraceSink;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Backend, Collected, Lane, SourceLocation, TracingContext, Verbosity};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Records command buffers from many threads and writes their GPU zones to a trace.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Recording threads.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
    /// Command buffers each thread records.
    #[arg(long, default_value_t = 200)]
    lists: u32,
    /// Dispatch zones per command buffer (each also gets one coarse command-buffer zone).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    zones: u32,
    /// Streams the command buffers are spread over (a stream records one buffer at a time).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    streams: u32,
    /// Most events the pool may grow to (zones beyond are dropped and counted).
    #[arg(long, default_value_t = 16384)]
    capacity: u32,
    /// Events created up front [default: 64, or --capacity if that is smaller].
    #[arg(long)]
    initial_capacity: Option<u32>,
    /// What to record: off, coarse (command buffers) or fine (also dispatches).
    #[arg(long, default_value = "fine")]
    verbosity: Verbosity,
    /// Where to write the Chrome/Perfetto trace.
    #[arg(long, default_value = "trace.json")]
    trace: PathBuf,
    /// Which GPU to run on.
    #[arg(long, value_enum, default_value_t = BackendKind::Sim)]
    backend: BackendKind,
    /// Also stream the zones to a Tracy profiler, one GPU lane per stream (build with
    /// `--features tracy`, or `tracy-only-localhost` to listen on the loopback interface only).
    #[cfg(feature = "tracy")]
    #[arg(long)]
    tracy: bool,
    /// Wait up to this many seconds for a Tracy profiler to connect before recording
    /// (implies `--tracy`).
    #[cfg(feature = "tracy")]
    #[arg(long, value_name = "SECS")]
    tracy_wait: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendKind {
    /// The simulated GPU (no GPU needed).
    Sim,
    /// CUDA device 0 (built with `--features cuda`): each dispatch is a real kernel that
    /// spins for its duration (`SpinKernel`).
    #[cfg(feature = "cuda")]
    Cuda,
}

/// What the demo needs of a GPU beyond the crate's `Backend`: streams and kernels.
trait DemoGpu: Backend + Clone {
    fn new_stream(&self) -> Result<Self::Stream, String>;
    /// Queues a kernel that runs for about `ns` nanoseconds.
    fn kernel(&self, stream: &Self::Stream, ns: i64) -> Result<(), String>;
}

impl DemoGpu for SimBackend {
    fn new_stream(&self) -> Result<Self::Stream, String> {
        Ok(self.stream())
    }
    fn kernel(&self, stream: &Self::Stream, ns: i64) -> Result<(), String> {
        self.launch(stream, ns);
        Ok(())
    }
}

#[cfg(feature = "cuda")]
mod cuda_gpu {
    use super::DemoGpu;
    use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
    use std::sync::OnceLock;

    static SPIN: OnceLock<SpinKernel> = OnceLock::new();

    /// Device 0, with the spin kernel loaded.
    pub(super) fn open() -> Result<CudaBackend, String> {
        let cuda = CudaBackend::new(0).map_err(|e| format!("no CUDA device: {e}"))?;
        let spin = SpinKernel::load(&cuda).map_err(|e| format!("cannot load the spin kernel: {e}"))?;
        SPIN.set(spin).map_err(|_| "the spin kernel is already loaded".to_owned())?;
        Ok(cuda)
    }

    impl DemoGpu for CudaBackend {
        fn new_stream(&self) -> Result<Self::Stream, String> {
            CudaBackend::new_stream(self).map_err(|e| e.to_string())
        }
        fn kernel(&self, stream: &Self::Stream, ns: i64) -> Result<(), String> {
            let spin = SPIN.get().ok_or("the spin kernel is not loaded")?;
            spin.launch(stream, ns.max(0) as u64).map_err(|e| e.to_string())
        }
    }
}

/// `--initial-capacity` when not given (cut to `--capacity`).
const DEFAULT_INITIAL_CAPACITY: u32 = 64;

const KERNELS: [(&str, i64); 5] =
    [("matmul", 24_000), ("softmax", 6_000), ("layernorm", 4_000), ("gelu", 3_000), ("copy", 9_000)];

/// Static locations, one per kernel name: free to pass on the recording path.
fn dispatch_location(kernel: usize) -> &'static SourceLocation {
    match kernel {
        0 => location!("matmul"),
        1 => location!("softmax"),
        2 => location!("layernorm"),
        3 => location!("gelu"),
        _ => location!("copy"),
    }
}

fn main() {
    let args = Args::parse();
    let result = match args.backend {
        BackendKind::Sim => run(SimBackend::realtime(), &args),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => cuda_gpu::open().and_then(|cuda| run(cuda, &args)),
    };
    if let Err(message) = result {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run<G: DemoGpu>(gpu: G, args: &Args) -> Result<(), String> {
    let memory = MemorySink::new();
    // On the host clock, exactly (`ts` 0 is when the sink was made).
    let trace = ChromeTraceSink::create(&args.trace)
        .map_err(|e| format!("cannot create trace file {}: {e}", args.trace.display()))?
        .with_backend_clock(&gpu);
    let initial_capacity = args.initial_capacity.unwrap_or(DEFAULT_INITIAL_CAPACITY.min(args.capacity));
    let builder = TracingContext::builder(gpu.clone())
        .name("demo")
        .capacity(initial_capacity, args.capacity)
        .verbosity(args.verbosity)
        .sink(memory.clone())
        .sink(trace);
    #[cfg(feature = "tracy")]
    let builder = with_tracy(builder, &gpu, args);
    let ctx = builder.build().map_err(|e| format!("cannot create the tracing context: {e}"))?;
    let streams: Vec<G::Stream> = (0..args.streams).map(|_| gpu.new_stream()).collect::<Result<_, _>>()?;
    for (i, stream) in streams.iter().enumerate() {
        ctx.name_stream(stream, format!("queue {i}"));
    }
    let streams: Vec<Mutex<G::Stream>> = streams.into_iter().map(Mutex::new).collect();

    let total_lists = u64::from(args.threads) * u64::from(args.lists);
    let bar = ProgressBar::new(total_lists).with_style(
        ProgressStyle::with_template("{spinner} recording {bar:40} {pos}/{len} command buffers  {msg}")
            .map_err(|e| e.to_string())?,
    );
    let recording = AtomicBool::new(true);
    let started = Instant::now();
    let (record_time, record_errors) = std::thread::scope(|s| -> Result<(Duration, usize), String> {
        let collector = s.spawn(|| -> Result<usize, String> {
            let mut collects = 0;
            while recording.load(Ordering::Acquire) {
                if let Collected::Done(_) = ctx.collect().map_err(|e| format!("collect failed: {e}"))? {
                    collects += 1;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            Ok(collects)
        });
        let workers: Vec<_> = (0..args.threads)
            .map(|t| {
                let (ctx, gpu, streams, bar) = (ctx.clone(), gpu.clone(), &streams, &bar);
                s.spawn(move || record_thread(t, args, &ctx, &gpu, streams, bar))
            })
            .collect();
        let mut errors = 0;
        for worker in workers {
            errors += worker.join().map_err(|_| "a recording thread panicked".to_owned())??;
        }
        let record_time = started.elapsed();
        recording.store(false, Ordering::Release);
        let collects = collector.join().map_err(|_| "the collector panicked".to_owned())??;
        bar.finish_with_message(format!("{collects} collects while recording"));
        Ok((record_time, errors))
    })?;
    let flushed = ctx.flush().map_err(|e| format!("flush failed: {e}"))?;
    let stats = ctx.stats();
    let free_walked = ctx.free_slots_walked();
    drop(ctx); // closes the trace file

    let zones = memory.zones();
    let recorded_zones = stats.zones_emitted + stats.dropped_zones;
    println!();
    println!("backend            {}", memory.info().map_or("?", |i| i.backend));
    println!(
        "workload           {} threads x {} command buffers x {} dispatches, {} streams, verbosity {:?}",
        args.threads, args.lists, args.zones, args.streams, args.verbosity
    );
    println!(
        "zones              {} emitted, {} dropped, {} recording errors ({} lists collected, {} at the final flush)",
        stats.zones_emitted, stats.dropped_zones, record_errors, stats.lists_collected, flushed.lists
    );
    println!(
        "recording          {:.1} ms, {:.0} zones/s, {:.2} events per zone",
        record_time.as_secs_f64() * 1e3,
        recorded_zones as f64 / record_time.as_secs_f64(),
        stats.events_submitted as f64 / stats.zones_emitted.max(1) as f64
    );
    println!(
        "pool               capacity {} of max {} in {} pages ({} grows), high water {}",
        stats.capacity, stats.max_capacity, stats.pages, stats.grows, stats.high_water
    );
    println!(
        "slots              free {} (freelist walk: {}), owned {}, submitted {}: {} unaccounted",
        stats.free,
        free_walked,
        stats.owned,
        stats.submitted,
        stats.unaccounted()
    );
    println!(
        "collector          {:.1} ns per zone in the emitter (the serial part, sinks included), {} lists moved by the order guard",
        stats.emitter_ns as f64 / stats.zones_emitted.max(1) as f64,
        stats.lists_shifted
    );
    match check_nesting(&zones) {
        Ok(lanes) => {
            println!("nesting            ok: {} zones on {lanes} streams nest properly", zones.len())
        }
        Err(e) => println!("nesting            BROKEN: {e}"),
    }
    println!();
    print_durations(&zones);
    println!();
    println!(
        "trace              {} (open in https://ui.perfetto.dev or chrome://tracing)",
        args.trace.display()
    );
    if stats.unaccounted() != 0 || free_walked != stats.free {
        return Err("slot accounting is off".to_owned());
    }
    Ok(())
}

/// Adds the Tracy sink when asked, waiting for a profiler to connect if asked to.
#[cfg(feature = "tracy")]
fn with_tracy<G: DemoGpu>(
    builder: gpu_event_pool::Builder<G>,
    gpu: &G,
    args: &Args,
) -> gpu_event_pool::Builder<G> {
    use gpu_event_pool::sink::tracy::TracySink;
    if !args.tracy && args.tracy_wait.is_none() {
        return builder;
    }
    let sink = TracySink::for_backend(gpu);
    if let Some(secs) = args.tracy_wait {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let connected = loop {
            let connected = tracy_client::Client::is_connected();
            if connected || Instant::now() >= deadline {
                break connected;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if connected {
            eprintln!("Tracy profiler connected");
        } else {
            eprintln!("no Tracy profiler after {secs} s, recording anyway (the client keeps the data)");
        }
    }
    builder.sink(sink)
}

/// One recording thread: command buffers of adjacent dispatch zones, each inside a coarse zone.
fn record_thread<G: DemoGpu>(
    thread: u32,
    args: &Args,
    ctx: &TracingContext<G>,
    gpu: &G,
    streams: &[Mutex<G::Stream>],
    bar: &ProgressBar,
) -> Result<usize, String> {
    let mut errors = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(thread);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..args.lists {
        let stream_index = ((thread + i) % args.streams) as usize;
        // A stream records one command buffer at a time, as a runtime's queue does.
        let stream = streams[stream_index].lock().unwrap_or_else(|p| p.into_inner());
        let mut list = ctx.list();
        errors +=
            usize::from(list.zone_begin(&*stream, location!("command buffer", Verbosity::Coarse)).is_err());
        for d in 0..args.zones {
            let kernel = (next() % KERNELS.len() as u64) as usize;
            let location = dispatch_location(kernel);
            let step =
                if d == 0 { list.zone_begin(&*stream, location) } else { list.zone_next(&*stream, location) };
            errors += usize::from(step.is_err());
            let base = KERNELS[kernel].1;
            gpu.kernel(&stream, base / 2 + (next() % base as u64) as i64)?;
        }
        errors += usize::from(list.zone_end(&*stream).is_err());
        errors += usize::from(list.zone_end(&*stream).is_err());
        drop(stream);
        ctx.submit(list).map_err(|e| format!("submit failed: {e}"))?;
        bar.inc(1);
    }
    Ok(errors)
}

/// Checks that on every stream, any two zones are either disjoint or one contains the other.
fn check_nesting(zones: &[Zone]) -> Result<usize, String> {
    let mut by_lane: HashMap<Lane, Vec<(i64, i64, &str)>> = HashMap::new();
    for z in zones {
        by_lane.entry(z.lane).or_default().push((z.gpu_begin_ns, z.gpu_end_ns, z.location.name()));
    }
    for (lane, spans) in &mut by_lane {
        // Outer zones first when they start together: longer first.
        spans.sort_by_key(|&(begin, end, _)| (begin, std::cmp::Reverse(end)));
        let mut open: Vec<(i64, i64, &str)> = Vec::new();
        for &span in spans.iter() {
            if span.0 > span.1 {
                return Err(format!("{lane:?}: zone {} ends before it begins", span.2));
            }
            while open.last().is_some_and(|top| top.1 <= span.0) {
                open.pop();
            }
            if let Some(top) = open.last() {
                if span.1 > top.1 {
                    return Err(format!("{lane:?}: zone {} {:?} overlaps {} {:?}", span.2, span, top.2, top));
                }
            }
            open.push(span);
        }
    }
    Ok(by_lane.len())
}

fn print_durations(zones: &[Zone]) {
    let mut by_name: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for z in zones {
        by_name.entry(z.location.name()).or_default().push(z.gpu_end_ns - z.gpu_begin_ns);
    }
    println!("{:<16} {:>8} {:>12} {:>12} {:>12}", "zone", "count", "mean µs", "p50 µs", "p99 µs");
    for (name, mut durations) in by_name {
        durations.sort_unstable();
        let percentile = |p: f64| durations[((durations.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
        let mean = durations.iter().sum::<i64>() as f64 / durations.len() as f64 / 1e3;
        println!(
            "{name:<16} {:>8} {mean:>12.3} {:>12.3} {:>12.3}",
            durations.len(),
            percentile(0.5),
            percentile(0.99)
        );
    }
}
