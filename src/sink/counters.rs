//! Which counter samples a trace writes, for every sink that writes them as tracks (Chrome,
//! Perfetto): at most one sample per `every` of host time, and of it only the counters that
//! changed since the last one written (a counter track holds its value until the next).

use super::CounterSample;

/// The counters' track names, in `CounterSample` order (the lag in microseconds).
pub(crate) const COUNTER_NAMES: [&str; 4] =
    ["slots in use", "zones dropped", "lists pending", "collection lag (us)"];

/// The index of the lag in [`COUNTER_NAMES`]: kept in nanoseconds, written in microseconds.
pub(crate) const LAG: usize = 3;

/// What a sink has written of the counters so far.
#[derive(Debug)]
pub(crate) struct CounterFilter {
    every_ns: i64,
    /// When the last sample was written, on the backend's host clock.
    written_ns: Option<i64>,
    /// The values last written (the lag in nanoseconds).
    last: [Option<i64>; 4],
}

impl CounterFilter {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        let every_ns = i64::try_from(every.as_nanos()).unwrap_or(i64::MAX);
        Self { every_ns, written_ns: None, last: [None; 4] }
    }

    /// The counters of `sample` to write now, in [`COUNTER_NAMES`] order: all `None` within
    /// `every` of the last sample written; else those that changed since it.
    pub(crate) fn changed(&mut self, sample: &CounterSample) -> [Option<i64>; 4] {
        if self.written_ns.is_some_and(|at| sample.host_ns.saturating_sub(at) < self.every_ns) {
            return [None; 4];
        }
        self.written_ns = Some(sample.host_ns);
        let count = |n: usize| Some(i64::try_from(n).unwrap_or(i64::MAX));
        let values = [
            count(sample.slots_in_use),
            count(sample.zones_dropped),
            count(sample.lists_pending),
            sample.lag_ns,
        ];
        let mut out = [None; 4];
        for (index, value) in values.into_iter().enumerate() {
            if let Some(value) = value.filter(|&v| self.last[index] != Some(v)) {
                self.last[index] = Some(value);
                out[index] = Some(value);
            }
        }
        out
    }
}
