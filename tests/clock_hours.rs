//! The one clock over hours (docs/design.md, section 8, "One clock"): a simulated GPU whose
//! host clock drifts against it, anchors that come late while the GPU is busy, jittered
//! calibration pairs, and first pairs that are wrong. The truth is known: GPU time `g` ran
//! at sim time `base + g`, which the host clock read as `host(base + g)`.
//!
//! The goal checked for every zone: once 1 s of GPU time has passed, its host begin and end
//! within 2 µs of the truth, its host duration the true host duration within 1 ns plus
//! 10 ppm; before, within the first pair's error; host time never going back as GPU time
//! goes on (across lists, lanes, collects, and long zones emitted late).
//!
//! The default run covers a few simulated minutes per case; `clock_matrix_over_ten_hours`
//! (ignored by default, run by CI in release mode) covers ten simulated hours per case:
//! `cargo test --release --test clock_hours -- --ignored`.

mod clock_common;

use clock_common::{run_case, Case, Skewed, Trouble, BAD_PAIR_ERROR, MS, S};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, TracingContext};

const DRIFTS_PPM: [f64; 9] = [0.0, 0.5, -0.5, 1.0, -1.0, 10.0, -10.0, 100.0, -100.0];
const TROUBLES: [Trouble; 4] =
    [Trouble::LateWhileBusy, Trouble::Jitter, Trouble::HostJitter, Trouble::BadFirstPairs];

fn matrix(troubles: &[Trouble], seconds: i64, period: i64, long_every: u64) {
    let mut failures = Vec::new();
    for &trouble in troubles {
        for drift in DRIFTS_PPM {
            let worst = run_case(&Case { long_every, ..Case::new(drift, trouble, seconds, period) });
            let first_pair_error = if trouble == Trouble::BadFirstPairs { BAD_PAIR_ERROR } else { 100_000 };
            let ok = worst.after <= 2_000
                && worst.before <= first_pair_error
                && worst.duration_excess <= 0
                && worst.backwards == 0
                && worst.time_errors.is_empty()
                && worst.other_errors == 0;
            println!(
                "{trouble:?} {drift:+} ppm over {seconds} s: {worst:?}{}",
                if ok { "" } else { "  FAILED" }
            );
            if !ok {
                failures.push(format!("{trouble:?} at {drift:+} ppm: {worst:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every case for two simulated minutes, one round every 20 ms, a long zone every minute.
#[test]
#[cfg_attr(miri, ignore = "minutes of simulation")]
fn clock_matrix_over_two_minutes() {
    matrix(&TROUBLES, 120, 20 * MS, 3_000);
}

/// Every case for ten simulated hours, one round every 250 ms, a long zone every 10 minutes;
/// but host reads jittered everywhere (`HostJitter`), whose bounds are too few at one round
/// every 250 ms for the goal (docs/design.md, section 8, "What the clock cannot do").
#[test]
#[ignore = "slow in debug builds: CI runs it in release mode"]
fn clock_matrix_over_ten_hours() {
    matrix(&[Trouble::LateWhileBusy, Trouble::Jitter, Trouble::BadFirstPairs], 10 * 3_600, 250 * MS, 2_400);
}

/// Issue 26, item 1: anchors 1 ms late while the GPU is busy, idle for the first 1.2 s and
/// busy after (a stream kept busy by other work) for 8 s: the drift is not fitted from an
/// exact early pair to a late later one.
#[test]
#[cfg_attr(miri, ignore = "seconds of simulation")]
fn anchors_late_while_busy_for_seconds_do_not_invent_a_drift() {
    for drift in [0.0, 100.0, -100.0] {
        let gpu = Skewed::new(drift, Trouble::LateWhileBusy);
        let sink = MemorySink::new();
        let ctx = TracingContext::builder(gpu.clone()).sink(sink.clone()).build().unwrap();
        let (stream, busy) = (gpu.sim.stream(), gpu.sim.stream());
        let (mut worst, mut first_second) = (0, 0);
        for round in 0..800i64 {
            if round == 120 {
                gpu.sim.launch(&busy, 20 * S);
            }
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("kernel")).unwrap();
            gpu.sim.launch(&stream, 200_000);
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
            gpu.sim.advance(10 * MS);
            ctx.collect().unwrap();
            for z in sink.take_zones() {
                let error = (z.host_begin_ns - gpu.truth(z.gpu_begin_ns)).abs();
                if z.gpu_begin_ns >= S {
                    worst = worst.max(error);
                } else {
                    first_second = first_second.max(error);
                }
            }
        }
        assert!(worst <= 2_000, "{drift} ppm: {worst} ns off the truth after 1 s");
        assert!(first_second <= 100_000, "{drift} ppm: {first_second} ns off the truth in the first second");
    }
}
