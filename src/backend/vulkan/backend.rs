//! The backend itself: [`VulkanBackend`] (what its clones share, the anchors, the host
//! clock) and its [`Backend`] implementation over the device, the query pages and the queues.

use super::device::VulkanDevice;
use super::errors::{NOT_CALIBRATED, NO_DEVICE, WAIT_TIMEOUT};
use super::queries::{PageAllocator, QueryWriter, TimestampQuery};
use super::queue::{AnchorSubmitter, Commands};
use crate::backend::ticks::TickScale;
use crate::backend::{Backend, BackendError, Elapsed, Mark, Placement};
use ash::vk;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How the collector's anchors (its calibration pairs) are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchors {
    /// `vkGetCalibratedTimestampsEXT` (or KHR): the device clock and `CLOCK_MONOTONIC` read
    /// together, so each pair is exact to the driver's reported deviation. Needs the
    /// extension.
    Calibrated,
    /// A timestamp written by a one-command submission to queue 0, paired with the host time
    /// read just before it is submitted: early by the submission's latency (as CUDA's
    /// anchors are). Works on every device.
    Submitted,
}

/// What a backend and its clones share.
struct VulkanTiming {
    device: VulkanDevice,
    scale: TickScale,
    pages: Mutex<PageAllocator>,
    anchors: Anchors,
    submitter: Mutex<Option<AnchorSubmitter>>,
    /// The host clock's origin, as an `Instant` and, with calibrated timestamps, as
    /// `CLOCK_MONOTONIC` nanoseconds (with its error bound, ns: [`clock_origin`]).
    origin: Instant,
    origin_mono_ns: Option<(i128, i64)>,
    wait_timeout: Duration,
}

/// Vulkan on one device. Cheap to clone: clones share the device, the query pools and the
/// host clock.
#[derive(Clone)]
pub struct VulkanBackend {
    shared: Arc<VulkanTiming>,
    /// What recording calls, kept here rather than behind `shared` (the backend is held by
    /// value in the context): valid while `shared` holds the device.
    writer: QueryWriter,
}

impl std::fmt::Debug for VulkanBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanBackend")
            .field("device", &self.shared.device)
            .field("anchors", &self.shared.anchors)
            .finish()
    }
}

/// How many times [`clock_origin`] reads the two clocks, keeping the narrowest bracket.
const ORIGIN_READS: usize = 16;

/// Where the backend's host clock (an [`Instant`] origin) reads 0, in the host time domain of
/// calibrated timestamps (`CLOCK_MONOTONIC` nanoseconds), and how far off that may be (ns).
///
/// Read through the driver itself, bracketed by two `Instant` reads: no platform clock call
/// of the crate's own (`Instant` is `CLOCK_MONOTONIC` on Linux, but std does not say what its
/// raw value is). Of [`ORIGIN_READS`] reads the one with the narrowest bracket is kept: its
/// half width bounds the error.
fn clock_origin(device: &VulkanDevice, origin: Instant) -> Result<Option<(i128, i64)>, BackendError> {
    let Some(calibrated) = &device.shared.calibrated else { return Ok(None) };
    let mut best: Option<(i128, i64)> = None;
    for _ in 0..ORIGIN_READS {
        let before = origin.elapsed().as_nanos() as i128;
        let ([_, monotonic], _) = calibrated.read()?;
        let after = origin.elapsed().as_nanos() as i128;
        let half_width = i64::try_from((after - before + 1) / 2).unwrap_or(i64::MAX);
        if best.is_none_or(|(_, width)| half_width < width) {
            best = Some((i128::from(monotonic) - (before + after) / 2, half_width));
        }
    }
    Ok(best)
}

impl VulkanBackend {
    /// A backend on `device`: calibrated anchors where the device has the extension,
    /// submitted ones otherwise.
    pub fn new(device: &VulkanDevice) -> Result<Self, BackendError> {
        let anchors =
            if device.has_calibrated_timestamps() { Anchors::Calibrated } else { Anchors::Submitted };
        Self::with_anchors(device, anchors)
    }

