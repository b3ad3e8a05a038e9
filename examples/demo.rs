//! The demo workload: many threads record command buffers on one or more GPUs (simulated by
//! default) while one collector thread drains every GPU's tracing context (the recording
//! threads also collect after each submit, unless `--recorders-collect false`); prints a
//! summary and writes one Chrome/Perfetto trace, with one process per GPU. On the simulated
//! GPU a recording thread waits while its stream has more than 2 ms of work queued, as a
//! runtime bounds its command buffers in flight: many threads on few streams then keep every
//! zone (8 threads on 1 stream, 2,000 lists each: 272,000 zones, none dropped, 2.5 s on the
//! 2-core development machine).
//!
//! ```text
//! cargo run --release --example demo -- --threads 8 --lists 500 --zones 32 --trace out.json
//! cargo run --release --example demo -- --devices 3
//! cargo run --release --features tracing --example demo -- --cpu-spans
//! cargo run --release --example demo --features vulkan -- --backend vulkan --lists 50
//! cargo run --release --example demo --features cupti -- --backend cupti --lists 50
//! cargo run --release --example demo --features perfetto -- --perfetto trace.pftrace --flight-recorder 2
//! ```
//!
//! With `--cpu-spans` (feature `tracing`), the trace also holds the recording threads' CPU
//! spans (one per command buffer, through the crate's `tracing` layer) and an arrow from each
//! zone's launch on its recording thread to the zone on the GPU.

use clap::Parser;
use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::frames::FrameStats;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{
    location, Backend, Collected, EventList, Lane, SourceLocation, Stats, TracingContext, Verbosity,
};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

type DemoResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Records command buffers from many threads and writes their GPU zones to a trace.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Recording threads.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
    /// Command buffers each thread records on each GPU.
    #[arg(long, default_value_t = 200)]
    lists: u32,
    /// Dispatch zones per command buffer (each also gets one coarse command-buffer zone).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    zones: u32,
    /// Collector threads, each collecting every GPU's context in turn: several share the
    /// reading of times (one emits at a time). 0: none, the recording threads collect
    /// (needs `--recorders-collect true`, the default).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=64))]
    collectors: u32,
    /// Whether each recording thread also calls `collect` after each submit, as a runtime
    /// whose threads record on one driver should: a backlog is then read by every thread at
    /// hand (the collector threads and the recorders), not by one thread whose driver calls
    /// wait behind every recorder's. `--recorders-collect false`: only the collector threads.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    recorders_collect: bool,
    /// Streams per GPU the command buffers are spread over (a stream records one buffer at a
    /// time).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    streams: u32,
    /// GPUs, each traced by a context of its own: every thread records on all of them in
    /// turn, one collector thread serves all the contexts, and the trace has one process per
    /// GPU. CUDA: devices 0 to N-1, which must be present.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    devices: u32,
    /// Most events each GPU's pool may grow to (zones beyond are dropped and counted).
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
    /// Frames (rounds of thread 0) the summary's statistics are kept over.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=65536))]
    window: u32,
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
    /// Also write the recording threads' CPU spans into the trace (the crate's `tracing`
    /// layer), and record launches: an arrow from each zone's recording call to the zone.
    #[cfg(feature = "tracing")]
    #[arg(long)]
    cpu_spans: bool,
    /// Also write the trace in Perfetto's own format (protobuf, `.pftrace`) to PATH: every GPU,
    /// its counters and frames, and with `--cpu-spans` the CPU spans and launch arrows.
    #[cfg(feature = "perfetto")]
    #[arg(long, value_name = "PATH")]
    perfetto: Option<PathBuf>,
    /// Keep the last SECONDS of every GPU's zones in a flight recorder: a zone over 4 times
    /// its name's p99 dumps them into `flight-recorder/` (at most one dump every 10 s; silent
    /// for a name until the statistics hold 100 zones of it: the stall of `--stall` is
    /// caught, the first zones of a short run are not), and the end of the run writes them to
    /// `flight-recorder/last.pftrace`.
    #[cfg(feature = "perfetto")]
    #[arg(long, value_name = "SECONDS")]
    flight_recorder: Option<f64>,
    /// One dispatch halfway through thread 0's command buffers runs 10 times its kernel's
    /// usual length (a stall, as a real run has now and then), for the flight recorder's
    /// trigger to catch. `--stall false`: every dispatch at its usual length.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    stall: bool,
    /// CUPTI activity buffers, all allocated at start (`--backend cupti`): CUPTI drops records
    /// while none is free [default: `CuptiConfig::default()`'s, 64].
    #[cfg(feature = "cupti")]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    cupti_buffers: Option<u32>,
    /// Size of each CUPTI activity buffer in KiB (`--backend cupti`) [default:
    /// `CuptiConfig::default()`'s, 1024].
    #[cfg(feature = "cupti")]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    cupti_buffer_kib: Option<u32>,
}

