//! Queues as lanes, command buffers as the backend's streams, and submission: where a list
//! takes its place in its queue's order.

use super::errors::vk_error;
use super::handles::DeviceShared;
use super::queries::TimestampQuery;
use crate::backend::BackendError;
use ash::vk;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Lane keys of lanes made by [`VulkanQueue::new_lane`]: the top bit set, so that they never
/// equal a queue's own key (its handle, a pointer).
static NEXT_LANE: AtomicU64 = AtomicU64::new(1 << 63);

/// The key of the backend's own clock stream ([`Commands`] with no command buffer).
pub(super) const CLOCK_LANE: u64 = 0;

/// A queue of the device and one lane of the trace: the zones of command buffers submitted
/// through it are ordered, per lane, in the order they were submitted.
///
/// [`VulkanDevice::queue`](super::VulkanDevice::queue) gives each queue's own lane (keyed by
/// its handle); [`new_lane`](Self::new_lane) gives another lane of the same queue (its
/// submissions share the queue's lock and are ordered among themselves only). Cheap to clone:
/// clones are the same lane.
#[derive(Debug, Clone)]
pub struct VulkanQueue {
    device: Arc<DeviceShared>,
    raw: vk::Queue,
    lock: Arc<Mutex<()>>,
    lane: u64,
}

impl VulkanQueue {
    pub(super) fn new(device: Arc<DeviceShared>, raw: vk::Queue, lock: Arc<Mutex<()>>) -> Self {
        use ash::vk::Handle;
        Self { device, raw, lock, lane: raw.as_raw() }
    }

    /// The queue handle (submit to it only under [`lock`](Self::lock)).
    pub fn raw(&self) -> vk::Queue {
        self.raw
    }

    /// The lane's key ([`Lane::Stream`](crate::Lane::Stream) of its zones).
    pub fn lane_key(&self) -> u64 {
        self.lane
    }

    /// Another lane on the same queue: its own order and its own track in the sinks, the
    /// queue's lock shared (a device with one queue can still keep two submission streams
    /// apart).
    pub fn new_lane(&self) -> Self {
        Self { lane: NEXT_LANE.fetch_add(1, Ordering::Relaxed), ..self.clone() }
    }

    /// The queue's lock: hold it around your own `vkQueueSubmit` and the
    /// `TracingContext::submit` of its lists, so that both see the same order.
    pub fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Zones recorded with the returned stream write their timestamps into `command_buffer`
    /// and belong to this lane.
    ///
    /// # Safety
    ///
    /// `command_buffer` is a command buffer of the backend's device, in the recording state
    /// while zones are recorded into it, recorded by the calling thread only (the returned
    /// value is not `Sync`), and submitted to this queue once, with its list
    /// (`TracingContext::queue_submit`). Submitting it again writes into queries that may belong
    /// to other lists by then (record it anew, or use `ONE_TIME_SUBMIT`).
    pub unsafe fn commands(&self, command_buffer: vk::CommandBuffer) -> Commands {
        Commands { command_buffer, lane: self.lane, _not_sync: PhantomData }
    }

    /// Submits `submits` to the queue under its lock, then calls `then` still holding it
    /// (`TracingContext::queue_submit` submits the lists there, in the same order).
    ///
    /// # Safety
    ///
    /// `submits` and `fence` are valid for `vkQueueSubmit` on this queue.
    pub(crate) unsafe fn submit_then(
        &self,
        submits: &[vk::SubmitInfo<'_>],
        fence: vk::Fence,
        then: impl FnOnce(),
    ) -> Result<(), BackendError> {
        let _queue = self.lock();
        // Safety: the caller's submit infos and fence are valid for this queue; the queue's
        // lock is held (external synchronization).
        unsafe { self.device.device.queue_submit(self.raw, submits, fence) }
            .map_err(vk_error("vkQueueSubmit"))?;
        then();
        Ok(())
    }
}

/// The backend's stream: a command buffer that zones write timestamps into, and the lane
/// (queue) it will be submitted to ([`VulkanQueue::commands`]). The backend's own clock
/// stream ([`Backend::create_stream`](crate::Backend::create_stream)) has no command buffer.
#[derive(Debug)]
pub struct Commands {
    pub(super) command_buffer: vk::CommandBuffer,
    pub(super) lane: u64,
    /// Recording into a command buffer is externally synchronized: one thread at a time.
    _not_sync: PhantomData<Cell<()>>,
}

impl Commands {
    pub(super) fn clock() -> Self {
        Self { command_buffer: vk::CommandBuffer::null(), lane: CLOCK_LANE, _not_sync: PhantomData }
    }

