//! Unit tests of what the public API cannot show: the statistics of a context whose last
//! handle is gone, read through a list that outlived it.

use super::stats::Stats;
use crate::backend::sim::SimBackend;
use crate::{location, RecordError, TracingContext};

#[test]
fn recording_after_the_last_handle_is_counted_as_dropped() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::new(sim.clone()).unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("begun before")).unwrap();
    drop(ctx);
    assert_eq!(list.zone_begin(&stream, location!("after")), Err(RecordError::ContextClosed));
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    let stats = Stats::of(list.context());
    assert_eq!(stats.dropped_zones, 1, "{stats:?}");
    assert_eq!(list.event_count(), 2, "the zone begun before ended with its kept slot");
}

/// Each stream's last end is remembered (for lane order and for lists recorded side by side)
/// only while an anchor older than it is kept: a runtime that makes a stream per job does not
/// grow the emitter without bound.
#[test]
#[cfg_attr(miri, ignore = "2,000 collects of safe bookkeeping: minutes under Miri")]
fn the_ends_of_streams_no_longer_used_are_forgotten_with_the_anchors_before_them() {
    let sim = SimBackend::manual();
    let ctx = TracingContext::new(sim.clone()).unwrap();
    let submit_on = |stream| {
        let mut list = ctx.list();
        list.zone_begin(stream, location!("job")).unwrap();
        sim.launch(stream, 10_000);
        list.zone_end(stream).unwrap();
        ctx.submit(list).unwrap();
    };
    let streams: Vec<_> = (0..200).map(|_| sim.stream()).collect();
    for stream in &streams {
        submit_on(stream);
    }
    sim.advance(1_000_000);
    ctx.collect().unwrap();
    let (lanes, side_by_side) = ctx.lanes_remembered().unwrap();
    assert!(lanes >= 200 && side_by_side >= 200, "{lanes} and {side_by_side} streams remembered");
    // One stream goes on for 2 s, collected every millisecond: the anchors roll over (64 kept,
    // one each 5 ms) and the 199 idle streams are forgotten.
    let busy = &streams[0];
    for _ in 0..2_000 {
        submit_on(busy);
        sim.advance(1_000_000);
        ctx.collect().unwrap();
    }
    let (lanes, side_by_side) = ctx.lanes_remembered().unwrap();
    assert!(lanes <= 2 && side_by_side <= 2, "{lanes} and {side_by_side} streams remembered");
}
