//! The one clock when things change (docs/design.md, section 8, "One clock"): a host clock
//! whose rate NTP or chrony changes, a GPU that becomes busy and stays busy, and reads that
//! are absurd. The simulated GPU knows the truth (`clock_common`); one round of work every
//! 20 ms, collected twice a round, so a collect's anchor comes every 10 ms or so. The goal
//! for every zone once 1 s of GPU time has passed: its host begin and end within 2 µs of
//! the truth, its host duration within 1 ns plus 10 ppm (plus the change of rate, while it
//! changes) of the true one, host time never going back as GPU time goes on, and no read
//! moving the mapping by more than its own list.
//!
//! Each case runs simulated seconds or minutes here; `tests/clock_hours.rs` runs the same
//! kinds of cases over hours (in release mode, in CI).

mod clock_common;

use clock_common::{run_case, sample, Case, Goal, Read, Trouble, Worst, GOAL, MS, S};
use gpu_event_pool::TimeError;

/// How far a change of rate by `ppm` may take a zone, and its duration, before bounds show
/// it: four exact bounds at distinct times, two on each half of 10 ms or more, after the
/// bounds leave the line, which a collect every 10 ms makes within 50 ms (100 ms with
/// jittered pairs, whose lists alone are exact: one time a round). Meanwhile host durations
/// are off by the change (twice the change, with the slope first taken from the run's few
/// bounds, and the correction's slew: 5 ppm), or, above 2 µs, by the error over 20 ms.
fn after_change(ppm: f64, trouble: Trouble) -> Goal {
    let shown_within = if trouble == Trouble::Jitter { 100.0 } else { 50.0 } * MS as f64;
    let after = (ppm.abs() * 1e-6 * shown_within).max(2_000.0) as i64;
    let slew = if after > 2_000 { after as f64 / 20e6 * 1e6 } else { 0.0 };
    Goal { after, rate_ppm: 10.0 + 2.0 * ppm.abs() + slew, ..GOAL }
}

fn check(name: &str, case: &Case, goal: &Goal) -> Worst {
    let worst = run_case(case);
    println!("{name}: {worst:?}");
    if let Some(missed) = worst.shortfall(goal) {
        panic!("{name}: {missed}; {worst:?}");
    }
    worst
}

/// A steady drift is followed from the first bounds: an anchor every collect says where the
/// offset is to within the drift over that long, so the first second holds to within the
/// drift over the time exact bounds take to show it, as a change of rate from none at the
/// start (before: a line flat until 500 ms of bounds, 54 µs off at 100 ppm).
#[test]
#[cfg_attr(miri, ignore = "simulated seconds")]
fn a_steady_drift_is_followed_from_the_first_bounds() {
    for &drift in sample(&[100.0_f64, -100.0, 30.0, -30.0]) {
        for &trouble in sample(&[Trouble::None, Trouble::Jitter]) {
            let goal = Goal { first: after_change(drift, trouble).after, ..GOAL };
            let worst =
                check(&format!("{drift:+} ppm, {trouble:?}"), &Case::new(drift, trouble, 5, 20 * MS), &goal);
            assert!(worst.time_errors.is_empty());
        }
    }
}

/// The host clock's rate changes (NTP or chrony slewing it): a run of bounds on one side of
/// the line is a rate change, followed, not lateness to ignore (before: 114 µs off for 10 s
/// after +10 to -10 ppm, 570 µs after 0 to -100 ppm).
#[test]
#[cfg_attr(miri, ignore = "simulated minutes")]
fn a_host_clock_whose_rate_changes_is_followed() {
    let changes =
        [(10.0, -10.0), (0.0, 5.0), (0.0, -5.0), (0.0, 20.0), (0.0, -20.0), (0.0, -100.0), (-50.0, 50.0)];
    for &(from, to) in sample(&changes) {
        for &trouble in sample(&[Trouble::None, Trouble::Jitter]) {
            let case = Case { changes: vec![(30 * S, to)], ..Case::new(from, trouble, 45, 20 * MS) };
            let name = format!("{from:+} to {to:+} ppm at 30 s, {trouble:?}");
            let worst = check(&name, &case, &after_change(to - from, trouble));
            assert!(worst.time_errors.is_empty(), "{name}");
        }
    }
}

