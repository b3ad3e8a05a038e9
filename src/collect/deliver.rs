//! The delivery to sinks, for every source: the only code that calls a [`Sink`]. One failure
//! policy (docs/design.md, section 8, end): a sink that returns an error is reported (the
//! first failure of a call is returned) and still called next time; one that panics is
//! caught, reported once, dropped and never called again; the other sinks are called either
//! way. Also here: the lane names, the frame marks and counter samples (watch.rs), and the
//! counts of what was delivered.

use super::report::CollectReport;
use super::watch::Watch;
use crate::backend::{panic_message, Backend, Lane};
use crate::error::Error;
use crate::shared::{Counters, Inner};
use crate::sink::{Calibration, ClockDiscontinuity, ContextInfo, Sink, ZoneBatch};

/// What the sinks of context `id`, named `name`, on `backend`, are told: its base pair (GPU
/// time 0 and the host time then) and the backend's host clock.
pub(crate) fn context_info<B: Backend>(backend: &B, id: u32, name: &str, base: Calibration) -> ContextInfo {
    ContextInfo {
        id,
        name: name.to_owned(),
        backend: backend.name(),
        base,
        host_clock_origin: backend.host_clock_origin(),
    }
}
use crate::sync::{lock, Ordering};

/// A lane whose front a list still being recorded held past the hold limit, for either
/// source's order: reported once (`Error::LaneHeld`) and counted (`Stats::lanes_released`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldLane {
    pub(crate) lane: Lane,
    pub(crate) list_id: u64,
    /// Its first zone's name and source location (`name at file:line`), where the holder
    /// registered one (an event source's place holders do; an activity list not yet
    /// submitted is known by its id only).
    pub(crate) location: Option<String>,
    /// How long it had held the lane (host ns).
    pub(crate) held_ns: i64,
}

/// One emit phase at work, for either source's order: the delivery to the sinks, the report
/// of the call it runs in, and the first failure met (each failure is counted in the report).
pub(crate) struct Phase<'a> {
    pub(crate) delivery: &'a mut Delivery,
    pub(crate) report: &'a mut CollectReport,
    pub(crate) error: Option<Error>,
}

impl Phase<'_> {
    /// A failure of this phase: counted; the first is the phase's error.
    pub(crate) fn fail(&mut self, error: Error) {
        self.report.errors += 1;
        self.error.get_or_insert(error);
    }

    /// A lane moved on past the list that held it: counted and reported.
    pub(crate) fn lane_held(&mut self, counters: &Counters, held: HeldLane) {
        counters.lanes_released.fetch_add(1, Ordering::Relaxed);
        self.fail(Error::LaneHeld {
            lane: held.lane,
            list_id: held.list_id,
            location: held.location.unwrap_or_else(|| "(its list is not submitted yet)".to_owned()),
            held_for: std::time::Duration::from_nanos(held.held_ns.unsigned_abs()),
        });
    }

    /// `fail`, for what may have failed.
    pub(crate) fn check(&mut self, failure: Option<Error>) {
        if let Some(error) = failure {
            self.fail(error);
        }
    }
}

/// The sinks of one context and what is told to them, behind the emitter's lock (one caller
/// at a time).
pub(crate) struct Delivery {
    /// The sinks, in the order they were added; `None` once one panicked (never called again).
    sinks: Vec<Option<Box<dyn Sink>>>,
    /// How many panicked.
    stopped: usize,
    info: ContextInfo,
    /// Frame marks and counters for the sinks.
    watch: Watch,
}

impl Delivery {
    /// Opens every sink with `info`; the first that fails (or panics) fails the context's
    /// build, named in the error.
    pub(crate) fn open(sinks: Vec<Box<dyn Sink>>, info: ContextInfo) -> Result<Self, Error> {
        let mut delivery =
            Self { sinks: sinks.into_iter().map(Some).collect(), stopped: 0, info, watch: Watch::new(false) };
        if let Some(e) = delivery.each_sink(|sink, info| sink.open(info)) {
            return Err(e);
        }
        delivery.watch = Watch::new(delivery.sinks.iter().flatten().any(|sink| sink.wants_counters()));
        Ok(delivery)
    }

