//! The one GPU-to-host clock (docs/design.md, section 8, "One clock"), checked against the
//! simulated GPU, where the truth is known: GPU time `g` ran at host time `base + g`, `base`
//! being the host time at which the GPU reached the context's base event.

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, TracingContext};
use std::time::Duration;

/// A small deterministic generator (xorshift).
fn jitter(seed: &mut u64, max: i64) -> i64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed % (max as u64 + 1)) as i64
}

fn context(sim: &SimBackend) -> (TracingContext<SimBackend>, MemorySink) {
    let zones = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone())
        .anchor_interval(Duration::from_millis(1))
        .sink(zones.clone())
        .build()
        .unwrap();
    (ctx, zones)
}

/// `rounds` rounds of one list per stream (a command buffer of three kernels of uneven
/// length), each followed by `pause(round)` ns and a collect; then a flush.
fn run(
    sim: &SimBackend,
    ctx: &TracingContext<SimBackend>,
    streams: &[SimStream],
    rounds: usize,
    pause: impl Fn(usize) -> i64,
) {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for round in 0..rounds {
        for stream in streams {
            let mut list = ctx.list();
            list.zone_begin(stream, location!("command buffer")).unwrap();
            for _ in 0..3 {
                list.zone_begin(stream, location!("kernel")).unwrap();
                sim.launch(stream, 10_000 + jitter(&mut seed, 300_000));
                list.zone_end(stream).unwrap();
            }
            list.zone_end(stream).unwrap();
            ctx.submit(list).unwrap();
        }
        sim.advance(pause(round) + jitter(&mut seed, 400_000));
        ctx.collect().unwrap();
    }
    ctx.flush().unwrap();
}

/// Every (GPU, host) time of `zones`, begins and ends, sorted by GPU time.
fn points(zones: &[Zone]) -> Vec<(i64, i64)> {
    let mut points: Vec<(i64, i64)> = zones
        .iter()
        .flat_map(|z| [(z.gpu_begin_ns, z.host_begin_ns), (z.gpu_end_ns, z.host_end_ns)])
        .collect();
    points.sort_unstable();
    points
}

/// Under load a busy GPU reaches the collector's anchors 1 ms late (as an H200 does), so
/// each new anchor's pair says the offset is up to 1 ms smaller than it is. The clock keeps
/// the best pair (the context was calibrated on the idle GPU), so every zone's host time is
/// within 1 µs of the truth and every host duration equals the GPU duration.
#[test]
fn host_times_stay_within_a_microsecond_of_the_truth_when_anchors_come_late() {
    let sim = SimBackend::manual();
    sim.advance(7_654_321);
    let base = sim.now();
    let (ctx, sink) = context(&sim);
    sim.set_late_records(1_000_000);
    let streams: Vec<SimStream> = (0..4).map(|_| sim.stream()).collect();
    let rounds = if cfg!(miri) { 20 } else { 300 };
    run(&sim, &ctx, &streams, rounds, |_| 300_000);

    let zones = sink.zones();
    assert_eq!(zones.len(), rounds * 4 * 4);
    for zone in &zones {
        let error = zone.host_begin_ns - (zone.gpu_begin_ns + base);
        assert!(error.abs() <= 1_000, "{zone:?}: {error} ns off the truth");
        assert_eq!(zone.host_end_ns - zone.host_begin_ns, zone.gpu_end_ns - zone.gpu_begin_ns);
    }
}

/// The context's base event is seen complete 5 ms after the GPU reached it (a slow
/// readback, as wgpu's on lavapipe): the first anchors, recorded once the wait returns, are
/// 5 ms of GPU time past the base but only microseconds of host time past that wait's end.
/// The context builds (no anchor refused as a step the GPU cannot have made), and every
/// zone after is within 1 µs of the truth.
#[test]
fn a_base_event_seen_late_does_not_make_the_next_anchors_seem_too_far() {
    let sim = SimBackend::manual();
    sim.advance(3_000_000);
    let base = sim.now();
    sim.delay_next_wait(5_000_000);
    let (ctx, sink) = context(&sim);
    let streams: Vec<SimStream> = (0..2).map(|_| sim.stream()).collect();
    run(&sim, &ctx, &streams, 50, |_| 300_000);

    let zones = sink.zones();
    assert_eq!(zones.len(), 50 * 2 * 4);
    assert_eq!(ctx.stats().lists_failed, 0);
    for zone in &zones {
        let error = zone.host_begin_ns - (zone.gpu_begin_ns + base);
        assert!(error.abs() <= 1_000, "{zone:?}: {error} ns off the truth");
    }
}

