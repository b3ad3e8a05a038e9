//! The target GPU-to-host mapping the sink brings its Tracy contexts to, fitted to the
//! collector's calibration pairs (the module doc of `sink::tracy` says how and why).

use crate::sink::Calibration;

/// One calibration epoch, in GPU nanoseconds: the sink keeps the best pair of each.
pub const EPOCH_NS: i64 = 1_000_000_000;

/// The shortest GPU-time baseline a drift is measured over.
pub const DRIFT_BASELINE_NS: i64 = 2 * EPOCH_NS;

/// A smaller measured drift (host ns per GPU ns, minus 1) is taken as none.
pub const DRIFT_FLOOR: f64 = 1e-6;

/// A linear map from GPU time to host time, as a calibrated Tracy context applies it:
/// `t` shows at `(t - gpu) * rate + cpu`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Mapping {
    pub(super) gpu: i64,
    pub(super) cpu: i64,
    /// Host ns per GPU ns.
    pub(super) rate: f64,
}

impl Mapping {
    /// Where `t` shows (Tracy truncates this to whole ns, which keeps its order).
    pub(super) fn at(&self, t: i64) -> f64 {
        (t - self.gpu) as f64 * self.rate + self.cpu as f64
    }

    /// The GPU time shown at host time `host`.
    pub(super) fn gpu_at(&self, host: i64) -> f64 {
        self.gpu as f64 + (host - self.cpu) as f64 / self.rate
    }
}

/// A calibration pair as GPU time and host-minus-GPU offset.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pair {
    gpu: i64,
    offset: i64,
}

/// Fits the target GPU-to-host mapping to the collector's calibration pairs (the module doc
/// says how and why).
#[derive(Debug)]
pub(super) struct Calibrator {
    /// The base pair, used until the first calibration pair: its host time is read after the
    /// base event completed, so it is a start, not a measurement to keep.
    start: Pair,
    /// The best pair of the first complete epoch: the early end of the drift baseline.
    first: Option<Pair>,
    /// The best pair of the latest complete epoch.
    previous: Option<Pair>,
    /// The best pair of the epoch in progress, which began at GPU time `epoch_start`.
    current: Option<Pair>,
    epoch_start: i64,
    /// Host ns per GPU ns, minus 1; 0 below `DRIFT_FLOOR` and until a baseline is long enough.
    drift: f64,
    pub(super) target: Mapping,
    /// Bumped whenever `target` changes.
    pub(super) version: u64,
}

impl Calibrator {
    pub(super) fn new(base: Calibration) -> Self {
        let start = Pair { gpu: base.gpu_ns, offset: base.host_ns - base.gpu_ns };
        Self {
            start,
            first: None,
            previous: None,
            current: None,
            epoch_start: base.gpu_ns,
            drift: 0.0,
            target: Self::through(start, 0.0),
            version: 0,
        }
    }

    fn through(pair: Pair, drift: f64) -> Mapping {
        Mapping { gpu: pair.gpu, cpu: pair.gpu + pair.offset, rate: 1.0 + drift }
    }

    /// A pair's offset carried to GPU time 0 with the current drift: the larger, the better.
    fn merit(&self, pair: Pair) -> f64 {
        pair.offset as f64 - self.drift * pair.gpu as f64
    }

    pub(super) fn observe(&mut self, calibration: Calibration) {
        let pair = Pair { gpu: calibration.gpu_ns, offset: calibration.host_ns - calibration.gpu_ns };
        match self.current {
            None => {
                self.current = Some(pair);
                self.epoch_start = pair.gpu;
            }
            Some(best) if pair.gpu - self.epoch_start >= EPOCH_NS => {
                let first = *self.first.get_or_insert(best);
                self.previous = Some(best);
                self.current = Some(pair);
                self.epoch_start = pair.gpu;
                if best.gpu - first.gpu >= DRIFT_BASELINE_NS {
                    let drift = (best.offset - first.offset) as f64 / (best.gpu - first.gpu) as f64;
                    self.drift = if drift.abs() >= DRIFT_FLOOR { drift } else { 0.0 };
                }
            }
            Some(best) if self.merit(pair) > self.merit(best) => self.current = Some(pair),
            Some(_) => {}
        }
        let best = [self.previous, self.current]
            .into_iter()
            .flatten()
            .max_by(|a, b| self.merit(*a).total_cmp(&self.merit(*b)))
            .unwrap_or(self.start);
        let target = Self::through(best, self.drift);
        if target != self.target {
            self.target = target;
            self.version += 1;
        }
    }
}
