//! What the emitter tells sinks besides zones, for a runtime that watches (docs/design.md,
//! section 12): the frame marks, and a sample of the counters at the end of every emit phase
//! for sinks that asked. Per list it only keeps the latest host end emitted, and only while
//! a sink wants counters.

use crate::backend::Backend;
use crate::shared::{Inner, LISTS_SUBMITTED};
use crate::sink::{CounterSample, FrameMark, Zone};
use crate::sync::Ordering;

/// The emitter's state for counters.
#[derive(Debug)]
pub(super) struct Watch {
    /// Whether some sink asked for counters (`Sink::wants_counters`, asked once).
    counters: bool,
    /// The latest host end of any zone emitted (counters only).
    latest_end_ns: Option<i64>,
    /// The largest host-time bound of the zones emitted since the last sample (counters
    /// only).
    worst_bound_ns: std::cell::Cell<Option<u64>>,
}

impl Watch {
    pub(super) fn new(counters: bool) -> Self {
        Self { counters, latest_end_ns: None, worst_bound_ns: std::cell::Cell::new(None) }
    }

    /// An emitted list's zones: keeps the latest end, for the lag.
    pub(super) fn emitted(&mut self, zones: &[Zone]) {
        if !self.counters {
            return;
        }
        if let Some(end) = zones.iter().map(|z| z.host_end_ns).max() {
            self.latest_end_ns = Some(self.latest_end_ns.map_or(end, |latest| latest.max(end)));
        }
        let worst = zones.iter().map(|z| z.host_begin_bound_ns.max(z.host_end_bound_ns)).max();
        self.worst_bound_ns.set(self.worst_bound_ns.get().max(worst));
    }

    /// What to hand the sinks at the end of an emit phase: the frame marks since the last
    /// phase, and a counter sample if a sink wants one.
    pub(super) fn take<B: Backend>(&self, ctx: &Inner<B>) -> (Vec<FrameMark>, Option<CounterSample>) {
        let marks = ctx.take_frame_marks();
        if !self.counters {
            return (marks, None);
        }
        let pool = ctx.pool().counts();
        let c = ctx.counters();
        let submitted = c.recorded.sum(LISTS_SUBMITTED).max(0) as usize;
        let host_ns = ctx.backend().host_now_ns();
        let sample = CounterSample {
            host_ns,
            slots_in_use: pool.owned + pool.submitted,
            zones_dropped: c.dropped_zones.load(Ordering::Relaxed),
            lists_pending: submitted.saturating_sub(c.lists_collected.load(Ordering::Relaxed)),
            lag_ns: self.latest_end_ns.map(|end| host_ns.saturating_sub(end)),
            clock_bound_ns: self.worst_bound_ns.take(),
        };
        (marks, Some(sample))
    }
}
