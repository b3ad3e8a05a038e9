//! The Vulkan backend on a real Vulkan driver (Mesa's lavapipe in CI): compute shaders that
//! spin for a known time, timed through the pool, checked against what they must measure.
//!
//! Without a Vulkan driver every test prints `SKIPPED: no Vulkan device (...)` to stderr and
//! returns. `GPU_EVENT_POOL_REQUIRE_VULKAN=1` (set by `.ci/run`) makes that a failure.

use gpu_event_pool::backend::vulkan::ash::vk;
use gpu_event_pool::backend::vulkan::{
    Anchors, Commands, SpinShader, VulkanBackend, VulkanDevice, VulkanQueue,
};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::{ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::{
    location, Backend, DynamicLocation, ErrorKind, EventList, Lane, RecordError, TracingContext,
};
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

const US: i64 = 1_000;
const MS: i64 = 1_000_000;

/// A spin measured by a zone around it lasts at least 90% of the spin (the shader's clock rate
/// is measured, within a few percent on lavapipe) and at most 110% plus this much (the
/// dispatch's own start and end, about 50 us on lavapipe, which runs shaders on a CPU thread
/// that the 2-core machine may deschedule for milliseconds).
const SPIN_SLACK: i64 = 20 * MS;

/// How early submitted anchors may place zones on the host clock (`Anchors::Submitted`).
const SUBMITTED_ANCHOR_BIAS: i64 = MS;

type Ctx = TracingContext<VulkanBackend>;
type List = EventList<VulkanBackend>;

/// The device, or `None` (after saying so on stderr) when this machine has no Vulkan driver.
fn device(test: &str) -> Option<VulkanDevice> {
    match VulkanDevice::open() {
        Ok(device) => Some(device),
        Err(e) if e.kind() == Some(ErrorKind::NoDevice) => {
            assert!(
                std::env::var_os("GPU_EVENT_POOL_REQUIRE_VULKAN").is_none(),
                "GPU_EVENT_POOL_REQUIRE_VULKAN is set, but there is no Vulkan device: {e}"
            );
            // Straight to stderr, past the test harness's output capture: a skip must show.
            let _ = writeln!(std::io::stderr(), "SKIPPED: no Vulkan device ({e}): {test}");
            None
        }
        Err(e) => panic!("a Vulkan driver is present but unusable: {e}"),
    }
}

/// Command buffers of one thread (a command pool is externally synchronized), freed when
/// dropped, after the device has finished with them.
struct Recorder {
    device: VulkanDevice,
    pool: vk::CommandPool,
}

impl Recorder {
    fn new(device: &VulkanDevice) -> Self {
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(device.queue_family());
        // Safety: a valid create info for the device's family.
        let pool = unsafe { device.device().create_command_pool(&info, None) }.unwrap();
        Self { device: device.clone(), pool }
    }

    /// A new command buffer in the recording state, and the backend's stream for `queue`.
    fn begin(&self, queue: &VulkanQueue) -> Commands {
        let info = vk::CommandBufferAllocateInfo::default().command_pool(self.pool).command_buffer_count(1);
        let d = self.device.device();
        // Safety: our pool, used by this thread only.
        let cb = unsafe { d.allocate_command_buffers(&info) }.unwrap()[0];
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // Safety: a new command buffer; recorded by this thread, submitted once to `queue`.
        unsafe {
            d.begin_command_buffer(cb, &begin).unwrap();
            queue.commands(cb)
        }
    }

    /// Ends `commands` and submits it with `list` through `queue`.
    fn submit(&self, ctx: &Ctx, queue: &VulkanQueue, commands: Commands, list: List) {
        let cb = [commands.command_buffer()];
        // Safety: a command buffer of ours in the recording state; a valid submit info.
        unsafe {
            self.device.device().end_command_buffer(cb[0]).unwrap();
            let submit = [vk::SubmitInfo::default().command_buffers(&cb)];
            ctx.queue_submit(queue, &submit, vec![list], vk::Fence::null()).unwrap();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Safety: the tests own every queue of the device: waiting idle, then freeing the
        // pool (and its command buffers) is safe.
        unsafe {
            let _ = self.device.device().device_wait_idle();
            self.device.device().destroy_command_pool(self.pool, None);
        }
    }
}

fn context(backend: &VulkanBackend, initial: u32, max: u32) -> (Ctx, MemorySink) {
    let sink = MemorySink::new();
    let ctx =
        TracingContext::builder(backend.clone()).capacity(initial, max).sink(sink.clone()).build().unwrap();
    (ctx, sink)
}

fn duration(zone: &Zone) -> i64 {
    zone.gpu_end_ns - zone.gpu_begin_ns
}

/// A zone around `spin` measures it: at least what the device's own timestamps around the
/// spin measured (written inside the zone, so the zone holds them), at most that plus
/// `SPIN_SLACK`. The reference is the device's measure, not the spin's nominal length: on a
/// loaded 2-core machine lavapipe's spins run from about half to twice their nominal length.
fn assert_spun(gpu: &Gpu, zone: &Zone, spin: Spin) {
    let (d, measured) = (duration(zone), gpu.spun(spin));
    // Timestamps in whole nanoseconds: a zone's two times and the pair's may round apart by 1.
    let (low, high) = (measured - 2, measured + SPIN_SLACK);
    assert!(
        (low..=high).contains(&d),
        "zone {:?} measured {d} ns around a spin of {} ns that the device measured as {measured} ns \
         (allowed: {low} to {high})",
        zone.location.name(),
        spin.ns
    );
}

/// Nothing lost and no slot leaked, once everything was flushed.
fn assert_accounted(ctx: &Ctx, zones: usize) {
    let stats = ctx.stats();
    assert_eq!((stats.zones_emitted, stats.dropped_zones, stats.lists_failed), (zones, 0, 0), "{stats:?}");
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!((stats.owned, stats.submitted), (0, 0), "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.capacity, "every slot is back: {stats:?}");
    assert_eq!(stats.concurrent_lists, 0, "Vulkan lists are placed at submission: {stats:?}");
}

struct Gpu {
    device: VulkanDevice,
    backend: VulkanBackend,
    queue: VulkanQueue,
    spin: SpinShader,
    /// Timestamps the tests write around each spin ([`Gpu::spin`]): the device's own measure
    /// of the spin, which a zone around it is checked against.
    raw: vk::QueryPool,
    /// The next free pair of `raw`.
    raw_next: AtomicU32,
    /// lavapipe runs shaders on the CPU: one test at a time, so that spins measure the spin,
    /// not the other tests' load on the machine.
    _alone: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn gpu(test: &str) -> Option<Gpu> {
    let alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let device = device(test)?;
    let backend = VulkanBackend::new(&device).unwrap();
    let queue = device.queue(0).unwrap();
    let spin = SpinShader::load(&device, &queue).expect("lavapipe has shaderDeviceClock");
    let info =
        vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(RAW_QUERIES);
    // Safety: a valid create info; the pool is reset from the host before any use (the
    // device enables host query reset) and destroyed when the `Gpu` drops, the device idle.
    let raw = unsafe {
        let raw = device.device().create_query_pool(&info, None).unwrap();
        device.device().reset_query_pool(raw, 0, RAW_QUERIES);
        raw
    };
    Some(Gpu { device, backend, queue, spin, raw, raw_next: AtomicU32::new(0), _alone: alone })
}

/// Queries in a test's pool of spin timestamps: two a spin.
const RAW_QUERIES: u32 = 4096;

/// A spin recorded by [`Gpu::spin`]: its nominal length and its pair of timestamps.
#[derive(Clone, Copy, Debug)]
struct Spin {
    ns: i64,
    pair: u32,
}

impl Gpu {
    /// Records a spin of `ns` into `commands`, between two timestamps of the test's own.
    fn spin(&self, commands: &Commands, ns: i64) -> Spin {
        let pair = self.raw_next.fetch_add(2, Ordering::Relaxed);
        assert!(pair + 2 <= RAW_QUERIES, "more spins than the test's query pool holds");
        let (raw, cb) = (self.device.device(), commands.command_buffer());
        // Safety: the command buffer is recording (one thread at a time: the caller's); the
        // queries were reset and are written once; the shader lives until the end of the
        // test, after the device went idle.
        unsafe {
            raw.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, self.raw, pair);
            self.spin.record(commands, ns as u64).unwrap();
            raw.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.raw, pair + 1);
        }
        Spin { ns, pair }
    }

    /// How long the device measured `spin`, in ns (waits until its timestamps are written).
    fn spun(&self, spin: Spin) -> i64 {
        let mut ticks = [0u64; 2];
        let flags = vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT;
        // Safety: the pair was written by a submitted command buffer; `ticks` holds two.
        unsafe { self.device.device().get_query_pool_results(self.raw, spin.pair, &mut ticks, flags) }
            .unwrap();
        (ticks[1].wrapping_sub(ticks[0]) as f64 * f64::from(self.device.timestamp_period())).round() as i64
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Safety: the device is idle once waited for, so no command buffer uses the pool.
        unsafe {
            let _ = self.device.device().device_wait_idle();
            self.device.device().destroy_query_pool(self.raw, None);
        }
    }
}

#[test]
fn nested_zones_measure_their_spins() {
    let Some(gpu) = gpu("nested_zones_measure_their_spins") else { return };
    let (ctx, sink) = context(&gpu.backend, 64, 1024);
    let rec = Recorder::new(&gpu.device);
    let commands = rec.begin(&gpu.queue);
    let mut list = ctx.list();
    let mut spins = Vec::new();
    {
        let mut frame = list.zone(&commands, location!("frame"));
        for (name, ms) in [("1 ms", 1), ("3 ms", 3)] {
            let _dispatch = frame.zone(&commands, DynamicLocation::new(name));
            spins.push(gpu.spin(&commands, ms * MS));
        }
    }
    rec.submit(&ctx, &gpu.queue, commands, list);
    ctx.flush().unwrap();
    let zones = sink.zones();
    let names: Vec<_> = zones.iter().map(|z| (z.location.name().to_owned(), z.depth)).collect();
    assert_eq!(names, [("frame".into(), 0), ("1 ms".into(), 1), ("3 ms".into(), 1)]);
    assert_spun(&gpu, &zones[1], spins[0]);
    assert_spun(&gpu, &zones[2], spins[1]);
    assert!(zones[0].gpu_begin_ns <= zones[1].gpu_begin_ns && zones[2].gpu_end_ns <= zones[0].gpu_end_ns);
    assert!(
        zones.iter().all(|z| z.lane == Lane::Stream(gpu.queue.lane_key())),
        "zones are on the queue's lane"
    );
    assert_accounted(&ctx, 3);
}

#[test]
fn zone_next_joins_adjacent_zones_with_one_event_each() {
    let Some(gpu) = gpu("zone_next_joins_adjacent_zones_with_one_event_each") else { return };
    let (ctx, sink) = context(&gpu.backend, 64, 1024);
    let rec = Recorder::new(&gpu.device);
    let commands = rec.begin(&gpu.queue);
    let mut list = ctx.list();
    list.zone_begin(&commands, location!("pass 0")).unwrap();
    let first = gpu.spin(&commands, 500 * US);
    list.zone_next(&commands, location!("pass 1")).unwrap();
    let second = gpu.spin(&commands, MS);
    list.zone_next(&commands, location!("pass 2")).unwrap();
    let third = gpu.spin(&commands, 2 * MS);
    list.zone_end(&commands).unwrap();
    assert_eq!(list.event_count(), 4, "3 adjacent zones take 4 events");
    rec.submit(&ctx, &gpu.queue, commands, list);
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(zones.len(), 3);
    for (zone, spin) in zones.iter().zip([first, second, third]) {
        assert_spun(&gpu, zone, spin);
    }
    assert!(zones.windows(2).all(|w| w[0].gpu_end_ns == w[1].gpu_begin_ns), "adjacent zones touch exactly");
    assert_eq!(ctx.stats().events_submitted, 4);
    assert_accounted(&ctx, 3);
}

#[test]
fn lists_recorded_out_of_order_are_emitted_in_submission_order() {
    let Some(gpu) = gpu("lists_recorded_out_of_order_are_emitted_in_submission_order") else { return };
    let (ctx, sink) = context(&gpu.backend, 64, 1024);
    let rec = Recorder::new(&gpu.device);
    let (first_recorded, second_recorded) = (rec.begin(&gpu.queue), rec.begin(&gpu.queue));
    let (mut a, mut b) = (ctx.list(), ctx.list());
    a.zone_begin(&first_recorded, location!("recorded first, submitted second")).unwrap();
    b.zone_begin(&second_recorded, location!("recorded second, submitted first")).unwrap();
    gpu.spin(&first_recorded, MS);
    gpu.spin(&second_recorded, MS);
    a.zone_end(&first_recorded).unwrap();
    b.zone_end(&second_recorded).unwrap();
    let (a_id, b_id) = (a.id(), b.id());
    rec.submit(&ctx, &gpu.queue, second_recorded, b);
    rec.submit(&ctx, &gpu.queue, first_recorded, a);
    ctx.flush().unwrap();
    let batches = sink.batches();
    let order: Vec<u64> = batches.iter().map(|(id, _)| *id).collect();
    assert_eq!(order, [b_id, a_id], "emitted in the queue's order, not the recording order");
    let (b_zone, a_zone) = (&batches[0].1[0], &batches[1].1[0]);
    assert!(b_zone.gpu_end_ns <= a_zone.gpu_begin_ns, "and that is the GPU's order: {b_zone:?} {a_zone:?}");
    assert_accounted(&ctx, 2);
}

/// `threads` threads each record `lists` lists of two zones and submit them to one of
/// `queues` (thread `t` to queue `t % queues`). Per lane, zones must come in GPU order.
fn threads_submitting(test: &str, threads: usize, queues: &[VulkanQueue], gpu: &Gpu) {
    const LISTS: usize = 6;
    let (ctx, sink) = context(&gpu.backend, 16, 4096);
    // One command pool per thread, dropped (its drop waits for the device to be idle) only
    // after every thread has stopped submitting: vkDeviceWaitIdle must not run beside
    // another thread's vkQueueSubmit (host access to every queue is externally
    // synchronized). A thread that dropped its pool while others submitted lost their
    // timestamp writes on the NVIDIA driver (queries never available, times out of order).
    let recorders: Vec<Recorder> = (0..threads).map(|_| Recorder::new(&gpu.device)).collect();
    let spins: Vec<Spin> = std::thread::scope(|s| {
        let threads: Vec<_> = recorders
            .iter()
            .enumerate()
            .map(|(t, rec)| {
                let (ctx, queue) = (&ctx, &queues[t % queues.len()]);
                s.spawn(move || {
                    let mut spins = Vec::new();
                    for i in 0..LISTS {
                        let commands = rec.begin(queue);
                        let mut list = ctx.list();
                        {
                            let mut outer = list.zone(&commands, location!("list"));
                            let _inner = outer.zone(&commands, location!("spin"));
                            spins.push(gpu.spin(&commands, 100 * US));
                        }
                        rec.submit(ctx, queue, commands, list);
                        if i % 2 == 0 {
                            let _ = ctx.collect();
                        }
                    }
                    spins
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(zones.len(), threads * LISTS * 2, "{test}");
    for queue in queues {
        let lane = Lane::Stream(queue.lane_key());
        let outers: Vec<&Zone> = zones.iter().filter(|z| z.lane == lane && z.depth == 0).collect();
        assert!(!outers.is_empty(), "{test}: every lane has lists");
        // lavapipe runs a queue's command buffers one after the other: in GPU order, each
        // list ends before the next begins. Lanes that share a queue interleave there.
        if queues.iter().all(|q| q.raw() != queue.raw() || q.lane_key() == queue.lane_key()) {
            assert!(outers.windows(2).all(|w| w[0].gpu_end_ns <= w[1].gpu_begin_ns), "{test}: in GPU order");
        } else {
            assert!(
                outers.windows(2).all(|w| w[0].gpu_begin_ns <= w[1].gpu_begin_ns),
                "{test}: in GPU order"
            );
        }
    }
    // Four recording threads share two cores with lavapipe's queue thread here: a spin's
    // zone holds the spin, however long the device measured it (the single-thread tests check
    // each zone against its own spin; here, against the shortest spin).
    let shortest = spins.iter().map(|&spin| gpu.spun(spin)).min().unwrap();
    for zone in zones.iter().filter(|z| z.depth == 1) {
        assert!(duration(zone) >= shortest - 2, "{test}: the shortest spin took {shortest} ns: {zone:?}");
    }
    assert_accounted(&ctx, threads * LISTS * 2);
}

/// A sink that keeps the lane names it is given.
struct LaneNames(std::sync::Arc<std::sync::Mutex<Vec<(Lane, String)>>>);

impl Sink for LaneNames {
    fn name_lane(&mut self, _: &ContextInfo, lane: Lane, name: &str) -> std::io::Result<()> {
        self.0.lock().unwrap().push((lane, name.to_owned()));
        Ok(())
    }
    fn zones(&mut self, _: &ContextInfo, _: ZoneBatch<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn name_queue_names_each_lane_of_a_queue_in_the_sinks() {
    let Some(gpu) = gpu("name_queue_names_each_lane_of_a_queue_in_the_sinks") else { return };
    let names = std::sync::Arc::default();
    let sink = LaneNames(std::sync::Arc::clone(&names));
    let ctx = TracingContext::builder(gpu.backend.clone()).sink(sink).build().unwrap();
    let second = gpu.queue.new_lane();
    ctx.name_queue(&gpu.queue, "queue 0");
    ctx.name_queue(&second, "queue 0, second lane");
    ctx.flush().unwrap();
    assert_eq!(
        *names.lock().unwrap(),
        [
            (Lane::Stream(gpu.queue.lane_key()), "queue 0".to_owned()),
            (Lane::Stream(second.lane_key()), "queue 0, second lane".to_owned())
        ]
    );
}

#[test]
fn threads_submitting_to_one_queue_are_emitted_in_its_order() {
    let Some(gpu) = gpu("threads_submitting_to_one_queue_are_emitted_in_its_order") else { return };
    threads_submitting("one queue", 4, std::slice::from_ref(&gpu.queue), &gpu);
}

#[test]
fn threads_submitting_to_two_queues_keep_each_queues_order() {
    let Some(gpu) = gpu("threads_submitting_to_two_queues_keep_each_queues_order") else { return };
    // lavapipe has one queue: two lanes of it, ordered apart (a device with two queues gets
    // two real ones).
    let second = gpu.device.queue(1).unwrap_or_else(|| gpu.queue.new_lane());
    let _ = writeln!(
        std::io::stderr(),
        "two queues: {} ({} queue(s) in the family)",
        if second.raw() == gpu.queue.raw() { "two lanes of one queue" } else { "two queues" },
        gpu.device.queue_count()
    );
    threads_submitting("two queues", 4, &[gpu.queue.clone(), second], &gpu);
}

#[test]
fn an_exhausted_pool_drops_zones_and_recovers_once_collected() {
    let Some(gpu) = gpu("an_exhausted_pool_drops_zones_and_recovers_once_collected") else { return };
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(gpu.backend.clone())
        .capacity(4, 4)
        .batch(1)
        .sink(sink.clone())
        .build()
        .unwrap();
    let rec = Recorder::new(&gpu.device);
    let commands = rec.begin(&gpu.queue);
    let mut list = ctx.list();
    let mut exhausted = 0;
    for _ in 0..6 {
        match list.zone_begin(&commands, location!("zone")) {
            Ok(()) => {}
            Err(RecordError::PoolExhausted { capacity: 4 }) => exhausted += 1,
            Err(e) => panic!("unexpected {e}"),
        }
        gpu.spin(&commands, 10 * US);
        let _ = list.zone_end(&commands);
    }
    assert_eq!(list.event_count(), 4, "every slot used");
    assert_eq!(exhausted, 4, "zones 3 to 6 could not begin");
    rec.submit(&ctx, &gpu.queue, commands, list);
    ctx.flush().unwrap();
    assert_eq!(sink.zones().len(), 2);
    let stats = ctx.stats();
    assert_eq!(stats.dropped_zones, 4, "{stats:?}");

    let commands = rec.begin(&gpu.queue);
    let mut list = ctx.list();
    list.zone_begin(&commands, location!("after")).unwrap();
    let spin = gpu.spin(&commands, 200 * US);
    list.zone_end(&commands).unwrap();
    rec.submit(&ctx, &gpu.queue, commands, list);
    ctx.flush().unwrap();
    assert_spun(&gpu, &sink.zones()[2], spin);
    let stats = ctx.stats();
    assert_eq!((stats.zones_emitted, stats.unaccounted(), stats.capacity), (3, 0, 4), "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), 4);
}

#[test]
fn a_query_is_reset_when_retired_and_read_anew_after_reuse() {
    let Some(gpu) = gpu("a_query_is_reset_when_retired_and_read_anew_after_reuse") else { return };
    let backend = &gpu.backend;
    let rec = Recorder::new(&gpu.device);
    let (start, end) = (backend.create_event().unwrap(), backend.create_event().unwrap());
    for round in 0..3 {
        let commands = rec.begin(&gpu.queue);
        backend.record(&start, &commands).unwrap();
        let spin = gpu.spin(&commands, MS);
        backend.record(&end, &commands).unwrap();
        assert!(
            !backend.is_complete(&end).unwrap(),
            "round {round}: the query was not reset since its last use"
        );
        let cb = [commands.command_buffer()];
        // Safety: our command buffer, recorded above; the queue's lock is held.
        unsafe {
            gpu.device.device().end_command_buffer(cb[0]).unwrap();
            let _queue = gpu.queue.lock();
            let submit = [vk::SubmitInfo::default().command_buffers(&cb)];
            gpu.device.device().queue_submit(gpu.queue.raw(), &submit, vk::Fence::null()).unwrap();
        }
        backend.wait(&end).unwrap();
        let elapsed = backend.elapsed(&start, &end).unwrap().expect("both available");
        assert!(elapsed.exact, "Vulkan reads exact nanoseconds");
        let measured = gpu.spun(spin);
        assert!(
            elapsed.ns >= measured - 2 && elapsed.ns <= measured + SPIN_SLACK,
            "round {round}: {elapsed:?} around a spin the device measured as {measured} ns"
        );
        let anchor = backend.create_event().unwrap();
        backend.record_anchor(&anchor, &backend.create_stream().unwrap()).unwrap();
        backend.wait(&anchor).unwrap();
        let after = backend.elapsed(&end, &anchor).unwrap().unwrap();
        assert!(after.ns >= 0, "round {round}: the query holds this round's time, not an old one: {after:?}");
        // What the collector does when a slot goes back to the pool.
        const { assert!(<VulkanBackend as Backend>::RETIRES) };
        backend.retire(&start);
        backend.retire(&end);
        assert!(!backend.is_complete(&end).unwrap(), "round {round}: retiring reset the query");
    }
}

/// A list recorded and dropped unsubmitted gives its slots back: the lists after it, on the
/// same two queries, measure their own spins, and nothing is read from the dropped one.
#[test]
fn queries_of_a_list_dropped_unsubmitted_serve_the_next_list() {
    let Some(gpu) = gpu("queries_of_a_list_dropped_unsubmitted_serve_the_next_list") else { return };
    let backend = &gpu.backend;
    let (ctx, sink) = context(backend, 2, 2);
    let rec = Recorder::new(&gpu.device);
    for round in 0..3 {
        // Recorded into a command buffer that is reset, never submitted, and dropped.
        let dropped = rec.begin(&gpu.queue);
        let mut list = ctx.list();
        list.zone_begin(&dropped, location!("dropped")).unwrap();
        list.zone_end(&dropped).unwrap();
        drop(list);
        let commands = rec.begin(&gpu.queue);
        let mut list = ctx.list();
        list.zone_begin(&commands, location!("kept")).unwrap();
        let spin = gpu.spin(&commands, MS);
        list.zone_end(&commands).unwrap();
        rec.submit(&ctx, &gpu.queue, commands, list);
        ctx.flush().unwrap();
        let zones = sink.zones();
        assert_eq!(zones.len(), round + 1, "{zones:?}");
        assert_eq!(zones[round].location.name(), "kept");
        assert_spun(&gpu, &zones[round], spin);
    }
    assert_eq!(ctx.stats().capacity, 2, "the two slots were reused");
}

/// Lists submitted over `rounds` rounds, collected as they go; returns the zones and the host
/// time (backend clock) before each submission and after each flush.
fn host_mapping(backend: &VulkanBackend, gpu: &Gpu, rounds: usize) -> Vec<(Zone, i64, i64)> {
    let (ctx, sink) = context(backend, 64, 1024);
    let rec = Recorder::new(&gpu.device);
    let mut out = Vec::new();
    for round in 0..rounds {
        let commands = rec.begin(&gpu.queue);
        let mut list = ctx.list();
        list.zone_begin(&commands, location!("mapped")).unwrap();
        gpu.spin(&commands, 300 * US);
        list.zone_end(&commands).unwrap();
        let before = backend.host_now_ns();
        rec.submit(&ctx, &gpu.queue, commands, list);
        ctx.flush().unwrap();
        let after = backend.host_now_ns();
        let zone = sink.zones().pop().unwrap();
        out.push((zone, before, after));
        if round % 3 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(6)); // a new anchor comes
        }
    }
    assert_accounted(&ctx, rounds);
    out
}

/// `early`: how far before its submission a zone may be placed on the host clock (the bias of
/// the anchors).
fn assert_host_mapping(mapped: &[(Zone, i64, i64)], anchors: &str, early: i64) {
    for (zone, before, after) in mapped {
        assert!(
            *before - early <= zone.host_begin_ns && zone.host_end_ns <= *after,
            "{anchors}: the zone ran between its submission and the flush that collected it: \
             {before} <= {} .. {} <= {after}",
            zone.host_begin_ns,
            zone.host_end_ns
        );
        // The host mapping slews toward a new estimate by at most 5% (docs/design.md).
        let (host, gpu) = (zone.host_end_ns - zone.host_begin_ns, duration(zone));
        assert!(
            (host - gpu).abs() <= gpu / 20 + 1,
            "{anchors}: durations kept within the slew: {host} vs {gpu}"
        );
    }
    let host: Vec<i64> = mapped.iter().flat_map(|(z, _, _)| [z.host_begin_ns, z.host_end_ns]).collect();
    assert!(host.windows(2).all(|w| w[0] <= w[1]), "{anchors}: host times never decrease: {host:?}");
}

#[test]
fn calibrated_host_times_are_non_decreasing_and_within_submission_and_flush() {
    let Some(gpu) = gpu("calibrated_host_times_are_non_decreasing_and_within_submission_and_flush") else {
        return;
    };
    assert_eq!(gpu.backend.anchors(), Anchors::Calibrated, "lavapipe has VK_EXT_calibrated_timestamps");
    let mut pairs = Vec::new();
    for _ in 0..100 {
        pairs.push(gpu.backend.calibrated_now().unwrap().unwrap());
    }
    assert!(pairs.windows(2).all(|w| w[0].device_ns <= w[1].device_ns && w[0].host_ns <= w[1].host_ns));
    let before = gpu.backend.host_now_ns();
    let pair = gpu.backend.calibrated_now().unwrap().unwrap();
    let after = gpu.backend.host_now_ns();
    assert!(before <= pair.host_ns + 1_000 && pair.host_ns <= after + 1_000, "on the backend's host clock");
    let origin_error = gpu.backend.clock_origin_error_ns().expect("calibrated: the origin was placed");
    eprintln!("host clock origin placed within {origin_error} ns");
    assert!(
        origin_error <= 5_000,
        "the narrowest of 16 brackets is a few microseconds at most: {origin_error} ns"
    );
    assert_host_mapping(&host_mapping(&gpu.backend, &gpu, 12), "calibrated", 0);
}

#[test]
fn submitted_anchors_are_the_fallback_without_calibrated_timestamps() {
    let Some(gpu) = gpu("submitted_anchors_are_the_fallback_without_calibrated_timestamps") else { return };
    let backend = VulkanBackend::with_anchors(&gpu.device, Anchors::Submitted).unwrap();
    assert_eq!(backend.calibrated_now().unwrap().is_some(), gpu.device.has_calibrated_timestamps());
    // A submitted anchor's host time is read before its submission: host times are early by
    // the latency from that read to the GPU's write (tens of microseconds on lavapipe).
    let mapped = host_mapping(&backend, &gpu, 12);
    let early = mapped.iter().map(|(z, before, _)| before - z.host_begin_ns).max().unwrap();
    let _ = writeln!(
        std::io::stderr(),
        "submitted anchors: zones placed up to {early} ns before their submission"
    );
    assert_host_mapping(&mapped, "submitted", SUBMITTED_ANCHOR_BIAS);
}

#[test]
fn the_committed_spirv_is_what_its_source_builds() {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/src/backend/vulkan/spin.comp");
    let out = std::env::temp_dir().join(format!("gpu-event-pool-spin-{}.spv", std::process::id()));
    let built = std::process::Command::new("glslangValidator")
        .args(["-V", "--target-env", "vulkan1.2", "-o"])
        .arg(&out)
        .arg(source)
        .output();
    match built {
        Ok(o) if o.status.success() => {
            let bytes = std::fs::read(&out).unwrap();
            let _ = std::fs::remove_file(&out);
            assert!(
                bytes == SpinShader::SPIRV,
                "spin.spv is stale: rebuild it with the command in spin.comp"
            );
        }
        Ok(o) => panic!("glslangValidator failed: {}", String::from_utf8_lossy(&o.stdout)),
        Err(e) => {
            // A tool check, not a driver one: CI installs the tool and requires it; the GPU
            // machine has a driver and no glslang.
            assert!(
                std::env::var_os("GPU_EVENT_POOL_REQUIRE_GLSLANG").is_none(),
                "GPU_EVENT_POOL_REQUIRE_GLSLANG is set, but glslangValidator cannot run: {e}"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: no glslangValidator ({e}): the_committed_spirv_is_what_its_source_builds"
            );
        }
    }
}

#[test]
fn a_device_is_found_or_the_skip_is_visible() {
    let started = Instant::now();
    if let Some(device) = device("a_device_is_found_or_the_skip_is_visible") {
        assert!(device.timestamp_valid_bits() > 0 && device.timestamp_period() > 0.0, "{device:?}");
        assert!(started.elapsed().as_secs() < 30);
    }
}