    /// The command buffer.
    pub fn command_buffer(&self) -> vk::CommandBuffer {
        self.command_buffer
    }
}

/// Anchors without calibrated timestamps: a one-command submission (`vkCmdWriteTimestamp`)
/// to queue 0 of the family, under its lock. Command buffers and fences are reused once
/// their fence has signalled.
pub(super) struct AnchorSubmitter {
    device: Arc<DeviceShared>,
    pool: vk::CommandPool,
    ring: Vec<(vk::CommandBuffer, vk::Fence)>,
}

impl std::fmt::Debug for AnchorSubmitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnchorSubmitter").field("command_buffers", &self.ring.len()).finish()
    }
}

impl AnchorSubmitter {
    pub(super) fn new(device: &Arc<DeviceShared>) -> Result<Self, BackendError> {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // Safety: a valid create info for the device's queue family.
        let pool = unsafe { device.device.create_command_pool(&info, None) }
            .map_err(vk_error("vkCreateCommandPool"))?;
        Ok(Self { device: Arc::clone(device), pool, ring: Vec::new() })
    }

    /// A command buffer and fence not in use: one whose fence has signalled, else a new one.
    fn idle(&mut self) -> Result<(vk::CommandBuffer, vk::Fence), BackendError> {
        let device = &self.device.device;
        for &(cb, fence) in &self.ring {
            // Safety: a fence of this device, made below.
            if unsafe { device.get_fence_status(fence) } == Ok(true) {
                return Ok((cb, fence));
            }
        }
        let info = vk::CommandBufferAllocateInfo::default().command_pool(self.pool).command_buffer_count(1);
        // Safety: the pool is ours and used by this thread only (the submitter is behind a lock).
        let cb = unsafe { device.allocate_command_buffers(&info) }
            .map_err(vk_error("vkAllocateCommandBuffers"))?[0];
        // Safety: a valid create info; made signalled, so that it reads as idle.
        let fence = unsafe {
            device.create_fence(&vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED), None)
        }
        .map_err(vk_error("vkCreateFence"))?;
        self.ring.push((cb, fence));
        Ok((cb, fence))
    }

    /// Submits a timestamp write of `query` (already reset) to queue 0.
    pub(super) fn write(&mut self, query: &TimestampQuery) -> Result<(), BackendError> {
        let (cb, fence) = self.idle()?;
        let device = &self.device.device;
        let (queue, lock) = &self.device.queues[0];
        // Safety: `cb` is not pending (its fence signalled) and is recorded by this thread
        // only; the query was reset from the host and is owned by the collector; the queue is
        // submitted to under its lock.
        unsafe {
            device
                .reset_command_buffer(cb, vk::CommandBufferResetFlags::empty())
                .map_err(vk_error("vkResetCommandBuffer"))?;
            let begin =
                vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            device.begin_command_buffer(cb, &begin).map_err(vk_error("vkBeginCommandBuffer"))?;
            device.cmd_write_timestamp(
                cb,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                query.pool(),
                query.index(),
            );
            device.end_command_buffer(cb).map_err(vk_error("vkEndCommandBuffer"))?;
            device.reset_fences(&[fence]).map_err(vk_error("vkResetFences"))?;
            let cbs = [cb];
            let submit = vk::SubmitInfo::default().command_buffers(&cbs);
            let _queue = lock.lock().unwrap_or_else(PoisonError::into_inner);
            device.queue_submit(*queue, &[submit], fence).map_err(vk_error("vkQueueSubmit"))
        }
    }
}

impl Drop for AnchorSubmitter {
    fn drop(&mut self) {
        let device = &self.device.device;
        let fences: Vec<vk::Fence> = self.ring.iter().map(|&(_, f)| f).collect();
        // Safety: our own fences and pool; waiting (one second at most) lets queued anchors
        // finish before their command buffers are freed with the pool.
        unsafe {
            if !fences.is_empty() {
                let _ = device.wait_for_fences(&fences, true, 1_000_000_000);
            }
            for fence in fences {
                device.destroy_fence(fence, None);
            }
            device.destroy_command_pool(self.pool, None);
        }
    }
}
