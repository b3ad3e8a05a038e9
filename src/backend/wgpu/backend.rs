//! The backend itself: [`WgpuBackend`] and its [`Backend`] implementation over the device's
//! queries, the encoders and the readbacks.

use super::errors::{FOREIGN_EVENT, LOST, WAIT_TIMEOUT};
use super::event::{Reading, TimestampEvent};
use super::frames::{FrameLog, WgpuFrames};
use super::queries::Timestamps;
use super::queue::{WgpuQueue, CLOCK_LANE};
use super::readback::{Owner, Queries};
use super::stream::{write_on_encoder, Site, WgpuStream};
use crate::backend::ticks::TickScale;
use crate::backend::{Backend, BackendError, Elapsed, Mark, Placement};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What a backend and its clones share.
#[derive(Debug)]
struct BackendState {
    queries: Arc<Queries>,
    queue: WgpuQueue,
    scale: TickScale,
    /// The host clock's origin.
    origin: Instant,
    wait_timeout: Duration,
    /// The frames' record of the lists, once a `WgpuFrames` is made for the backend.
    frames: OnceLock<Arc<FrameLog>>,
}

/// wgpu on one device and its queue. Cheap to clone: clones share the queries, the readbacks
/// and the host clock.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let (device, queue): (wgpu::Device, wgpu::Queue) = unimplemented!();
/// use gpu_event_pool::backend::wgpu::WgpuBackend;
/// use gpu_event_pool::TracingContext;
///
/// let backend = WgpuBackend::new(&device, &queue)?;
/// let lane = backend.queue();
/// let ctx = TracingContext::new(backend)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct WgpuBackend {
    shared: Arc<BackendState>,
    debug_groups: bool,
}

impl WgpuBackend {
    /// A backend on `device` and `queue`, timing zones with whatever timestamp features the
    /// device was created with ([`Timestamps::of`]); without `TIMESTAMP_QUERY` every zone is
    /// dropped and counted ([`untimed`](Self::untimed)), and nothing fails.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Self, BackendError> {
        let timestamps = Timestamps::of(device.features());
        let period = queue.get_timestamp_period();
        let scale = TickScale::new(period, 64).or_else(|| TickScale::new(1.0, 64)).ok_or_else(|| {
            BackendError::new("Queue::get_timestamp_period", format!("{period} ns per tick"))
        })?;
        Ok(Self {
            shared: Arc::new(BackendState {
                queries: Arc::new(Queries::new(device, timestamps)),
                queue: WgpuQueue::new(queue),
                scale,
                origin: Instant::now(),
                wait_timeout: Duration::from_secs(10),
                frames: OnceLock::new(),
            }),
            debug_groups: false,
        })
    }

    /// Whether a `WgpuList`'s scopes push a debug group named after their zone, and name
    /// their passes after it (markers for RenderDoc, PIX, Xcode): off by default. Lists made
    /// after this call have it.
    pub fn with_debug_groups(mut self, on: bool) -> Self {
        self.debug_groups = on;
        self
    }

    /// The timestamp features zones are timed with.
    pub fn timestamps(&self) -> Timestamps {
        self.shared.queries.timestamps
    }

    /// The backend's queue as a lane (made with the backend; clones are the same lane).
    pub fn queue(&self) -> WgpuQueue {
        self.shared.queue.clone()
    }

    /// Whether debug groups are on ([`with_debug_groups`](Self::with_debug_groups)).
    pub fn debug_groups(&self) -> bool {
        self.debug_groups
    }

    /// A new stream on `lane`: the queries of one list (`TracingContext::wgpu_list`).
    pub(crate) fn stream(&self, lane: &WgpuQueue) -> WgpuStream {
        WgpuStream::new(Arc::clone(&self.shared.queries), lane.lane_key(), Owner::Application)
    }

    /// Every finished frame's scopes as a tree, untimed scopes kept ([`WgpuFrames`]): from now
    /// on the backend's `WgpuList`s keep their scopes' shape (each scope's location, depth and
    /// thread, pushed on a vector of the list: not measured by the benches, which keep no
    /// frames). Call it before building the context and hand
    /// [`WgpuFrames::sink`] to the builder; every call (on the backend or a clone) reads the
    /// same frames.
    pub fn keep_frames(&self) -> WgpuFrames {
        WgpuFrames::new(Arc::clone(self.shared.frames.get_or_init(Default::default)))
    }

    /// The frames' record of the lists, if [`keep_frames`](Self::keep_frames) was called.
    pub(crate) fn frame_log(&self) -> Option<&Arc<FrameLog>> {
        self.shared.frames.get()
    }

    /// How long resolved timestamps may take to come back before they are let go: their
    /// lists then fail (their zones dropped and counted, the lane moves on) and the readback
    /// is counted in [`readbacks_dropped`](Self::readbacks_dropped). Default 2 s. Refuses
    /// zero ([`ErrorKind::ZeroReadbackLimit`](crate::ErrorKind::ZeroReadbackLimit)), which would let every
    /// readback go. The collector's own anchors are never let go
    /// ([`anchors_late`](Self::anchors_late)).
    pub fn set_readback_limit(&self, limit: Duration) -> Result<(), BackendError> {
        self.shared.queries.set_readback_limit(limit)
    }

    /// The readback limit ([`set_readback_limit`](Self::set_readback_limit)).
    pub fn readback_limit(&self) -> Duration {
        self.shared.queries.readback_limit()
    }

    /// Zone marks refused because the device cannot time them (no `TIMESTAMP_QUERY`, or a
    /// mark inside a pass without `TIMESTAMP_QUERY_INSIDE_PASSES`): their zones are dropped
    /// and counted in `Stats::dropped_zones` too.
    pub fn untimed(&self) -> u64 {
        self.shared.queries.untimed()
    }

    /// Readbacks let go after the readback limit.
    pub fn readbacks_dropped(&self) -> u64 {
        self.shared.queries.readbacks_dropped()
    }

    /// The collector's own anchor readbacks that took longer than the readback limit: waited
    /// for all the same (the backend submitted them), and never reported as a loss.
    pub fn anchors_late(&self) -> u64 {
        self.shared.queries.anchors_late()
    }

    /// Query chunks made so far (of 128 queries each: the query pool grows on demand).
    pub fn query_chunks(&self) -> u64 {
        self.shared.queries.chunks_made()
    }

    /// Polls the device without waiting and stamps the timestamps whose readbacks came. The
    /// collector does this itself; an application need not.
    pub fn poll(&self) {
        self.shared.queries.pump();
    }

    /// Ticks to host-independent nanoseconds: the reading of `event`, `None` while pending.
    fn ticks(&self, event: &TimestampEvent) -> Result<Option<u64>, BackendError> {
        let mut reading = event.reading();
        if reading == Reading::Pending && self.shared.queries.pump() {
            reading = event.reading();
        }
        match reading {
            Reading::Pending => Ok(None),
            Reading::Ticks(ticks) => Ok(Some(ticks)),
            Reading::Lost => Err(BackendError::new("wgpu readback", LOST)),
        }
    }
}