    /// A backend on `device` that takes its anchors as `anchors` says (fails with code
    /// [`ErrorKind::NotCalibrated`](crate::ErrorKind::NotCalibrated) for [`Anchors::Calibrated`] on a device without the extension).
    pub fn with_anchors(device: &VulkanDevice, anchors: Anchors) -> Result<Self, BackendError> {
        if anchors == Anchors::Calibrated && !device.has_calibrated_timestamps() {
            return Err(BackendError::new("VulkanBackend::with_anchors", NOT_CALIBRATED));
        }
        let scale =
            TickScale::new(device.timestamp_period(), device.timestamp_valid_bits()).ok_or_else(|| {
                BackendError::new(
                    "VulkanBackend::new",
                    format!("{NO_DEVICE}: the queue family writes no timestamps"),
                )
            })?;
        if device.queue_count() == 0 {
            return Err(BackendError::new("VulkanBackend::new", format!("{NO_DEVICE}: no queue")));
        }
        let submitter = match anchors {
            Anchors::Submitted => Some(AnchorSubmitter::new(&device.shared)?),
            Anchors::Calibrated => None,
        };
        let origin = Instant::now();
        let origin_mono_ns = clock_origin(device, origin)?;
        Ok(Self {
            writer: QueryWriter::new(&device.shared.device),
            shared: Arc::new(VulkanTiming {
                device: device.clone(),
                scale,
                pages: Mutex::new(PageAllocator::default()),
                anchors,
                submitter: Mutex::new(submitter),
                origin,
                origin_mono_ns,
                wait_timeout: Duration::from_secs(10),
            }),
        })
    }

    /// The device.
    pub fn device_handle(&self) -> &VulkanDevice {
        &self.shared.device
    }

    /// How anchors are taken.
    pub fn anchors(&self) -> Anchors {
        self.shared.anchors
    }

    /// How long [`Backend::wait`] (so `flush`) waits for one query before failing with
    /// [`ErrorKind::WaitTimeout`](crate::ErrorKind::WaitTimeout): 10 s. A query submitted to
    /// the context whose command buffer never reaches the GPU would otherwise hold `flush`
    /// forever.
    pub fn wait_timeout(&self) -> Duration {
        self.shared.wait_timeout
    }

    /// With calibrated timestamps, how far the host clock's origin may be from where it was
    /// placed in the calibrated host domain (ns): half the narrowest of 16 brackets of two
    /// `Instant` reads around one calibrated read, measured when the backend was made. Every
    /// calibrated anchor's host time carries this error, the same for all of them.
    pub fn clock_origin_error_ns(&self) -> Option<i64> {
        self.shared.origin_mono_ns.map(|(_, error)| error)
    }

    /// The device clock and the host clock ([`Backend::host_now_ns`]) read together, and
    /// the driver's bound on how far apart the two samples were (ns); `None` without
    /// calibrated timestamps.
    pub fn calibrated_now(&self) -> Result<Option<CalibratedPair>, BackendError> {
        let Some(calibrated) = &self.shared.device.shared.calibrated else { return Ok(None) };
        let Some((origin_mono_ns, _)) = self.shared.origin_mono_ns else { return Ok(None) };
        let ([device, monotonic], deviation_ns) = calibrated.read()?;
        let device_ticks = device & self.shared.scale.mask;
        let host_ns = i64::try_from(i128::from(monotonic) - origin_mono_ns).unwrap_or(i64::MAX);
        Ok(Some(CalibratedPair {
            device_ticks,
            device_ns: self.shared.scale.ticks_ns(device_ticks),
            host_ns,
            deviation_ns,
        }))
    }

    fn device(&self) -> &ash::Device {
        &self.shared.device.shared.device
    }

    fn scale(&self) -> &TickScale {
        &self.shared.scale
    }
}

/// One reading of [`VulkanBackend::calibrated_now`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibratedPair {
    /// The device's timestamp counter (masked to its valid bits).
    pub device_ticks: u64,
    /// The same, in nanoseconds.
    pub device_ns: u128,
    /// The host clock ([`Backend::host_now_ns`]) at the same moment.
    pub host_ns: i64,
    /// How far apart the two samples may be, as the driver reports it (ns).
    pub deviation_ns: u64,
}

impl Backend for VulkanBackend {
    type Event = TimestampQuery;
    type Stream = Commands;
    type Graph = std::convert::Infallible;
    type GraphNode = std::convert::Infallible;

    const PLACEMENT: Placement = Placement::Submit;
    /// Each query is reset from the host when its slot goes back to the pool, off the
    /// recording path.
    const RETIRES: bool = true;

