//! The API a runtime adopts: builder, configuration errors, `Debug`, and the small promises
//! around them.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{location, Config, ConfigError, Error, TracingContext};

#[test]
fn builder_setters_win_over_a_whole_config_whichever_comes_first() {
    let sim = SimBackend::manual();
    let mut base = Config::default();
    base.name = "from config".to_owned();
    base.batch = 3;
    let before = TracingContext::builder(sim.clone()).name("named").config(base.clone()).build().unwrap();
    assert_eq!(before.config().name, "named", "a name set before config() is kept");
    assert_eq!(before.config().batch, 3, "what no setter set comes from the config");
    let after = TracingContext::builder(sim).config(base).name("named").batch(5).build().unwrap();
    assert_eq!((after.config().name.as_str(), after.config().batch), ("named", 5));
}

#[test]
fn an_initial_capacity_that_cannot_be_rounded_up_is_blamed_for_it() {
    let err = TracingContext::builder(SimBackend::manual()).capacity(u32::MAX, u32::MAX).build().unwrap_err();
    assert!(matches!(err, Error::Config(ConfigError::InitialTooLarge { initial: u32::MAX })), "{err:?}");
    assert!(err.to_string().contains("initial capacity"), "{err}");
}

#[test]
fn formatting_a_context_with_debug_changes_no_statistic() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).capacity(64, 64).batch(1).build().unwrap();
    let mut list = ctx.list();
    for _ in 0..5 {
        list.zone_begin(&stream, location!("z")).unwrap();
        list.zone_end(&stream).unwrap();
    }
    let shown = format!("{ctx:?}");
    assert!(shown.contains("TracingContext"), "{shown}");
    drop(list);
    assert_eq!(ctx.stats().high_water, 0, "Debug sampled the high-water mark while 10 slots were in use");
}

mod guards {
    use super::*;
    use gpu_event_pool::sink::memory::MemorySink;
    use gpu_event_pool::{EventList, RecordError};

    fn record_frame(
        list: &mut EventList<SimBackend>,
        sim: &SimBackend,
        stream: &gpu_event_pool::sim::SimStream,
        fail: bool,
    ) -> Result<(), &'static str> {
        let mut frame = list.zone(stream, location!("frame"));
        let _dispatch = frame.zone(stream, location!("dispatch"));
        sim.launch(stream, 1_000);
        if fail {
            return Err("early return");
        }
        sim.launch(stream, 1_000);
        Ok(())
    }

    #[test]
    fn guards_end_their_zones_on_an_early_return_innermost_first() {
        let sim = SimBackend::manual();
        let stream = sim.stream();
        let sink = MemorySink::new();
        let ctx = TracingContext::builder(sim.clone()).sink(sink.clone()).build().unwrap();
        let mut list = ctx.list();
        assert!(record_frame(&mut list, &sim, &stream, true).is_err());
        assert_eq!(list.open_zones(), 0, "the early return closed both zones");
        record_frame(&mut list, &sim, &stream, false).unwrap();
        ctx.submit(list).unwrap();
        ctx.flush().unwrap();
        let zones: Vec<(String, u32, i64)> = sink
            .zones()
            .iter()
            .map(|z| (z.location.name().to_owned(), z.depth, z.gpu_end_ns - z.gpu_begin_ns))
            .collect();
        assert_eq!(
            zones,
            [
                ("frame".to_owned(), 0, 1_000),
                ("dispatch".to_owned(), 1, 1_000),
                ("frame".to_owned(), 0, 2_000),
                ("dispatch".to_owned(), 1, 2_000)
            ]
        );
    }

    #[test]
    fn a_guard_moves_to_the_next_zone_with_one_event_and_reports_a_dropped_zone() {
        let sim = SimBackend::manual();
        let stream = sim.stream();
        let sink = MemorySink::new();
        let ctx =
            TracingContext::builder(sim.clone()).capacity(3, 3).batch(1).sink(sink.clone()).build().unwrap();
        let mut list = ctx.list();
        {
            let mut pass = list.zone(&stream, location!("first"));
            assert!(pass.error().is_none());
            sim.launch(&stream, 500);
            pass.next(location!("second"));
            assert!(pass.error().is_none());
            sim.launch(&stream, 700);
            // Its begin and its end would need two slots besides the one kept for second's end.
            let dropped = pass.zone(&stream, location!("no slot left"));
            assert_eq!(dropped.error(), Some(&RecordError::PoolExhausted { capacity: 3 }));
        }
        assert_eq!(list.event_count(), 3, "the shared boundary took one event; the dropped zone none");
        ctx.submit(list).unwrap();
        ctx.flush().unwrap();
        let names: Vec<String> = sink.zones().iter().map(|z| z.location.name().to_owned()).collect();
        assert_eq!(names, ["first", "second"], "the zones that began ended: their ends' slots were kept");
        assert_eq!(ctx.stats().dropped_zones, 1);
    }
}