impl Args {
    fn cpu_spans(&self) -> bool {
        #[cfg(feature = "tracing")]
        return self.cpu_spans;
        #[cfg(not(feature = "tracing"))]
        false
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendKind {
    /// Simulated GPUs (no GPU needed).
    Sim,
    /// CUDA devices (built with `--features cuda`): each dispatch is a real kernel that
    /// spins for its duration (`SpinKernel`).
    #[cfg(feature = "cuda")]
    Cuda,
    /// The first Vulkan device (built with `--features vulkan`; lavapipe runs it on the CPU):
    /// each dispatch is a compute shader that spins for its duration (`SpinShader`), each
    /// stream a lane of the device's queue.
    #[cfg(feature = "vulkan")]
    Vulkan,
    /// CUDA device 0 timed by CUPTI's activity records instead of events (built with
    /// `--features cupti`): the same lists and zones, each dispatch's spin kernel a zone CUPTI
    /// reports inside it; one device.
    #[cfg(feature = "cupti")]
    Cupti,
}

#[cfg(feature = "vulkan")]
#[path = "demo/vulkan.rs"]
mod vulkan_gpu;

#[cfg(feature = "cupti")]
#[path = "demo/cupti.rs"]
mod cupti_gpu;

/// One GPU as the demo drives it: the crate's `Backend`, plus queues and kernels.
trait DemoGpu: Sync {
    type Backend: Backend + Clone;
    /// Where command buffers go, one at a time: a stream (sim, CUDA), or a Vulkan queue lane
    /// with a command pool.
    type Queue: Send;
    fn backend(&self) -> &Self::Backend;
    /// A new queue, named `name` in the sinks.
    fn new_queue(&self, ctx: &TracingContext<Self::Backend>, name: String) -> DemoResult<Self::Queue>;
    /// The stream one command buffer is recorded on.
    fn begin(&self, queue: &mut Self::Queue) -> DemoResult<Stream<Self>>;
    /// Queues a kernel that runs for about `ns` nanoseconds.
    fn kernel(&self, stream: &Stream<Self>, ns: i64) -> DemoResult<()>;
    /// Waits, before a command buffer is recorded on `stream`, while the GPU has more than a
    /// few command buffers of it queued: the bound on work in flight every runtime keeps
    /// (past it, recording threads that outrun the GPU only fill the pool). Default: no
    /// wait (the real GPUs' spin kernels keep up with the demo's threads).
    fn wait_for_room(&self, stream: &Stream<Self>) {
        let _ = stream;
    }
    /// Submits the command buffer and its list.
    fn submit(
        &self,
        ctx: &TracingContext<Self::Backend>,
        queue: &mut Self::Queue,
        stream: Stream<Self>,
        list: EventList<Self::Backend>,
    ) -> DemoResult<()>;
}

type Stream<G> = <<G as DemoGpu>::Backend as Backend>::Stream;

/// `DemoGpu`'s queue methods for an API whose stream is its queue (sim, CUDA, CUPTI).
#[macro_export]
macro_rules! stream_is_queue {
    () => {
        fn begin(&self, queue: &mut Self::Queue) -> DemoResult<Stream<Self>> {
            Ok(queue.clone())
        }
        fn submit(
            &self,
            ctx: &TracingContext<Self::Backend>,
            _queue: &mut Self::Queue,
            _stream: Stream<Self>,
            list: gpu_event_pool::EventList<Self::Backend>,
        ) -> DemoResult<()> {
            Ok(ctx.submit(list)?)
        }
    };
}

impl DemoGpu for SimBackend {
    type Backend = Self;
    type Queue = gpu_event_pool::sim::SimStream;
    fn backend(&self) -> &Self {
        self
    }
    fn new_queue(&self, ctx: &TracingContext<Self>, name: String) -> DemoResult<Self::Queue> {
        let stream = self.stream();
        ctx.name_stream(&stream, name);
        Ok(stream)
    }
    stream_is_queue!();
    fn kernel(&self, stream: &Stream<Self>, ns: i64) -> DemoResult<()> {
        self.launch(stream, ns);
        Ok(())
    }
    fn wait_for_room(&self, stream: &Stream<Self>) {
        loop {
            let queued = self.pending_ns(stream);
            if queued <= MAX_QUEUED_NS {
                return;
            }
            std::thread::sleep(std::time::Duration::from_nanos((queued - MAX_QUEUED_NS) as u64));
        }
    }
}

/// How many times its kernel's mean length the stalled dispatch of `--stall` runs: over the
/// flight recorder's trigger of 4 times the kernel's p99, since a kernel's lengths are drawn
/// from half to one and a half times its mean (a p99 under 1.5 times it, 4 times that under
/// 6 times it).
const STALL: i64 = 10;

/// The most GPU work a simulated stream has queued before a recording thread waits to record
/// on it (about 13 of the demo's command buffers of 16 dispatches).
const MAX_QUEUED_NS: i64 = 2_000_000;

#[cfg(feature = "cuda")]
mod cuda_gpu {
    use super::{DemoGpu, DemoResult, Stream};
    use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
    use gpu_event_pool::TracingContext;

    /// A CUDA device with the spin kernel loaded in its context.
    pub(super) struct CudaGpu {
        cuda: CudaBackend,
        spin: SpinKernel,
    }

    /// Devices 0 to `devices - 1`; asking for more than are present is an error.
    pub(super) fn open(devices: usize) -> DemoResult<Vec<CudaGpu>> {
        let first = CudaBackend::new(0).map_err(|e| format!("no CUDA device: {e}"))?;
        // `CudaBackend::new` loaded the driver, so counting devices can use it.
        let present = cudarc::driver::CudaContext::device_count()
            .map_err(|e| format!("cannot count the CUDA devices: {e}"))?;
        if devices > present.max(0) as usize {
            return Err(format!("--devices {devices}: this machine has {present} CUDA device(s)").into());
        }
        let mut backends = vec![first];
        for ordinal in 1..devices {
            backends.push(CudaBackend::new(ordinal).map_err(|e| format!("CUDA device {ordinal}: {e}"))?);
        }
        backends
            .into_iter()
            .enumerate()
            .map(|(ordinal, cuda)| {
                let spin = SpinKernel::load(&cuda)
                    .map_err(|e| format!("cannot load the spin kernel on CUDA device {ordinal}: {e}"))?;
                Ok(CudaGpu { cuda, spin })
            })
            .collect()
    }

    impl DemoGpu for CudaGpu {
        type Backend = CudaBackend;
        type Queue = std::sync::Arc<cudarc::driver::CudaStream>;
        fn backend(&self) -> &CudaBackend {
            &self.cuda
        }
        fn new_queue(&self, ctx: &TracingContext<CudaBackend>, name: String) -> DemoResult<Self::Queue> {
            let stream = self.cuda.new_stream()?;
            ctx.name_stream(&stream, name);
            Ok(stream)
        }
        stream_is_queue!();
        fn kernel(&self, stream: &Stream<Self>, ns: i64) -> DemoResult<()> {
            Ok(self.spin.launch(stream, ns.max(0) as u64)?)
        }
    }
}

/// How often the traces sample the pool's counters: a millisecond, a few hundred samples in a
/// default run (every emit phase would be thousands).
const COUNTERS_EVERY: Duration = Duration::from_millis(1);

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
    if args.collectors == 0 && !args.recorders_collect {
        eprintln!(
            "error: --collectors 0 with --recorders-collect false: nothing would collect while recording"
        );
        std::process::exit(2);
    }
    let devices = args.devices as usize;
    let result = match args.backend {
        BackendKind::Sim => run((0..devices).map(|_| SimBackend::realtime()).collect(), &args),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => cuda_gpu::open(devices).and_then(|gpus| run(gpus, &args)),
        #[cfg(feature = "vulkan")]
        BackendKind::Vulkan => vulkan_gpu::open(devices).and_then(|gpus| run(gpus, &args)),
        #[cfg(feature = "cupti")]
        BackendKind::Cupti => cupti_gpu::open(&args).and_then(|gpus| run(gpus, &args)),
    };
    if let Err(message) = result {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

/// One GPU's share of the run: its context (one per GPU) and its streams.
struct Device<G: DemoGpu> {
    gpu: G,
    ctx: TracingContext<G::Backend>,
    memory: MemorySink,
    /// A stream records one command buffer at a time, as a runtime's queue does.
    streams: Vec<Mutex<G::Queue>>,
}

impl<G: DemoGpu> Device<G> {
    /// GPU `index`'s context, writing into the shared trace (as process "gpu <index>").
    fn open(
        index: usize,
        gpu: G,
        trace: &ChromeTrace,
        stats: &FrameStats,
        outputs: &Outputs,
        args: &Args,
    ) -> DemoResult<Self> {
        let memory = MemorySink::new();
        let initial_capacity = args.initial_capacity.unwrap_or(DEFAULT_INITIAL_CAPACITY.min(args.capacity));
        let builder = TracingContext::builder(gpu.backend().clone())
            .name(format!("gpu {index}"))
            .capacity(initial_capacity, args.capacity)
            .verbosity(args.verbosity)
            .sink(memory.clone())
            // Per-kernel statistics over the last frames, every GPU together.
            .sink(stats.sink())
            // On the host clock, exactly: every GPU on the trace's one timeline; the pool's
            // counters at most once a millisecond.
            .sink(trace.sink().with_counters(COUNTERS_EVERY))
            // Launch arrows from the recording threads (with the CPU spans they sit in).
            .record_launches(args.cpu_spans());
        #[cfg(feature = "tracy")]
        let builder = with_tracy(builder, gpu.backend(), args);
        let builder = outputs.add_sinks(builder);
        let ctx =
            builder.build().map_err(|e| format!("cannot create the tracing context of GPU {index}: {e}"))?;
        let mut streams = Vec::new();
        for i in 0..args.streams {
            streams.push(Mutex::new(gpu.new_queue(&ctx, format!("queue {i}"))?));
        }
        Ok(Self { gpu, ctx, memory, streams })
    }
}

/// What a GPU's context reported at the end of the run.
struct DeviceReport {
    stats: Stats,
    free_walked: usize,
    flushed_lists: usize,
    zones: Vec<Zone>,
}

fn run<G: DemoGpu>(gpus: Vec<G>, args: &Args) -> DemoResult<()> {
    // One file for every GPU; it is closed when the trace and every context are gone.
    let trace = ChromeTrace::create(&args.trace)
        .map_err(|e| format!("cannot create trace file {}: {e}", args.trace.display()))?;
    let stats = FrameStats::new(args.window as usize);
    let outputs = Outputs::open(args, &stats, &trace)?;
    let devices = gpus
        .into_iter()
        .enumerate()
        .map(|(index, gpu)| Device::open(index, gpu, &trace, &stats, &outputs, args))
        .collect::<DemoResult<Vec<_>>>()?;
    // With CPU spans, the layer keeps the trace open: it is flushed at the end instead.
    #[cfg(feature = "tracing")]
    if args.cpu_spans {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(trace.layer());
        #[cfg(feature = "perfetto")]
        let subscriber = subscriber.with(outputs.perfetto.as_ref().map(|perfetto| perfetto.layer()));
        tracing::subscriber::set_global_default(subscriber)?;
    }
    let cpu_trace = args.cpu_spans().then(|| trace.clone());
    drop(trace);
    #[cfg(feature = "tracy")]
    wait_for_tracy(args);

    let total_lists = u64::from(args.threads) * u64::from(args.lists) * devices.len() as u64;
    let bar = ProgressBar::new(total_lists).with_style(ProgressStyle::with_template(
        "{spinner} recording {bar:40} {pos}/{len} command buffers  {msg}",
    )?);
    let recording = AtomicBool::new(true);
    let started = Instant::now();
    let (record_time, record_errors) = std::thread::scope(|s| -> DemoResult<(Duration, usize)> {
        let collectors: Vec<_> =
            (0..args.collectors).map(|_| s.spawn(|| collect_while_recording(&devices, &recording))).collect();
        let stop = StopCollecting(&recording);
        let workers: Vec<_> = (0..args.threads)
            .map(|t| {
                let (devices, bar) = (&devices, &bar);
                std::thread::Builder::new()
                    .name(format!("recorder {t}"))
                    .spawn_scoped(s, move || record_thread(t, args, devices, bar))
            })
            .collect::<Result<_, _>>()?;
        let mut errors = 0;
        for worker in workers {
            errors += worker.join().map_err(|_| "a recording thread panicked")??;
        }
        let record_time = started.elapsed();
        drop(stop);
        let mut collects = 0;
        for collector in collectors {
            collects += collector.join().map_err(|_| "a collector panicked")??;
        }
        bar.finish_with_message(format!("{collects} collects while recording"));
        Ok((record_time, errors))
    })?;
    let backend = devices[0].gpu.backend().name();
    let mut reports = Vec::new();
    for device in devices {
        let flushed = device.ctx.flush()?;
        let (stats, free_walked) = (device.ctx.stats(), device.ctx.free_slots_walked());
        drop(device.ctx); // the last context to go closes the trace file (without --cpu-spans)
        reports.push(DeviceReport {
            stats,
            free_walked,
            flushed_lists: flushed.lists,
            zones: device.memory.zones(),
        });
    }

    println!();
    println!(
        "backend            {backend}, {} GPU(s), a context each, {} collector thread(s) for all{}",
        reports.len(),
        args.collectors,
        if args.recorders_collect { ", and every recording thread collects after each submit" } else { "" }
    );
    println!(
        "workload           {} threads x {} command buffers x {} dispatches on each GPU, {} streams per GPU, verbosity {:?}",
        args.threads, args.lists, args.zones, args.streams, args.verbosity
    );
    let sum = |field: fn(&Stats) -> usize| reports.iter().map(|r| field(&r.stats)).sum::<usize>();
    let (emitted, dropped) = (sum(|s| s.zones_emitted), sum(|s| s.dropped_zones));
    println!(
        "zones              {emitted} emitted, {dropped} dropped, {record_errors} recording errors, all GPUs together"
    );
    println!(
        "recording          {:.1} ms, {:.0} zones/s, {:.2} events per zone",
        record_time.as_secs_f64() * 1e3,
        (emitted + dropped) as f64 / record_time.as_secs_f64(),
        sum(|s| s.events_submitted) as f64 / emitted.max(1) as f64
    );
    for (index, report) in reports.iter().enumerate() {
        println!();
        print_device(index, report);
    }
    println!();
    print_durations(&stats, args.lists);
    if let Some(trace) = cpu_trace {
        trace.flush()?;
    }
    outputs.finish(args, emitted)?;
    println!();
    println!(
        "trace              {}: one process per GPU with its counters and frames{} (open in https://ui.perfetto.dev or chrome://tracing)",
        args.trace.display(),
        if args.cpu_spans() { ", one for the CPU spans, launch arrows" } else { "" }
    );
    for (index, report) in reports.iter().enumerate() {
        if report.stats.unaccounted() != 0 || report.free_walked != report.stats.free {
            return Err(format!("slot accounting is off on GPU {index}").into());
        }
    }
    Ok(())
}

/// The outputs besides the Chrome trace (feature `perfetto`): the Perfetto trace and the
/// flight recorder, each with a sink per GPU.
#[derive(Default)]
struct Outputs {
    #[cfg(feature = "perfetto")]
    perfetto: Option<gpu_event_pool::sink::perfetto::PerfettoTrace>,
    #[cfg(feature = "perfetto")]
    flight: Option<gpu_event_pool::sink::flight::FlightRecorder>,
}

impl Outputs {
    #[cfg(not(feature = "perfetto"))]
    fn open(_args: &Args, _stats: &FrameStats, _trace: &ChromeTrace) -> DemoResult<Self> {
        Ok(Self::default())
    }

    #[cfg(feature = "perfetto")]
    fn open(args: &Args, stats: &FrameStats, trace: &ChromeTrace) -> DemoResult<Self> {
        use gpu_event_pool::sink::flight::{DumpFormat, FlightRecorder, Trigger};
        let perfetto = match &args.perfetto {
            Some(path) => Some(
                gpu_event_pool::sink::perfetto::PerfettoTrace::create(path)
                    .map_err(|e| format!("cannot create trace file {}: {e}", path.display()))?,
            ),
            None => None,
        };
        let flight = match args.flight_recorder {
            Some(seconds) => Some(
                FlightRecorder::builder(
                    Duration::try_from_secs_f64(seconds)
                        .map_err(|e| format!("--flight-recorder {seconds}: {e}"))?,
                )
                .trigger_on(Trigger::zone_over_p99(stats, 4.0))
                .dump_to("flight-recorder", DumpFormat::Perfetto)
                // The streamed traces' counter samples, and (for a Chrome dump) their timeline.
                .with_counters(COUNTERS_EVERY)
                .chrome_timeline_of(trace)
                .build()?,
            ),
            None => None,
        };
        Ok(Self { perfetto, flight })
    }

    /// Each GPU's sinks into the outputs.
    fn add_sinks<B: Backend>(&self, builder: gpu_event_pool::Builder<B>) -> gpu_event_pool::Builder<B> {
        #[cfg(feature = "perfetto")]
        let builder = match &self.perfetto {
            Some(trace) => builder.sink(trace.sink().with_counters(COUNTERS_EVERY)),
            None => builder,
        };
        #[cfg(feature = "perfetto")]
        let builder = match &self.flight {
            Some(recorder) => {
                let on_error = recorder.clone();
                builder.sink(recorder.sink()).on_error(move |context, error| {
                    eprintln!("warning: {}: {error}", context.name);
                    on_error.trigger(format!("{}: {error}", context.name));
                })
            }
            None => builder,
        };
        builder
    }

    /// Writes out what is left and prints what each output holds.
    #[cfg(not(feature = "perfetto"))]
    fn finish(self, _args: &Args, _zones: usize) -> DemoResult<()> {
        Ok(())
    }

    #[cfg(feature = "perfetto")]
    fn finish(self, args: &Args, zones: usize) -> DemoResult<()> {
        if let (Some(trace), Some(path)) = (&self.perfetto, &args.perfetto) {
            trace.flush()?;
            println!(
                "perfetto trace     {}: {} bytes, {:.1} per zone (open in https://ui.perfetto.dev)",
                path.display(),
                trace.bytes(),
                trace.bytes() as f64 / zones.max(1) as f64
            );
        }
        if let Some(recorder) = &self.flight {
            recorder.wait_for_dumps(Duration::from_secs(60));
            let last = recorder
                .dump("flight-recorder/last.pftrace", gpu_event_pool::sink::flight::DumpFormat::Perfetto)?;
            println!(
                "flight recorder    {} zones kept in {} bytes; {} triggers, {} dumps; the last {} s: {} ({} bytes)",
                recorder.zones(),
                recorder.bytes(),
                recorder.triggers(),
                recorder.dumps().len(),
                args.flight_recorder.unwrap_or_default(),
                last.path.display(),
                last.bytes
            );
            for dump in recorder.dumps() {
                println!("  dump             {}: {} zones, {}", dump.path.display(), dump.zones, dump.reason);
            }
        }
        Ok(())
    }
}

/// A collector thread: collects every GPU's context in turn until recording stops; sleeps
/// 500 µs only after a pass that collected nothing.
fn collect_while_recording<G: DemoGpu>(devices: &[Device<G>], recording: &AtomicBool) -> DemoResult<usize> {
    let mut collects = 0;
    while recording.load(Ordering::Acquire) {
        let mut collected = false;
        for (index, device) in devices.iter().enumerate() {
            let outcome = device.ctx.collect().map_err(|e| format!("collect failed on GPU {index}: {e}"))?;
            if let Collected::Done(report) = outcome {
                collects += 1;
                collected |= report.lists > 0;
            }
        }
        // A pass that found work goes again at once: a backlog is drained, not waited on.
        if !collected {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    Ok(collects)
}

fn print_device(index: usize, report: &DeviceReport) {
    let stats = &report.stats;
    println!("gpu {index}");
    println!(
        "  zones            {} emitted, {} dropped ({} lists collected, {} at the final flush)",
        stats.zones_emitted, stats.dropped_zones, stats.lists_collected, report.flushed_lists
    );
    println!(
        "  pool             capacity {} of max {} in {} pages ({} grows), high water {}",
        stats.capacity, stats.max_capacity, stats.pages, stats.grows, stats.high_water
    );
    println!(
        "  slots            free {} (freelist walk: {}), owned {}, submitted {}: {} unaccounted",
        stats.free,
        report.free_walked,
        stats.owned,
        stats.submitted,
        stats.unaccounted()
    );
    println!(
        "  collector        {:.1} ns per zone in the emitter (the serial part, sinks included), {} lists moved by the order guard",
        stats.emitter_ns as f64 / stats.zones_emitted.max(1) as f64,
        stats.lists_shifted
    );
    let mut bounds: Vec<u64> =
        report.zones.iter().map(|z| z.host_begin_bound_ns.max(z.host_end_bound_ns)).collect();
    bounds.sort_unstable();
    let at = |q: f64| {
        let bound = bounds.get(((bounds.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied();
        match bound {
            Some(u64::MAX) => "unbounded".to_owned(),
            Some(ns) => ns.to_string(),
            None => "-".to_owned(),
        }
    };
    println!(
        "  clock            each zone's host times within p50 {} / p99 {} / max {} ns of the truth (its bound); {} discontinuities, {} lists placed from their own reads",
        at(0.5),
        at(0.99),
        at(1.0),
        stats.clock_discontinuities,
        stats.lists_placed_alone
    );
    let activity = &stats.activity;
    if activity.activities > 0 || activity.empty_zones > 0 {
        let losses = &activity.losses;
        println!(
            "  activities       {} kernels, copies and memsets as zones, {} zones without work, {} late batches, {} lists without every record",
            activity.activities, activity.empty_zones, activity.late, activity.lists_partial
        );
        println!(
            "  losses           {} records dropped, {} buffer requests refused, {} records without times, {} links dropped",
            losses.records_dropped, losses.buffers_refused, losses.records_incomplete, losses.links_dropped
        );
    }
    match check_nesting(&report.zones) {
        Ok(lanes) => {
            println!("  nesting          ok: {} zones on {lanes} streams nest properly", report.zones.len())
        }
        Err(e) => println!("  nesting          BROKEN: {e}"),
    }
}

/// Adds a Tracy sink when asked: each GPU's context has its own, one Tracy GPU context per
/// stream (docs/tracy.md).
#[cfg(feature = "tracy")]
fn with_tracy<B: Backend + Clone>(
    builder: gpu_event_pool::Builder<B>,
    backend: &B,
    args: &Args,
) -> gpu_event_pool::Builder<B> {
    if !args.tracy && args.tracy_wait.is_none() {
        return builder;
    }
    builder.sink(gpu_event_pool::sink::tracy::TracySink::for_backend(backend).with_plots())
}

/// Waits for a Tracy profiler to connect, if asked to (the client keeps everything until one
/// does).
#[cfg(feature = "tracy")]
pub(crate) fn wait_for_tracy(args: &Args) {
    let Some(secs) = args.tracy_wait else { return };
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

/// One recording thread: command buffers of adjacent dispatch zones, each inside a coarse
/// zone, on every GPU in turn (consecutive command buffers go to consecutive GPUs, and each
/// GPU's streams take turns).
/// Ends the collectors' loop however the recording ends (an error or a panic of a recording
/// thread included): the scope waits for the collectors before it returns the error.
struct StopCollecting<'a>(&'a AtomicBool);

impl Drop for StopCollecting<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn record_thread<G: DemoGpu>(
    thread: u32,
    args: &Args,
    devices: &[Device<G>],
    bar: &ProgressBar,
) -> DemoResult<usize> {
    let mut errors = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(thread);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..args.lists as usize * devices.len() {
        if thread == 0 && i % devices.len() == 0 {
            // A new round: a frame (a step) on every GPU.
            for device in devices {
                device.ctx.frame((i / devices.len()) as u64);
            }
        }
        let turn = thread as usize + i;
        let device = &devices[turn % devices.len()];
        let queue = &device.streams[turn / devices.len() % device.streams.len()];
        let mut queue = queue.lock().unwrap_or_else(|p| p.into_inner());
        let stream = device.gpu.begin(&mut queue)?;
        device.gpu.wait_for_room(&stream);
        #[cfg(feature = "tracing")]
        let _span =
            args.cpu_spans().then(|| tracing::info_span!("record command buffer", list = i).entered());
        let mut list = device.ctx.list();
        errors +=
            usize::from(list.zone_begin(&stream, location!("command buffer", Verbosity::Coarse)).is_err());
        for d in 0..args.zones {
            let kernel = (next() % KERNELS.len() as u64) as usize;
            let location = dispatch_location(kernel);
            let step =
                if d == 0 { list.zone_begin(&stream, location) } else { list.zone_next(&stream, location) };
            errors += usize::from(step.is_err());
            let base = KERNELS[kernel].1;
            let ns = base / 2 + (next() % base as u64) as i64;
            let stall = args.stall && thread == 0 && i == args.lists as usize * devices.len() / 2 && d == 0;
            device.gpu.kernel(&stream, if stall { STALL * base } else { ns })?;
        }
        errors += usize::from(list.zone_end(&stream).is_err());
        errors += usize::from(list.zone_end(&stream).is_err());
        device.gpu.submit(&device.ctx, &mut queue, stream, list)?;
        drop(queue);
        if args.recorders_collect {
            device.ctx.collect().map_err(|e| format!("collect failed on a recording thread: {e}"))?;
        }
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

/// The per-kernel table, from the statistics over the last frames.
fn print_durations(stats: &FrameStats, frames: u32) {
    let kept = stats.frames().len();
    println!("zone durations over the last {kept} frames (of {frames}), all GPUs together (FrameStats)");
    println!(
        "{:<16} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "zone", "count", "mean µs", "p50 µs", "p99 µs", "max µs"
    );
    for zone in stats.summary() {
        let us = |ns: u64| ns as f64 / 1e3;
        println!(
            "{:<16} {:>8} {:>12.3} {:>12.3} {:>12.3} {:>12.3}",
            zone.name,
            zone.count,
            zone.mean_ns / 1e3,
            us(zone.p50_ns),
            us(zone.p99_ns),
            us(zone.max_ns)
        );
    }
}
