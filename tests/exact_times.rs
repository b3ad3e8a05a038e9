//! The promise of exact GPU times (README, `Config::anchor_interval`, docs/design.md section 8,
//! "Time: every distance short"), as written: a zone's GPU times are exact to the nanosecond
//! when the events of its list are under 16 ms apart and the context is collected at least
//! every 4 ms (with the default `anchor_interval` of 5 ms, while the GPU reaches the
//! collector's anchors within 1 ms); a zone whose events are further apart is off by at most
//! 2^-24 of the distance plus 1 ns (CUDA's `f32` milliseconds).

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{location, TracingContext};

const MS: i64 = 1_000_000;

fn jitter(seed: &mut u64, max: i64) -> i64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed % (max as u64 + 1)) as i64
}

/// A list of zones back to back on an idle stream, begun now: its kernels' lengths.
fn record(ctx: &TracingContext<SimBackend>, sim: &SimBackend, stream: &SimStream, kernels: &[i64]) {
    let mut list = ctx.list();
    list.zone_begin(stream, location!("first")).unwrap();
    for (k, &ns) in kernels.iter().enumerate() {
        if k > 0 {
            list.zone_next(stream, location!("next")).unwrap();
        }
        sim.launch(stream, ns);
    }
    list.zone_end(stream).unwrap();
    ctx.submit(list).unwrap();
}

/// Half an hour of lists on an idle stream, the context collected every 0.5 to 4 ms, the GPU
/// busy (anchors reached 1 ms late) every other 10 s: every zone whose list's events are under
/// 16 ms apart begins and ends exactly where it ran; zones of 20 ms, 100 ms and 1 s (lists of
/// one zone) are off by at most the documented bound: their duration by 2^-24 of it plus 1 ns,
/// their begin by as much of the distance to the anchor it was read from.
#[test]
#[cfg_attr(miri, ignore = "simulated minutes")]
fn gpu_times_are_exact_with_events_under_16_ms_apart_and_a_collect_every_4_ms() {
    let minutes = if std::env::var_os("GPU_EVENT_POOL_QUICK_TESTS").is_some() { 3 } else { 30 };
    let sim = SimBackend::manual();
    sim.set_late_records(MS);
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(sink.clone()).build().unwrap();
    let base = sink.info().unwrap().base.host_ns;
    let (stream, busy) = (sim.stream(), sim.stream());
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    // (expected GPU begin, kernel lengths)
    let mut expected: Vec<(i64, Vec<i64>)> = Vec::new();
    let long = [20 * MS, 100 * MS, 1_000 * MS];
    let mut next_list = 0;
    let mut round = 0usize;
    while sim.now() < minutes * 60_000 * MS {
        let now = sim.now();
        let busy_now = (now / (10_000 * MS)) % 2 == 1;
        if busy_now && sim.pending_ns(&busy) == 0 {
            sim.launch(&busy, 10_000 * MS - now % (10_000 * MS));
        }
        if now >= next_list && sim.pending_ns(&stream) == 0 {
            let kernels: Vec<i64> = if round % 50 == 49 {
                vec![long[(round / 50) % long.len()]]
            } else {
                (0..1 + jitter(&mut seed, 3)).map(|_| 1_000 + jitter(&mut seed, 15 * MS)).collect()
            };
            // Recorded on an idle stream: the GPU reaches it now, or 1 ms late while busy.
            let begin = now + if sim.pending_ns(&busy) > 0 { MS } else { 0 } - base;
            record(&ctx, &sim, &stream, &kernels);
            expected.push((begin, kernels));
            next_list = now + jitter(&mut seed, 30 * MS);
            round += 1;
        }
        sim.advance(MS / 2 + jitter(&mut seed, 7 * MS / 2));
        ctx.collect().unwrap();
    }
    ctx.flush().unwrap();

    let zones = sink.zones();
    let mut zones_at = zones.iter();
    let (mut exact, mut bounded, mut worst_long) = (0, 0, 0);
    for (begin, kernels) in &expected {
        let mut at = *begin;
        for &ns in kernels {
            let zone = zones_at.next().expect("a zone per kernel");
            if ns < 16 * MS && kernels.iter().all(|&k| k < 16 * MS) {
                assert_eq!((zone.gpu_begin_ns, zone.gpu_end_ns), (at, at + ns), "{zone:?}");
                exact += 1;
            } else {
                // Its duration is read as one distance; its begin, read when the list is complete,
                // from an anchor as far away (and a few collects more).
                let bound = |distance: i64| (distance >> 24) + 1;
                let off = (zone.gpu_end_ns - zone.gpu_begin_ns - ns).abs();
                assert!(off <= bound(ns), "{ns} ns zone {off} ns long off: {zone:?}");
                let placed = (zone.gpu_begin_ns - at).abs();
                assert!(placed <= bound(ns + 20 * MS), "{ns} ns zone placed {placed} ns off: {zone:?}");
                worst_long = worst_long.max(off).max(placed);
                bounded += 1;
            }
            at += ns;
        }
    }
    assert!(zones_at.next().is_none());
    eprintln!(
        "{exact} zones exact, {bounded} zones of 20 ms to 1 s within the bound (worst {worst_long} ns)"
    );
    assert!(exact > 10_000 && bounded > 100);
}

/// Zones nested three deep on one stream: each comes out at its depth, beginning and ending
/// exactly where it ran.
#[test]
fn nested_zones_come_out_at_their_depth_with_exact_times() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(sink.clone()).build().unwrap();
    let at = sim.now();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("outer")).unwrap();
    sim.launch(&stream, 100);
    list.zone_begin(&stream, location!("middle")).unwrap();
    sim.launch(&stream, 200);
    list.zone_begin(&stream, location!("inner")).unwrap();
    sim.launch(&stream, 300);
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    sim.launch(&stream, 400);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(MS);
    ctx.flush().unwrap();
    let zones = sink.zones();
    let zones: Vec<(&str, u32, i64, i64)> =
        zones.iter().map(|z| (z.location.name(), z.depth, z.gpu_begin_ns - at, z.gpu_end_ns - at)).collect();
    assert_eq!(zones, [("outer", 0, 0, 1_000), ("middle", 1, 100, 600), ("inner", 2, 300, 600)]);
}
