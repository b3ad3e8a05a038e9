//! The event lifecycle end to end on the simulated GPU: record, submit, collect, release.

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{
    location, Collected, ConfigError, DynamicLocation, Error, RecordError, Stats, SubmitError,
    TracingContext, Verbosity,
};

fn setup(initial: u32, max: u32) -> (SimBackend, SimStream, MemorySink, TracingContext<SimBackend>) {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone())
        .capacity(initial, max)
        .batch(4)
        .sink(sink.clone())
        .build()
        .unwrap();
    (sim, stream, sink, ctx)
}

fn assert_accounted(ctx: &TracingContext<SimBackend>) -> Stats {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.free, "free counter matches the freelist");
    stats
}

fn names(zones: &[Zone]) -> Vec<String> {
    zones.iter().map(|z| z.location.name().to_owned()).collect()
}

/// Records one zone named `name` around a kernel of `ns` on `stream`, and submits it.
fn one_zone(ctx: &TracingContext<SimBackend>, sim: &SimBackend, stream: &SimStream, name: &str, ns: i64) {
    let mut list = ctx.list();
    list.zone_begin(stream, DynamicLocation::new(name)).unwrap();
    sim.launch(stream, ns);
    list.zone_end(stream).unwrap();
    ctx.submit(list).unwrap();
}

#[test]
fn collect_emits_lists_in_submission_order() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let other = sim.stream();
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        one_zone(&ctx, &sim, if i % 2 == 0 { &stream } else { &other }, name, 100);
    }
    sim.advance(1_000);
    let Collected::Done(report) = ctx.collect().unwrap() else { panic!("no other collector") };
    assert_eq!((report.lists, report.zones, report.pending_lists), (4, 4, 0));
    assert_eq!(names(&sink.zones()), ["a", "b", "c", "d"], "lanes merged in list order");
    let ids: Vec<u64> = sink.batches().iter().map(|(id, _)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_accounted(&ctx);
}

#[test]
fn a_slow_lane_does_not_hold_back_a_finished_lane() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let slow = sim.stream();
    one_zone(&ctx, &sim, &stream, "fast 1", 100);
    one_zone(&ctx, &sim, &slow, "slow", 10_000);
    one_zone(&ctx, &sim, &stream, "fast 2", 100);
    sim.advance(500);
    let Collected::Done(report) = ctx.collect().unwrap() else { panic!() };
    assert_eq!((report.lists, report.pending_lists), (2, 1), "only the slow lane waits");
    assert_eq!(names(&sink.zones()), ["fast 1", "fast 2"]);
    assert_eq!(ctx.stats().submitted, 2, "the slow list's two events wait; nothing else is held");
    sim.advance(10_000);
    ctx.collect().unwrap();
    assert_eq!(names(&sink.zones()), ["fast 1", "fast 2", "slow"]);
    assert_accounted(&ctx);
}

#[test]
fn collect_never_waits_for_the_gpu() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    one_zone(&ctx, &sim, &stream, "long", 3_600_000_000_000);
    let before = sim.now();
    let Collected::Done(report) = ctx.collect().unwrap() else { panic!() };
    assert_eq!((report.lists, report.pending_lists), (0, 1));
    assert_eq!(sim.now(), before, "collect did not wait (waiting moves the manual clock)");
    assert!(sink.zones().is_empty());
}

#[test]
fn flush_waits_for_everything_submitted() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    one_zone(&ctx, &sim, &stream, "a", 5_000);
    one_zone(&ctx, &sim, &stream, "b", 7_000);
    let report = ctx.flush().unwrap();
    assert_eq!((report.lists, report.pending_lists), (2, 0));
    assert!(sim.now() >= 12_000, "flush waited for the GPU");
    let zones = sink.zones();
    assert_eq!(zones.iter().map(|z| z.gpu_end_ns - z.gpu_begin_ns).collect::<Vec<_>>(), [5_000, 7_000]);
    assert_eq!(sink.flushes(), 1);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.owned, stats.submitted), (0, 0));
}

