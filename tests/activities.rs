//! A context timed by activity records, end to end on the simulated GPU (`SimActivities`):
//! what CUPTI does to records (none for a launch, held back, dropped, ids that wrap), zones
//! ended out of order or left open, and nothing waits past the hold limit.

use gpu_event_pool::sim::{SimActivities, SimBackend, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::testing::SimActivityFaults;
use gpu_event_pool::{location, DynamicLocation, Error, TracingContext};
use std::time::Duration;

const US: i64 = 1_000;
const HOLD: Duration = Duration::from_millis(50);

fn context(gpu: &SimActivities) -> (TracingContext<SimActivities>, MemorySink) {
    let memory = MemorySink::new();
    let ctx = TracingContext::builder(gpu.clone()).hold_limit(HOLD).sink(memory.clone()).build().unwrap();
    (ctx, memory)
}

/// (name, depth) of each zone, in the order the sinks got them.
fn shape(memory: &MemorySink) -> Vec<(String, u32)> {
    memory.zones().iter().map(|z| (z.location.name().to_owned(), z.depth)).collect()
}

fn owned(shape: &[(&str, u32)]) -> Vec<(String, u32)> {
    shape.iter().map(|&(n, d)| (n.to_owned(), d)).collect()
}

#[test]
fn a_launch_that_makes_no_record_holds_its_list_only_until_the_hold_limit() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    for _ in 0..100 {
        let mut list = ctx.list();
        {
            let _zone = list.zone(&stream, location!("with a host function"));
            gpu.launch(&stream, 10 * US);
            gpu.launch_without_record();
        }
        ctx.submit(list).unwrap();
    }
    gpu.sim().advance(10_000 * US);
    ctx.collect().unwrap();
    assert!(memory.zones().is_empty(), "every list waits for its launch's record");
    gpu.sim().advance(HOLD.as_nanos() as i64);
    ctx.collect().unwrap();
    let stats = ctx.stats();
    assert_eq!(stats.activity.lists_partial, 100, "{stats:?}");
    assert_eq!(memory.batches().len(), 100, "every list comes out at the hold limit, with its kernel");
    assert_eq!(stats.activity.activities, 100);
}

#[test]
fn a_flush_waits_for_records_within_the_hold_limit_and_counts_what_never_came() {
    let gpu = SimActivities::new(SimBackend::realtime());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    let mut list = ctx.list();
    {
        let _zone = list.zone(&stream, location!("zone"));
        gpu.launch(&stream, 2_000 * US);
        gpu.drop_records(1);
        gpu.launch(&stream, 10 * US);
    }
    ctx.submit(list).unwrap();
    // The first kernel's record comes after 2 ms: the flush waits for it; the second's never.
    ctx.flush().unwrap();
    assert_eq!(shape(&memory), owned(&[("zone", 0), ("kernel", 1)]));
    let stats = ctx.stats();
    assert_eq!((stats.activity.lists_partial, stats.activity.losses.records_dropped), (1, 1), "{stats:?}");
}

/// Two lists interleaved on one thread: the first's zone ends while the second's is open. The
/// thread's open zones are a stack popped by zone: launches after go to the second's.
#[test]
fn a_zone_ended_out_of_order_leaves_the_thread_on_the_innermost_zone_still_open() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let (a, b) = (gpu.sim().stream(), gpu.sim().stream());
    let mut first = ctx.list();
    let mut second = ctx.list();
    first.zone_begin(&a, location!("first")).unwrap();
    second.zone_begin(&b, location!("second")).unwrap();
    gpu.launch_named(&b, "in second", 10 * US);
    first.zone_end(&a).unwrap();
    gpu.launch_named(&b, "still in second", 10 * US);
    second.zone_end(&b).unwrap();
    gpu.launch_named(&b, "in no zone", 10 * US);
    ctx.submit(first).unwrap();
    ctx.submit(second).unwrap();
    gpu.sim().advance(1_000 * US);
    ctx.flush().unwrap();
    assert_eq!(
        shape(&memory),
        owned(&[("second", 0), ("in second", 1), ("still in second", 1), ("in no zone", 0)])
    );
    assert_eq!(ctx.stats().activity.empty_zones, 1, "the first zone launched nothing");
}

