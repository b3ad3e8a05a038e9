//! Recording compiled out: without the default feature `enable`
//! (`cargo test --no-default-features --test compiled_out`), the recording API compiles and
//! records nothing. The same calls in the default build record (the control), so each build
//! checks the other's claim.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::memory::MemorySink;
#[cfg(not(feature = "enable"))]
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{location, TracingContext, ENABLED};

/// Every recording call of the API, once: zones on a stream (with and without guards), in a
/// graph, a frame. Returns the context, the sink, and how many zones it recorded.
fn record_everything(sim: &SimBackend) -> (TracingContext<SimBackend>, MemorySink, usize) {
    let stream = sim.stream();
    let graph = sim.graph();
    let memory = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(memory.clone()).build().unwrap();
    ctx.frame(1);
    let mut list = ctx.list();
    {
        let mut command_buffer = list.zone(&stream, location!("command buffer"));
        let mut pass = command_buffer.zone(&stream, location!("pass"));
        sim.launch(&stream, 1_000);
        pass.next(location!("next pass"));
        sim.launch(&stream, 1_000);
        assert!(pass.error().is_none());
    }
    list.zone_begin(&stream, location!("begin")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_next(&stream, location!("next")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    let begin = list.graph_zone_begin(&graph, &[], location!("graph")).unwrap();
    let kernel = sim.add_kernel_node(&graph, 1_000);
    let after: Vec<_> = begin.into_iter().chain([kernel]).collect();
    let next = list.graph_zone_next(&graph, &after, location!("graph next")).unwrap();
    list.graph_zone_end(&graph, &next.into_iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(list.open_zones(), 0);
    ctx.submit(list).unwrap();
    assert!(sim.launch_graph(&graph, &stream));
    sim.advance(1_000_000);
    ctx.flush().unwrap();
    (ctx, memory, 7)
}

#[test]
fn recording_calls_record_exactly_when_compiled_in() {
    let sim = SimBackend::manual();
    let (ctx, memory, zones) = record_everything(&sim);
    let stats = ctx.stats();
    if ENABLED {
        assert_eq!((stats.zones_emitted, memory.zones().len()), (zones, zones), "{stats:?}");
        assert!(memory.zones().iter().all(|z| z.frame == Some(1)));
        assert_eq!(ctx.current_frame(), Some(1));
    } else {
        assert_eq!(memory.zones().len(), 0);
        assert_eq!(
            (stats.zones_emitted, stats.events_submitted, stats.dropped_zones),
            (0, 0, 0),
            "{stats:?}"
        );
        assert_eq!((stats.owned, stats.submitted, stats.grows), (0, 0, 0), "{stats:?}");
        assert_eq!(ctx.current_frame(), None, "frame() does nothing");
    }
    assert_eq!(stats.unaccounted(), 0);
}

/// Compiled out, no recording call reaches the backend: with every record failing, every
/// call still succeeds, and a zone may even end that never began.
#[cfg(not(feature = "enable"))]
#[test]
fn compiled_out_recording_never_calls_the_backend() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::new(sim.clone()).unwrap();
    let created = sim.events_created();
    sim.fail_records(u32::MAX);
    let mut list = ctx.list();
    for _ in 0..1_000 {
        list.zone_begin(&stream, location!("zone")).unwrap();
        list.zone_next(&stream, location!("next")).unwrap();
        list.zone_end(&stream).unwrap();
    }
    list.zone_end(&stream).unwrap();
    assert_eq!((list.event_count(), list.open_zones(), list.frame()), (0, 0, None));
    ctx.submit(list).unwrap();
    assert_eq!(sim.events_created(), created, "no slot was taken: the pool never grew");
    assert_eq!(ctx.stats().dropped_zones, 0);
}