#[test]
fn a_second_concurrent_collector_returns_busy_at_once() {
    use std::sync::mpsc;
    struct Blocking(mpsc::Sender<()>, std::sync::Mutex<mpsc::Receiver<()>>);
    impl gpu_event_pool::sink::Sink for Blocking {
        fn zones(
            &mut self,
            _: &gpu_event_pool::sink::ContextInfo,
            _: gpu_event_pool::sink::ZoneBatch<'_>,
        ) -> std::io::Result<()> {
            self.0.send(()).unwrap();
            self.1.lock().unwrap().recv().unwrap();
            Ok(())
        }
    }
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = Blocking(entered_tx, std::sync::Mutex::new(release_rx));
    let ctx = TracingContext::builder(sim.clone()).sink(sink).build().unwrap();
    one_zone(&ctx, &sim, &stream, "a", 10);
    sim.advance(10);
    std::thread::scope(|s| {
        let first = s.spawn(|| ctx.collect().unwrap());
        entered_rx.recv().unwrap();
        assert_eq!(ctx.collect().unwrap(), Collected::Busy);
        release_tx.send(()).unwrap();
        assert!(matches!(first.join().unwrap(), Collected::Done(r) if r.lists == 1));
    });
}

#[test]
fn pool_grows_on_demand_up_to_its_maximum() {
    let (sim, stream, _sink, ctx) = setup(4, 28);
    assert_eq!(
        (ctx.stats().capacity, sim.events_created()),
        (4, 4 + 1 + 1),
        "first page, the base event and one anchor event (the start-up anchor's, kept for the next)"
    );
    let mut list = ctx.list();
    for _ in 0..14 {
        list.zone_begin(&stream, location!("z")).unwrap();
        list.zone_end(&stream).unwrap();
    }
    let stats = ctx.stats();
    assert_eq!((stats.capacity, stats.pages, stats.grows), (28, 3, 2), "4 + 8 + 16");
    assert_eq!(stats.high_water, 28);
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_accounted(&ctx);
}

#[test]
fn exhaustion_drops_zones_then_recording_recovers_once_slots_return() {
    let (sim, stream, sink, ctx) = setup(4, 4);
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("outer")).unwrap();
    list.zone_next(&stream, location!("a")).unwrap();
    list.zone_next(&stream, location!("b")).unwrap();
    // The last slot ends b; c could not keep one for its own end, so it is not begun.
    let exhausted = RecordError::PoolExhausted { capacity: 4 };
    assert_eq!(list.zone_next(&stream, location!("c")), Err(exhausted.clone()));
    assert_eq!(list.zone_next(&stream, location!("d")), Err(exhausted));
    assert_eq!(list.open_zones(), 1, "d is open (dropped), so zone_end stays balanced");
    list.zone_end(&stream).unwrap();
    assert_eq!(list.event_count(), 4, "outer, a, b and b's end");
    assert_eq!(ctx.stats().dropped_zones, 2, "c and d");
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["outer", "a", "b"]);
    one_zone(&ctx, &sim, &stream, "after", 10);
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()).last().unwrap(), "after");
    assert_accounted(&ctx);
}

#[test]
fn verbosity_skips_zones_above_the_context_level() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = MemorySink::new();
    let ctx =
        TracingContext::builder(sim.clone()).verbosity(Verbosity::Coarse).sink(sink.clone()).build().unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("command buffer", Verbosity::Coarse)).unwrap();
    list.zone_begin(&stream, location!("dispatch", Verbosity::Fine)).unwrap();
    list.zone_next(&stream, location!("dispatch 2", Verbosity::Fine)).unwrap();
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    assert_eq!(list.event_count(), 2, "only the coarse zone records events");
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["command buffer"]);

    let off = TracingContext::builder(sim.clone()).verbosity(Verbosity::Off).build().unwrap();
    let mut list = off.list();
    list.zone_begin(&stream, location!("anything", Verbosity::Coarse)).unwrap();
    list.zone_end(&stream).unwrap();
    assert_eq!(list.event_count(), 0);
    assert_eq!(off.stats().owned, 0, "a skipped zone takes no slot");
}

