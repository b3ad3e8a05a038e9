//! The trait over the GPU API, and its implementations.
//!
//! The crate needs very little from a GPU: timing events that can be recorded on a stream or
//! added to a graph, a completion check, a blocking wait, the time between two completed
//! events (as `f32` milliseconds, the way `cuEventElapsedTime` reports it, or as exact
//! nanoseconds where the API gives absolute ticks: [`Backend::elapsed`]), and a host clock.
//!
//! - [`sim`]: a simulated GPU (the default, no GPU needed).
//! - `cuda`: CUDA through `cudarc` (feature `cuda`).
//! - `cupti`: CUPTI activity records of kernels, copies and memsets (feature `cupti`).
//! - `vulkan`: Vulkan timestamp queries through `ash` (feature `vulkan`).
//! - `wgpu`: wgpu timestamp queries (feature `wgpu`).
//!
//! Two kinds of source ([`Timing`]): a backend that records timing events (the simulation,
//! CUDA events, Vulkan), or one that reports the work the GPU ran (CUPTI, and
//! the simulation's [`SimActivities`](sim::SimActivities)). The same lists, guards, `submit`,
//! `collect`, frames and sinks serve both; switching is the backend given to the builder.

// Beside the layers (docs/design.md, section 11): imports only the leaves (`location`,
// `sync`) and the sink trait (wgpu's frames are a sink); never the pool, the lists, the
// shared state, the collector or the context.
pub mod activity;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
#[cfg(feature = "cupti")]
#[cfg_attr(docsrs, doc(cfg(feature = "cupti")))]
pub mod cupti;
pub mod sim;
#[cfg(any(feature = "vulkan", feature = "wgpu"))]
mod ticks;
#[cfg(feature = "vulkan")]
#[cfg_attr(docsrs, doc(cfg(feature = "vulkan")))]
pub mod vulkan;
#[cfg(feature = "wgpu")]
#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
pub mod wgpu;

mod codes;

pub use activity::{ActivityLosses, Timing};
#[doc(hidden)]
pub use activity::{ActivitySource, ReadFor};
pub use codes::ErrorKind;

/// A failure reported by the GPU backend, with the call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {code}")]
pub struct BackendError {
    /// The backend call that failed (`cuEventRecord`, `sim::record`, ...).
    pub call: &'static str,
    /// The backend's name for the failure (for CUDA, the `CUresult` name).
    pub code: String,
}

impl BackendError {
    /// Makes an error for `call` with the backend's failure name.
    pub fn new(call: &'static str, code: impl Into<String>) -> Self {
        Self { call, code: code.into() }
    }

    /// What this failure means, for the failures a program may act on; `None` for one passed
    /// through from the GPU API (its `code` names it: a `CUresult`, a `vk::Result`).
    ///
    /// ```
    /// use gpu_event_pool::backend::ErrorKind;
    /// use gpu_event_pool::BackendError;
    ///
    /// let error = BackendError::new("cuInit", "CUDA_ERROR_NO_DEVICE");
    /// assert_eq!(error.kind(), Some(ErrorKind::NoDevice));
    /// assert_eq!(BackendError::new("cuEventRecord", "CUDA_ERROR_LAUNCH_FAILED").kind(), None);
    /// ```
    pub fn kind(&self) -> Option<ErrorKind> {
        codes::kind_of(&self.code)
    }
}

/// Which queue an event was recorded on: a stream, or a graph (whose launch stream is only
/// known when it is launched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// Recorded on the stream with this key ([`Backend::stream_key`]).
    Stream(u64),
    /// Added as a node of the graph with this key ([`Backend::graph_key`]).
    Graph(u64),
}

/// The time from one completed event to another, as a backend read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed {
    /// Nanoseconds from the first event to the second (negative when the second came first).
    pub ns: i64,
    /// Whether `ns` is exact: read from integer ticks (Vulkan), not rounded from `f32`
    /// milliseconds (CUDA), whose rounding the collector bounds (docs/design.md, section 8).
    pub exact: bool,
}

