//! How close the wgpu backend's host times come to the truth, on lavapipe, whose device clock
//! is CLOCK_MONOTONIC in nanoseconds: alone in its process, so that no other test's GPU work
//! (lavapipe runs on the same 2 CPU cores) delays the timestamps it compares.
//!
//! Without an adapter the test prints `SKIPPED: ...` to stderr and returns;
//! `GPU_EVENT_POOL_REQUIRE_WGPU=1` (set by `.ci/run`) makes that a failure.

#![cfg(target_os = "linux")]

mod wgpu_common;

use gpu_event_pool::backend::wgpu::WgpuBackend;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, Backend, TracingContext};
use std::time::{Duration, Instant};
use wgpu_common::{gpu, is_lavapipe, skip, Reference, Spin, ALL_TIMESTAMPS};

/// CLOCK_MONOTONIC, in nanoseconds: on lavapipe, the clock its timestamps are read from.
fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// On lavapipe a timestamp is CLOCK_MONOTONIC in nanoseconds, so the true host time of a zone
/// is known: the test writes raw timestamps right after a zone's begin and right before its
/// end, in the same encoder, and compares the zone's host times with them (docs/wgpu.md
/// reports the figures).
#[test]
fn host_times_on_lavapipe_are_within_a_millisecond_of_the_device_clock() {
    let test = "host_times_on_lavapipe_are_within_a_millisecond_of_the_device_clock";
    let Some(gpu) = gpu(test, ALL_TIMESTAMPS) else { return };
    if !is_lavapipe(&gpu) {
        skip(test, "not lavapipe, whose device clock is CLOCK_MONOTONIC");
        return;
    }
    let sink = MemorySink::new();
    let backend = WgpuBackend::new(&gpu.device, &gpu.queue).unwrap();
    let ctx = TracingContext::builder(backend).sink(sink.clone()).build().unwrap();
    let spin = Spin::new(&gpu.device);
    let reference = Reference::new(&gpu.device);
    let lane = ctx.backend().queue();
    // Where the crate's host clock reads 0, on CLOCK_MONOTONIC.
    let origin = ctx.backend().host_clock_origin().unwrap();
    let origin_mono = monotonic_ns() - origin.elapsed().as_nanos() as i64;
    // Per zone, the error of its host times (host minus true) lies between `begin - ref0` (the
    // zone begins just before the test's first raw timestamp) and `end - ref1` (it ends just
    // after the second), both read on CLOCK_MONOTONIC.
    let (mut low, mut high) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        sink.clear();
        spin.set_steps(&gpu.queue, 20_000);
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        let mut list = ctx.wgpu_list(&lane);
        {
            let mut zone = list.scope(&mut encoder, location!("zone"));
            zone.write_timestamp(&reference.set, 0);
            spin.dispatch(&mut zone.scoped_compute_pass(location!("work")));
            zone.write_timestamp(&reference.set, 1);
        }
        reference.resolve(&mut encoder);
        list.resolve(&mut encoder).unwrap();
        ctx.queue_submit(&lane, [encoder.finish()], [list]).unwrap();
        let ticks = reference.read(&gpu.device);
        ctx.flush().unwrap();
        let zone = sink.zones().into_iter().find(|z| z.location.name() == "zone").unwrap();
        low.push(zone.host_begin_ns - (ticks[0] as i64 - origin_mono));
        high.push(zone.host_end_ns - (ticks[1] as i64 - origin_mono));
        std::thread::sleep(Duration::from_millis(5));
    }
    for (i, (&lo, &hi)) in low.iter().zip(&high).enumerate() {
        assert!(lo <= 1_000_000 && hi >= -1_000_000, "zone {i}: its error in [{lo}, {hi}] ns misses 1 ms");
    }
    let median = |v: &mut Vec<i64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    eprintln!(
        "host time minus true time over {} zones: between {} ns and {} ns (medians of the bounds); widest low bound {} ns, widest high bound {} ns",
        low.len(),
        median(&mut low),
        median(&mut high),
        low[0],
        high[high.len() - 1]
    );
}