#[test]
fn adjacent_zones_with_zone_next_take_k_plus_one_events() {
    let (sim, stream, sink, ctx) = setup(64, 256);
    for k in [1usize, 2, 5, 17] {
        sink.clear();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("dispatch")).unwrap();
        for _ in 1..k {
            sim.launch(&stream, 1_000);
            list.zone_next(&stream, location!("dispatch")).unwrap();
        }
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap();
        assert_eq!(list.event_count(), k + 1, "the seed would take {}", 2 * k);
        ctx.submit(list).unwrap();
        ctx.flush().unwrap();
        let zones = sink.zones();
        assert_eq!(zones.len(), k);
        assert!(
            zones.windows(2).all(|w| w[0].gpu_end_ns == w[1].gpu_begin_ns),
            "adjacent zones share an event"
        );
        assert!(zones.iter().all(|z| z.gpu_end_ns - z.gpu_begin_ns == 1_000 && z.depth == 0));
    }
}

#[test]
fn nested_zones_are_emitted_parents_first_with_their_depths() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("frame")).unwrap();
    list.zone_begin(&stream, location!("pass")).unwrap();
    list.zone_begin(&stream, location!("dispatch")).unwrap();
    sim.launch(&stream, 300);
    list.zone_end(&stream).unwrap();
    sim.launch(&stream, 200);
    list.zone_end(&stream).unwrap();
    list.zone_begin(&stream, location!("copy")).unwrap();
    sim.launch(&stream, 100);
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(names(&zones), ["frame", "pass", "dispatch", "copy"]);
    assert_eq!(zones.iter().map(|z| z.depth).collect::<Vec<_>>(), [0, 1, 2, 1]);
    let span = |z: &Zone| (z.gpu_begin_ns, z.gpu_end_ns);
    let (frame, pass, dispatch, copy) = (span(&zones[0]), span(&zones[1]), span(&zones[2]), span(&zones[3]));
    assert_eq!(dispatch.1 - dispatch.0, 300);
    assert_eq!(pass.1 - pass.0, 500);
    assert_eq!(copy.1 - copy.0, 100);
    assert!(frame.0 <= pass.0 && pass.1 <= copy.0 && copy.1 <= frame.1);
    assert!(zones.iter().all(|z| z.location.file().ends_with("lifecycle.rs") && z.location.line() > 0));
    assert!(
        zones[0].location.function().contains("nested_zones_are_emitted"),
        "{}",
        zones[0].location.function()
    );
}

#[test]
fn dropping_an_unsubmitted_list_returns_its_slots_and_emits_nothing() {
    let (_sim, stream, sink, ctx) = setup(8, 64);
    let mut list = ctx.list();
    for _ in 0..5 {
        list.zone_begin(&stream, location!("never submitted")).unwrap();
        list.zone_end(&stream).unwrap();
    }
    assert_eq!(ctx.stats().owned, 12, "10 events, 2 spare in the reservation");
    drop(list);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.owned, stats.lists_discarded), (0, 1));
    ctx.flush().unwrap();
    assert!(sink.zones().is_empty());
}

#[test]
fn the_last_handle_flushes_and_lists_outlive_it() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let clone = ctx.clone();
    one_zone(&ctx, &sim, &stream, "before drop", 1_000);
    let mut survivor = ctx.list();
    survivor.zone_begin(&stream, location!("held")).unwrap();
    drop(ctx);
    assert!(sink.zones().is_empty(), "a clone is still alive");
    drop(clone);
    assert_eq!(names(&sink.zones()), ["before drop"], "dropping the last handle flushed");
    survivor.zone_end(&stream).unwrap();
    drop(survivor); // returns its slots to the pool the list keeps alive
}

#[test]
fn zone_end_without_an_open_zone_is_an_error() {
    let (_sim, stream, _sink, ctx) = setup(8, 64);
    let mut list = ctx.list();
    assert_eq!(list.zone_end(&stream), Err(RecordError::NoOpenZone));
    assert_eq!(list.zone_next(&stream, location!("x")), Err(RecordError::NoOpenZone));
    assert_eq!(list.event_count(), 0);
}

