//! `vulkan` (feature `vulkan`): what recording a zone costs on a real Vulkan driver
//! (lavapipe here), against bare timestamp writes into the same command buffer, in one run.
//!
//! One iteration records one list: a coarse zone around 63 adjacent dispatch zones (as in
//! `record` and `nvtx`), 66 events for 64 zones, into a command buffer that is never
//! submitted (the list is dropped, its slots go back). Three variants, one thread:
//!
//! - `crate_zone_next`: the crate (`zone_begin`, `zone_next`, `zone_end`): per event a slot
//!   from the list's reservation, `vkResetQueryPool` of its query, `vkCmdWriteTimestamp`;
//! - `bare_write_timestamp`: 66 `vkCmdWriteTimestamp` and nothing else (the floor);
//! - `bare_reset_and_write`: 66 host `vkResetQueryPool` + `vkCmdWriteTimestamp` pairs (what
//!   the backend calls, without the pool).
//!
//! The command buffer is reset every 64 lists, outside the timed part. Each record gives
//! nanoseconds per zone. Without a Vulkan driver the bench says `SKIPPED` and records nothing.

mod common;

use common::criterion_estimate_ns;
use common::results::{Record, Results};
use criterion::{BenchmarkId, Criterion, Throughput};
use gpu_event_pool::backend::vulkan::ash::vk;
use gpu_event_pool::backend::vulkan::{is_no_device, Commands, VulkanBackend, VulkanDevice, VulkanQueue};
use gpu_event_pool::{location, SourceLocation, TracingContext, Verbosity};
use std::time::{Duration, Instant, SystemTime};

const ZONES_PER_LIST: u64 = 64;
const EVENTS_PER_LIST: u32 = 66;
const LISTS_PER_RESET: u64 = 64;

static COARSE: &SourceLocation = location!("command buffer", Verbosity::Coarse);
static DISPATCH: &SourceLocation = location!("dispatch");

fn record_list(ctx: &TracingContext<VulkanBackend>, commands: &Commands) {
    let mut list = ctx.list();
    let _ = list.zone_begin(commands, COARSE);
    let _ = list.zone_begin(commands, DISPATCH);
    for _ in 1..ZONES_PER_LIST - 1 {
        let _ = list.zone_next(commands, DISPATCH);
    }
    let _ = list.zone_end(commands);
    let _ = list.zone_end(commands);
    drop(list);
}

/// A command buffer in the recording state, reset every `LISTS_PER_RESET` lists.
struct Recording {
    device: VulkanDevice,
    pool: vk::CommandPool,
    commands: Commands,
    queries: vk::QueryPool,
}

impl Recording {
    fn new(device: &VulkanDevice, queue: &VulkanQueue) -> Self {
        let d = device.device();
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.queue_family())
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        let alloc =
            |pool| vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
        let queries = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(EVENTS_PER_LIST);
        // Safety: valid create infos; the command buffer is recorded by this thread only and
        // never submitted.
        unsafe {
            let pool = d.create_command_pool(&info, None).expect("command pool");
            let cb = d.allocate_command_buffers(&alloc(pool)).expect("command buffer")[0];
            d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()).expect("begin");
            let queries = d.create_query_pool(&queries, None).expect("query pool");
            Self { device: device.clone(), pool, commands: queue.commands(cb), queries }
        }
    }

    fn reset(&self) {
        let (d, cb) = (self.device.device(), self.commands.command_buffer());
        // Safety: never submitted, so never pending; recorded by this thread only.
        unsafe {
            d.reset_command_buffer(cb, vk::CommandBufferResetFlags::empty()).expect("reset");
            d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()).expect("begin");
        }
    }

    fn bare(&self, reset: bool) {
        let (d, cb) = (self.device.device(), self.commands.command_buffer());
        for q in 0..EVENTS_PER_LIST {
            // Safety: our query pool and command buffer (recording, this thread only); the
            // command buffer is never submitted, so no query is in use.
            unsafe {
                if reset {
                    d.reset_query_pool(self.queries, q, 1);
                }
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.queries, q);
            }
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        // Safety: nothing was submitted; ours to destroy.
        unsafe {
            self.device.device().destroy_query_pool(self.queries, None);
            self.device.device().destroy_command_pool(self.pool, None);
        }
    }
}

fn main() {
    let device = match VulkanDevice::open() {
        Ok(device) => device,
        Err(e) if is_no_device(&e) => {
            eprintln!("SKIPPED: no Vulkan device ({e}): the vulkan bench records nothing");
            return;
        }
        Err(e) => panic!("a Vulkan driver is present but unusable: {e}"),
    };
    let backend = VulkanBackend::new(&device).expect("backend");
    let queue = device.queue(0).expect("a queue");
    let mut c: Criterion = common::criterion();
    let mut results = Results::default();
    let mut group = c.benchmark_group("vulkan");
    group.throughput(Throughput::Elements(ZONES_PER_LIST));
    for variant in ["crate_zone_next", "bare_write_timestamp", "bare_reset_and_write"] {
        let ctx =
            TracingContext::builder(backend.clone()).capacity(1024, 64 * 1024).build().expect("context");
        let recording = Recording::new(&device, &queue);
        let since = SystemTime::now();
        group.bench_function(BenchmarkId::new(variant, 1), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for i in 0..iters {
                    if i % LISTS_PER_RESET == 0 {
                        recording.reset();
                    }
                    let started = Instant::now();
                    match variant {
                        "crate_zone_next" => record_list(&ctx, &recording.commands),
                        "bare_write_timestamp" => recording.bare(false),
                        _ => recording.bare(true),
                    }
                    timed += started.elapsed();
                }
                timed
            })
        });
        assert_eq!(ctx.stats().dropped_zones, 0, "the pool is large enough for every list");
        if let Some(per_iter) = criterion_estimate_ns("vulkan", variant, "1", since) {
            results.push(Record {
                group: "vulkan".to_owned(),
                implementation: variant.to_owned(),
                mode: format!(
                    "lists of 64 zones (66 events) into one command buffer, never submitted; {}",
                    device.name()
                ),
                threads: 1,
                ns_per_op: Some(per_iter / ZONES_PER_LIST as f64),
                zones_per_sec: Some(ZONES_PER_LIST as f64 * 1e9 / per_iter),
                ..Record::default()
            });
        }
    }
    group.finish();
    c.final_summary();
    if common::benchmarking() {
        results.write("vulkan");
    }
}
