//! A compute shader that spins for a given time: GPU work of a known duration.

use super::device::VulkanDevice;
use super::errors::vk_error;
use super::handles::DeviceShared;
use super::queue::{Commands, VulkanQueue};
use crate::backend::BackendError;
use ash::vk;
use std::sync::Arc;

/// The `code` of [`SpinShader::load`] on a device without `shaderDeviceClock` (hidden:
/// `ErrorKind::NoShaderClock` is the API).
#[doc(hidden)]
pub const NO_SHADER_CLOCK: &str = crate::backend::codes::VK_NO_SHADER_CLOCK;

/// `spin.comp` built with `glslangValidator -V --target-env vulkan1.2 -o spin.spv spin.comp`
/// (the command is in the source's header).
const SPIN_SPIRV: &[u8] = include_bytes!("spin.spv");

/// A compute pipeline whose one invocation spins until the device's real-time shader clock
/// (`VK_KHR_shader_clock`, `shaderDeviceClock`) has advanced by a given number of ticks: GPU
/// work of a known duration, for tests, demos and benchmarks.
///
/// The clock's unit is the driver's (lavapipe reads the CPU's cycle counter), so
/// [`load`](Self::load) measures its rate against timestamp queries: two spins of different
/// lengths, their difference in ticks over the difference of their shortest durations
/// (which cancels the dispatch's own cost). [`record`](Self::record) takes
/// nanoseconds.
pub struct SpinShader {
    device: Arc<DeviceShared>,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    descriptors: vk::DescriptorPool,
    set: vk::DescriptorSet,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// Shader-clock ticks per nanosecond.
    rate: f64,
}

impl std::fmt::Debug for SpinShader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinShader")
            .field("pipeline", &self.pipeline)
            .field("ticks_per_ns", &self.rate)
            .finish()
    }
}

/// The SPIR-V words of `bytes` (a multiple of 4 bytes, in the host's byte order as glslang
/// writes them on this host).
fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]])).collect()
}

impl SpinShader {
    /// The committed SPIR-V of the shader (`src/backend/vulkan/spin.spv`).
    pub const SPIRV: &'static [u8] = SPIN_SPIRV;

