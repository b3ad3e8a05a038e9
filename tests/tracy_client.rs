//! The Tracy sink on the real, enabled `tracy-client` (feature `tracy`; CI adds
//! `tracy-only-localhost`, and broadcast stays off). No profiler connects: the client queues
//! everything in memory. Four threads record on four streams, so the sink makes four Tracy GPU
//! contexts (one named by the user) through the real client, with frame marks and the
//! counters' plots. The test checks that nothing is lost in the crate's own accounting on the
//! way.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::tracy::TracySink;
use gpu_event_pool::{location, DynamicLocation, TracingContext};
use std::sync::Arc;

#[test]
fn a_full_run_through_the_enabled_client_loses_no_zone() {
    const THREADS: usize = 4;
    const LISTS: usize = 50;
    const ZONES_PER_LIST: usize = 8;

    let sim = SimBackend::realtime();
    let ctx = TracingContext::builder(sim.clone())
        .name("tracy client test")
        .sink(TracySink::for_backend(&sim).with_plots())
        .build()
        .expect("the real client gives the first context an id");

    let kernel = Arc::new(DynamicLocation::new("kernel (named at run time)"));
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (ctx, sim, kernel) = (ctx.clone(), sim.clone(), Arc::clone(&kernel));
            scope.spawn(move || {
                let stream = sim.stream();
                if thread == 0 {
                    ctx.name_stream(&stream, "named stream");
                }
                for n in 0..LISTS {
                    if thread == 0 {
                        // Frame marks and the counters' plots go through the real client too.
                        ctx.frame(n as u64);
                    }
                    let mut list = ctx.list();
                    list.zone_begin(&stream, location!("command buffer")).unwrap();
                    list.zone_begin(&stream, location!("dispatch")).unwrap();
                    for i in 1..ZONES_PER_LIST - 1 {
                        sim.launch(&stream, 2_000);
                        if i % 2 == 0 {
                            list.zone_next(&stream, location!("dispatch")).unwrap();
                        } else {
                            list.zone_next(&stream, Arc::clone(&kernel)).unwrap();
                        }
                    }
                    sim.launch(&stream, 2_000);
                    list.zone_end(&stream).unwrap();
                    list.zone_end(&stream).unwrap();
                    ctx.submit(list).unwrap();
                    let _ = ctx.collect().unwrap();
                }
            });
        }
    });
    ctx.flush().unwrap();

    let stats = ctx.stats();
    assert_eq!(stats.zones_emitted, THREADS * LISTS * ZONES_PER_LIST, "{stats:?}");
    assert_eq!(stats.dropped_zones, 0, "{stats:?}");
    assert_eq!(stats.lists_collected, THREADS * LISTS, "{stats:?}");
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!(stats.submitted + stats.owned, 0, "{stats:?}");
}