    fn name(&self) -> &'static str {
        "vulkan"
    }

    fn create_event(&self) -> Result<TimestampQuery, BackendError> {
        lock(&self.shared.pages).next(&self.shared.device.shared)
    }

    /// The backend's clock stream, for the collector's anchors (it records into no command
    /// buffer of the application's).
    fn create_stream(&self) -> Result<Commands, BackendError> {
        Ok(Commands::clock())
    }

    fn stream_key(&self, stream: &Commands) -> u64 {
        stream.lane
    }

    fn graph_key(&self, graph: &std::convert::Infallible) -> u64 {
        match *graph {}
    }

    fn record(&self, event: &TimestampQuery, stream: &Commands) -> Result<(), BackendError> {
        self.record_mark(event, stream, Mark::End)
    }

    #[inline]
    fn record_mark(&self, event: &TimestampQuery, stream: &Commands, mark: Mark) -> Result<(), BackendError> {
        if stream.command_buffer == vk::CommandBuffer::null() {
            return self.record_anchor(event, stream).map(drop);
        }
        let stage = match mark {
            Mark::Begin => vk::PipelineStageFlags::TOP_OF_PIPE,
            Mark::End | Mark::EndAndBegin => vk::PipelineStageFlags::BOTTOM_OF_PIPE,
        };
        // Safety: `VulkanQueue::commands`'s contract: a command buffer of this device in the
        // recording state, recorded by this thread only; the query is owned by the caller's
        // list (the `Backend::record_mark` contract) and reset: made reset, and retired
        // (reset) each time its slot went back to the pool.
        unsafe { self.writer.write(event, stream.command_buffer, stage) };
        Ok(())
    }

    fn retire(&self, event: &TimestampQuery) {
        event.reset(&self.writer);
    }

    fn record_anchor(&self, event: &TimestampQuery, _stream: &Commands) -> Result<Option<i64>, BackendError> {
        match self.shared.anchors {
            Anchors::Calibrated => {
                let pair = self
                    .calibrated_now()?
                    .ok_or_else(|| BackendError::new("record_anchor", NOT_CALIBRATED))?;
                event.stamp(pair.device_ticks);
                Ok(Some(pair.host_ns))
            }
            Anchors::Submitted => {
                event.reset(&self.writer);
                match lock(&self.shared.submitter).as_mut() {
                    Some(submitter) => submitter.write(event)?,
                    None => return Err(BackendError::new("record_anchor", "no anchor submitter")),
                }
                Ok(None)
            }
        }
    }

    fn add_graph_record_node(
        &self,
        _event: &TimestampQuery,
        graph: &std::convert::Infallible,
        _dependencies: &[std::convert::Infallible],
    ) -> Result<std::convert::Infallible, BackendError> {
        match *graph {}
    }

    fn is_complete(&self, event: &TimestampQuery) -> Result<bool, BackendError> {
        Ok(event.ticks(self.device(), self.scale())?.is_some())
    }

    fn wait(&self, event: &TimestampQuery) -> Result<(), BackendError> {
        let started = Instant::now();
        let mut pause = Duration::from_micros(10);
        while !self.is_complete(event)? {
            if started.elapsed() >= self.shared.wait_timeout {
                return Err(BackendError::new("vkGetQueryPoolResults", WAIT_TIMEOUT));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        Ok(())
    }

    fn elapsed_ms(&self, start: &TimestampQuery, end: &TimestampQuery) -> Result<Option<f32>, BackendError> {
        Ok(self.elapsed(start, end)?.map(|e| (e.ns as f64 / 1e6) as f32))
    }

    fn elapsed(&self, start: &TimestampQuery, end: &TimestampQuery) -> Result<Option<Elapsed>, BackendError> {
        let Some(end_ticks) = end.ticks(self.device(), self.scale())? else { return Ok(None) };
        let Some(start_ticks) = start.ticks(self.device(), self.scale())? else { return Ok(None) };
        Ok(Some(Elapsed::from_ns(self.scale().elapsed_ns(start_ticks, end_ticks))))
    }

    fn host_now_ns(&self) -> i64 {
        i64::try_from(self.shared.origin.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    fn host_clock_origin(&self) -> Option<Instant> {
        Some(self.shared.origin)
    }
}