impl Backend for WgpuBackend {
    type Event = TimestampEvent;
    type Stream = WgpuStream;
    type Graph = std::convert::Infallible;
    type GraphNode = std::convert::Infallible;

    const PLACEMENT: Placement = Placement::Submit;

    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn create_event(&self) -> Result<TimestampEvent, BackendError> {
        Ok(self.shared.queries.cells.event())
    }

    /// The backend's clock stream, for the collector's anchors (it records into no encoder of
    /// the application's).
    fn create_stream(&self) -> Result<WgpuStream, BackendError> {
        Ok(WgpuStream::new(Arc::clone(&self.shared.queries), CLOCK_LANE, Owner::Crate))
    }

    fn stream_key(&self, stream: &WgpuStream) -> u64 {
        stream.lane_key()
    }

    fn graph_key(&self, graph: &std::convert::Infallible) -> u64 {
        match *graph {}
    }

    #[inline]
    fn record(&self, event: &TimestampEvent, stream: &WgpuStream) -> Result<(), BackendError> {
        if stream.is_clock() {
            return self.record_anchor(event, stream).map(drop);
        }
        stream.record(event)
    }

    #[inline]
    fn record_mark(
        &self,
        event: &TimestampEvent,
        stream: &WgpuStream,
        _mark: Mark,
    ) -> Result<(), BackendError> {
        self.record(event, stream)
    }

    /// A one-timestamp submission to the queue (wgpu has no calibrated timestamps): the
    /// collector pairs it with the host time read just before, a lower bound of the offset.
    fn record_anchor(
        &self,
        event: &TimestampEvent,
        _stream: &WgpuStream,
    ) -> Result<Option<i64>, BackendError> {
        let queries = &self.shared.queries;
        if !queries.cells.owns(event) {
            // A chunk keeps only a pointer to an event's cell, valid while its arena lives.
            return Err(BackendError::new("wgpu anchor", FOREIGN_EVENT));
        }
        if !queries.timestamps.query {
            // Nothing is timed on this device: the anchor only has to exist.
            queries.stamp_now(event, self.host_now_ns().max(0) as u64);
            return Ok(None);
        }
        let anchor = WgpuStream::new(Arc::clone(queries), CLOCK_LANE, Owner::Crate);
        anchor.expect(Site::Encoder);
        anchor.record(event)?;
        let mut encoder = queries
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("gpu-event-pool anchor") });
        anchor.write_taken(|set, query| write_on_encoder(&mut encoder, queries.timestamps, set, query));
        anchor.resolve(&mut encoder);
        self.shared.queue.queue().submit([encoder.finish()]);
        Ok(None)
    }

    fn add_graph_record_node(
        &self,
        _event: &TimestampEvent,
        graph: &std::convert::Infallible,
        _dependencies: &[std::convert::Infallible],
    ) -> Result<std::convert::Infallible, BackendError> {
        match *graph {}
    }

    fn is_complete(&self, event: &TimestampEvent) -> Result<bool, BackendError> {
        Ok(self.ticks(event)?.is_some())
    }

    fn wait(&self, event: &TimestampEvent) -> Result<(), BackendError> {
        let started = Instant::now();
        let mut pause = Duration::from_micros(10);
        while !self.is_complete(event)? {
            if started.elapsed() >= self.shared.wait_timeout {
                return Err(BackendError::new("wgpu readback", WAIT_TIMEOUT));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        Ok(())
    }

    fn elapsed_ms(&self, start: &TimestampEvent, end: &TimestampEvent) -> Result<Option<f32>, BackendError> {
        Ok(self.elapsed(start, end)?.map(|e| (e.ns as f64 / 1e6) as f32))
    }

    fn elapsed(&self, start: &TimestampEvent, end: &TimestampEvent) -> Result<Option<Elapsed>, BackendError> {
        let Some(end_ticks) = self.ticks(end)? else { return Ok(None) };
        let Some(start_ticks) = self.ticks(start)? else { return Ok(None) };
        Ok(Some(Elapsed::from_ns(self.shared.scale.elapsed_ns(start_ticks, end_ticks))))
    }

    fn host_now_ns(&self) -> i64 {
        i64::try_from(self.shared.origin.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    fn host_clock_origin(&self) -> Option<Instant> {
        Some(self.shared.origin)
    }
}