/// A context made while its GPU is busy calibrates 800 µs short; once the GPU goes idle, an
/// exact pair arrives and the clock slews to it. Throughout, host times never go back as
/// GPU time goes on, whatever list, lane or collect call a time came from, and in the end
/// the clock is within 1 µs of the truth.
#[test]
fn host_times_never_go_back_across_lists_lanes_and_collects_and_converge_to_the_truth() {
    const LATE: i64 = 800_000;
    let sim = SimBackend::manual();
    sim.advance(2_000_000);
    sim.set_late_records(LATE);
    let busy = sim.stream();
    sim.launch(&busy, 40_000_000);
    // The base event is reached late too: GPU time 0 ran at this host time.
    let base = sim.now() + LATE;
    let (ctx, sink) = context(&sim);
    let streams: Vec<SimStream> = (0..3).map(|_| sim.stream()).collect();
    // Under Miri, fewer rounds: the GPU is busy for the first 10 and idle from then on.
    let (rounds, busy) = if cfg!(miri) { (30, 10) } else { (400, 150) };
    run(&sim, &ctx, &streams, rounds, |round| if round < busy { 150_000 } else { 2_500_000 });

    let zones = sink.zones();
    assert_eq!(zones.len(), rounds * 3 * 4);
    let points = points(&zones);
    for pair in points.windows(2) {
        assert!(pair[0].1 <= pair[1].1, "host time goes back as GPU time goes on: {pair:?}");
    }
    let early = zones.iter().map(|z| z.host_begin_ns - (z.gpu_begin_ns + base)).min().unwrap();
    assert!(early <= -LATE / 2, "the test did not start off the truth ({early} ns)");
    let last = zones.iter().max_by_key(|z| z.gpu_begin_ns).unwrap();
    let error = last.host_begin_ns - (last.gpu_begin_ns + base);
    assert!(error.abs() <= 1_000, "{error} ns off the truth at the end");
    // A correction stretches a zone by at most the correction, and only while slewing.
    for zone in &zones {
        let stretch = (zone.host_end_ns - zone.host_begin_ns) - (zone.gpu_end_ns - zone.gpu_begin_ns);
        assert!((0..=LATE).contains(&stretch), "{zone:?} stretched by {stretch} ns");
    }
}

/// Several threads record on a real-time simulated GPU, each on its own stream, while a
/// collector thread collects: zones that are disjoint on the GPU are disjoint on the host
/// clock (each list's zones are back to back with the next list's on its stream), and host
/// times follow GPU times.
#[test]
#[cfg_attr(miri, ignore = "real time")]
fn back_to_back_lists_of_a_stream_never_overlap_on_the_host_clock() {
    let sim = SimBackend::realtime();
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone())
        .collect_every(Duration::from_millis(1))
        .sink(sink.clone())
        .build()
        .unwrap();
    let streams: Vec<SimStream> = (0..4).map(|_| sim.stream()).collect();
    std::thread::scope(|s| {
        for stream in &streams {
            let (ctx, sim) = (&ctx, &sim);
            s.spawn(move || {
                for _ in 0..100 {
                    let mut list = ctx.list();
                    list.zone_begin(stream, location!("command buffer")).unwrap();
                    sim.launch(stream, 2_000);
                    list.zone_next(stream, location!("second")).unwrap();
                    sim.launch(stream, 3_000);
                    list.zone_end(stream).unwrap();
                    ctx.submit(list).unwrap();
                }
            });
        }
    });
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(zones.len(), 4 * 100 * 2);
    for lane in streams.iter().map(|s| gpu_event_pool::Lane::Stream(sim_key(&sim, s))) {
        let mut on_lane: Vec<&Zone> = zones.iter().filter(|z| z.lane == lane).collect();
        on_lane.sort_by_key(|z| z.gpu_begin_ns);
        assert!(on_lane.windows(2).all(|p| p[0].gpu_end_ns <= p[1].gpu_begin_ns), "one thread per stream");
        for pair in on_lane.windows(2).filter(|p| p[0].gpu_end_ns <= p[1].gpu_begin_ns) {
            assert!(
                pair[0].host_end_ns <= pair[1].host_begin_ns,
                "zones cross on the host clock: {:?} ends after {:?} begins",
                pair[0],
                pair[1]
            );
        }
    }
    let points = points(&zones);
    assert!(points.windows(2).all(|p| p[0].1 <= p[1].1), "host time goes back");
}

fn sim_key(sim: &SimBackend, stream: &SimStream) -> u64 {
    use gpu_event_pool::Backend;
    sim.stream_key(stream)
}
