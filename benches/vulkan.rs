//! `vulkan` (feature `vulkan`): what recording a zone costs on a real Vulkan driver
//! (lavapipe here), against bare timestamp writes into the same command buffer, in one run.
//!
//! One iteration records one list: a coarse zone around 63 adjacent dispatch zones (as in
//! `record` and `nvtx`), 66 events for 64 zones, into a command buffer that is never
//! submitted (the list is dropped, its slots go back). Three variants, one thread:
//!
//! - `crate_zone_next`: the crate (`zone_begin`, `zone_next`, `zone_end`): per event a slot
//!   from the list's reservation and `vkCmdWriteTimestamp` (its query was reset when its last
//!   list was collected, in the collector: a dropped list's queries were never written);
//! - `bare_write_timestamp`: 66 `vkCmdWriteTimestamp` and nothing else (the floor);
//! - `bare_reset_and_write`: 66 host `vkResetQueryPool` + `vkCmdWriteTimestamp` pairs (what
//!   the backend called on the recording path until the reset moved to the collector).
//!
//! The command buffer is reset every 64 lists, outside the timed part. Each record gives
//! nanoseconds per zone. Without a Vulkan driver the bench says `SKIPPED` and records nothing.
//!
//! A second group, `vulkan_interleaved`, times the same three variants in rounds of 50 lists,
//! taking turns within one process (`INTERLEAVED_ROUNDS` rounds each), and reports each
//! variant's minimum, 25th percentile and median round, and the crate's ratio to the bare
//! writes at the minimum and the 25th percentile: on a shared machine, where criterion's
//! variants run seconds apart under different loads, the ratio of rounds taken side by side
//! is the steadier figure (issue 27's goal is `crate_zone_next` at most 1.3x
//! `bare_write_timestamp`).

mod common;

use common::criterion_estimate_ns;
use common::results::{Record, Results};
use criterion::{BenchmarkId, Criterion, Throughput};
use gpu_event_pool::backend::vulkan::ash::vk;
use gpu_event_pool::backend::vulkan::{Commands, VulkanBackend, VulkanDevice, VulkanQueue};
use gpu_event_pool::{location, ErrorKind, SourceLocation, TracingContext, Verbosity};
use std::time::{Duration, Instant, SystemTime};

const ZONES_PER_LIST: u64 = 64;
const EVENTS_PER_LIST: u32 = 66;
const LISTS_PER_RESET: u64 = 64;
/// Rounds per variant of `vulkan_interleaved` (a tenth without `--bench`), and lists per
/// round.
const INTERLEAVED_ROUNDS: usize = 300;
const LISTS_PER_ROUND: u64 = 50;
const VARIANTS: [&str; 3] = ["crate_zone_next", "bare_write_timestamp", "bare_reset_and_write"];

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

    /// Records one list of `variant` into the command buffer, resetting it every
    /// `LISTS_PER_RESET` lists (the `n`th list here) before the clock starts.
    fn list(&self, ctx: &TracingContext<VulkanBackend>, variant: &str, n: u64) -> Duration {
        if n.is_multiple_of(LISTS_PER_RESET) {
            self.reset();
        }
        let started = Instant::now();
        match variant {
            "crate_zone_next" => record_list(ctx, &self.commands),
            "bare_write_timestamp" => self.bare(false),
            _ => self.bare(true),
        }
        started.elapsed()
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
        Err(e) if e.kind() == Some(ErrorKind::NoDevice) => {
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
    for variant in VARIANTS {
        let ctx =
            TracingContext::builder(backend.clone()).capacity(1024, 64 * 1024).build().expect("context");
        let recording = Recording::new(&device, &queue);
        let since = SystemTime::now();
        group.bench_function(BenchmarkId::new(variant, 1), |b| {
            b.iter_custom(|iters| (0..iters).map(|i| recording.list(&ctx, variant, i)).sum())
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
    interleaved(&backend, &device, &queue, &mut results);
    c.final_summary();
    if common::benchmarking() {
        results.write("vulkan");
    }
}

/// `vulkan_interleaved`: the three variants in rounds of `LISTS_PER_ROUND` lists, taking
/// turns, one command buffer each; each variant's minimum, 25th percentile and median round
/// in nanoseconds per zone, and the crate's ratios to the bare writes.
fn interleaved(backend: &VulkanBackend, device: &VulkanDevice, queue: &VulkanQueue, results: &mut Results) {
    let rounds = if common::benchmarking() { INTERLEAVED_ROUNDS } else { INTERLEAVED_ROUNDS / 10 };
    let ctx = TracingContext::builder(backend.clone()).capacity(1024, 64 * 1024).build().expect("context");
    let recordings: Vec<Recording> = VARIANTS.iter().map(|_| Recording::new(device, queue)).collect();
    let mut rounds_ns: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds + 2 {
        for (v, variant) in VARIANTS.iter().enumerate() {
            let first = round as u64 * LISTS_PER_ROUND;
            let timed: Duration =
                (first..first + LISTS_PER_ROUND).map(|n| recordings[v].list(&ctx, variant, n)).sum();
            // The first two rounds warm the caches, the pool and the command buffers up.
            if round >= 2 {
                rounds_ns[v].push(timed.as_nanos() as f64 / (LISTS_PER_ROUND * ZONES_PER_LIST) as f64);
            }
        }
    }
    assert_eq!(ctx.stats().dropped_zones, 0, "the pool is large enough for every list");
    let quantile = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q) as usize]
    };
    let [min, p25, median]: [[f64; 3]; 3] =
        [0.0, 0.25, 0.5].map(|q| std::array::from_fn(|v| quantile(&mut rounds_ns[v], q)));
    for (v, variant) in VARIANTS.iter().enumerate() {
        println!(
            "vulkan_interleaved/{variant:<21} min {:>6.1} ns/zone  p25 {:>6.1}  median {:>6.1}  ({rounds} rounds of {LISTS_PER_ROUND} lists)",
            min[v], p25[v], median[v]
        );
        results.push(Record {
            group: "vulkan_interleaved".to_owned(),
            implementation: (*variant).to_owned(),
            mode: format!("rounds of {LISTS_PER_ROUND} lists, variants taking turns; {}", device.name()),
            threads: 1,
            ns_per_op: Some(p25[v]),
            p50_ns: Some(median[v]),
            samples: Some(rounds as u64),
            note: format!("min {:.1}, p25 {:.1}, median {:.1} ns per zone", min[v], p25[v], median[v]),
            ..Record::default()
        });
    }
    println!(
        "vulkan_interleaved/crate_to_bare        {:.2}x at the minimum, {:.2}x at the 25th percentile",
        min[0] / min[1],
        p25[0] / p25[1]
    );
}
