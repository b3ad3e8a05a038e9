//! What the emitter needs of a list's zones, gathered in the one pass that places them on
//! their anchor's GPU time (`EventOrder::emit_list`).

use crate::backend::Lane;
use crate::collect::events::bounds::Tent;
use crate::collect::events::concurrent::HomeSpan;
use crate::launch::Launch;
use crate::sink::Zone;

/// What the emitter needs of a list's zones, gathered in one pass: the earliest begin
/// (`first`) and the latest end (`last`), its zones on its home lane, and its best launch
/// (every launch is a lower bound at its zone's begin: the best one goes to the clock, and
/// the highest offset any of them asks for is a floor of the list's).
#[derive(Debug, Clone, Copy)]
pub(super) struct ListSpan {
    pub(super) first: i64,
    pub(super) last: i64,
    pub(super) home: Option<HomeSpan>,
    pub(super) launch: Option<Tent>,
}

impl Default for ListSpan {
    fn default() -> Self {
        Self { first: i64::MAX, last: i64::MIN, home: None, launch: None }
    }
}

impl ListSpan {
    /// The span of `zones`, a list whose home lane is `home`.
    pub(super) fn of(zones: &[Zone], home: Lane) -> Self {
        let mut span = Self::default();
        for (index, zone) in zones.iter().enumerate() {
            span.add(index, zone, home);
        }
        span
    }

    /// Counts `zone`, the `index`th of the list.
    #[inline]
    pub(super) fn add(&mut self, index: usize, zone: &Zone, home: Lane) {
        (self.first, self.last) = (self.first.min(zone.gpu_begin_ns), self.last.max(zone.gpu_end_ns));
        HomeSpan::add(&mut self.home, index, zone, home);
        if let Some(l) = &zone.launch {
            let at = launch_floor(l).saturating_sub(zone.gpu_begin_ns);
            if self.launch.is_none_or(|best| at > best.at) {
                self.launch = Some(Tent { gpu: zone.gpu_begin_ns, at });
            }
        }
    }
}

/// The host time from which a launch's zone can be drawn: its record call's first
/// nanosecond (where a trace's arrow leaves it), not before the host asked.
fn launch_floor(launch: &Launch) -> i64 {
    let call = launch.host_end_ns.saturating_sub(launch.host_begin_ns).clamp(0, 1);
    launch.host_begin_ns.saturating_add(call)
}
