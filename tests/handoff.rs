//! The collect/flush hand-off (`collect/mod.rs`) with real threads, written to run under
//! Miri's weak-memory emulation with many seeds (docs/verification.md, "Which tool sees which
//! ordering"):
//!
//! ```sh
//! MIRIFLAGS="-Zmiri-many-seeds=0..64" cargo +nightly miri test --test handoff
//! ```
//!
//! One thread submits a list and collects it while another flushes, or collects too. Once both
//! calls have returned, every list has reached the sink exactly once (the emitter-busy and the
//! turned-away hand-offs) and every slot is back. Under Miri each seed is one interleaving
//! with its own choice of which older store each plain atomic load reads, and Miri's race
//! detector checks the slots' records (plain memory in an `UnsafeCell`) between the
//! recording, reading and emitting threads. Natively the same rounds run many times, as a
//! stress test of the same property (and under ThreadSanitizer in CI).

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{DynamicLocation, TracingContext};

/// Rounds per test: one under Miri (many seeds give the variety), many natively.
const ROUNDS: usize = if cfg!(miri) { 1 } else { 500 };

/// What the other thread does while the first collects the list it just submitted.
#[derive(Debug, Clone, Copy)]
enum Partner {
    Flush,
    Collect,
}

/// Records one complete zone on `stream` and submits it.
fn submit_one(ctx: &TracingContext<SimBackend>, sim: &SimBackend, stream: &SimStream, name: &'static str) {
    let mut list = ctx.list();
    list.zone_begin(stream, DynamicLocation::new(name)).unwrap();
    sim.launch(stream, 1_000);
    list.zone_end(stream).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(10_000);
}

/// One round: a list submitted before both calls, and one the collecting thread submits just
/// before its collect, race the partner's call; both reach the sink once before both return.
fn round(partner: Partner) {
    let sim = SimBackend::manual();
    let (before_stream, own_stream) = (sim.stream(), sim.stream());
    let zones = MemorySink::new();
    let ctx =
        TracingContext::builder(sim.clone()).capacity(8, 8).batch(2).sink(zones.clone()).build().unwrap();
    submit_one(&ctx, &sim, &before_stream, "before both calls");
    std::thread::scope(|s| {
        s.spawn(|| {
            submit_one(&ctx, &sim, &own_stream, "submitted, then collected");
            ctx.collect().unwrap();
        });
        match partner {
            Partner::Flush => drop(ctx.flush().unwrap()),
            Partner::Collect => drop(ctx.collect().unwrap()),
        }
    });
    let mut names: Vec<String> = zones.zones().iter().map(|z| z.location.name().to_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        ["before both calls", "submitted, then collected"],
        "with a {partner:?}: a list left behind after both calls returned, or emitted twice"
    );
    let stats = ctx.stats();
    assert_eq!((stats.unaccounted(), stats.submitted, stats.lists_collected), (0, 0, 2), "{stats:?}");
}

#[test]
fn a_list_collected_beside_a_flush_reaches_the_sink_once_before_both_return() {
    (0..ROUNDS).for_each(|_| round(Partner::Flush));
}

#[test]
fn a_list_collected_beside_another_collect_reaches_the_sink_once_before_both_return() {
    (0..ROUNDS).for_each(|_| round(Partner::Collect));
}
