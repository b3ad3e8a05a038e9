//! Timings back to the application: each collected command buffer's zones reach the
//! application through a channel (`ResultsSink`), tied to the list it submitted by the list's
//! id; it prints per-kernel count / mean / p50 / p99 computed from the lists it received
//! and the tree of one frame (the shape `wgpu-profiler` returns). `FrameStats` keeps such
//! figures over the last N frames for you (`cargo run --example watch`).
//!
//! ```text
//! cargo run --example results
//! ```

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::results::{ListResults, ResultsSink, ZoneNode};
use gpu_event_pool::{location, DynamicLocation, TracingContext, Verbosity};
use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::time::Duration;

const KERNELS: [(&str, i64); 3] = [("matmul", 40_000), ("softmax", 12_000), ("copy", 20_000)];

fn main() {
    // Errors print as sentences (their `Display`), and the process exits with 1.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let gpu = SimBackend::realtime();
    let stream = gpu.stream();
    let (sink, results) = ResultsSink::channel();
    let ctx = TracingContext::builder(gpu.clone())
        .sink(sink)
        .collect_every(Duration::from_millis(1)) // a collector thread feeds the channel
        .build()?;

    // Record 50 frames, remembering which list is which frame.
    let mut frame_of_list = HashMap::new();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for frame in 0..50u32 {
        let mut list = ctx.list();
        {
            // Guards end their zones when dropped. A zone that cannot be recorded (the pool
            // full, say) is counted in `ctx.stats()` and the frame goes on recording: the
            // recording calls are not `?`-ed.
            // A dynamic name keeps its call site; arguments go to Chrome args / Tracy names.
            let kernel_location = |name| DynamicLocation::new(name).arg("frame", frame);
            let mut frame_zone = list.zone(&stream, location!("frame", Verbosity::Coarse));
            let mut kernel = frame_zone.zone(&stream, kernel_location(KERNELS[0].0));
            for (i, &(name, ns)) in KERNELS.iter().enumerate() {
                if i > 0 {
                    kernel.next(kernel_location(name)); // ends the kernel before: one event
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                gpu.launch(&stream, ns / 2 + (rng % ns as u64) as i64);
            }
        }
        frame_of_list.insert(list.id(), frame);
        ctx.submit(list)?;
    }
    ctx.flush()?; // every list submitted so far reaches the channel

    let lists: Vec<ListResults> = results.try_iter().collect();
    let mut durations: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for list in &lists {
        for zone in &list.zones {
            durations
                .entry(zone.location.name().to_owned())
                .or_default()
                .push(zone.gpu_end_ns - zone.gpu_begin_ns);
        }
    }
    println!("{} lists back, {} frames recorded", lists.len(), frame_of_list.len());
    println!("{:<10} {:>6} {:>10} {:>10} {:>10}", "zone", "count", "mean µs", "p50 µs", "p99 µs");
    for (name, mut ns) in durations {
        ns.sort_unstable();
        let percentile = |p: f64| ns[((ns.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
        let mean = ns.iter().sum::<i64>() as f64 / ns.len() as f64 / 1e3;
        println!(
            "{name:<10} {:>6} {mean:>10.3} {:>10.3} {:>10.3}",
            ns.len(),
            percentile(0.5),
            percentile(0.99)
        );
    }

    let last = lists.iter().max_by_key(|l| frame_of_list[&l.list_id]).ok_or("no list came back")?;
    println!("\nframe {} as a tree:", frame_of_list[&last.list_id]);
    print_tree(&last.tree(), 1);
    Ok(())
}

fn print_tree(nodes: &[ZoneNode<'_>], indent: usize) {
    for node in nodes {
        let zone = node.zone;
        let us = (zone.gpu_end_ns - zone.gpu_begin_ns) as f64 / 1e3;
        println!("{:indent$}{} {us:.3} µs", "", zone.location.name(), indent = indent * 2);
        print_tree(&node.children, indent + 1);
    }
}
