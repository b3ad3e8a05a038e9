//! Unit tests of the mapping: one context's bounds, anchors and lists, constructed by hand.

use super::*;

fn pair(gpu: i64, host_before: i64, host_after: i64) -> PointBound {
    PointBound::from_host(gpu, Some(host_before), Some(host_after))
}

fn reads(first_host_ns: i64, read_host_ns: i64) -> ListReads {
    ListReads { first_host_ns: Some(first_host_ns), read_host_ns, uncertain: 0, drift: 0 }
}

#[test]
fn an_exact_pair_pins_the_offset_and_the_bound_grows_at_the_rate_bound_away_from_it() {
    let mut clock = HostClock::new();
    assert_eq!(clock.anchor(pair(0, 1_000, 1_000), 0), None);
    // A list 2 ms later, read long after: its times are placed by the anchor alone.
    let (placed, bound) = clock.place(2_000_000, 2_100_000, reads(0, 50_000_000), None, None, None);
    assert!(!placed.alone);
    assert_eq!(bound.at(2_000_000), 1_001, "500 ppm of 2 ms, and 1 ns of rounding");
    let host = 2_000_000 + placed.offset;
    assert!((host - 2_001_000).unsigned_abs() <= bound.at(2_000_000));
}

#[test]
fn a_late_anchor_only_narrows_the_set_and_never_moves_it() {
    let mut clock = HostClock::new();
    clock.anchor(pair(0, 1_000, 1_000), 0);
    let (before, _) = clock.place(1_000_000, 1_000_000, reads(0, 9_000_000), None, None, None);
    // An anchor reached 50 µs late: its interval is 50 µs wide and holds the truth.
    assert_eq!(clock.anchor(pair(1_000_000, 1_001_000 - 50_000, 1_001_000 + 10), 0), None);
    let (after, bound) = clock.place(1_000_000, 1_000_000, reads(0, 9_000_000), None, None, None);
    assert!((after.offset - 1_000).unsigned_abs() <= bound.at(1_000_000), "the truth is within");
    assert!(bound.at(1_000_000) <= 501 + 10, "{}", bound.at(1_000_000));
    assert!((after.offset - before.offset).abs() <= 600, "{} then {}", before.offset, after.offset);
}

#[test]
fn an_anchor_no_mapping_fits_begins_a_new_segment() {
    let mut clock = HostClock::new();
    clock.anchor(pair(0, 0, 0), 0);
    clock.anchor(pair(5_000_000, 5_000_000, 5_000_000), 0);
    // The GPU ran 2 s that the host clock did not see (a suspend).
    let host = 10_000_000 - 2_000_000_000;
    let jump = clock.anchor(pair(10_000_000, host, host), 0).expect("a discontinuity");
    assert_eq!(jump.jump_ns, -2_000_000_000);
    assert_eq!(clock.segments(), 2);
    // Later lists are placed in the new segment; an earlier one in the old.
    let (new, _) = clock.place(11_000_000, 11_000_000, reads(-1_999_000_000, i64::MAX / 4), None, None, None);
    assert!(!new.alone);
    assert!((new.offset + 2_000_000_000).abs() <= 600);
    let (old, _) = clock.place(4_000_000, 4_000_000, reads(0, i64::MAX / 4), None, None, None);
    assert!(!old.alone);
    assert!(old.offset.abs() <= 600);
}

#[test]
fn a_list_its_segment_does_not_fit_is_placed_from_its_own_reads() {
    let mut clock = HostClock::new();
    clock.anchor(pair(0, 0, 0), 0);
    // Read 1 s before the segment says its GPU times ran: a suspend not seen by an anchor
    // yet.
    let (placed, bound) =
        clock.place(3_000_000_000, 3_000_010_000, reads(1_999_990_000, 2_000_020_000), None, None, None);
    assert!(placed.alone);
    let truth = 2_000_000_000 - 3_000_000_000;
    assert!((placed.offset - truth).unsigned_abs() <= bound.at(3_000_000_000));
    assert!(bound.at(3_000_000_000) <= 20_000, "{}", bound.at(3_000_000_000));
}

