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
/// same samples, with the same clock bound: each due sample carries the largest bound of
/// those skipped since the last one due, so that a dump holds the streamed trace's samples.
#[derive(Debug)]
pub(crate) struct Every {
    every_ns: i64,
    /// When the last sample due was taken, on the backend's host clock.
    last_ns: Option<i64>,
    /// The largest clock bound of the samples skipped since the last one due.
    bound: Option<u64>,
}

impl Every {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        Self { every_ns: i64::try_from(every.as_nanos()).unwrap_or(i64::MAX), last_ns: None, bound: None }
    }

    /// `sample` when it is due (and if so, counts from it), its clock bound the largest since
    /// the last one due; `None` when it is not.
    pub(crate) fn due(&mut self, sample: &CounterSample) -> Option<CounterSample> {
        self.bound = self.bound.max(sample.clock_bound_ns);
        if self.last_ns.is_some_and(|at| sample.host_ns.saturating_sub(at) < self.every_ns) {
            return None;
        }
        self.last_ns = Some(sample.host_ns);
        Some(CounterSample { clock_bound_ns: self.bound.take(), ..*sample })
    }
}

/// What a sink has written of the counters so far.
#[derive(Debug)]
pub(crate) struct CounterFilter {
    every: Every,
    /// The values last written (the lag in nanoseconds).
    last: [Option<i64>; COUNTERS],
}

impl CounterFilter {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        Self { every: Every::new(every), last: [None; COUNTERS] }
    }

    /// The counters of `sample` to write now, in [`COUNTER_NAMES`] order: all `None` when it
    /// is not due; else those that changed since the last written (the clock bound: the
    /// largest since the last written, whenever one came).
    pub(crate) fn changed(&mut self, sample: &CounterSample) -> [Option<i64>; COUNTERS] {
        let Some(sample) = self.every.due(sample) else {
            return [None; COUNTERS];
        };
        let count = |n: usize| Some(i64::try_from(n).unwrap_or(i64::MAX));
        let bound = sample.clock_bound_ns.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(host_ns: i64, bound: u64) -> CounterSample {
        CounterSample {
            host_ns,
            slots_in_use: 0,
            zones_dropped: 0,
            lists_pending: 0,
            lag_ns: None,
            clock_bound_ns: Some(bound),
        }
    }

    #[test]
    fn a_due_sample_carries_the_largest_bound_of_those_skipped_since_the_last() {
        let mut every = Every::new(std::time::Duration::from_nanos(10));
        let bounds = |every: &mut Every, samples: &[(i64, u64)]| -> Vec<Option<u64>> {
            samples
                .iter()
                .filter_map(|&(at, b)| every.due(&sample(at, b)))
                .map(|s| s.clock_bound_ns)
                .collect()
        };
        assert_eq!(
            bounds(&mut every, &[(0, 5), (3, 9), (6, 1), (10, 2), (12, 4), (25, 3)]),
            [Some(5), Some(9), Some(4)]
        );
    }

    #[test]
    fn a_trace_and_a_recorder_with_the_same_every_write_the_same_bounds() {
        // The recorder keeps the due samples; its dump writes each of them (every: zero).
        let samples: Vec<CounterSample> =
            (0..200).map(|k| sample(k * 7, (k as u64 * 7_919) % 1_000)).collect();
        let mut trace = CounterFilter::new(std::time::Duration::from_nanos(50));
        let mut recorder = Every::new(std::time::Duration::from_nanos(50));
        let mut dump = CounterFilter::new(std::time::Duration::ZERO);
        for s in &samples {
            let streamed = trace.changed(s)[BOUND];
            let dumped = recorder.due(s).map(|kept| dump.changed(&kept)[BOUND]);
            assert_eq!(streamed, dumped.flatten(), "at {}", s.host_ns);
        }
    }
}
