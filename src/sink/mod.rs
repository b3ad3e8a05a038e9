//! Where collected zones go: the only way zones leave the crate.
//!
//! The collector calls a sink, one batch per collected list: the batches of one lane (the
//! home lane of each list: the stream of its first event) arrive in that lane's GPU order;
//! batches of different lanes interleave. Only the emitting collector calls sinks, and only
//! one emits at a time, so a sink needs `Send` but not `Sync`, and never sees two calls at
//! once. A sink that panics is caught and reported once, and is never called again (its
//! state is unknown); the other sinks go on.
//!
//! - [`memory`]: keeps zones in memory (tests, in-process analysis).
//! - [`results`]: hands each collected list's zones to a closure or a channel (timings back
//!   to the application).
//! - [`frames`]: statistics per zone name over the last N frames (count, mean, percentiles,
//!   max) and each kept frame's zones as a tree, read by the application at any time.
//! - [`chrome`]: Chrome trace event JSON, loadable in Perfetto and `chrome://tracing`, on the
//!   host clock by default so that it lines up with a CPU trace ([`chrome`], "Which clock").
//! - `perfetto`: Perfetto's own trace format, streamed (feature `perfetto`).
//! - `flight`: a flight recorder, the newest zones in a bounded ring, dumped as a Perfetto or
//!   Chrome trace on request or on a trigger (feature `perfetto`).
//! - `tracy`: the Tracy profiler (feature `tracy`).
//! - `chrome::ChromeLayer` (feature `tracing`, from `ChromeTrace::layer`): not a sink but a
//!   `tracing-subscriber` layer that writes the application's CPU spans into a
//!   [`chrome::ChromeTrace`], beside its GPU zones.

// Beside the layers (docs/design.md, section 11): imports only the leaves (`location`,
// `launch`) and the backend's `Lane` and trait (Tracy's calibration reads a host clock); never
// the pool, the lists, the shared state, the collector or the context: it sees zones only as
// the collector delivers them.
pub mod chrome;
mod counters;
#[cfg(feature = "perfetto")]
#[cfg_attr(docsrs, doc(cfg(feature = "perfetto")))]
pub mod flight;
pub mod frames;
pub mod memory;
#[cfg(feature = "perfetto")]
#[cfg_attr(docsrs, doc(cfg(feature = "perfetto")))]
pub mod perfetto;
pub mod results;
#[cfg(feature = "tracing")]
mod span_edges;
#[cfg(feature = "tracing")]
mod tracing_layer;
#[cfg(feature = "tracy")]
#[cfg_attr(docsrs, doc(cfg(feature = "tracy")))]
pub mod tracy;

use crate::backend::Lane;
use crate::launch::Launch;
use crate::location::Location;

/// What a sink learns about the context that feeds it.
#[derive(Debug, Clone)]
pub struct ContextInfo {
    /// The context's id, unique in this process.
    pub id: u32,
    /// The context's name (from its configuration).
    pub name: String,
    /// The backend's name.
    pub backend: &'static str,
    /// The first calibration pair, taken when the context was made: GPU time 0 is the
    /// context's base event.
    pub base: Calibration,
    /// Where the backend's host clock (the host times of zones and calibrations) reads 0, as
    /// an [`Instant`](std::time::Instant), when the backend knows it
    /// ([`Backend::host_clock_origin`](crate::Backend::host_clock_origin)): a sink maps host
    /// times onto `Instant` exactly through it.
    pub host_clock_origin: Option<std::time::Instant>,
}

/// A (GPU time, host time) pair observed together. GPU times are nanoseconds since the
/// context's base event; host times are the backend's host clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calibration {
    /// GPU nanoseconds since the base event.
    pub gpu_ns: i64,
    /// Host clock nanoseconds at the same moment.
    pub host_ns: i64,
}