impl Elapsed {
    /// `f32` milliseconds, rounded to the nearest nanosecond: not exact. `None` when `ms` is
    /// not a number, infinite, or beyond what `i64` nanoseconds hold (about 292 years).
    pub fn from_ms(ms: f32) -> Option<Self> {
        // 2^63, the first `f64` above `i64::MAX`; -2^63 is `i64::MIN`. The product is exact
        // (a 24-bit significand times 1e6's 14-bit one), so the comparison is too.
        const LIMIT: f64 = 9_223_372_036_854_775_808.0;
        let ns = f64::from(ms) * 1e6;
        // A NaN fails both comparisons. Rounded half away from zero, as `f64::round` rounds,
        // by adding a signed half and truncating: the product has at most 38 significant
        // bits, so wherever the sum can reach the next integer (|ns| >= 0.5) it is exact; and
        // the truncating conversion is one instruction, where `round` is a call into libm
        // (x86-64 without SSE4.1), a nanosecond or two of every event the collector reads.
        // Every value at or past 2^52 is an integer already, and adding the half leaves it.
        (-LIMIT..LIMIT).contains(&ns).then(|| Self { ns: (ns + 0.5f64.copysign(ns)) as i64, exact: false })
    }

    /// Exact nanoseconds.
    pub fn from_ns(ns: i64) -> Self {
        Self { ns, exact: true }
    }
}

/// When a list takes its place in its home lane's order, which is the GPU's order of the
/// lists of that lane (docs/design.md, section 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Right after the list records its first event: work runs in the order it is recorded
    /// (a CUDA stream).
    FirstRecord,
    /// When the list is submitted ([`TracingContext::submit`](crate::TracingContext::submit)):
    /// work runs in the order it is submitted to the queue, whatever order it was recorded in
    /// (Vulkan command buffers). The application submits the list beside its own queue
    /// submission, in the same order.
    Submit,
}

/// What a recorded event marks, for a backend that records zone begins and ends differently
/// (Vulkan writes a begin at the top of the pipe, an end at the bottom).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Begins a zone.
    Begin,
    /// Ends a zone.
    End,
    /// Ends a zone and begins the next (`zone_next`).
    EndAndBegin,
}