#[test]
fn submitting_a_list_with_open_zones_hands_it_back() {
    let (_sim, stream, sink, ctx) = setup(8, 64);
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("open")).unwrap();
    let err = ctx.submit(list).unwrap_err();
    assert!(err.to_string().contains("1 open zone"), "{err}");
    let SubmitError::OpenZones { open: 1, .. } = &err else { panic!("{err:?}") };
    let mut list = err.into_list();
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["open"]);
}

#[test]
fn submitting_a_list_to_another_context_hands_it_back() {
    let (_sim, stream, _sink, ctx) = setup(8, 64);
    let (_, _, _, other) = setup(8, 64);
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("x")).unwrap();
    list.zone_end(&stream).unwrap();
    let err = other.submit(list).unwrap_err();
    assert!(matches!(err, SubmitError::WrongContext { .. }));
    ctx.submit(err.into_list()).unwrap();
    assert_eq!(ctx.stats().lists_submitted, 1);
    assert_eq!(other.stats().lists_submitted, 0);
}

#[test]
fn invalid_capacities_are_refused() {
    let sim = SimBackend::manual();
    let build = |initial, max| TracingContext::builder(sim.clone()).capacity(initial, max).build();
    assert!(matches!(build(0, 10), Err(Error::Config(ConfigError::ZeroCapacity { .. }))));
    assert!(matches!(build(10, 0), Err(Error::Config(ConfigError::ZeroCapacity { .. }))));
    assert!(matches!(
        build(100, 10),
        Err(Error::Config(ConfigError::InvertedCapacity { initial: 100, max: 10 }))
    ));
    assert!(matches!(build(1, u32::MAX), Err(Error::Config(ConfigError::TooLarge { .. }))));
    let zero_batch = TracingContext::builder(sim.clone()).batch(0).build();
    assert!(matches!(zero_batch, Err(Error::Config(ConfigError::ZeroBatch))));
    assert!(build(3, 3).is_ok(), "an initial size rounded above the max is cut to it");
}

#[test]
fn a_backend_error_while_recording_drops_the_zone_and_leaks_no_slot() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let mut list = ctx.list();
    sim.fail_records(1);
    assert!(matches!(list.zone_begin(&stream, location!("lost")), Err(RecordError::Backend(_))));
    list.zone_end(&stream).unwrap(); // closes the dropped zone, records nothing
    list.zone_begin(&stream, location!("kept")).unwrap();
    sim.fail_records(1);
    assert!(matches!(list.zone_end(&stream), Err(RecordError::Backend(_))), "end lost: zone dropped");
    list.zone_begin(&stream, location!("fine")).unwrap();
    list.zone_end(&stream).unwrap();
    assert_eq!(list.event_count(), 3);
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_eq!(names(&sink.zones()), ["fine"]);
    let stats = assert_accounted(&ctx);
    assert_eq!(stats.dropped_zones, 2);
}

/// A `zone_next` whose event fails in the middle of a list, its slots already reserved (the
/// step made inline, without the general step): the zone it ends loses its begin and the
/// zone it begins opens as dropped, both counted; nesting stays balanced and the zones
/// around them are emitted.
#[test]
fn a_zone_next_whose_event_fails_drops_the_zone_it_ends_and_the_one_it_begins() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("outer")).unwrap();
    list.zone_begin(&stream, location!("a")).unwrap();
    sim.launch(&stream, 1_000);
    // Refills the reservation (a batch of 4): the next step has its slots reserved.
    list.zone_next(&stream, location!("ended by the failure")).unwrap();
    sim.launch(&stream, 1_000);
    assert!(format!("{list:?}").contains("reserved: 5"), "{list:?}");
    sim.fail_records(1);
    assert!(matches!(
        list.zone_next(&stream, location!("begun by the failure")),
        Err(RecordError::Backend(_))
    ));
    assert_eq!((list.open_zones(), list.event_count()), (2, 3), "outer and the dropped zone");
    list.zone_end(&stream).unwrap(); // closes the dropped zone, records nothing
    list.zone_begin(&stream, location!("after")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_next(&stream, location!("next")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    let mut emitted = names(&sink.zones());
    emitted.sort();
    assert_eq!(emitted, ["a", "after", "next", "outer"]);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.dropped_zones, stats.owned, stats.submitted), (2, 0, 0), "{stats:?}");
}

