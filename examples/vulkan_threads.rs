//! Several threads recording Vulkan command buffers for one queue at once (feature `vulkan`):
//! each thread has a command pool of its own (a pool is used by one thread at a time) and
//! submits through `TracingContext::queue_submit`, which calls `vkQueueSubmit` and hands the
//! list to the context under the queue's lock.
//!
//! ```text
//! cargo run --example vulkan_threads --features vulkan
//! ```
//!
//! A Vulkan list takes its place in its queue's order when it is submitted, not when it
//! begins, so the threads record without a lock of their own. Each thread re-records one
//! command buffer per frame, after the fence of its previous submission has signalled: a
//! frame zone around two passes, each a spin of the crate's spin shader (where the device
//! reads its clock in shaders; otherwise the passes are empty). At the end it prints what
//! each zone measured, and fails if a zone was lost or a list was counted as concurrent.

use gpu_event_pool::backend::vulkan::ash::vk;
use gpu_event_pool::backend::vulkan::{Commands, SpinShader, VulkanBackend, VulkanDevice, VulkanQueue};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, DynamicLocation, TracingContext};
use std::collections::BTreeMap;
use std::time::Duration;

const THREADS: usize = 4;
const FRAMES: usize = 20;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() {
    // Errors print as sentences (their `Display`), and the process exits with 1.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let device = VulkanDevice::open()?;
    let queue = device.queue(0).ok_or("the device has no queue")?;
    let spin = SpinShader::load(&device, &queue).ok();
    let zones = MemorySink::new();
    let ctx = TracingContext::builder(VulkanBackend::new(&device)?)
        .sink(zones.clone())
        .collect_every(Duration::from_millis(2))
        .build()?;
    ctx.name_queue(&queue, "queue 0");
    println!("{} ({} threads x {FRAMES} frames)", device.name(), THREADS);

    std::thread::scope(|s| -> Result<()> {
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (device, queue, ctx, spin) = (&device, &queue, &ctx, spin.as_ref());
                s.spawn(move || record_frames(device, queue, ctx, spin, thread))
            })
            .collect();
        for thread in threads {
            thread.join().map_err(|_| "a recording thread panicked")??;
        }
        Ok(())
    })?;
    ctx.flush()?;

    let mut by_name: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for zone in zones.zones() {
        by_name.entry(zone.location.name().to_owned()).or_default().push(zone.gpu_end_ns - zone.gpu_begin_ns);
    }
    for (name, ns) in &by_name {
        let mean_us = ns.iter().sum::<i64>() as f64 / ns.len() as f64 / 1e3;
        println!("{name:<12} {:>4} zones, mean {mean_us:>9.1} µs", ns.len());
    }
    let stats = ctx.stats();
    println!(
        "{} zones emitted, {} dropped, {} lists failed, {} concurrent lists",
        stats.zones_emitted, stats.dropped_zones, stats.lists_failed, stats.concurrent_lists
    );
    if stats.zones_emitted != THREADS * FRAMES * 3 || stats.dropped_zones + stats.lists_failed > 0 {
        return Err(format!("zones were lost: {stats:?}").into());
    }
    if stats.concurrent_lists > 0 {
        return Err(format!("Vulkan lists are placed at submission, none is concurrent: {stats:?}").into());
    }
    Ok(())
}

/// One thread's frames: its own command pool, one command buffer re-recorded each frame once
/// the fence of the last submission has signalled.
fn record_frames(
    device: &VulkanDevice,
    queue: &VulkanQueue,
    ctx: &TracingContext<VulkanBackend>,
    spin: Option<&SpinShader>,
    thread: usize,
) -> Result<()> {
    let frames = ThreadFrames::new(device)?;
    let d = device.device();
    for frame in 0..FRAMES {
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // Safety: the fence guards the command buffer's last submission: once it has
        // signalled, the buffer is not pending and may be reset and recorded again, by this
        // thread only (the pool is this thread's).
        let commands = unsafe {
            d.wait_for_fences(&[frames.fence], true, u64::MAX)?;
            d.reset_fences(&[frames.fence])?;
            d.reset_command_pool(frames.pool, vk::CommandPoolResetFlags::empty())?;
            d.begin_command_buffer(frames.buffer, &begin)?;
            queue.commands(frames.buffer)
        };
        let mut list = ctx.list();
        {
            let frame_location = DynamicLocation::new("frame").arg("thread", thread).arg("frame", frame);
            let mut frame_zone = list.zone(&commands, frame_location);
            let mut pass = frame_zone.zone(&commands, location!("shadows"));
            spin_for(spin, &commands, 200_000)?;
            pass.next(location!("lighting"));
            spin_for(spin, &commands, 400_000)?;
        }
        let buffers = [frames.buffer];
        let submit = [vk::SubmitInfo::default().command_buffers(&buffers)];
        // Safety: the command buffer holds this list's zones and no other list's; it is
        // ended here and submitted once; the fence is unsignalled (reset above).
        unsafe {
            d.end_command_buffer(frames.buffer)?;
            ctx.queue_submit(queue, &submit, vec![list], frames.fence).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Work of `ns` nanoseconds on the GPU, where the spin shader loaded.
fn spin_for(spin: Option<&SpinShader>, commands: &Commands, ns: u64) -> Result<()> {
    if let Some(spin) = spin {
        // Safety: the shader outlives every command buffer (it is dropped after the threads,
        // each of which waits for its last submission), and every spin runs on one queue.
        unsafe { spin.record(commands, ns) }?;
    }
    Ok(())
}

/// A thread's command pool, its one command buffer and the fence of its last submission;
/// destroyed once that submission has completed.
struct ThreadFrames {
    device: VulkanDevice,
    pool: vk::CommandPool,
    buffer: vk::CommandBuffer,
    fence: vk::Fence,
}

impl ThreadFrames {
    fn new(device: &VulkanDevice) -> Result<Self> {
        let d = device.device();
        let null = (vk::CommandPool::null(), vk::CommandBuffer::null(), vk::Fence::null());
        let mut frames = Self { device: device.clone(), pool: null.0, buffer: null.1, fence: null.2 };
        let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(device.queue_family());
        let fence_info = vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED);
        // Safety: valid create infos for the device; what is made is destroyed by `drop`, also
        // when a later step fails.
        unsafe {
            frames.pool = d.create_command_pool(&pool_info, None)?;
            frames.fence = d.create_fence(&fence_info, None)?;
            let allocate =
                vk::CommandBufferAllocateInfo::default().command_pool(frames.pool).command_buffer_count(1);
            frames.buffer = d.allocate_command_buffers(&allocate)?[0];
        }
        Ok(frames)
    }
}

impl Drop for ThreadFrames {
    fn drop(&mut self) {
        let d = self.device.device();
        // Safety: once the fence has signalled nothing of the pool is pending (a fence never
        // submitted was made signalled); destroying the pool frees its command buffer, and
        // destroying a null pool does nothing.
        unsafe {
            if self.fence != vk::Fence::null() {
                let _ = d.wait_for_fences(&[self.fence], true, u64::MAX);
                d.destroy_fence(self.fence, None);
            }
            d.destroy_command_pool(self.pool, None);
        }
    }
}