/// A GPU API the pool can record timing events with.
///
/// Implementations must be cheap to call from many threads at once: `record` is on the
/// recording hot path. The collector reads completion through `elapsed` alone (its "not
/// ready" answer is the completion test); it calls `wait` only in `flush` and when the
/// context is made. The collector calls `is_complete` only on a backend that retires events
/// ([`RETIRES`](Self::RETIRES)), for the events of a list whose read failed, before it
/// retires them.
pub trait Backend: Send + Sync + 'static {
    /// A timing event. Created once per pool slot, destroyed (dropped) with the pool.
    type Event: Send + Sync + 'static;
    /// A stream (queue) events are recorded on.
    type Stream: Send + 'static;
    /// A graph events can be added to as nodes.
    type Graph;
    /// A node of a graph, used as a dependency of later nodes.
    type GraphNode: Clone;

    /// When a list takes its place in its lane's order. Default: at its first record.
    const PLACEMENT: Placement = Placement::FirstRecord;
    /// How zones are timed: by events this backend records (the default), or by the work
    /// records of its [`activity_source`](Self::activity_source). An activity backend records
    /// no event (its `record_mark` does nothing and never fails), and the collector never
    /// calls its other event methods: its zones take slots only to travel through
    /// submission. What the crate reads is [`timing`](Self::timing), which says this unless
    /// the backend chooses when it is made.
    const TIMING: Timing = Timing::Events;
    /// Whether [`retire`](Self::retire) does anything. `false` (the default): the crate never
    /// calls it.
    const RETIRES: bool = false;
    /// Whether an event [`elapsed`](Self::elapsed) finds not yet complete is one the GPU had
    /// not reached when asked: its completion is seen the moment its time is taken. Then
    /// each ask that finds an anchor incomplete narrows its bound from below. `false` (the
    /// default): completion may be seen after the time was taken (a readback, a driver's
    /// flag written after the timestamp), and only the host reads around the record and the
    /// first ask that found it complete bound the anchor. `true` only where it holds exactly:
    /// the simulated GPU.
    const COMPLETE_WHEN_REACHED: bool = false;

    /// A short name for reports ("sim", "cuda", "vulkan").
    fn name(&self) -> &'static str;
    /// How this backend's zones are timed: [`TIMING`](Self::TIMING) (the default, a constant
    /// the compiler folds). A backend that chooses when it is made overrides it: a
    /// `CuptiBackend` that found CUPTI held by another tool and was asked to fall back to
    /// CUDA events (`CuptiConfig::fall_back_to_events`) says [`Timing::Events`]. It never
    /// changes once the backend is made.
    #[inline(always)]
    fn timing(&self) -> Timing {
        Self::TIMING
    }
    /// Creates a timing event.
    fn create_event(&self) -> Result<Self::Event, BackendError>;
    /// Creates a stream for the context's own calibration events.
    fn create_stream(&self) -> Result<Self::Stream, BackendError>;
    /// A key that identifies `stream` (stable while it lives).
    fn stream_key(&self, stream: &Self::Stream) -> u64;
    /// A key that identifies `graph` (stable while it lives).
    fn graph_key(&self, graph: &Self::Graph) -> u64;
    /// Records `event` on `stream`: it completes when the stream reaches this point.
    fn record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<(), BackendError>;
    /// Records `event` on `stream` for a zone: `mark` says whether it begins or ends one.
    /// Default: [`record`](Self::record).
    fn record_mark(
        &self,
        event: &Self::Event,
        stream: &Self::Stream,
        mark: Mark,
    ) -> Result<(), BackendError> {
        let _ = mark;
        self.record(event, stream)
    }
    /// Records `event` on `stream` as the collector's time anchor, and returns the host time
    /// ([`host_now_ns`](Self::host_now_ns)'s clock) of the moment the GPU clock reads the
    /// event's time, when the backend knows it (Vulkan's calibrated timestamps). `None` (the
    /// default, after [`record`](Self::record)): the collector pairs the anchor with the host
    /// time it read just before recording it.
    fn record_anchor(&self, event: &Self::Event, stream: &Self::Stream) -> Result<Option<i64>, BackendError> {
        self.record(event, stream).map(|()| None)
    }
    /// Adds a node to `graph` that records `event` after `dependencies`.
    fn add_graph_record_node(
        &self,
        event: &Self::Event,
        graph: &Self::Graph,
        dependencies: &[Self::GraphNode],
    ) -> Result<Self::GraphNode, BackendError>;
    /// Whether the work before `event` has completed. Never blocks.
    fn is_complete(&self, event: &Self::Event) -> Result<bool, BackendError>;
    /// Blocks until `event` has completed.
    fn wait(&self, event: &Self::Event) -> Result<(), BackendError>;
    /// Milliseconds from `start` to `end`, or `None` if either has not completed yet. Never
    /// blocks (unlike cudarc's `CudaEvent::elapsed_ms`, which synchronizes).
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<Option<f32>, BackendError>;
    /// The time from `start` to `end`, or `None` if either has not completed yet. Never
    /// blocks. The collector reads every time through this. Default: [`elapsed_ms`](Self::elapsed_ms),
    /// rounded to the nanosecond (not exact), and an error for a reading that is no time
    /// ([`Elapsed::from_ms`] refuses it: call `Backend::elapsed_ms`, code `<ms> ms is out of
    /// range`); a backend that reads absolute ticks overrides it with exact nanoseconds
    /// (Vulkan).
    fn elapsed(&self, start: &Self::Event, end: &Self::Event) -> Result<Option<Elapsed>, BackendError> {
        match self.elapsed_ms(start, end)? {
            None => Ok(None),
            Some(ms) => Elapsed::from_ms(ms)
                .map(Some)
                .ok_or_else(|| BackendError::new("Backend::elapsed_ms", format!("{ms} ms is out of range"))),
        }
    }
    /// The host clock, in nanoseconds (monotonic, arbitrary origin).
    fn host_now_ns(&self) -> i64;
    /// The [`Instant`](std::time::Instant) at which [`host_now_ns`](Self::host_now_ns) read 0,
    /// when the host clock is std's monotonic clock (`CLOCK_MONOTONIC` on Linux) counted from
    /// that instant: sinks use it to put host times on a CPU trace's timeline exactly.
    /// `None` (the default) when the host clock is some other clock (the manual simulation).
    fn host_clock_origin(&self) -> Option<std::time::Instant> {
        None
    }
    /// Called with each event of a collected list (emitted, or failed) before its slot goes
    /// back to the pool, on the collecting thread: never on the recording path; for a failed
    /// list, only once [`is_complete`](Self::is_complete) says the GPU has passed each of its
    /// events (another of its zones may still run when its read fails). A backend
    /// whose events must be reset before they are recorded again does it here (Vulkan's
    /// queries). Not called for a list dropped unsubmitted (its events were recorded into
    /// work that must never run, so never written), nor for the collector's anchors (a
    /// backend resets those in [`record_anchor`](Self::record_anchor)). With
    /// [`RETIRES`](Self::RETIRES) `false` it is never called. A panic here is caught; the
    /// slot goes back all the same.
    fn retire(&self, event: &Self::Event) {
        let _ = event;
    }
    /// Where the collector reads the work the GPU ran, for a backend whose
    /// [`timing`](Self::timing) is [`Timing::Activities`] (`Builder::build` refuses one that
    /// gives none). `None` (the default) for an event backend. Hidden: the activity contract
    /// is the crate's own backends'.
    #[doc(hidden)]
    fn activity_source(&self) -> Option<&dyn ActivitySource> {
        None
    }
}