/// A guard forgotten leaves its zone open: the list can never be submitted, and is dropped.
/// Its zone leaves the thread's stack with it, so later launches are not tied to it, and the
/// work it did launch goes out alone, at once.
#[test]
fn a_forgotten_guard_and_its_dropped_list_hold_nothing_up() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    let mut lost = ctx.list();
    std::mem::forget(lost.zone(&stream, location!("forgotten")));
    gpu.launch_named(&stream, "in the forgotten zone", 10 * US);
    let refused = ctx.submit(lost).unwrap_err();
    drop(refused.into_list());
    let mut list = ctx.list();
    {
        let _zone = list.zone(&stream, location!("next"));
        gpu.launch_named(&stream, "in next", 10 * US);
    }
    ctx.submit(list).unwrap();
    gpu.launch_named(&stream, "after", 10 * US);
    gpu.sim().advance(1_000 * US);
    ctx.collect().unwrap();
    assert_eq!(
        shape(&memory),
        owned(&[("in the forgotten zone", 0), ("next", 0), ("in next", 1), ("after", 0)]),
        "nothing waits for the hold limit"
    );
    let stats = ctx.stats();
    assert_eq!((stats.lists_discarded, stats.lanes_released, stats.unaccounted()), (1, 0, 0), "{stats:?}");
}

/// A zone held open for the whole run: its list is never submitted. Its work goes out alone
/// after the hold limit (reported), and the lists after it on its stream follow.
#[test]
fn work_of_a_list_still_being_recorded_waits_only_until_the_hold_limit() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    let worker = {
        let (ctx, gpu, stream) = (ctx.clone(), gpu.clone(), stream.clone());
        std::thread::spawn(move || {
            let mut open = ctx.list();
            open.zone_begin(&stream, location!("held open")).unwrap();
            gpu.launch_named(&stream, "early", 10 * US);
            open
        })
    };
    let open = worker.join().unwrap();
    let mut list = ctx.list();
    {
        let _zone = list.zone(&stream, location!("later"));
        gpu.launch_named(&stream, "in later", 10 * US);
    }
    ctx.submit(list).unwrap();
    gpu.sim().advance(1_000 * US);
    ctx.collect().unwrap();
    assert!(memory.zones().is_empty(), "the early work's list may still come");
    gpu.sim().advance(HOLD.as_nanos() as i64);
    let error = ctx.collect().unwrap_err();
    assert!(matches!(error.error, Error::LaneHeld { .. }), "{error}");
    assert_eq!(shape(&memory), owned(&[("early", 0), ("later", 0), ("in later", 1)]));
    assert_eq!(ctx.stats().lanes_released, 1);
    drop(open);
}

#[test]
fn correlation_ids_that_wrap_keep_every_kernel_in_its_zone() {
    let gpu = SimActivities::new(SimBackend::manual());
    gpu.next_correlation(u32::MAX - 3);
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    for pass in ["before", "across", "after"] {
        let mut list = ctx.list();
        {
            let _zone = list.zone(&stream, DynamicLocation::new(pass));
            gpu.launch(&stream, 10 * US);
            gpu.launch(&stream, 10 * US);
        }
        ctx.submit(list).unwrap();
    }
    gpu.sim().advance(1_000 * US);
    ctx.flush().unwrap();
    let mut expected = Vec::new();
    for pass in ["before", "across", "after"] {
        expected.extend([(pass, 0), ("kernel", 1), ("kernel", 1)]);
    }
    assert_eq!(shape(&memory), owned(&expected));
}