    /// Calls `f` on every sink still in service; a sink that fails or panics is reported (the
    /// first failure is returned) and the others are still called. A panic is caught so that
    /// no slot and no later list is lost with it, and the sink that panicked is never called
    /// again (its state is unknown): it is dropped, reported once, and counted in
    /// `Stats::sinks_stopped`.
    fn each_sink(
        &mut self,
        mut f: impl FnMut(&mut dyn Sink, &ContextInfo) -> std::io::Result<()>,
    ) -> Option<Error> {
        let mut error = None;
        for index in 0..self.sinks.len() {
            let Some(sink) = self.sinks[index].as_mut() else { continue };
            let info = &self.info;
            let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(sink.as_mut(), info)));
            let failure = match call {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => Error::Sink(e),
                Err(panic) => {
                    let stopped = self.sinks[index].take();
                    // Dropping it may finish its output; a panic there is its last.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(stopped)));
                    self.stopped += 1;
                    Error::SinkPanicked(format!(
                        "sink {index} panicked: {}; it is not called again",
                        panic_message(panic.as_ref())
                    ))
                }
            };
            error.get_or_insert(failure);
        }
        error
    }

    /// Hands the sinks the lane names given since the last call (`name_stream`), before any
    /// zone of this emit phase. Each failure is counted in `errors`; the first is returned.
    pub(crate) fn name_lanes<B: Backend>(&mut self, ctx: &Inner<B>, errors: &mut usize) -> Option<Error> {
        let names = std::mem::take(&mut *lock(ctx.lane_names()));
        let mut error = None;
        for (lane, name) in names {
            if let Some(e) = self.each_sink(|sink, info| sink.name_lane(info, lane, &name)) {
                *errors += 1;
                error.get_or_insert(e);
            }
        }
        error
    }

    /// A new calibration pair, for the sinks that follow the clock.
    pub(crate) fn calibrate(&mut self, at: Calibration) -> Option<Error> {
        self.each_sink(|sink, info| sink.calibrate(info, at))
    }

    /// A discontinuity of the clocks, to every sink.
    pub(crate) fn discontinuity(&mut self, discontinuity: ClockDiscontinuity) -> Option<Error> {
        self.each_sink(|sink, info| sink.clock_discontinuity(info, discontinuity))
    }

    /// One batch of zones (a list's, or a source's work outside any list) to every sink:
    /// counted in `Stats::zones_emitted`, or, if a sink failed it, in `Stats::sink_failures`
    /// (once per batch, however many sinks failed it).
    pub(crate) fn zones<B: Backend>(&mut self, ctx: &Inner<B>, batch: ZoneBatch<'_>) -> Option<Error> {
        self.watch.emitted(batch.zones);
        let failure = self.each_sink(|sink, info| sink.zones(info, batch));
        if failure.is_some() {
            ctx.counters().sink_failures.fetch_add(1, Ordering::Relaxed);
        }
        ctx.counters().zones_emitted.fetch_add(batch.zones.len(), Ordering::Relaxed);
        failure
    }

    /// The end of an emit phase: the frame marks and, if a sink wants it, a sample of the
    /// counters (watch.rs); the count of sinks stopped.
    pub(crate) fn end_phase<B: Backend>(&mut self, ctx: &Inner<B>) -> Option<Error> {
        let (marks, sample) = self.watch.take(ctx);
        let mut error = None;
        for mark in marks {
            if let Some(e) = self.each_sink(|sink, info| sink.frame(info, mark)) {
                error.get_or_insert(e);
            }
        }
        if let Some(e) = sample.and_then(|sample| self.each_sink(|sink, info| sink.counters(info, &sample))) {
            error.get_or_insert(e);
        }
        ctx.counters().sinks_stopped.store(self.stopped, Ordering::Relaxed);
        error
    }

    /// Flushes every sink; a flush that failed (or panicked) is counted in
    /// `Stats::sink_failures`, once per call, as a failed batch is.
    pub(crate) fn flush<B: Backend>(&mut self, ctx: &Inner<B>) -> Option<Error> {
        let error = self.each_sink(|sink, _| sink.flush());
        if error.is_some() {
            ctx.counters().sink_failures.fetch_add(1, Ordering::Relaxed);
        }
        ctx.counters().sinks_stopped.store(self.stopped, Ordering::Relaxed);
        error
    }

    /// Finishes the sinks: drops each (a Chrome trace closes its array then), in the order
    /// they were added; none is called again. A sink that panics in its drop is reported (the
    /// first such panic is returned) and counted in `Stats::sink_failures`.
    pub(crate) fn finish<B: Backend>(&mut self, ctx: &Inner<B>) -> Option<Error> {
        let mut error = None;
        for (index, sink) in self.sinks.iter_mut().enumerate() {
            let Some(sink) = sink.take() else { continue };
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(sink))) {
                ctx.counters().sink_failures.fetch_add(1, Ordering::Relaxed);
                error.get_or_insert(Error::SinkPanicked(format!(
                    "sink {index} panicked when finished (dropped): {}",
                    panic_message(panic.as_ref())
                )));
            }
        }
        error
    }
}