/// Calls into a backend, turning a panic into a [`BackendError`] for `call` (code
/// `panicked: <message>`): the crate's protocols (counters raised around a call, slots taken
/// for it) must survive a backend that panics, as they survive one that fails.
///
/// Always inlined, with the panic's error made out of line ([`caught`]): out of line, the
/// guard's call, the moves of the closure's captures and of its result were about 30 of the
/// crate's 233 instructions per event recorded on Vulkan and 56 of its 328 per wgpu timestamp
/// (callgrind, the vulkan and wgpu benches on lavapipe); inlined, a call that returns pays
/// only what its own code costs, and one that unwinds lands in the landing pad.
#[inline(always)]
pub(crate) fn guarded<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, BackendError>,
) -> Result<T, BackendError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => Err(caught(call, panic)),
    }
}

/// The error of a call that panicked ([`guarded`]): out of line, so that the guard around a
/// call that returns is small enough to inline into a recording step.
#[cold]
#[inline(never)]
fn caught(call: &'static str, panic: Box<dyn std::any::Any + Send>) -> BackendError {
    BackendError::new(call, format!("panicked: {}", panic_message(panic.as_ref())))
}

/// [`Backend::create_event`], a panic caught as its error ([`guarded`]).
pub(crate) fn create_event<B: Backend>(backend: &B) -> Result<B::Event, BackendError> {
    guarded("Backend::create_event", || backend.create_event())
}

/// [`Backend::host_now_ns`], a panic caught as its error ([`guarded`]).
pub(crate) fn host_now<B: Backend>(backend: &B) -> Result<i64, BackendError> {
    guarded("Backend::host_now_ns", || Ok(backend.host_now_ns()))
}

/// The message of a caught panic, when it has one.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::Elapsed;

    /// What `from_ms` must return: the product rounded by `f64::round`, if it fits.
    fn reference(ms: f32) -> Option<i64> {
        let ns = (f64::from(ms) * 1e6).round();
        (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&ns).then_some(ns as i64)
    }

    #[test]
    fn a_millisecond_reading_rounds_as_f64_round_does_across_every_f32() {
        // Every f32 bit pattern at a prime stride (every 65th under Miri's slower one), and
        // the values whose products lie at or next to a half nanosecond.
        let stride = if cfg!(miri) { 4_194_301 } else { 4_099 };
        let sampled = (0..=u32::MAX).step_by(stride).map(f32::from_bits);
        let halves = [0.5e-6f32, 1.5e-6, 2.5e-6, 0.4999999e-6, 0.5000001e-6, 1e-12, 5e-7, 3.5e-6];
        let edges = halves
            .into_iter()
            .flat_map(|h| [h, -h, f32::from_bits(h.to_bits() + 1), f32::from_bits(h.to_bits() - 1)]);
        for ms in sampled.chain(edges).chain([0.0, -0.0, 9.2e12, -9.2e12, 9.3e12, f32::MAX, f32::NAN]) {
            assert_eq!(Elapsed::from_ms(ms).map(|e| e.ns), reference(ms), "{ms:e} ms ({:#x})", ms.to_bits());
        }
    }
}