#[test]
fn records_held_back_still_come_out_in_stream_order() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream: SimStream = gpu.sim().stream();
    gpu.hold_back_records(1);
    for name in ["one", "two", "three"] {
        let mut list = ctx.list();
        {
            let _zone = list.zone(&stream, DynamicLocation::new(name));
            gpu.launch(&stream, 10 * US);
        }
        ctx.submit(list).unwrap();
    }
    gpu.sim().advance(1_000 * US);
    ctx.collect().unwrap();
    assert!(memory.zones().is_empty(), "the first list's record is held back: the stream waits");
    ctx.collect().unwrap();
    let names: Vec<String> =
        memory.zones().iter().filter(|z| z.depth == 0).map(|z| z.location.name().into()).collect();
    assert_eq!(names, ["one", "two", "three"]);
    assert_eq!(ctx.stats().activity.late, 0);
}

#[test]
fn a_failed_launch_is_untied() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    let mut list = ctx.list();
    {
        let _zone = list.zone(&stream, location!("zone"));
        gpu.fail_launch();
        gpu.launch(&stream, 10 * US);
    }
    ctx.submit(list).unwrap();
    gpu.sim().advance(1_000 * US);
    ctx.collect().unwrap();
    assert_eq!(shape(&memory), owned(&[("zone", 0), ("kernel", 1)]));
    assert_eq!(ctx.stats().activity.lists_partial, 0);
}

#[test]
fn graph_zones_are_refused_with_a_typed_error_and_stay_balanced() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, _memory) = context(&gpu);
    let graph = gpu.sim().graph();
    let mut list = ctx.list();
    let error = list.graph_zone_begin(&graph, &[], location!("node")).unwrap_err();
    assert!(
        matches!(
            error,
            gpu_event_pool::RecordError::Unsupported { call: "graph_zone_begin", backend: "sim-activities" }
        ),
        "{error}"
    );
    assert_eq!(list.open_zones(), 1);
    let _ = list.graph_zone_end(&graph, &[]);
    assert_eq!(list.open_zones(), 0);
    ctx.submit(list).unwrap();
    assert_eq!(ctx.stats().dropped_zones, 1);
}

#[test]
fn frames_and_dropped_lists_count_as_on_every_source() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    for frame in 0..3 {
        ctx.frame(frame);
        let mut list = ctx.list();
        {
            let _zone = list.zone(&stream, location!("step"));
            gpu.launch(&stream, 10 * US);
        }
        ctx.submit(list).unwrap();
    }
    gpu.sim().advance(1_000 * US);
    ctx.flush().unwrap();
    let frames: Vec<Option<u64>> = memory.zones().iter().map(|z| z.frame).collect();
    assert_eq!(frames, [Some(0), Some(0), Some(1), Some(1), Some(2), Some(2)]);
    let stats = ctx.stats();
    assert_eq!((stats.lists_submitted, stats.lists_collected, stats.in_use), (3, 3, 0), "{stats:?}");
}

#[test]
fn a_source_feeds_one_context() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (_ctx, _memory) = context(&gpu);
    let error = TracingContext::builder(gpu.clone()).build().unwrap_err();
    assert!(matches!(&error, Error::Backend(e) if e.code.contains("a second context")), "{error}");
}

/// A kernel that outlasts the hold limit, launched in a zone whose list is still being
/// recorded: its link is kept until its record comes, so the list, submitted then, has it as
/// its zone's work (before, the list was forgotten with nothing waiting: the kernel came out
/// alone and the zone was counted as empty).
#[test]
fn a_kernel_longer_than_the_hold_limit_stays_in_the_zone_of_a_list_still_recorded() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    let hold = HOLD.as_nanos() as i64;
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("long")).unwrap();
    gpu.launch_named(&stream, "long kernel", 3 * hold);
    for _ in 0..3 {
        gpu.sim().advance(hold + US);
        ctx.collect().unwrap();
    }
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(shape(&memory), owned(&[("long", 0), ("long kernel", 1)]));
    let stats = ctx.stats();
    assert_eq!((stats.activity.empty_zones, stats.activity.lists_partial), (0, 0), "{stats:?}");
    assert_eq!(memory.zones()[0].gpu_end_ns - memory.zones()[0].gpu_begin_ns, 3 * hold);
}

