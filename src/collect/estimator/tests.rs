//! The estimator's rules, each on bounds made to show it.

use super::*;

fn b(gpu: i64, offset: f64) -> Bound {
    Bound { gpu, offset }
}

const MS: i64 = 1_000_000;

/// Feeds `estimator` a bound every `step` ns over `[from, to)`, at `offset(gpu)`.
fn feed(estimator: &mut Estimator, from: i64, to: i64, step: i64, mut offset: impl FnMut(i64) -> f64) {
    let mut gpu = from;
    while gpu < to {
        estimator.lower(b(gpu, offset(gpu)));
        gpu += step;
    }
}

#[test]
fn a_drift_is_followed_from_timely_bounds() {
    let mut estimator = Estimator::new();
    // -0.9 ppm over 100 s of exact bounds, one every 4 ms (40 ms under Miri).
    let step = if cfg!(miri) { 40 * MS } else { 4 * MS };
    feed(&mut estimator, 0, 100_000 * MS + 1, step, |gpu| 1_000.0 - 0.9e-6 * gpu as f64);
    let line = estimator.line().unwrap();
    assert!((line.drift + 0.9e-6).abs() < 1e-9, "{line:?}");
    let end = 100_000 * MS;
    assert!((line.at(end) - (1_000.0 - 0.9e-6 * end as f64)).abs() < 2.0, "{line:?}");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "over ten thousand bounds of arithmetic (no unsafe code, no threads): too slow for Miri"
)]
fn late_bounds_after_timely_ones_leave_the_line_and_its_drift() {
    let mut estimator = Estimator::new();
    let truth = |gpu: i64| 5_000.0 + 20e-6 * gpu as f64;
    // 1.2 s of exact bounds, then 10 s of bounds 1 ms late.
    feed(&mut estimator, 0, 1_200 * MS, MS, truth);
    feed(&mut estimator, 1_200 * MS, 11_200 * MS, MS, |gpu| truth(gpu) - 1_000_000.0);
    let line = estimator.line().unwrap();
    let end = 11_200 * MS;
    assert!((line.at(end) - truth(end)).abs() < 50.0, "{} ns off", line.at(end) - truth(end));
}

/// The host clock's rate moves by 1 ppm while the GPU is busy (every bound 1 ms late): the
/// late bounds show the new rate, and the line follows it.
#[test]
#[cfg_attr(
    miri,
    ignore = "over ten thousand bounds of arithmetic (no unsafe code, no threads): too slow for Miri"
)]
fn late_bounds_show_a_rate_change_while_the_gpu_is_busy() {
    let mut estimator = Estimator::new();
    let truth = |gpu: i64| 5_000.0 + 3e-6 * gpu as f64 + 1e-6 * (gpu - 5_000 * MS).max(0) as f64;
    feed(&mut estimator, 0, 2_000 * MS, 5 * MS, truth);
    feed(&mut estimator, 2_000 * MS, 60_000 * MS, 5 * MS, |gpu| truth(gpu) - 1_000_000.0);
    let line = estimator.line().unwrap();
    let end = 60_000 * MS;
    assert!((line.drift - 4e-6).abs() < 1e-8, "{line:?}");
    assert!((line.at(end) - truth(end)).abs() < 1_000.0, "{} ns off", line.at(end) - truth(end));
}

/// A bound late by more than the GPU's steady lateness, first, sets the lateness too high;
/// the less late ones after it in the lateness's first second lower it, and never raise the
/// line.
#[test]
fn the_lateness_is_the_least_seen_in_its_first_second() {
    let mut estimator = Estimator::new();
    let truth = |gpu: i64| 2_000.0 - 5e-6 * gpu as f64;
    feed(&mut estimator, 0, 1_000 * MS, 5 * MS, truth);
    estimator.lower(b(1_000 * MS, truth(1_000 * MS) - 1_040_000.0));
    feed(&mut estimator, 1_005 * MS, 3_000 * MS, 5 * MS, |gpu| truth(gpu) - 1_000_000.0);
    let line = estimator.line().unwrap();
    let end = 3_000 * MS;
    assert!((line.at(end) - truth(end)).abs() < 50.0, "{} ns off", line.at(end) - truth(end));
}

