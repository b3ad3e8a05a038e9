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