#[test]
fn the_offset_is_raised_to_the_lane_floor_within_the_set_only() {
    let mut clock = HostClock::new();
    clock.anchor(pair(0, 0, 0), 0);
    let (placed, bound) = clock.place(1_000_000, 2_000_000, reads(-5_000, 10_000_000), None, None, Some(300));
    assert_eq!(placed.offset, 300, "after the list before it");
    assert!(bound.at(1_000_000) >= 300, "the distance to the set's low end");
    let (placed, _) = clock.place(3_000_000, 4_000_000, reads(-5_000, 10_000_000), None, None, Some(9_000));
    assert_eq!(placed.offset, 1_501, "no higher than the set allows over the span (500 ppm of 3 ms)");
}

#[test]
fn a_list_between_two_segments_goes_to_the_one_its_reads_fit() {
    let mut clock = HostClock::new();
    clock.anchor(pair(0, 0, 0), 0);
    let host = 100_000_000 - 2_000_000_000;
    assert!(clock.anchor(pair(100_000_000, host, host), 0).is_some());
    // Ran between the two anchors, after the jump: its read (upper bound) says so.
    let reads = ListReads {
        first_host_ns: None,
        read_host_ns: 60_000_000 - 2_000_000_000 + 5_000,
        uncertain: 0,
        drift: 0,
    };
    let (placed, bound) = clock.place(60_000_000, 60_000_000, reads, None, None, None);
    assert!(!placed.alone);
    assert!((placed.offset + 2_000_000_000).unsigned_abs() <= bound.at(60_000_000));
    assert!(bound.at(60_000_000) <= 25_000, "{}", bound.at(60_000_000));
}

#[test]
fn a_drift_shared_with_the_segment_does_not_widen_and_one_apart_from_it_does() {
    // A suspend read as one long step: every anchor and list after it shares its
    // rounding (200 ns), and the segment it began is as tight as the one before.
    let mut clock = HostClock::new();
    clock.anchor(pair(0, 0, 0), 0);
    let host = 3_000_000_000 - 2_000_000_000;
    assert!(clock.anchor(pair(3_000_000_000, host, host), 200).is_some());
    assert_eq!(clock.anchor(pair(3_002_000_000, host + 2_000_000, host + 2_000_000), 200), None);
    let reads = |drift| ListReads { first_host_ns: None, read_host_ns: i64::MAX / 4, uncertain: 0, drift };
    let (shared, bound) = clock.place(3_001_000_000, 3_001_000_000, reads(200), None, None, None);
    assert_eq!((shared.uncertain, bound.at(3_001_000_000)), (0, 501), "500 ppm of 1 ms, 1 ns of rounding");
    // Read from an anchor 50 ns of rounding further on: off the segment's by 50 ns at most.
    let (apart, _) = clock.place(3_001_000_000, 3_001_000_000, reads(250), None, None, None);
    assert_eq!(apart.uncertain, 50);
}

#[test]
fn a_discontinuity_is_reported_at_its_anchor_with_the_change_of_offset_across_it() {
    let mut clock = HostClock::new();
    // The host clock 1 ms ahead of the GPU's, then a suspend of 2 s.
    clock.anchor(pair(0, 1_000_000, 1_000_000), 0);
    let host = 10_000_000 - 2_000_000_000;
    let jump = clock.anchor(pair(10_000_000, host, host), 0).expect("a discontinuity");
    assert_eq!((jump.gpu_ns, jump.host_ns, jump.jump_ns), (10_000_000, host, -2_001_000_000));
}

