//! The demo on Vulkan: one device, each demo stream a lane of its queue (lavapipe has one
//! queue: every lane shares it) with a command pool of its own; each command buffer is
//! submitted through `TracingContext::queue_submit`, which places its list in the lane's order.

use super::{DemoGpu, DemoResult, Stream};
use gpu_event_pool::backend::vulkan::ash::vk;
use gpu_event_pool::backend::vulkan::{SpinShader, VulkanBackend, VulkanDevice, VulkanQueue};
use gpu_event_pool::{EventList, TracingContext};

/// Command buffers kept per queue before the queue is drained and they are freed.
const PENDING: usize = 64;

pub(super) struct VulkanGpu {
    device: VulkanDevice,
    backend: VulkanBackend,
    queue: VulkanQueue,
    spin: SpinShader,
}

/// A lane of the device's queue, with the command buffers submitted on it not yet freed.
pub(super) struct QueueLane {
    lane: VulkanQueue,
    pool: vk::CommandPool,
    pending: Vec<vk::CommandBuffer>,
    device: VulkanDevice,
}

impl QueueLane {
    /// Waits until the queue is idle and frees the command buffers submitted so far.
    fn drain(&mut self) -> DemoResult<()> {
        let d = self.device.device();
        // Safety: the queue is waited for under its lock; then no command buffer of ours is
        // pending, and the pool is used by the thread holding this lane only.
        unsafe {
            let queue = self.lane.lock();
            d.queue_wait_idle(self.lane.raw())?;
            drop(queue);
            if !self.pending.is_empty() {
                d.free_command_buffers(self.pool, &self.pending);
            }
        }
        self.pending.clear();
        Ok(())
    }
}

impl Drop for QueueLane {
    fn drop(&mut self) {
        let _ = self.drain();
        // Safety: nothing of the pool is pending any more (drained above).
        unsafe { self.device.device().destroy_command_pool(self.pool, None) };
    }
}

pub(super) fn open(devices: usize) -> DemoResult<Vec<VulkanGpu>> {
    if devices != 1 {
        return Err("--backend vulkan runs on one device".into());
    }
    let device = VulkanDevice::open().map_err(|e| format!("no Vulkan device: {e}"))?;
    let backend = VulkanBackend::new(&device)?;
    let queue = device.queue(0).ok_or("the device has no queue")?;
    let spin = SpinShader::load(&device, &queue).map_err(|e| format!("cannot load the spin shader: {e}"))?;
    eprintln!("vulkan             {} ({:?} anchors)", device.name(), backend.anchors());
    Ok(vec![VulkanGpu { device, backend, queue, spin }])
}

impl DemoGpu for VulkanGpu {
    type Backend = VulkanBackend;
    type Queue = QueueLane;
    fn backend(&self) -> &VulkanBackend {
        &self.backend
    }
    fn new_queue(&self, ctx: &TracingContext<VulkanBackend>, name: String) -> DemoResult<QueueLane> {
        let lane = self.queue.new_lane();
        ctx.name_queue(&lane, name);
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(self.device.queue_family());
        // Safety: a valid create info for the device's queue family.
        let pool = unsafe { self.device.device().create_command_pool(&info, None) }?;
        Ok(QueueLane { lane, pool, pending: Vec::new(), device: self.device.clone() })
    }
    fn begin(&self, queue: &mut QueueLane) -> DemoResult<Stream<Self>> {
        if queue.pending.len() >= PENDING {
            queue.drain()?;
        }
        let d = self.device.device();
        let info = vk::CommandBufferAllocateInfo::default().command_pool(queue.pool).command_buffer_count(1);
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // Safety: the lane's pool, used by the thread holding the lane only; the command
        // buffer is recorded by this thread and submitted once, to this lane's queue.
        unsafe {
            let cb = d.allocate_command_buffers(&info)?[0];
            d.begin_command_buffer(cb, &begin)?;
            Ok(queue.lane.commands(cb))
        }
    }
    fn kernel(&self, stream: &Stream<Self>, ns: i64) -> DemoResult<()> {
        // Safety: the shader lives as long as the demo's devices, which drain their queues
        // before they go.
        Ok(unsafe { self.spin.record(stream, ns.max(0) as u64) }?)
    }
    fn submit(
        &self,
        ctx: &TracingContext<VulkanBackend>,
        queue: &mut QueueLane,
        stream: Stream<Self>,
        list: EventList<VulkanBackend>,
    ) -> DemoResult<()> {
        let cbs = [stream.command_buffer()];
        // Safety: our command buffer, recorded above, holding this list's zones only.
        unsafe {
            self.device.device().end_command_buffer(cbs[0])?;
            let submit = [vk::SubmitInfo::default().command_buffers(&cbs)];
            ctx.queue_submit(&queue.lane, &submit, vec![list], vk::Fence::null())?;
        }
        queue.pending.push(cbs[0]);
        Ok(())
    }
}
