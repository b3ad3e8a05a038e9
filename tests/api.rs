//! The API a runtime adopts: builder, configuration errors, `Debug`, and the small promises
//! around them.

use gpu_event_pool::sim::SimBackend;
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