/// A GPU idle for 20 s, then busy for the rest of the run (every anchor and every list's first
/// record reached 1 ms late), while the host clock's rate moves: the late bounds, late by a
/// steady amount, show the new rate (before: 1 µs more off every second at 1 ppm).
#[test]
#[cfg_attr(miri, ignore = "simulated minutes")]
fn a_gpu_busy_for_minutes_still_follows_the_host_clocks_rate() {
    for &trouble in sample(&[Trouble::LateWhileBusy, Trouble::LateAndJitter]) {
        for &(from, to) in sample(&[(0.0, 1.0), (10.0, 9.0), (-20.0, 20.0)]) {
            let case = Case {
                changes: vec![(40 * S, to)],
                busy: Some((20 * S, 200 * S)),
                ..Case::new(from, trouble, 100, 20 * MS)
            };
            let name = format!("busy from 20 s, {from:+} to {to:+} ppm at 40 s, {trouble:?}");
            check(&name, &case, &after_change(to - from, Trouble::None));
        }
    }
}

/// A GPU busy from 2 s on: the drift the short idle start showed is refined while busy, from
/// the late bounds.
#[test]
#[cfg_attr(miri, ignore = "simulated minutes")]
fn a_gpu_busy_from_a_short_idle_start_refines_the_drift_while_busy() {
    for &trouble in sample(&[Trouble::LateWhileBusy, Trouble::LateAndJitter]) {
        for &drift in sample(&[10.0, -10.0, 100.0]) {
            let case = Case { busy: Some((2 * S, 1_000 * S)), ..Case::new(drift, trouble, 120, 20 * MS) };
            check(&format!("busy from 2 s, {drift:+} ppm, {trouble:?}"), &case, &GOAL);
        }
    }
}

/// The list of the absurd read failed with a time error, and nothing else failed.
fn one_absurd_read_error(name: &str, worst: &Worst) {
    assert_eq!(worst.time_errors.len(), 1, "{name}: {:?}", worst.time_errors);
    let failed = &worst.time_errors[0];
    let absurd = matches!(
        failed,
        TimeError::OutOfReach { .. } | TimeError::OutOfRange { .. } | TimeError::WentBack { .. }
    );
    assert!(absurd, "{name}: {failed:?}");
}

/// Longer than the context has existed: 11.6 days.
const DAYS: i64 = 1_000_000 * S;

/// An absurd step read (`i64::MAX`, what Vulkan's read returns when a difference does not fit,
/// or days) fails its list: the mapping's frontier does not jump there, and later corrections
/// (a host clock whose rate changes by 20 ppm) still apply (before: 400 µs off 20 s after).
#[test]
#[cfg_attr(miri, ignore = "simulated minutes")]
fn an_absurd_step_read_fails_its_list_and_moves_nothing() {
    for &read in sample(&[Read::ListStep, Read::Placement]) {
        for &ns in sample(&[i64::MAX, DAYS, -DAYS]) {
            let case = Case {
                changes: vec![(40 * S, 20.0)],
                absurd: Some((20 * S, read, ns)),
                ..Case::new(0.0, Trouble::None, 60, 20 * MS)
            };
            let name = format!("absurd {read:?} of {ns} ns at 20 s, +20 ppm at 40 s");
            let worst = check(&name, &case, &after_change(20.0, Trouble::None));
            one_absurd_read_error(&name, &worst);
        }
    }
}

/// An absurd placement of the context's very first list (its first event read from the anchor
/// as `i64::MAX`): the addition that places it does not wrap (nor panic in a debug build),
/// the list fails, and every later zone is where it ran.
#[test]
#[cfg_attr(miri, ignore = "simulated seconds")]
fn an_absurd_placement_of_the_first_list_fails_that_list_only() {
    let case =
        Case { absurd: Some((0, Read::Placement, i64::MAX)), ..Case::new(10.0, Trouble::None, 5, 20 * MS) };
    let name = "absurd placement of the first list";
    let worst = check(name, &case, &Goal { first: 2_000, ..GOAL });
    one_absurd_read_error(name, &worst);
}

/// An absurd step between two anchors (longer than the context has existed, or back) is
/// refused: the anchor is dropped, and no list is placed from it.
#[test]
#[cfg_attr(miri, ignore = "simulated seconds")]
fn an_absurd_anchor_step_is_refused() {
    for &ns in sample(&[i64::MAX, DAYS, -DAYS]) {
        let case = Case {
            absurd: Some((2 * S, Read::AnchorStep, ns)),
            ..Case::new(10.0, Trouble::None, 10, 20 * MS)
        };
        let name = format!("absurd anchor step of {ns} ns at 2 s");
        let worst = check(&name, &case, &Goal { first: 2_000, ..GOAL });
        assert!(
            matches!(worst.time_errors[..], [TimeError::AnchorStep { step_ns, .. }] if step_ns == ns),
            "{name}: {:?}",
            worst.time_errors
        );
    }
}