/// The host clock's rate changes (exact bounds every 5 ms): the run of bounds off the line is
/// a rate change, taken once the bounds are off the line by [`ON_NS`] and within four bounds
/// after (the line 5 ms ahead of the latest bound is never off by more than that much and
/// the change over 20 ms).
#[test]
fn a_run_of_exact_bounds_off_the_line_is_a_rate_change() {
    for (before, after) in [(10e-6, -10e-6), (0.0, 100e-6), (0.0, -100e-6), (-50e-6, 50e-6)] {
        let mut estimator = Estimator::new();
        let change = 2_000 * MS;
        let truth =
            move |gpu: i64| 1_000.0 + before * gpu as f64 + (after - before) * (gpu - change).max(0) as f64;
        feed(&mut estimator, 0, change, 5 * MS, truth);
        let mut worst: f64 = 0.0;
        let mut gpu = change;
        while gpu < change + 500 * MS {
            estimator.lower(b(gpu, truth(gpu)));
            let line = estimator.line().unwrap();
            worst = worst.max((line.at(gpu + 5 * MS) - truth(gpu + 5 * MS)).abs());
            gpu += 5 * MS;
        }
        let line = estimator.line().unwrap();
        assert!((line.drift - after).abs() < 1e-8, "{before} to {after}: {line:?}");
        let limit = ON_NS + (after - before).abs() * (20 * MS) as f64;
        assert!(worst <= limit, "{before} to {after}: {worst} ns off, 5 ms ahead of the latest bound");
    }
}

/// Bounds jittered by up to 50 µs around a steady drift are not taken for rate changes: the
/// line stays on the best of them.
#[test]
fn jittered_bounds_below_the_line_are_no_rate_change() {
    let mut estimator = Estimator::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut jitter = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 50_000) as f64
    };
    let truth = |gpu: i64| 7_000.0 + 12e-6 * gpu as f64;
    // A minute of bounds 5 ms apart (50 ms under Miri).
    let step = if cfg!(miri) { 50 * MS } else { 5 * MS };
    feed(&mut estimator, 0, 60_000 * MS, step, |gpu| truth(gpu) - jitter());
    let line = estimator.line().unwrap();
    let end = 60_000 * MS;
    assert!((line.at(end) - truth(end)).abs() < 2_000.0, "{} ns off", line.at(end) - truth(end));
    assert!((line.drift - 12e-6).abs() < 0.2e-6, "{line:?}");
}

#[test]
fn a_lower_bound_above_the_line_raises_it_at_once() {
    let mut estimator = Estimator::new();
    estimator.lower(b(0, 100.0));
    assert!(estimator.lower(b(1_000, 150.0)));
    assert!(estimator.line().unwrap().at(1_000) >= 150.0);
    assert!(!estimator.lower(b(2_000, 10.0)), "a weaker bound changes nothing");
}

#[test]
fn lower_bounds_an_upper_bound_proves_wrong_are_dropped() {
    let mut estimator = Estimator::new();
    // The first pairs 10 ms too high, then exact ones.
    for k in 0..4 {
        estimator.lower(b(k * 1_000, 10_000_000.0));
    }
    for k in 1..100i64 {
        estimator.lower(b(k * MS, 0.0));
    }
    assert!(estimator.line().unwrap().at(100 * MS) > 9_000_000.0, "the wrong pairs rule");
    assert!(estimator.upper(b(100 * MS, 300.0)));
    let line = estimator.line().unwrap();
    assert!(line.at(100 * MS).abs() < 1.0, "{line:?}");
    assert!(!estimator.upper(b(101 * MS, 500.0)), "a consistent upper bound changes nothing");
}
