//! What a runtime watches (docs/watch.md): a render loop marks frames, a collector thread
//! drains the GPU zones into statistics over the last 120 frames (`FrameStats`) and into a
//! Chrome trace with the pool's counters on its timeline; every 60 frames the loop prints a
//! HUD line read from the statistics while collection goes on; at the end, the per-pass table
//! and the last frame as a tree.
//!
//! ```text
//! cargo run --example watch [-- TRACE.json]
//! ```

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::frames::FrameStats;
use gpu_event_pool::sink::ZoneNode;
use gpu_event_pool::{location, TracingContext, Verbosity};
use std::error::Error;
use std::time::Duration;

const FRAMES: u64 = 300;
const WINDOW: usize = 120;
/// Lists in flight above which the loop waits, as a runtime waits on its fences.
const IN_FLIGHT: usize = 8;

fn main() {
    // Errors print as sentences (their `Display`), and the process exits with 1.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let path: std::path::PathBuf =
        std::env::args().nth(1).map_or_else(|| std::env::temp_dir().join("watch.json"), Into::into);
    // The trace's folder is made if it is not there.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let gpu = SimBackend::realtime();
    let (graphics, copies) = (gpu.stream(), gpu.stream());
    let stats = FrameStats::new(WINDOW);
    let ctx = TracingContext::builder(gpu.clone())
        .name("gpu 0")
        .capacity(64, 1024)
        .sink(stats.sink())
        // Counters: slots in use, zones dropped, lists pending, collection lag (1 ms apart at most).
        .sink(ChromeTrace::create(&path)?.sink().with_counters(Duration::from_millis(1)))
        .collect_every(Duration::from_millis(1))
        .build()?;
    ctx.name_stream(&graphics, "graphics");
    ctx.name_stream(&copies, "copies");

    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut jitter = |ns: i64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        ns / 2 + (rng % ns as u64) as i64
    };
    for frame in 0..FRAMES {
        ctx.frame(frame); // lists made from here on belong to this frame
        let mut list = ctx.list();
        {
            let mut whole = list.zone(&graphics, location!("frame", Verbosity::Coarse));
            let mut pass = whole.zone(&graphics, location!("shadows"));
            gpu.launch(&graphics, jitter(30_000));
            pass.next(location!("gbuffer"));
            gpu.launch(&graphics, jitter(50_000));
            pass.next(location!("lighting"));
            // Every 50th frame a lighting spike: the p99 and the max see it, the p50 does not.
            gpu.launch(&graphics, if frame % 50 == 49 { 400_000 } else { jitter(40_000) });
        }
        ctx.submit(list)?;
        let mut upload = ctx.list();
        upload.zone_begin(&copies, location!("upload"))?;
        gpu.launch(&copies, jitter(20_000));
        upload.zone_end(&copies)?;
        ctx.submit(upload)?;

        while in_flight(&ctx) > IN_FLIGHT {
            std::thread::sleep(Duration::from_micros(100));
        }
        if frame % 60 == 59 {
            // Read while the collector thread keeps collecting.
            if let Some(lighting) = stats.zone("lighting") {
                let s = ctx.stats();
                println!(
                    "frame {frame:>3}: lighting p50 {:>6.1} µs  p99 {:>6.1} µs over {} frames; slots in use {}, dropped {}",
                    lighting.p50_ns as f64 / 1e3,
                    lighting.p99_ns as f64 / 1e3,
                    lighting.frames,
                    s.in_use,
                    s.dropped_zones
                );
            }
        }
    }
    ctx.flush()?;

    println!();
    println!("over the last {} frames:", stats.frames().len());
    println!(
        "{:<10} {:>6} {:>10} {:>10} {:>10} {:>10}",
        "pass", "count", "mean µs", "p50 µs", "p99 µs", "max µs"
    );
    for pass in stats.summary() {
        let us = |ns: u64| ns as f64 / 1e3;
        println!(
            "{:<10} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            pass.name,
            pass.count,
            pass.mean_ns / 1e3,
            us(pass.p50_ns),
            us(pass.p99_ns),
            us(pass.max_ns)
        );
    }
    let frames = stats.frames();
    let spans: Vec<u64> = frames.iter().map(|f| f.span_ns()).collect();
    println!(
        "GPU span of a frame: {:.1} µs mean, {:.1} µs at most",
        spans.iter().sum::<u64>() as f64 / spans.len().max(1) as f64 / 1e3,
        spans.iter().max().copied().unwrap_or(0) as f64 / 1e3
    );
    let last = stats.frame(FRAMES - 1).ok_or("the last frame keeps its zones")?;
    println!("frame {} as a tree:", last.id);
    print_tree(&last.tree(), 1);
    println!("trace with the counters: {}", path.display());

    let skipped = stats.skipped();
    if frames.len() != WINDOW || skipped.late + skipped.unframed + skipped.untracked > 0 {
        return Err(format!(
            "expected {WINDOW} frames and no zone skipped: {} frames, {skipped:?}",
            frames.len()
        )
        .into());
    }
    Ok(())
}

fn in_flight(ctx: &TracingContext<SimBackend>) -> usize {
    let stats = ctx.stats();
    stats.lists_submitted.saturating_sub(stats.lists_collected)
}

fn print_tree(nodes: &[ZoneNode<'_>], indent: usize) {
    for node in nodes {
        let zone = node.zone;
        let us = (zone.gpu_end_ns - zone.gpu_begin_ns) as f64 / 1e3;
        println!("{:indent$}{} {us:.1} µs", "", zone.location.name(), indent = indent * 2);
        print_tree(&node.children, indent + 1);
    }
}
