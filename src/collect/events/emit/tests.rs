//! Unit tests of the emit phase.

use super::*;
use crate::backend::sim::faults::SimFaults;
use crate::backend::sim::SimBackend;
use crate::shared::config::Config;
use crate::shared::lanes::Holder;
use crate::slots::pool::Pool;

/// The emitter reads the host clock for the hold limit, once per
/// emit phase. A backend whose clock panics there fails the emit phase (an error,
/// counted), and unwinds through nothing; here a lane waits on a place still held.
#[test]
fn a_host_clock_that_panics_under_the_hold_limit_is_an_error_not_an_unwind() {
    let backend = SimBackend::manual();
    let (mut emitter, info) = EventOrder::new(&backend, 1, "panicky").unwrap();
    let pool = Pool::new(4, 4, 4, || backend.create_event()).unwrap();
    let ctx = Inner::new(backend, Config::default(), pool, info);
    let lane = Lane::Stream(1);
    let holder = |list_id| Holder {
        list_id,
        lane,
        location: crate::location!("held").into(),
        started_ns: ctx.backend().host_now_ns(),
    };
    // Place 0 held by a list still being recorded; place 1 waiting (a void stands for the
    // read list there: only that something waits counts here).
    let (held, ()) = ctx.lanes().record_first(lane, || Ok::<_, ()>(()), || holder(1)).unwrap();
    let (later, ()) = ctx.lanes().record_first(lane, || Ok::<_, ()>(()), || holder(2)).unwrap();
    ctx.lanes().release(later);
    emitter.waiting.entry(later.entry).or_default().insert(later.seq, None);
    ctx.backend().panic_in_host_clock(1);
    let released =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| emitter.release_held_lanes(&ctx)))
            .expect("the host clock's panic unwound through the emitter");
    assert!(matches!(&released, Err(Error::Backend(e)) if e.code.contains("injected panic")), "{released:?}");
    assert_eq!(emitter.next_place[held.entry as usize], held.seq, "the lane did not move on");
    // The clock works again: the held list is within the limit, nothing is reported.
    assert_eq!(emitter.release_held_lanes(&ctx).map(|held| held.len()).ok(), Some(0));
}
