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
//! - [`chrome`]: Chrome trace event JSON, loadable in Perfetto and `chrome://tracing`, on the
//!   host clock by default so that it lines up with a CPU trace ([`chrome`], "Which clock").
//! - `tracy`: the Tracy profiler (feature `tracy`).
//! - `tracing_layer` (feature `tracing`): not a sink but a `tracing-subscriber` layer that
//!   writes the application's CPU spans into a [`chrome::ChromeTrace`], beside its GPU zones.

pub mod chrome;
pub mod memory;
pub mod results;
#[cfg(feature = "tracing")]
pub mod tracing_layer;
#[cfg(feature = "tracy")]
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
    /// Begin on the host clock, through the latest calibration pair.
    pub host_begin_ns: i64,
    /// End on the host clock, through the latest calibration pair.
    pub host_end_ns: i64,
    /// Where and when the host recorded the zone's begin: `Some` only while the context
    /// records launches ([`Builder::record_launches`](crate::Builder::record_launches)).
    pub launch: Option<Launch>,
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
            launch: None,
        }
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
    /// A user's name for a lane ([`TracingContext::name_stream`](crate::TracingContext::name_stream)),
    /// delivered by the collector before any later batch, so a sink can label its track.
    fn name_lane(&mut self, context: &ContextInfo, lane: Lane, name: &str) -> std::io::Result<()> {
        let _ = (context, lane, name);
        Ok(())
    }
    /// The zones of one list. Batches of one lane arrive in that lane's GPU order.
    fn zones(&mut self, context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()>;
    /// Makes everything written so far durable (called by `flush` and when the context ends).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
