//! The assembler's rules, without a GPU.

use super::*;
use crate::location::DynamicLocation;

const LANE_A: (u32, u32) = (1, 7);
const LANE_B: (u32, u32) = (1, 8);

fn key((context, stream): (u32, u32)) -> u64 {
    lane_key(context, stream)
}

fn zone(id: u64, parent: u64, depth: u32, name: &str) -> ClosedZone {
    ClosedZone {
        id,
        parent,
        depth,
        location: DynamicLocation::new(name).into(),
        lane: Some(key(LANE_A)),
        launch: Launch::new(id as i64, id as i64 + 1, 1),
    }
}

fn kernel(lane: (u32, u32), correlation_id: u32, start: u64, end: u64) -> ActivityRecord {
    ActivityRecord {
        kind: ActivityKind::Kernel,
        name: Some(format!("k{correlation_id}")),
        device_id: 0,
        context_id: lane.0,
        stream_id: lane.1,
        correlation_id,
        graph_id: 0,
        graph_node_id: 0,
        start_ns: start,
        end_ns: end,
        external_id: None,
    }
}

fn link(correlation_id: u32, external: u64) -> ActivityRecord {
    ActivityRecord {
        kind: ActivityKind::ExternalCorrelation,
        name: None,
        start_ns: 0,
        end_ns: 0,
        external_id: Some(external),
        ..kernel(LANE_A, correlation_id, 0, 0)
    }
}

/// (name, depth, begin, end) of each zone of each batch.
fn shape(out: &Emitted) -> Vec<Vec<(String, u32, i64, i64)>> {
    out.batches
        .iter()
        .map(|(_, zones)| {
            zones
                .iter()
                .map(|z| (z.location.name().to_owned(), z.depth, z.host_begin_ns, z.host_end_ns))
                .collect()
        })
        .collect()
}

fn ns(t: u64) -> i64 {
    t as i64
}

#[test]
fn a_tree_comes_out_nested_with_spans_of_its_work() {
    let mut a = Assembler::new(0);
    // list(1) { pass(2) { k10 k11 } k12 }
    a.close(zone(2, 1, 1, "pass"));
    a.close(zone(1, 0, 0, "list"));
    a.records(
        vec![
            link(10, 2),
            link(11, 2),
            link(12, 1),
            kernel(LANE_A, 10, 100, 110),
            kernel(LANE_A, 11, 120, 130),
            kernel(LANE_A, 12, 140, 150),
        ],
        ns,
    );
    let out = a.emit(false);
    assert_eq!(
        shape(&out),
        vec![vec![
            ("list".into(), 0, 100, 150),
            ("pass".into(), 1, 100, 130),
            ("k10".into(), 2, 100, 110),
            ("k11".into(), 2, 120, 130),
            ("k12".into(), 1, 140, 150),
        ]]
    );
    assert_eq!((out.user_zones, out.activities, out.empty_zones), (2, 3, 0));
    assert_eq!(out.batches[0].0, 1, "a tree's batch is named by its root");
    let launch = out.batches[0].1[0].launch.expect("user zones carry their launch");
    assert_eq!(launch.host_begin_ns, 1);
    assert_eq!(a.pending(), 0, "an emitted tree is forgotten");
}

#[test]
fn a_lane_waits_for_an_open_zone_and_for_final_links() {
    let mut a = Assembler::new(0);
    // Zone 1 still open: its kernel arrives, and an unowned one behind it.
    a.records(vec![link(10, 1), kernel(LANE_A, 10, 100, 110), kernel(LANE_A, 11, 120, 130)], ns);
    let out = a.emit(false);
    assert!(out.batches.is_empty(), "the front's zone is open: the lane waits");
    // Closed, but no flush has followed its close yet: another launch may be undelivered.
    a.close(zone(1, 0, 0, "list"));
    assert!(a.emit(false).batches.is_empty(), "links not final: the lane waits");
    a.records(vec![link(12, 1)], ns);
    assert!(a.emit(false).batches.is_empty(), "a linked record has not arrived");
    a.records(vec![kernel(LANE_A, 12, 140, 150)], ns);
    let out = a.emit(false);
    assert_eq!(
        shape(&out),
        vec![
            vec![("list".into(), 0, 100, 150), ("k10".into(), 1, 100, 110), ("k12".into(), 1, 140, 150)],
            vec![("k11".into(), 0, 120, 130)],
        ]
    );
}

#[test]
fn work_outside_zones_and_on_other_lanes_comes_out_alone() {
    let mut a = Assembler::new(5);
    a.close(zone(1, 0, 0, "list"));
    a.close(zone(3, 0, 0, "idle"));
    a.records(
        vec![
            kernel(LANE_B, 9, 50, 60),
            link(10, 1),
            link(11, 1),
            kernel(LANE_A, 10, 100, 110),
            kernel(LANE_B, 11, 120, 130),
        ],
        ns,
    );
    let out = a.emit(false);
    assert_eq!(
        shape(&out),
        vec![
            vec![("list".into(), 0, 100, 110), ("k10".into(), 1, 100, 110)],
            vec![("k9".into(), 0, 50, 60)],
            vec![("k11".into(), 0, 120, 130)],
        ]
    );
    assert_eq!(out.batches[1].1[0].lane, Lane::Stream(key(LANE_B)));
    assert_eq!(out.batches[1].1[0].gpu_begin_ns, 45, "GPU times count from the base");
    assert_eq!(out.empty_zones, 1, "a zone with no work is counted, not emitted");
    assert_eq!(a.pending(), 0);
}