#[test]
fn a_backend_error_while_growing_leaves_the_pool_usable() {
    let (sim, stream, _sink, ctx) = setup(4, 64);
    let mut list = ctx.list();
    for _ in 0..2 {
        list.zone_begin(&stream, location!("z")).unwrap();
        list.zone_end(&stream).unwrap();
    }
    sim.fail_event_creation_after(Some(3));
    let err = list.zone_begin(&stream, location!("needs a new page")).unwrap_err();
    assert!(matches!(err, RecordError::Backend(ref e) if e.call == "sim::create_event"), "{err:?}");
    assert_eq!(ctx.stats().capacity, 4, "the failed page was not added");
    sim.fail_event_creation_after(None);
    list.zone_end(&stream).unwrap();
    list.zone_begin(&stream, location!("grown")).unwrap();
    list.zone_end(&stream).unwrap();
    assert_eq!(ctx.stats().capacity, 12);
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    assert_accounted(&ctx);
}

#[test]
fn a_backend_error_while_collecting_loses_no_other_list_and_no_slot() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    one_zone(&ctx, &sim, &stream, "a", 10);
    one_zone(&ctx, &sim, &stream, "b", 10);
    one_zone(&ctx, &sim, &stream, "c", 10);
    sim.advance(100);
    // The first elapsed read of list "b" fails (a: 2 reads; anchor promotion may take one).
    ctx.collect().unwrap();
    sink.clear();
    one_zone(&ctx, &sim, &stream, "d", 10);
    one_zone(&ctx, &sim, &stream, "e", 10);
    sim.advance(100);
    sim.fail_elapsed(1);
    let err = ctx.collect().unwrap_err();
    assert!(matches!(err.error, Error::Backend(ref e) if e.code == "injected failure"), "{err:?}");
    assert_eq!(
        (err.report.lists, err.report.failed_lists, err.report.zones),
        (2, 1, 1),
        "the report survives the error"
    );
    assert_eq!(names(&sink.zones()), ["e"], "d failed, e was still collected");
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.lists_failed, stats.dropped_zones), (1, 1));
    assert_eq!(stats.submitted, 0, "no event is held as a reference");
}

#[test]
fn many_threads_record_and_every_zone_is_emitted_exactly_once() {
    const THREADS: usize = 4;
    let lists = if cfg!(miri) { 3 } else { 300 };
    let sim = SimBackend::realtime();
    let sink = MemorySink::new();
    let ctx =
        TracingContext::builder(sim.clone()).capacity(16, 16384).batch(8).sink(sink.clone()).build().unwrap();
    let mut expected = std::collections::HashMap::new();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for t in 0..THREADS {
            let (ctx, sim) = (ctx.clone(), sim.clone());
            handles.push(s.spawn(move || {
                let stream = sim.stream();
                let mut ids = Vec::new();
                for i in 0..lists {
                    let mut list = ctx.list();
                    list.zone_begin(&stream, DynamicLocation::new(format!("t{t} l{i}"))).unwrap();
                    for _ in 0..(i % 5) {
                        sim.launch(&stream, 50);
                        list.zone_next(&stream, location!("dispatch")).ok();
                    }
                    list.zone_end(&stream).ok();
                    ids.push((list.id(), 1 + i % 5));
                    ctx.submit(list).unwrap();
                }
                ids
            }));
        }
        while !handles.iter().all(|h| h.is_finished()) {
            ctx.collect().unwrap();
            std::thread::yield_now();
        }
        for h in handles {
            expected.extend(h.join().unwrap());
        }
    });
    ctx.flush().unwrap();
    let stats = assert_accounted(&ctx);
    assert_eq!(stats.dropped_zones, 0, "16384 slots are enough for 4 threads");
    eprintln!("high water {} of {} slots", stats.high_water, stats.capacity);
    assert_eq!((stats.owned, stats.submitted), (0, 0));
    let batches = sink.batches();
    assert_eq!(batches.len(), THREADS * lists);
    let mut seen = std::collections::HashSet::new();
    for (id, zones) in &batches {
        assert!(seen.insert(*id), "list {id} emitted twice");
        assert_eq!(zones.len(), expected[id], "list {id}");
        assert!(zones.iter().all(|z| z.gpu_begin_ns <= z.gpu_end_ns));
    }
    assert_eq!(stats.zones_emitted, expected.values().sum::<usize>());
}

