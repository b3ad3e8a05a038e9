//! A wgpu compute workload profiled with the crate (feature `wgpu`): several threads each
//! record their own command encoder per frame, with nested scopes and compute passes, submit
//! through the context, and every zone goes to a Chrome trace and a per-frame result tree.
//!
//! ```text
//! cargo run --features wgpu --example wgpu -- [TRACE.json] [FRAMES]
//! ```
//!
//! Open the trace in Perfetto (ui.perfetto.dev) or chrome://tracing. The example prints the
//! last frame as a tree (`WgpuFrames`: the shape `wgpu-profiler` returns) and the mean time of each
//! zone over the frames, and fails if a zone was lost.

use gpu_event_pool::backend::wgpu::{ScopeResult, WgpuBackend};
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::frames::FrameStats;
use gpu_event_pool::{location, DynamicLocation, TracingContext, WgpuList};
use std::time::Duration;

const THREADS: usize = 3;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const SHADER: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;

@compute @workgroup_size(64)
fn step(@builtin(global_invocation_id) id: vec3<u32>) {
    var x = data[id.x];
    for (var i = 0u; i < 2000u; i = i + 1u) {
        x = x * 1664525u + 1013904223u;
    }
    data[id.x] = x;
}
"#;

/// What every thread dispatches: one pipeline over a buffer of its own.
struct Workload {
    device: wgpu::Device,
    pipeline: wgpu::ComputePipeline,
    bind_groups: Vec<wgpu::BindGroup>,
}

fn main() {
    // Errors print as sentences (their `Display`), and the process exits with 1.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "target/wgpu-trace.json".to_owned());
    let frames: u64 = match args.next() {
        Some(f) => f.parse().map_err(|e| format!("FRAMES must be a whole number, not {f:?}: {e}"))?,
        None => 10,
    };
    // The trace's folder is made if it is not there (`target/` before the first build).
    if let Some(dir) = std::path::Path::new(&path).parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }

    let (device, queue) = open_device()?;
    let workload = Workload::new(&device);
    let stats = FrameStats::new(16);
    let backend = WgpuBackend::new(&device, &queue)?;
    let (lane, finished) = (backend.queue(), backend.keep_frames());
    let ctx = TracingContext::builder(backend)
        .name("wgpu")
        .sink(ChromeTrace::create(&path).map_err(|e| format!("cannot create the trace {path}: {e}"))?.sink())
        .sink(stats.sink())
        .sink(finished.sink())
        .collect_every(Duration::from_millis(2))
        .build()?;
    ctx.name_queue(&lane, "queue");

    for frame in 0..frames {
        ctx.frame(frame);
        // Each thread records its own encoder (no lock between them); the command buffers
        // are submitted together, in thread order, with their lists.
        let recorded = std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|thread| {
                    let (ctx, lane, workload) = (&ctx, &lane, &workload);
                    s.spawn(move || {
                        let mut encoder = workload.device.create_command_encoder(&Default::default());
                        let mut list = ctx.wgpu_list(lane);
                        record(&mut list, &mut encoder, workload, thread);
                        list.resolve(&mut encoder).map(|()| (encoder.finish(), list))
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().expect("a recording thread panicked")).collect::<Vec<_>>()
        });
        let (command_buffers, lists): (Vec<_>, Vec<_>) =
            recorded.into_iter().collect::<std::result::Result<_, _>>()?;
        ctx.queue_submit(&lane, command_buffers, lists).map_err(|e| e.to_string())?;
    }
    ctx.frame(frames);
    ctx.flush()?;

    // Every frame's tree, in order, as wgpu-profiler's process_finished_frame gives it.
    let mut last = None;
    while let Some(frame) = finished.next_finished() {
        last = Some(frame);
    }
    if let Some(frame) = last {
        println!("frame {}:", frame.id);
        print_tree(&frame.scopes, 1);
    }
    for zone in stats.summary() {
        println!("{:<16} {:>4} zones, mean {:>8.1} µs", zone.name, zone.count, zone.mean_ns / 1e3);
    }
    let s = ctx.stats();
    println!(
        "{} zones, {} dropped, {} lists failed; trace in {path}",
        s.zones_emitted, s.dropped_zones, s.lists_failed
    );
    let expected = frames as usize * THREADS * 5;
    if s.zones_emitted != expected || s.dropped_zones + s.lists_failed > 0 {
        return Err(format!("zones were lost: {} of {expected} emitted ({s:?})", s.zones_emitted).into());
    }
    Ok(())
}

/// One thread's frame: a scope around an upload-free setup scope and a compute pass holding
/// two dispatch scopes.
fn record(list: &mut WgpuList, encoder: &mut wgpu::CommandEncoder, workload: &Workload, thread: usize) {
    let mut frame = list.scope(encoder, DynamicLocation::new("thread").arg("thread", thread));
    drop(frame.scope(location!("setup")));
    let mut pass = frame.scoped_compute_pass(location!("simulate"));
    for name in [location!("integrate"), location!("collide")] {
        let mut dispatch = pass.scope(name);
        dispatch.set_pipeline(&workload.pipeline);
        dispatch.set_bind_group(0, &workload.bind_groups[thread], &[]);
        dispatch.dispatch_workgroups(16, 1, 1);
    }
}

impl Workload {
    fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("step"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("step"),
            layout: None,
            module: &module,
            entry_point: Some("step"),
            compilation_options: Default::default(),
            cache: None,
        });
        let bind_groups = (0..THREADS)
            .map(|_| {
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("data"),
                    size: 16 * 64 * 4,
                    usage: wgpu::BufferUsages::STORAGE,
                    mapped_at_creation: false,
                });
                device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &[wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() }],
                })
            })
            .collect();
        Self { device: device.clone(), pipeline, bind_groups }
    }
}

/// The first adapter, with every timestamp feature it has.
fn open_device() -> Result<(wgpu::Device, wgpu::Queue)> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))?;
    let timestamps = wgpu::Features::TIMESTAMP_QUERY
        | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
        | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    println!("{} ({:?})", adapter.get_info().name, adapter.get_info().backend);
    let descriptor =
        wgpu::DeviceDescriptor { required_features: adapter.features() & timestamps, ..Default::default() };
    Ok(block_on(adapter.request_device(&descriptor))?)
}

/// Waits for one of wgpu's futures (the adapter, the device): on native wgpu they are ready
/// when made, so polling with a waker that does nothing is enough.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::yield_now();
    }
}

fn print_tree(scopes: &[ScopeResult], depth: usize) {
    for scope in scopes {
        match scope.time_ns() {
            Some(time) => println!(
                "{:indent$}{} {:.1} µs",
                "",
                scope.name(),
                (time.end - time.start) as f64 / 1e3,
                indent = depth * 2
            ),
            None => println!("{:indent$}{} (not timed)", "", scope.name(), indent = depth * 2),
        }
        print_tree(&scope.children, depth + 1);
    }
}