/// One collected zone.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Zone {
    /// Where the zone was recorded.
    pub location: Location,
    /// The stream or graph its begin event was recorded on.
    pub lane: Lane,
    /// Nesting depth in its list: 0 for an outermost zone.
    pub depth: u32,
    /// Begin, GPU nanoseconds since the context's base event.
    pub gpu_begin_ns: i64,
    /// End, GPU nanoseconds since the context's base event (`>= gpu_begin_ns`).
    pub gpu_end_ns: i64,
    /// Begin on the backend's host clock ([`Backend::host_now_ns`](crate::Backend::host_now_ns)),
    /// placed by the collector once for every sink. Every zone of a list is placed with one
    /// offset from its GPU times, so `host_end_ns - host_begin_ns` is the GPU duration,
    /// exact, and so is every gap inside the list; zones of one lane never overlap across
    /// lists. The true host time lies within [`host_begin_bound_ns`](Self::host_begin_bound_ns)
    /// of it.
    pub host_begin_ns: i64,
    /// End on the backend's host clock (`host_begin_ns` plus the GPU duration).
    pub host_end_ns: i64,
    /// How far the true host time of the begin can be from `host_begin_ns`, in nanoseconds:
    /// the widest the host/GPU mapping can be there, given every host time the collector read
    /// around the GPU's work and a largest rate difference of 500 ppm between the clocks
    /// (docs/design.md, section 8). `u64::MAX`: not bounded (nothing was read before it; or a
    /// source whose host times come from the driver, CUPTI, whose error is its own).
    pub host_begin_bound_ns: u64,
    /// The same for the end.
    pub host_end_bound_ns: u64,
    /// Where and when the host recorded the zone's begin: `Some` only while the context
    /// records launches ([`Builder::record_launches`](crate::Builder::record_launches)).
    pub launch: Option<Launch>,
    /// The frame its list belongs to: the one current when the list was made
    /// ([`TracingContext::frame`](crate::TracingContext::frame)); `None` for a list made
    /// before any frame or after `frame(u64::MAX)`.
    pub frame: Option<u64>,
}

impl Zone {
    /// A zone on the GPU clock; its host times are set to the same values (a sink's tests,
    /// say, build zones this way; the collector sets host times from its calibration).
    pub fn new(
        location: impl Into<Location>,
        lane: Lane,
        depth: u32,
        gpu_begin_ns: i64,
        gpu_end_ns: i64,
    ) -> Self {
        Self {
            location: location.into(),
            lane,
            depth,
            gpu_begin_ns,
            gpu_end_ns,
            host_begin_ns: gpu_begin_ns,
            host_end_ns: gpu_end_ns,
            host_begin_bound_ns: 0,
            host_end_bound_ns: 0,
            launch: None,
            frame: None,
        }
    }

    /// The same zone in `frame`.
    pub fn with_frame(mut self, frame: u64) -> Self {
        self.frame = Some(frame);
        self
    }

    /// Its GPU duration in nanoseconds (`gpu_end_ns - gpu_begin_ns`, never negative).
    pub fn duration_ns(&self) -> u64 {
        self.gpu_end_ns.saturating_sub(self.gpu_begin_ns).max(0) as u64
    }

    /// The same zone with this launch (where and when the host recorded it).
    pub fn with_launch(mut self, launch: Launch) -> Self {
        self.launch = Some(launch);
        self
    }

    /// The same zone with these host times.
    pub fn with_host_times(mut self, host_begin_ns: i64, host_end_ns: i64) -> Self {
        self.host_begin_ns = host_begin_ns;
        self.host_end_ns = host_end_ns;
        self
    }
}

/// The zones of one collected list, in the order they began (parents before children).
#[derive(Debug, Clone, Copy)]
pub struct ZoneBatch<'a> {
    /// The list's id, unique in its context.
    pub list_id: u64,
    /// The zones, in begin order.
    pub zones: &'a [Zone],
}

/// One zone and the zones nested in it (`ListResults::tree`, `FrameZones::tree`).
#[derive(Debug, Clone)]
pub struct ZoneNode<'a> {
    /// The zone.
    pub zone: &'a Zone,
    /// Its children, in the order they began.
    pub children: Vec<ZoneNode<'a>>,
}

/// Zones in begin order, each with its depth (a batch, or batches one after another), as a
/// tree: the outermost zones, each with the zones nested in it (the shape `wgpu-profiler`
/// returns a frame in). A zone is a child of the nearest zone before it one level up.
pub(crate) fn zone_tree(zones: &[Zone]) -> Vec<ZoneNode<'_>> {
    fn take<'a>(
        zones: &mut std::iter::Peekable<std::slice::Iter<'a, Zone>>,
        depth: u32,
    ) -> Vec<ZoneNode<'a>> {
        let mut nodes = Vec::new();
        while let Some(zone) = zones.next_if(|z| z.depth >= depth) {
            let children = take(zones, zone.depth + 1);
            nodes.push(ZoneNode { zone, children });
        }
        nodes
    }
    take(&mut zones.iter().peekable(), 0)
}