#[test]
fn graph_zones_time_the_first_launch_of_their_graph() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let graph = sim.graph();
    let mut list = ctx.list();
    let begin = list.graph_zone_begin(&graph, &[], location!("graph")).unwrap().expect("recorded");
    let kernel = sim.add_kernel_node(&graph, 4_000);
    let next = list.graph_zone_next(&graph, &[kernel], location!("second half")).unwrap().expect("recorded");
    sim.add_kernel_node(&graph, 6_000);
    let end = list.graph_zone_end(&graph, &[next]).unwrap().expect("recorded");
    assert!(begin.0 < kernel.0 && kernel.0 < next.0 && next.0 < end.0);
    assert!(sim.launch_graph(&graph, &stream));
    ctx.submit(list).unwrap();
    sim.launch_graph(&graph, &stream); // a second launch: untimed, changes nothing
    ctx.flush().unwrap();
    let zones = sink.zones();
    assert_eq!(names(&zones), ["graph", "second half"]);
    assert_eq!(zones[0].gpu_end_ns - zones[0].gpu_begin_ns, 4_000);
    assert_eq!(zones[1].gpu_end_ns - zones[1].gpu_begin_ns, 6_000);
    assert!(matches!(zones[0].lane, gpu_event_pool::Lane::Graph(_)));
    assert_accounted(&ctx);
}

#[test]
fn a_graph_list_collected_before_its_launch_fails_clearly_and_loses_nothing_else() {
    let (sim, stream, sink, ctx) = setup(8, 64);
    let graph = sim.graph();
    let mut list = ctx.list();
    list.graph_zone_begin(&graph, &[], location!("too early")).unwrap();
    sim.add_kernel_node(&graph, 1_000);
    list.graph_zone_end(&graph, &[]).unwrap();
    ctx.submit(list).unwrap();
    one_zone(&ctx, &sim, &stream, "stream zone", 500);
    let err = ctx.flush().unwrap_err();
    assert!(
        matches!(err.error, Error::Backend(ref e) if e.kind() == Some(gpu_event_pool::ErrorKind::GraphNotLaunched)),
        "{err:?}"
    );
    assert_eq!(names(&sink.zones()), ["stream zone"]);
    sim.launch_graph(&graph, &stream);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.lists_failed, stats.dropped_zones, stats.submitted), (1, 1, 0));
}

/// A pool of 8 slots, reserving 2 at a time: after a flush returns the slots (some to this
/// thread's magazine, some to the depot), four lists of two events fit exactly. A magazine
/// holding one slot must top a reservation up from the depot, or a list keeps a spare slot
/// that the last list needs (found by the CUDA graph-relaunch test on the H200).
#[test]
fn every_slot_is_usable_when_a_magazine_runs_short_of_a_batch() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).capacity(8, 8).batch(2).build().unwrap();
    let graph = sim.graph();
    let mut gl = ctx.list();
    gl.graph_zone_begin(&graph, &[], location!("g1")).unwrap();
    sim.add_kernel_node(&graph, 1000);
    gl.graph_zone_next(&graph, &[], location!("g2")).unwrap();
    sim.add_kernel_node(&graph, 1000);
    gl.graph_zone_end(&graph, &[]).unwrap();
    sim.launch_graph(&graph, &stream);
    let mut marker = ctx.list();
    marker.zone_begin(&stream, location!("m")).unwrap();
    marker.zone_end(&stream).unwrap();
    ctx.submit(gl).unwrap();
    ctx.submit(marker).unwrap();
    ctx.flush().unwrap();
    let mut lists = Vec::new();
    for i in 0..4 {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("r")).unwrap_or_else(|e| panic!("{i} {e} {:?}", ctx.stats()));
        list.zone_end(&stream).unwrap_or_else(|e| panic!("{i} end {e} {:?}", ctx.stats()));
        lists.push(list);
    }
}