    /// Builds the pipeline on `device` and measures the shader clock's rate (submitting to
    /// `queue`, under its lock; about 40 ms on lavapipe). Fails with [`ErrorKind::NoShaderClock`](crate::ErrorKind::NoShaderClock) when the
    /// device cannot read its clock in shaders.
    pub fn load(device: &VulkanDevice, queue: &VulkanQueue) -> Result<Self, BackendError> {
        if !device.has_shader_clock() {
            return Err(BackendError::new("SpinShader::load", NO_SHADER_CLOCK));
        }
        let shared = Arc::clone(&device.shared);
        let raw = &shared.device;
        let mut spin = Self {
            device: Arc::clone(&shared),
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            descriptors: vk::DescriptorPool::null(),
            set: vk::DescriptorSet::null(),
            buffer: vk::Buffer::null(),
            memory: vk::DeviceMemory::null(),
            rate: 1.0,
        };
        let code = words(SPIN_SPIRV);
        // Safety (this block): valid create infos for objects of this device, each kept in
        // `spin` as soon as made, so that its drop destroys whatever was made if a later
        // step fails. The SPIR-V passed spirv-val; the device has the shader clock and
        // 64-bit integers enabled.
        unsafe {
            spin.module = raw
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
                .map_err(vk_error("vkCreateShaderModule"))?;
            let bindings = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)];
            spin.set_layout = raw
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .map_err(vk_error("vkCreateDescriptorSetLayout"))?;
            let ranges =
                [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).size(8)];
            let set_layouts = [spin.set_layout];
            let info = vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&set_layouts)
                .push_constant_ranges(&ranges);
            spin.layout =
                raw.create_pipeline_layout(&info, None).map_err(vk_error("vkCreatePipelineLayout"))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(spin.module)
                .name(c"main");
            let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(spin.layout)];
            spin.pipeline = raw
                .create_compute_pipelines(vk::PipelineCache::null(), &info, None)
                .map_err(|(_, e)| vk_error("vkCreateComputePipelines")(e))?[0];
            let info = vk::BufferCreateInfo::default().size(16).usage(vk::BufferUsageFlags::STORAGE_BUFFER);
            spin.buffer = raw.create_buffer(&info, None).map_err(vk_error("vkCreateBuffer"))?;
            let needs = raw.get_buffer_memory_requirements(spin.buffer);
            let memory_type = needs.memory_type_bits.trailing_zeros();
            let info =
                vk::MemoryAllocateInfo::default().allocation_size(needs.size).memory_type_index(memory_type);
            spin.memory = raw.allocate_memory(&info, None).map_err(vk_error("vkAllocateMemory"))?;
            raw.bind_buffer_memory(spin.buffer, spin.memory, 0).map_err(vk_error("vkBindBufferMemory"))?;
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)];
            let info = vk::DescriptorPoolCreateInfo::default().max_sets(1).pool_sizes(&sizes);
            spin.descriptors =
                raw.create_descriptor_pool(&info, None).map_err(vk_error("vkCreateDescriptorPool"))?;
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(spin.descriptors)
                .set_layouts(&set_layouts);
            spin.set = raw.allocate_descriptor_sets(&info).map_err(vk_error("vkAllocateDescriptorSets"))?[0];
            let buffers = [vk::DescriptorBufferInfo::default().buffer(spin.buffer).range(vk::WHOLE_SIZE)];
            let write = vk::WriteDescriptorSet::default()
                .dst_set(spin.set)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&buffers);
            raw.update_descriptor_sets(&[write], &[]);
        }
        spin.rate = spin.measure_rate(queue)?;
        Ok(spin)
    }

    /// Shader-clock ticks per nanosecond, as [`load`](Self::load) measured it.
    pub fn ticks_per_ns(&self) -> f64 {
        self.rate
    }

    /// Records a dispatch into `commands` that spins for `ns` nanoseconds (at the measured
    /// rate). Fails (recording nothing) on the backend's clock stream, which has no command
    /// buffer.
    ///
    /// # Safety
    ///
    /// `self` outlives the execution of the command buffer (dropping it destroys the
    /// pipeline); the command buffer is not executing another spin of this shader at the
    /// same time on another queue (they share one 16-byte result buffer).
    pub unsafe fn record(&self, commands: &Commands, ns: u64) -> Result<(), BackendError> {
        let cb = commands.command_buffer;
        if cb == vk::CommandBuffer::null() {
            return Err(BackendError::new("SpinShader::record", "the stream has no command buffer"));
        }
        // Safety: the caller's contract, passed on.
        unsafe { self.record_ticks(cb, (ns as f64 * self.rate) as u64) };
        Ok(())
    }

    /// # Safety
    ///
    /// `cb` is a command buffer of this device in the recording state, recorded by this
    /// thread only, executed while `self` lives.
    unsafe fn record_ticks(&self, cb: vk::CommandBuffer, ticks: u64) {
        let raw = &self.device.device;
        // Safety: the caller's contract; the pipeline, layout and set are ours.
        unsafe {
            raw.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            raw.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            raw.cmd_push_constants(cb, self.layout, vk::ShaderStageFlags::COMPUTE, 0, &ticks.to_ne_bytes());
            raw.cmd_dispatch(cb, 1, 1, 1);
        }
    }

    /// Ticks per nanosecond: spins of 1 and 6 million ticks, five of each, each in its own
    /// submission between two timestamp queries; the difference of the lengths in ticks over
    /// the difference of the shortest durations.
    fn measure_rate(&self, queue: &VulkanQueue) -> Result<f64, BackendError> {
        const SHORT: u64 = 1_000_000;
        const LONG: u64 = 6_000_000;
        let raw = &self.device.device;
        let mut durations: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(2);
        let family = vk::CommandPoolCreateInfo::default().queue_family_index(self.device.family);
        // Safety: valid create infos; the objects are destroyed when `scratch` drops, on
        // every path.
        let scratch = unsafe {
            Scratch {
                raw,
                queries: raw.create_query_pool(&info, None).map_err(vk_error("vkCreateQueryPool"))?,
                commands: raw.create_command_pool(&family, None).map_err(vk_error("vkCreateCommandPool"))?,
                fence: raw
                    .create_fence(&vk::FenceCreateInfo::default(), None)
                    .map_err(vk_error("vkCreateFence"))?,
            }
        };
        let alloc =
            vk::CommandBufferAllocateInfo::default().command_pool(scratch.commands).command_buffer_count(1);
        for round in 0..10 {
            let ticks = if round % 2 == 0 { SHORT } else { LONG };
            let mut times = [0u64; 2];
            // Safety: a command buffer of our own pool, recorded here, submitted once under
            // the queue's lock and waited for (fence) before the next round resets the
            // queries from the host and frees it.
            unsafe {
                raw.reset_query_pool(scratch.queries, 0, 2);
                let cb =
                    raw.allocate_command_buffers(&alloc).map_err(vk_error("vkAllocateCommandBuffers"))?[0];
                let begin =
                    vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
                raw.begin_command_buffer(cb, &begin).map_err(vk_error("vkBeginCommandBuffer"))?;
                raw.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, scratch.queries, 0);
                self.record_ticks(cb, ticks);
                raw.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, scratch.queries, 1);
                raw.end_command_buffer(cb).map_err(vk_error("vkEndCommandBuffer"))?;
                let cbs = [cb];
                let submit = [vk::SubmitInfo::default().command_buffers(&cbs)];
                {
                    let _queue = queue.lock();
                    raw.queue_submit(queue.raw(), &submit, scratch.fence)
                        .map_err(vk_error("vkQueueSubmit"))?;
                }
                raw.wait_for_fences(&[scratch.fence], true, 10_000_000_000)
                    .map_err(vk_error("vkWaitForFences"))?;
                raw.reset_fences(&[scratch.fence]).map_err(vk_error("vkResetFences"))?;
                raw.free_command_buffers(scratch.commands, &cbs);
                raw.get_query_pool_results(scratch.queries, 0, &mut times, vk::QueryResultFlags::TYPE_64)
                    .map_err(vk_error("vkGetQueryPoolResults"))?;
            }
            durations[round % 2].push(f64::from(self.device.period) * times[1].wrapping_sub(times[0]) as f64);
        }
        // A spin's duration is only ever stretched (by the dispatch's cost, by the thread that
        // runs it being descheduled): the shortest of each length is the nearest to the truth.
        let shortest = |d: &[f64]| d.iter().copied().fold(f64::INFINITY, f64::min);
        let (short, long) = (shortest(&durations[0]), shortest(&durations[1]));
        if long <= short {
            return Err(BackendError::new("SpinShader::load", "the shader clock did not advance"));
        }
        Ok((LONG - SHORT) as f64 / (long - short))
    }
}

/// The query pool, command pool and fence of a rate measurement, destroyed when it ends.
struct Scratch<'d> {
    raw: &'d ash::Device,
    queries: vk::QueryPool,
    commands: vk::CommandPool,
    fence: vk::Fence,
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        // Safety: ours; every submission that used them was waited for (or never made).
        unsafe {
            self.raw.destroy_fence(self.fence, None);
            self.raw.destroy_command_pool(self.commands, None);
            self.raw.destroy_query_pool(self.queries, None);
        }
    }
}

impl Drop for SpinShader {
    fn drop(&mut self) {
        let raw = &self.device.device;
        // Safety: made in `load` (or null: destroying a null handle does nothing), destroyed
        // only here; `record`'s contract keeps the shader alive until the command buffers
        // that use it have completed.
        unsafe {
            raw.destroy_pipeline(self.pipeline, None);
            raw.destroy_pipeline_layout(self.layout, None);
            raw.destroy_descriptor_pool(self.descriptors, None);
            raw.destroy_descriptor_set_layout(self.set_layout, None);
            raw.destroy_buffer(self.buffer, None);
            raw.free_memory(self.memory, None);
            raw.destroy_shader_module(self.module, None);
        }
    }
}
