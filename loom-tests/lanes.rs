#![cfg(gpu_event_pool_loom)]
//! Loom models of the lane table (`shared/lanes/`): a list takes its place on its lane in the
//! same step as it records its first event, under the entry's place lock, so the lists of one
//! stream reach the sinks in the order the GPU runs them; an entry serves one stream at a
//! time.
//!
//! The place lock's orderings (the lock's Acquire CAS, the Release store of `take_place` and
//! of the unlock on drop) order what the backend does under the lock for one list against
//! what it does for the next. A driver that serializes a stream's commands itself needs no
//! more than the lock's mutual exclusion, and the loom backend's tick count (a
//! read-modify-write, which loom lets read only the newest value) sees no more either. So the
//! stream of these models also keeps, in plain memory (a loom cell), the order in which
//! command buffers were opened on it, as a driver does that leaves host access to its caller
//! (Vulkan's "externally synchronized" command buffers and queues): loom reports a first
//! record that is not ordered after the one before as a data race.

#[path = "common/backend.rs"]
mod backend;
mod common;

use backend::{assert_accounted, context, received, record_one_zone, LoomBackend, LoomStream, Openings};
use gpu_event_pool::{DynamicLocation, Error, EventList, Lane, TracingContext};
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

/// Two threads start a list each on one stream at once: each list takes its place on the lane
/// in the same step as it records its first event (under the lane's place lock), so the lane
/// order the sinks get is the order of the first events' GPU stamps, and the order in which
/// the driver saw their command buffers opened, in every interleaving. (When recording and
/// taking the place were two steps, a thread preempted between them let the other take the
/// earlier place for a later event: this model found it.) The place lock's Acquire and
/// Release make each opening happen after the one before: weakened, loom reports the two
/// openings as a data race.
#[test]
fn lists_started_at_once_on_one_lane_are_emitted_in_gpu_order() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        let ticks = Arc::new(AtomicU64::new(0));
        let queue = Arc::new(Openings::new());
        let recorders: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let stream = LoomStream::opening(0, ticks.clone(), queue.clone(), name, false);
                let ctx = ctx.clone();
                thread::spawn(move || ctx.submit(record_one_zone(&ctx, &stream, name)).unwrap())
            })
            .collect();
        for r in recorders {
            r.join().unwrap();
        }
        // Recorded on one stream at once: where their events interleave, the flush reports
        // them (the crate's rule is one list on a stream at a time), and still emits both.
        if let Err(e) = ctx.flush() {
            assert!(matches!(e.error, Error::ConcurrentLists { .. }) && e.report.errors == 1, "{e}");
        }
        let zones = sink.zones();
        let begins: Vec<(&str, i64)> = zones.iter().map(|z| (z.location.name(), z.gpu_begin_ns)).collect();
        assert_eq!(zones.len(), 2, "{begins:?}");
        assert!(zones[0].gpu_begin_ns < zones[1].gpu_begin_ns, "lane order is not GPU order: {begins:?}");
        let names: Vec<&str> = begins.iter().map(|&(name, _)| name).collect();
        assert_eq!(names, queue.names(), "lane order is not the order the driver saw");
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 2));
    });
}

/// A list's first record fails (after the driver looked at the stream) while another thread
/// starts a list on the same stream; the thread then records a new list. The failure takes no
/// place (the lane would otherwise wait for it for ever) and unlocks the place lock: its
/// Release orders the driver's look before the next opening (weakened, loom reports a data
/// race). Both lists reach the sinks, in the order the driver saw them opened, once each.
#[test]
fn a_first_record_that_fails_takes_no_place_and_the_stream_goes_on() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        let ticks = Arc::new(AtomicU64::new(0));
        let queue = Arc::new(Openings::new());
        let failing = {
            let stream = LoomStream::opening(0, ticks.clone(), queue.clone(), "a", true);
            let ctx = ctx.clone();
            thread::spawn(move || {
                let mut list = ctx.list();
                assert!(
                    list.zone_begin(&stream, DynamicLocation::new("a")).is_err(),
                    "the first record fails"
                );
                drop(list);
                ctx.submit(record_one_zone(&ctx, &stream, "a")).unwrap();
            })
        };
        let other = LoomStream::opening(0, ticks.clone(), queue.clone(), "b", false);
        ctx.submit(record_one_zone(&ctx, &other, "b")).unwrap();
        failing.join().unwrap();
        if let Err(e) = ctx.flush() {
            assert!(matches!(e.error, Error::ConcurrentLists { .. }) && e.report.errors == 1, "{e}");
        }
        let names: Vec<String> = received(&sink).into_iter().map(|(name, _, _)| name).collect();
        assert_eq!(names, queue.names(), "each list once, in the order the driver saw");
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 2));
    });
}

