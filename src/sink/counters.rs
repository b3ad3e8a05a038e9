//! Which counter samples a trace writes, for every sink that writes them as tracks (Chrome,
//! Perfetto): at most one sample per `every` of host time, and of it only the counters that
//! changed since the last one written (a counter track holds its value until the next).

use super::CounterSample;

/// The counters' track names, in `CounterSample` order (the lag in microseconds).
pub(crate) const COUNTER_NAMES: [&str; COUNTERS] =
    ["slots in use", "zones dropped", "lists pending", "collection lag (us)", "clock bound (ns)"];

/// How many counters a sample has.
pub(crate) const COUNTERS: usize = 5;

/// The index of the lag in [`COUNTER_NAMES`]: kept in nanoseconds, written in microseconds.
pub(crate) const LAG: usize = 3;

/// The index of the clock bound in [`COUNTER_NAMES`]: the largest since the last sample
/// written, so that a sample skipped does not hide one.
const BOUND: usize = 4;

/// Which samples are due: at most one per `every` of host time, counted from the last one
/// due. A trace's sink and a flight recorder with the same `every` on one context pass the
/// same samples, so that a dump holds the streamed trace's samples.
#[derive(Debug)]
pub(crate) struct Every {
    every_ns: i64,
    /// When the last sample due was taken, on the backend's host clock.
    last_ns: Option<i64>,
}

impl Every {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        Self { every_ns: i64::try_from(every.as_nanos()).unwrap_or(i64::MAX), last_ns: None }
    }

    /// Whether a sample taken at `host_ns` is due (and if so, counts from it).
    pub(crate) fn due(&mut self, host_ns: i64) -> bool {
        if self.last_ns.is_some_and(|at| host_ns.saturating_sub(at) < self.every_ns) {
            return false;
        }
        self.last_ns = Some(host_ns);
        true
    }
}

/// What a sink has written of the counters so far.
#[derive(Debug)]
pub(crate) struct CounterFilter {
    every: Every,
    /// The values last written (the lag in nanoseconds).
    last: [Option<i64>; COUNTERS],
    /// The largest clock bound of the samples skipped since the last written.
    bound: Option<u64>,
}

impl CounterFilter {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        Self { every: Every::new(every), last: [None; COUNTERS], bound: None }
    }

    /// The counters of `sample` to write now, in [`COUNTER_NAMES`] order: all `None` when it
    /// is not due; else those that changed since the last written (the clock bound: the
    /// largest since the last written, whenever one came).
    pub(crate) fn changed(&mut self, sample: &CounterSample) -> [Option<i64>; COUNTERS] {
        self.bound = self.bound.max(sample.clock_bound_ns);
        if !self.every.due(sample.host_ns) {
            return [None; COUNTERS];
        }
        let count = |n: usize| Some(i64::try_from(n).unwrap_or(i64::MAX));
        let bound = self.bound.take().map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        let values = [
            count(sample.slots_in_use),
            count(sample.zones_dropped),
            count(sample.lists_pending),
            sample.lag_ns,
            bound,
        ];
        let mut out = [None; COUNTERS];
        for (index, value) in values.into_iter().enumerate() {
            // The bound is written whenever zones came: a track that held the last value would
            // say the newest zones had it.
            if let Some(value) = value.filter(|&v| index == BOUND || self.last[index] != Some(v)) {
                self.last[index] = Some(value);
                out[index] = Some(value);
            }
        }
        out
    }
}