mod switches {
    use super::*;
    use gpu_event_pool::sink::memory::MemorySink;
    use gpu_event_pool::Verbosity;

    #[test]
    fn verbosity_changes_at_run_time_for_zones_begun_after() {
        let sim = SimBackend::manual();
        let stream = sim.stream();
        let sink = MemorySink::new();
        let ctx = TracingContext::builder(sim.clone()).sink(sink.clone()).build().unwrap();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("fine, recorded")).unwrap();
        ctx.set_verbosity(Verbosity::Coarse);
        assert_eq!(ctx.verbosity(), Verbosity::Coarse);
        list.zone_end(&stream).unwrap();
        list.zone_begin(&stream, location!("fine, skipped")).unwrap();
        list.zone_end(&stream).unwrap();
        list.zone_begin(&stream, location!("coarse", Verbosity::Coarse)).unwrap();
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        ctx.flush().unwrap();
        let names: Vec<String> = sink.zones().iter().map(|z| z.location.name().to_owned()).collect();
        assert_eq!(names, ["fine, recorded", "coarse"]);
    }

    #[test]
    fn a_disabled_context_records_nothing_and_creates_no_event_until_enabled() {
        let sim = SimBackend::manual();
        let stream = sim.stream();
        let sink = MemorySink::new();
        let ctx = TracingContext::builder(sim.clone()).capacity(4, 64).sink(sink.clone()).build().unwrap();
        ctx.set_enabled(false);
        assert!(!ctx.is_enabled());
        let created = sim.events_created();
        let mut list = ctx.list();
        for _ in 0..100 {
            list.zone_begin(&stream, location!("off")).unwrap();
            list.zone_end(&stream).unwrap();
        }
        assert_eq!((list.event_count(), ctx.stats().owned), (0, 0));
        assert_eq!(sim.events_created(), created, "no event created while disabled");
        ctx.set_enabled(true);
        assert_eq!(ctx.verbosity(), Verbosity::Fine, "the verbosity survives disabling");
        list.zone_begin(&stream, location!("on")).unwrap();
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        ctx.flush().unwrap();
        let names: Vec<String> = sink.zones().iter().map(|z| z.location.name().to_owned()).collect();
        assert_eq!(names, ["on"]);
    }
}

#[test]
fn the_high_water_mark_is_taken_when_the_pool_runs_out() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).capacity(8, 8).batch(1).build().unwrap();
    let mut list = ctx.list();
    let mut exhausted = 0;
    for _ in 0..20 {
        exhausted += usize::from(list.zone_begin(&stream, location!("z")).is_err());
        exhausted += usize::from(list.zone_end(&stream).is_err());
    }
    assert!(exhausted > 0, "the pool ran out");
    drop(list);
    let stats = ctx.stats();
    assert_eq!(stats.in_use, 0);
    assert_eq!(stats.high_water, 8, "every slot was in use when the pool ran out: {stats:?}");
}