#[test]
fn force_emits_what_arrived() {
    let mut a = Assembler::new(0);
    a.close(zone(1, 0, 0, "list"));
    // Launch 11's record was dropped by CUPTI; zone 5 never closed.
    a.records(
        vec![
            link(10, 1),
            link(11, 1),
            link(12, 5),
            kernel(LANE_A, 10, 100, 110),
            kernel(LANE_B, 12, 120, 130),
        ],
        ns,
    );
    assert!(a.emit(false).batches.is_empty());
    let out = a.emit(true);
    assert_eq!(
        shape(&out),
        vec![
            vec![("list".into(), 0, 100, 110), ("k10".into(), 1, 100, 110)],
            vec![("k12".into(), 0, 120, 130)],
        ]
    );
    assert_eq!(a.pending(), 0, "nothing is held after a forced pass");
}

#[test]
fn a_failed_launch_is_untied_and_holds_nothing_up() {
    let mut a = Assembler::new(0);
    a.close(zone(1, 0, 0, "list"));
    a.link(10, 1);
    a.link(11, 1);
    // Launch 11 failed: the callback at its exit unties it.
    a.link(11, 0);
    a.records(vec![kernel(LANE_A, 10, 100, 110)], ns);
    assert_eq!(shape(&a.emit(false)), vec![vec![("list".into(), 0, 100, 110), ("k10".into(), 1, 100, 110)]]);
    assert_eq!(a.pending(), 0);
}

#[test]
fn records_of_one_delivery_leave_in_start_order_and_a_later_delivery_is_counted_late() {
    let mut a = Assembler::new(0);
    a.close(zone(1, 0, 0, "first"));
    a.close(zone(2, 0, 0, "second"));
    a.close(zone(3, 0, 0, "third"));
    for (correlation_id, zone) in [(10, 1), (11, 2), (12, 3)] {
        a.link(correlation_id, zone);
    }
    // One delivery out of start order: sorted.
    a.records(vec![kernel(LANE_A, 11, 200, 210), kernel(LANE_A, 10, 100, 110)], ns);
    let out = a.emit(false);
    let names: Vec<String> = shape(&out).iter().map(|b| b[0].0.clone()).collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(out.late_batches, 0);
    // A buffer CUPTI held back: its work began before what the lane already emitted.
    a.records(vec![kernel(LANE_A, 12, 150, 160)], ns);
    let out = a.emit(false);
    assert_eq!(shape(&out), vec![vec![("third".into(), 0, 150, 160), ("k12".into(), 1, 150, 160)]]);
    assert_eq!(out.late_batches, 1, "counted, not hidden");
}

#[test]
fn a_lane_waits_for_an_earlier_launch_for_a_while() {
    let mut a = Assembler::new(0);
    a.close(zone(1, 0, 0, "first"));
    a.close(zone(2, 0, 0, "second"));
    a.link(10, 1);
    a.link(11, 2);
    // Launch 10's record is in a buffer CUPTI holds back.
    a.records(vec![kernel(LANE_A, 11, 200, 210)], ns);
    assert!(a.emit(false).batches.is_empty(), "launch 10's record may come first");
    a.set_now(HOLD_NS - 1);
    assert!(a.emit(false).batches.is_empty());
    a.records(vec![kernel(LANE_A, 10, 100, 110)], ns);
    let out = a.emit(false);
    assert_eq!(shape(&out).len(), 2);
    assert_eq!((out.batches[0].0, out.late_batches), (1, 0), "in order, none late");
    // A record that never comes holds a lane for `HOLD_NS` at most.
    a.close(zone(3, 0, 0, "third"));
    a.close(zone(4, 0, 0, "fourth"));
    a.link(12, 3);
    a.link(13, 4);
    a.records(vec![kernel(LANE_A, 13, 300, 310)], ns);
    assert!(a.emit(false).batches.is_empty());
    a.set_now(2 * HOLD_NS);
    assert_eq!(
        shape(&a.emit(false)),
        vec![vec![("fourth".into(), 0, 300, 310), ("k13".into(), 1, 300, 310)]]
    );
}

#[test]
fn a_graph_launch_is_one_link_for_all_its_nodes() {
    let mut a = Assembler::new(0);
    a.close(zone(1, 0, 0, "replay"));
    a.records(vec![link(10, 1), kernel(LANE_A, 10, 100, 110), kernel(LANE_A, 10, 120, 130)], ns);
    let out = a.emit(false);
    assert_eq!(
        shape(&out),
        vec![vec![("replay".into(), 0, 100, 130), ("k10".into(), 1, 100, 110), ("k10".into(), 1, 120, 130)]]
    );
    // A node's record that trails its emitted tree comes out alone, never a second tree.
    a.records(vec![kernel(LANE_A, 10, 140, 150)], ns);
    assert_eq!(shape(&a.emit(false)), vec![vec![("k10".into(), 0, 140, 150)]]);
    assert_eq!(a.pending(), 0);
}

#[test]
fn graph_work_carries_its_graph_and_node() {
    let mut a = Assembler::new(0);
    let mut record = kernel(LANE_A, 10, 100, 110);
    record.graph_id = 3;
    record.graph_node_id = 42;
    a.records(vec![record], ns);
    let out = a.emit(false);
    let location = &out.batches[0].1[0].location;
    let args: Vec<String> = location.args().iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    assert_eq!(args.len(), 2, "{args:?}");
    assert!(args[0].starts_with("graph=") && args[0].contains('3'), "{args:?}");
    assert!(args[1].starts_with("graph_node=") && args[1].contains("42"), "{args:?}");
}