/// A lane-table entry serves one stream at a time and goes to another once the collector is
/// done with every list of it (`shared/lanes/`). Streams 0, 9 and 17 hash to one window of
/// the loom table's first level (two entries of four). `a`'s first list is emitted (its entry
/// idle) and `b` holds the other entry with a list being recorded; then a newcomer starts a
/// list on `c` while `a` starts its second. The newcomer takes over `a`'s entry if it is
/// still idle, else makes the second level; `a` finds its entry, or finds it taken over (at
/// the place lock) and claims another. In every interleaving each stream's lists reach the
/// sinks in their order, each once, and no slot is lost.
#[test]
fn a_stream_that_takes_over_an_idle_entry_keeps_every_stream_in_order() {
    common::model(|| {
        let (_backend, sink, ctx) = context(8, 8, 2);
        let (a, b, c) = (LoomStream::new(0), LoomStream::new(9), LoomStream::new(17));
        ctx.submit(record_one_zone(&ctx, &a, "a1")).unwrap();
        ctx.flush().unwrap();
        let mut held = ctx.list();
        held.zone_begin(&b, DynamicLocation::new("b1")).unwrap();
        let newcomer = {
            let ctx = ctx.clone();
            thread::spawn(move || ctx.submit(record_one_zone(&ctx, &c, "c1")).unwrap())
        };
        ctx.submit(record_one_zone(&ctx, &a, "a2")).unwrap();
        newcomer.join().unwrap();
        held.zone_end(&b).unwrap();
        ctx.submit(held).unwrap();
        ctx.flush().unwrap();
        let on = |lane| -> Vec<String> {
            received(&sink).into_iter().filter(|(_, l, _)| *l == lane).map(|(name, _, _)| name).collect()
        };
        assert_eq!(on(Lane::Stream(0)), ["a1", "a2"]);
        assert_eq!(
            (on(Lane::Stream(9)), on(Lane::Stream(17))),
            (vec!["b1".to_owned()], vec!["c1".to_owned()])
        );
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 4));
    });
}

/// The lists held on streams `ids`, each begun (its place taken) and not ended: the lane
/// table's entries those streams took stay in use until they are submitted.
fn hold(ctx: &TracingContext<LoomBackend>, ids: &[u64]) -> Vec<(LoomStream, EventList<LoomBackend>)> {
    ids.iter()
        .map(|&id| {
            let stream = LoomStream::new(id);
            let mut list = ctx.list();
            list.zone_begin(&stream, DynamicLocation::new(format!("held {id}"))).unwrap();
            (stream, list)
        })
        .collect()
}

/// Ends and submits the lists [`hold`] began.
fn submit_held(ctx: &TracingContext<LoomBackend>, held: Vec<(LoomStream, EventList<LoomBackend>)>) {
    for (stream, mut list) in held {
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
    }
}

/// Two threads start a list each on stream 17 at once while streams 0 and 9 hold the two
/// entries of its first-level window (in use, not idle): both must claim an entry for the
/// lane, one at a time under the claiming lock of its home, and the second finds the entry
/// the first claimed (it looks again under the lock) instead of claiming another: one lane,
/// one entry, one order. The claiming lock's Acquire is what makes the second see the first's
/// claim: weakened, the two lists' first records go under two entries' place locks, unordered
/// (loom reports the openings as a data race).
#[test]
fn two_lists_that_claim_an_entry_for_one_lane_at_once_share_it() {
    common::model(|| {
        let (_backend, sink, ctx) = context(8, 8, 2);
        let held = hold(&ctx, &[0, 9]);
        let ticks = Arc::new(AtomicU64::new(0));
        let queue = Arc::new(Openings::new());
        let recorders: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let stream = LoomStream::opening(17, ticks.clone(), queue.clone(), name, false);
                let ctx = ctx.clone();
                thread::spawn(move || ctx.submit(record_one_zone(&ctx, &stream, name)).unwrap())
            })
            .collect();
        for r in recorders {
            r.join().unwrap();
        }
        submit_held(&ctx, held);
        if let Err(e) = ctx.flush() {
            assert!(matches!(e.error, Error::ConcurrentLists { .. }) && e.report.errors == 1, "{e}");
        }
        let on_17: Vec<&str> = queue.names();
        let names: Vec<String> = received(&sink)
            .into_iter()
            .filter(|(_, l, _)| *l == Lane::Stream(17))
            .map(|(n, _, _)| n)
            .collect();
        assert_eq!(names, on_17, "the lane's lists in the order the driver saw, once each");
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 4));
    });
}

/// Streams 0, 9, 3 and 2 hold every entry of the loom table's first level; then a list on
/// stream 17 and one on stream 6 (first-level homes 3 and 1: two claiming locks) start at
/// once, and each claims an entry of the second level, which one of them makes. The level's
/// pointer is published with a Release CAS and read with Acquire: the thread that did not make
/// the level sees its entries as made (weakened, loom reports the entry's holders, made by the
/// other thread, as touched with no happens-before edge). Both lists reach the sinks, once.
#[test]
fn lanes_of_two_homes_claim_entries_of_a_new_level_at_once() {
    common::model(|| {
        let (_backend, sink, ctx) = context(12, 12, 2);
        let held = hold(&ctx, &[0, 9, 3, 2]);
        let recorders: Vec<_> = [17, 6]
            .into_iter()
            .map(|id| {
                let ctx = ctx.clone();
                thread::spawn(move || {
                    let stream = LoomStream::new(id);
                    ctx.submit(record_one_zone(&ctx, &stream, &format!("new {id}"))).unwrap()
                })
            })
            .collect();
        for r in recorders {
            r.join().unwrap();
        }
        submit_held(&ctx, held);
        ctx.flush().unwrap();
        let mut names: Vec<String> = received(&sink).into_iter().map(|(n, _, _)| n).collect();
        names.sort();
        assert_eq!(names, ["held 0", "held 2", "held 3", "held 9", "new 17", "new 6"]);
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 6));
    });
}