/// The same list submitted only long after its kernel's record came: the kernel goes out
/// alone at the hold limit (reported), and the zone, when its list comes, still spans it:
/// it is neither emitted without its work nor counted as empty.
#[test]
fn a_zone_whose_work_went_out_alone_still_spans_it_when_its_list_comes() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    let hold = HOLD.as_nanos() as i64;
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("long")).unwrap();
    gpu.launch_named(&stream, "long kernel", 3 * hold);
    let mut held = 0;
    for _ in 0..6 {
        gpu.sim().advance(hold + US);
        if let Err(e) = ctx.collect() {
            assert!(matches!(e.error, Error::LaneHeld { .. }), "{e}");
            held += 1;
        }
    }
    assert_eq!((held, shape(&memory)), (1, owned(&[("long kernel", 0)])), "out alone, reported once");
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(shape(&memory), owned(&[("long kernel", 0), ("long", 0)]));
    let stats = ctx.stats();
    assert_eq!((stats.activity.empty_zones, stats.lanes_released), (0, 1), "{stats:?}");
    let zone = &memory.zones()[1];
    assert_eq!(zone.gpu_end_ns - zone.gpu_begin_ns, 3 * hold, "the zone spans its kernel");
}

/// A zone begun on one thread and ended on another (a guard moved with its list, as async
/// code does) leaves the first thread's stack: that thread's later launches are not its
/// work, and the zone spans only what was launched inside it. (Before, the zone stayed on the
/// first thread's stack: a later zoneless kernel there was nested in it, and once its list
/// was emitted the thread's work waited the whole hold limit for it, reported as held.)
#[test]
fn a_zone_ended_on_another_thread_no_longer_takes_the_first_threads_launches() {
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream = gpu.sim().stream();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("moved")).unwrap();
    gpu.launch_named(&stream, "inside", 10 * US);
    let list = {
        let stream = stream.clone();
        std::thread::spawn(move || {
            list.zone_end(&stream).unwrap();
            list
        })
        .join()
        .unwrap()
    };
    gpu.sim().advance(1_000 * US);
    gpu.launch_named(&stream, "zoneless", 10 * US);
    ctx.submit(list).unwrap();
    gpu.sim().advance(1_000 * US);
    ctx.flush().unwrap();
    assert_eq!(shape(&memory), owned(&[("moved", 0), ("inside", 1), ("zoneless", 0)]));
    assert_eq!(memory.zones()[0].gpu_end_ns - memory.zones()[0].gpu_begin_ns, 10 * US);
    gpu.launch_named(&stream, "after", 10 * US);
    gpu.sim().advance(1_000 * US);
    ctx.collect().expect("nothing held");
    assert_eq!(memory.zones().last().map(|z| z.location.name().to_owned()), Some("after".to_owned()));
}

#[test]
fn an_activity_sources_zones_carry_the_bound_it_gives() {
    // The simulation's records are its own clock's: exact (CUPTI's cannot say: `u64::MAX`,
    // checked on the GPU in tests/cupti_source.rs).
    let gpu = SimActivities::new(SimBackend::manual());
    let (ctx, memory) = context(&gpu);
    let stream: SimStream = gpu.sim().stream();
    let mut list = ctx.list();
    {
        let _zone = list.zone(&stream, DynamicLocation::new("zone"));
        gpu.launch(&stream, 10 * US);
    }
    ctx.submit(list).unwrap();
    gpu.sim().advance(1_000 * US);
    ctx.flush().unwrap();
    let zones = memory.zones();
    assert_eq!(zones.len(), 2, "the zone and its kernel");
    assert!(zones.iter().all(|z| (z.host_begin_bound_ns, z.host_end_bound_ns) == (0, 0)), "{zones:?}");
}