#[test]
fn the_last_segments_are_kept_and_a_list_older_than_all_of_them_is_placed_alone() {
    let mut clock = HostClock::new();
    // A suspend of 2 s every 10 ms: one segment more than are kept.
    let offset = |k: i64| -2_000_000_000 * k;
    for k in 0..=SEGMENTS as i64 {
        let gpu = 10_000_000 * k;
        clock.anchor(pair(gpu, gpu + offset(k), gpu + offset(k)), 0);
    }
    assert_eq!(clock.segments(), SEGMENTS);
    // In the oldest segment kept, and in the one before it, dropped.
    let (kept, _) =
        clock.place(10_000_000, 10_000_000, reads(10_000_000 + offset(1), i64::MAX / 4), None, None, None);
    assert!(!kept.alone);
    assert_eq!(kept.offset, offset(1));
    let (dropped, _) = clock.place(5_000_000, 5_000_000, reads(5_000_000, i64::MAX / 4), None, None, None);
    assert!(dropped.alone);
}

/// A segment from GPU time 0 with its last bound at 10 ms, and one begun at 100 ms by a suspend
/// of 2 s.
fn two_segments() -> HostClock {
    let mut clock = HostClock::new();
    clock.anchor(pair(0, 0, 0), 0);
    assert_eq!(clock.anchor(pair(10_000_000, 10_000_000, 10_000_000), 0), None);
    let host = 100_000_000 - 2_000_000_000;
    assert!(clock.anchor(pair(100_000_000, host, host), 0).is_some());
    clock
}

#[test]
fn a_list_that_begins_at_its_segments_last_bound_is_placed_in_that_segment() {
    let mut clock = two_segments();
    // Read so late that its reads fit the next segment too: it ran at a GPU time the first
    // segment has a bound at, so in the first segment, not between the two.
    let late = ListReads { first_host_ns: None, read_host_ns: i64::MAX / 4, uncertain: 0, drift: 0 };
    let (placed, bound) = clock.place(10_000_000, 10_000_000, late, None, None, None);
    assert!(!placed.alone);
    assert_eq!((placed.offset, bound.at(10_000_000)), (0, 0));
}

#[test]
fn a_list_between_two_segments_whose_reads_fit_only_the_earlier_goes_to_it() {
    let mut clock = two_segments();
    let (placed, bound) =
        clock.place(50_000_000, 50_000_000, reads(50_000_000 - 1_000, 50_000_000 + 1_000), None, None, None);
    assert!(!placed.alone);
    assert!(placed.offset.unsigned_abs() <= bound.at(50_000_000));
    assert!(bound.at(50_000_000) <= 2_000, "{}", bound.at(50_000_000));
}

#[test]
fn a_lists_bound_is_sampled_at_its_ends_and_at_most_six_of_the_bounds_inside_spread_evenly() {
    // A list over 10 ms to 12.2 ms with its own bounds at its ends, and `n` lower bounds
    // inside it, 0.1 ms apart, each somewhere the highest.
    let (first, last, apart) = (10_000_000, 12_200_000, 100_000);
    for n in 0..=20 {
        let mut clock = HostClock::new();
        clock.anchor(pair(0, 0, 0), 0);
        let inside: Vec<i64> = (1..=n).map(|i| first + i * apart).collect();
        for &gpu in &inside {
            assert_eq!(clock.anchor(PointBound { gpu, lower: Some(0), upper: None }, 0), None);
        }
        let (placed, bound) = clock.place(first, last, reads(first, last + 100), None, None, None);
        assert!(!placed.alone);
        // Every one while they fit, else every `ceil(n / 6)`-th from the first: no bound
        // inside is more than that many from a sample.
        let step = inside.len().div_ceil(SAMPLES - 2).max(1);
        let expected: Vec<i64> = inside.iter().copied().step_by(step).collect();
        let mut sampled: Vec<i64> =
            bound.samples.iter().map(|s| s.0).filter(|&g| first < g && g < last).collect();
        sampled.sort_unstable();
        assert_eq!(sampled, expected, "{n} bounds inside");
        assert!(bound.samples.len() <= SAMPLES, "{n} bounds inside: {} samples", bound.samples.len());
        assert!(bound.samples.iter().any(|s| s.0 == first) && bound.samples.iter().any(|s| s.0 == last));
    }
}
