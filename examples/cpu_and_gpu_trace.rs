//! One timeline for the CPU and the GPU: `tracing` spans written by `tracing-chrome`, GPU zones
//! written by the crate's Chrome sink, merged into one file for Perfetto.
//!
//! ```text
//! cargo run --example cpu_and_gpu_trace -- merged.json
//! ```
//!
//! How the clocks line up (docs/chrome.md): `tracing-chrome` writes `ts` as microseconds since
//! an `Instant` it takes when its layer is built; the Chrome sink, on its default host clock,
//! writes microseconds since the `Instant` given to `with_origin`. Taking that origin right
//! after building the layer puts both on one timeline; the context gives the sink its
//! backend's clock, so the GPU's host times land on `Instant` exactly. Each frame's GPU zones then sit under the CPU span that
//! recorded them and the one that waited for them.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::{location, SourceLocation, TracingContext};
use serde_json::value::RawValue;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

/// `tracing-chrome` writes every event with pid 1; the GPU gets a process of its own.
const GPU_PID: u32 = 2;

const KERNELS: [(&str, i64); 3] = [("matmul", 400_000), ("softmax", 150_000), ("copy", 250_000)];

fn kernel_location(kernel: usize) -> &'static SourceLocation {
    match kernel {
        0 => location!("matmul"),
        1 => location!("softmax"),
        _ => location!("copy"),
    }
}

fn main() {
    // Errors print as sentences (their `Display`), and the process exits with 1.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let output =
        PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "cpu_and_gpu_trace.json".to_owned()));
    let dir = std::env::temp_dir();
    let (cpu_path, gpu_path) =
        (dir.join("cpu_and_gpu_trace.cpu.json"), dir.join("cpu_and_gpu_trace.gpu.json"));

    let (layer, cpu_guard) = tracing_chrome::ChromeLayerBuilder::new().file(&cpu_path).build();
    let origin = Instant::now(); // right after the layer took its own start
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;

    let gpu = SimBackend::realtime();
    let stream = gpu.stream();
    let gpu_trace = ChromeTrace::create(&gpu_path)?.with_origin(origin);
    let ctx =
        TracingContext::builder(gpu.clone()).name("gpu").sink(gpu_trace.sink().with_pid(GPU_PID)).build()?;
    ctx.name_stream(&stream, "compute queue");

    for frame in 0..3 {
        let _frame = tracing::info_span!("frame", frame).entered();
        let done = {
            let _record = tracing::info_span!("record command buffer").entered();
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("command buffer"))?;
            let mut done = 0;
            for (kernel, &(_, ns)) in KERNELS.iter().enumerate() {
                let step = if kernel == 0 {
                    list.zone_begin(&stream, kernel_location(kernel))
                } else {
                    list.zone_next(&stream, kernel_location(kernel))
                };
                step?;
                done = gpu.launch(&stream, ns);
            }
            list.zone_end(&stream)?;
            list.zone_end(&stream)?;
            ctx.submit(list)?;
            done
        };
        let _wait = tracing::info_span!("wait for the GPU").entered();
        while gpu.now() < done {
            std::thread::sleep(Duration::from_micros(100));
        }
        ctx.collect()?;
    }
    ctx.flush()?;
    drop((ctx, gpu_trace)); // closes the GPU trace
    drop(cpu_guard); // closes the CPU trace

    let events = merge(&[&cpu_path, &gpu_path], &output)?;
    println!("{events} events in {} (open in https://ui.perfetto.dev)", output.display());
    Ok(())
}

/// Concatenates Chrome traces in the JSON array format. The events are copied as written
/// (`RawValue`), so the GPU sink's three-decimal microseconds stay exact.
fn merge(inputs: &[&Path], output: &Path) -> Result<usize, Box<dyn Error>> {
    let mut events: Vec<Box<RawValue>> = Vec::new();
    for input in inputs {
        let text = std::fs::read_to_string(input)?;
        events.extend(serde_json::from_str::<Vec<Box<RawValue>>>(&text)?);
    }
    // The trace's folder is made if it is not there.
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(output, serde_json::to_string(&events)?)
        .map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    Ok(events.len())
}