/// The start of a frame ([`TracingContext::frame`](crate::TracingContext::frame)), as the
/// collector hands it to the sinks ([`Sink::frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMark {
    /// The frame's id, as given to `frame`.
    pub id: u64,
    /// When `frame` was called, on the backend's host clock (the clock of
    /// [`Zone::host_begin_ns`]).
    pub host_ns: i64,
}

/// A discontinuity of the clocks ([`Sink::clock_discontinuity`]): from the anchor at `gpu_ns`
/// on, the collector's mapping of GPU time to host time begins a new segment, because no
/// mapping fitted that anchor's host times and the bounds before it (a suspend, a GPU counter
/// that stopped, a host clock stepped or slewed faster than 500 ppm). Zones before and after
/// are each placed within their bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockDiscontinuity {
    /// The GPU time of the anchor that begins the new segment.
    pub gpu_ns: i64,
    /// Its host time, as the new segment places it (the clock of [`Zone::host_begin_ns`]).
    pub host_ns: i64,
    /// How far the host time of that GPU time moved from what the bounds before said (the
    /// middles of the two): positive when the host clock is later than they said.
    pub jump_ns: i64,
}

/// What the collector samples for sinks that asked ([`Sink::wants_counters`]): once per emit
/// phase, after the lists it emitted released their slots (docs/watch.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSample {
    /// When it was sampled, on the backend's host clock.
    pub host_ns: i64,
    /// Slots held by lists being recorded or submitted and not yet collected
    /// ([`Stats::in_use`](crate::Stats::in_use)).
    pub slots_in_use: usize,
    /// Zones dropped so far, cumulative ([`Stats::dropped_zones`](crate::Stats::dropped_zones)).
    pub zones_dropped: usize,
    /// Lists submitted and not yet collected.
    pub lists_pending: usize,
    /// `host_ns` minus the latest host end of any zone emitted so far, in nanoseconds: how far
    /// behind the host the emitted GPU timeline is. `None` before the first zone. While the
    /// GPU is idle it grows with the time since its last work.
    pub lag_ns: Option<i64>,
    /// The largest host-time bound ([`Zone::host_begin_bound_ns`], `host_end_bound_ns`) of the
    /// zones emitted since the last sample, in nanoseconds; `None` if none were (`u64::MAX`:
    /// one was not bounded).
    pub clock_bound_ns: Option<u64>,
}

/// A destination for collected zones.
pub trait Sink: Send {
    /// Called once when the context is made, before any other call.
    fn open(&mut self, context: &ContextInfo) -> std::io::Result<()> {
        let _ = context;
        Ok(())
    }
    /// A new calibration pair (sent whenever the collector takes a new anchor).
    fn calibrate(&mut self, context: &ContextInfo, calibration: Calibration) -> std::io::Result<()> {
        let _ = (context, calibration);
        Ok(())
    }
    /// A discontinuity of the clocks, delivered before any zone placed in the new segment (a
    /// trace marks it on its clock track).
    fn clock_discontinuity(
        &mut self,
        context: &ContextInfo,
        discontinuity: ClockDiscontinuity,
    ) -> std::io::Result<()> {
        let _ = (context, discontinuity);
        Ok(())
    }
    /// A user's name for a lane ([`TracingContext::name_stream`](crate::TracingContext::name_stream)),
    /// delivered by the collector before any later batch, so a sink can label its track.
    fn name_lane(&mut self, context: &ContextInfo, lane: Lane, name: &str) -> std::io::Result<()> {
        let _ = (context, lane, name);
        Ok(())
    }
    /// The zones of one list. Batches of one lane arrive in that lane's GPU order.
    fn zones(&mut self, context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()>;
    /// The start of a frame, delivered at the end of the emit phase that follows the
    /// [`frame`](crate::TracingContext::frame) call: a frame's first zones may come before
    /// it (they carry [`Zone::frame`]).
    fn frame(&mut self, context: &ContextInfo, mark: FrameMark) -> std::io::Result<()> {
        let _ = (context, mark);
        Ok(())
    }
    /// Whether this sink wants [`counters`](Self::counters): asked once, when the context is
    /// made. While no sink of a context wants them, nothing is sampled.
    fn wants_counters(&self) -> bool {
        false
    }
    /// A sample of the context's counters, at the end of every emit phase (only for a
    /// context with a sink that [wants](Self::wants_counters) them).
    fn counters(&mut self, context: &ContextInfo, sample: &CounterSample) -> std::io::Result<()> {
        let _ = (context, sample);
        Ok(())
    }
    /// Makes everything written so far durable (called by `flush` and when the context ends).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
