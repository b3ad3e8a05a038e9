#![cfg(gpu_event_pool_loom)]
//! Loom models of the collector's rules: one collector at a time, a second caller never
//! waits; and the end of a context while lists are still alive.

#[path = "common/backend.rs"]
mod backend;
mod common;

use backend::{assert_accounted, builder, context, received, record_one_zone, LoomStream};
use gpu_event_pool::sink::{ContextInfo, Sink, ZoneBatch};
use gpu_event_pool::{Collected, DynamicLocation, Lane};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A sink that, on its first batch, says it is inside the collector (`inside`), then holds
/// the collector there until `returned` callers of `collect` have come back out.
struct GateSink {
    inside: Arc<AtomicBool>,
    returned: Arc<AtomicUsize>,
}

impl Sink for GateSink {
    fn zones(&mut self, _context: &ContextInfo, _batch: ZoneBatch<'_>) -> std::io::Result<()> {
        self.inside.store(true, Ordering::Release);
        // Acquire: pairs with the Release increment after the other caller's `collect`.
        while self.returned.load(Ordering::Acquire) == 0 {
            thread::yield_now();
        }
        Ok(())
    }
}

/// While one thread is inside `collect` (held there by the gate sink), a second caller gets
/// `Busy` and returns: if it waited for the collector instead, the two would wait for each
/// other and loom would report the deadlock. The list is collected exactly once.
///
/// The second caller starts only once the first is inside: loom 0.7's `Mutex::try_lock`
/// wrongly blocks a thread whose `try_lock` is pending when another thread takes the lock
/// (tokio-rs/loom#376), so a model racing the two `try_lock`s cannot tell a blocking
/// `collect` from loom's false block. The race itself is the next model.
#[test]
fn second_collector_returns_busy_while_the_first_collects() {
    common::exhaustive(|| {
        let inside = Arc::new(AtomicBool::new(false));
        let returned = Arc::new(AtomicUsize::new(0));
        let (_backend, sink, builder) = builder(2, 2, 2);
        let gate = GateSink { inside: inside.clone(), returned: returned.clone() };
        let ctx = builder.sink(gate).build().unwrap();
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "submitted")).unwrap();
        let first = {
            let ctx = ctx.clone();
            thread::spawn(move || ctx.collect().unwrap())
        };
        let second = {
            let ctx = ctx.clone();
            thread::spawn(move || {
                // Acquire: pairs with the gate's Release store.
                while !inside.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                let outcome = ctx.collect().unwrap();
                returned.fetch_add(1, Ordering::Release);
                outcome
            })
        };
        assert_eq!(second.join().unwrap(), Collected::Busy);
        match first.join().unwrap() {
            Collected::Done(report) => assert_eq!(report.lists, 1),
            Collected::Busy => panic!("the first caller found no other collector"),
        }
        assert_eq!(received(&sink), [("submitted".to_owned(), Lane::Stream(0), 1_000)]);
        let stats = assert_accounted(&ctx);
        assert_eq!(
            (stats.owned, stats.submitted, stats.lists_collected),
            (0, 0, 1),
            "collected, nothing held"
        );
    });
}

/// Two threads race to `collect` one submitted list: it is collected exactly once, and a
/// caller that finds the other collecting gets `Busy` (seen in some interleaving).
#[test]
fn racing_collectors_collect_each_list_once() {
    static SAW_BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    common::model(|| {
        let (_backend, sink, ctx) = context(2, 2, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "submitted")).unwrap();
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let ctx = ctx.clone();
                thread::spawn(move || ctx.collect().unwrap())
            })
            .collect();
        let outcomes: Vec<Collected> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        let lists: usize = outcomes
            .iter()
            .map(|o| match o {
                Collected::Done(report) => report.lists,
                Collected::Busy => 0,
            })
            .sum();
        assert_eq!(lists, 1, "{outcomes:?}");
        if outcomes.contains(&Collected::Busy) {
            SAW_BUSY.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        assert_eq!(received(&sink), [("submitted".to_owned(), Lane::Stream(0), 1_000)]);
        let stats = assert_accounted(&ctx);
        assert_eq!(
            (stats.owned, stats.submitted, stats.lists_collected),
            (0, 0, 1),
            "collected, nothing held"
        );
    });
    assert!(SAW_BUSY.load(std::sync::atomic::Ordering::Relaxed), "no interleaving overlapped the collectors");
}

/// The main thread drops its handle while thread A submits a list and drops the other
/// handle, and thread B still holds an unsubmitted list with an open zone, which it ends and
/// drops. Whichever handle goes last flushes: A's zone always arrives, exactly once; B's
/// list releases its slots into a pool that has no handle left and emits nothing; the pool
/// and its events are destroyed exactly once, by whoever lets go last.
#[test]
fn last_handle_dropped_while_another_thread_holds_a_list() {
    common::model(|| {
        let (backend, sink, ctx) = context(2, 4, 2);
        let mut held = ctx.list();
        let held_stream = LoomStream::new(1);
        held.zone_begin(&held_stream, DynamicLocation::new("held")).unwrap();
        assert_accounted(&ctx);

        let submitter = {
            let ctx = ctx.clone();
            thread::spawn(move || {
                ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "submitted")).unwrap()
            })
        };
        let holder = thread::spawn(move || {
            held.zone_end(&held_stream).unwrap();
            drop(held);
        });
        drop(ctx);
        submitter.join().unwrap();
        holder.join().unwrap();

        assert_eq!(received(&sink), [("submitted".to_owned(), Lane::Stream(0), 1_000)]);
        assert!(sink.flushes() >= 1, "the last handle flushed the sinks");
        assert_eq!(backend.live_events(), 0, "every event destroyed with the pool");
    });
}

/// Two lists of one lane, recorded in order A then B, are submitted by two threads in either
/// order while a third collects: the sinks get A before B, each once, however the threads
/// interleave (B waits while A is not submitted yet), and no slot is lost.
#[test]
fn lists_of_one_lane_submitted_out_of_order_reach_the_sinks_in_order() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        let stream = LoomStream::new(0);
        let a = record_one_zone(&ctx, &stream, "a");
        let b = record_one_zone(&ctx, &stream, "b");
        let submitters: Vec<_> = [b, a]
            .into_iter()
            .map(|list| {
                let ctx = ctx.clone();
                thread::spawn(move || ctx.submit(list).unwrap())
            })
            .collect();
        let collector = {
            let ctx = ctx.clone();
            thread::spawn(move || drop(ctx.collect().unwrap()))
        };
        for s in submitters {
            s.join().unwrap();
        }
        collector.join().unwrap();
        ctx.flush().unwrap();
        let names: Vec<String> = received(&sink).into_iter().map(|(name, _, _)| name).collect();
        assert_eq!(names, ["a", "b"]);
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 2));
    });
}

/// Two threads start a list each on one stream at once: each list takes its place on the
/// lane in the same step as it records its first event (under the lane's lock), so the lane
/// order the sinks get is the order of the first events' GPU stamps, in every interleaving.
/// (When recording and taking the place were two steps, a thread preempted between them let
/// the other take the earlier place for a later event: this model found it.)
#[test]
fn lists_started_at_once_on_one_lane_are_emitted_in_gpu_order() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        let ticks = Arc::new(loom::sync::atomic::AtomicU64::new(0));
        let recorders: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let (ctx, stream) = (ctx.clone(), LoomStream::shared(0, ticks.clone()));
                thread::spawn(move || ctx.submit(record_one_zone(&ctx, &stream, name)).unwrap())
            })
            .collect();
        for r in recorders {
            r.join().unwrap();
        }
        ctx.flush().unwrap();
        let zones = sink.zones();
        let begins: Vec<(&str, i64)> = zones.iter().map(|z| (z.location.name(), z.gpu_begin_ns)).collect();
        assert_eq!(zones.len(), 2, "{begins:?}");
        assert!(zones[0].gpu_begin_ns < zones[1].gpu_begin_ns, "lane order is not GPU order: {begins:?}");
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 2));
    });
}

/// Two collectors race over two complete lists of two lanes: whichever reads a list and
/// finds the other emitting hands it over, so once both calls have returned every list has
/// reached the sinks, exactly once, with no flush.
#[test]
fn a_list_read_by_a_busy_collector_is_emitted_before_both_return() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "x")).unwrap();
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(1), "y")).unwrap();
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let ctx = ctx.clone();
                thread::spawn(move || drop(ctx.collect().unwrap()))
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
        let mut names: Vec<String> = received(&sink).into_iter().map(|(name, _, _)| name).collect();
        names.sort();
        assert_eq!(names, ["x", "y"]);
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.submitted, stats.lists_collected), (0, 2));
    });
}

/// A sink that fails its first batch.
struct FailsOnce(bool);

impl Sink for FailsOnce {
    fn zones(&mut self, _context: &ContextInfo, _batch: ZoneBatch<'_>) -> std::io::Result<()> {
        if std::mem::replace(&mut self.0, false) {
            return Err(std::io::Error::other("sink full"));
        }
        Ok(())
    }
}

/// A recorder submits while a collector runs; the backend fails the first time read and a
/// sink fails its first batch. Whatever the interleaving, every slot comes back, each list is
/// collected once (failed or emitted), and every failure is reported.
#[test]
fn a_failing_read_and_a_failing_sink_lose_no_slot() {
    common::model(|| {
        let (backend, sink, builder) = builder(4, 4, 2);
        let ctx = builder.sink(FailsOnce(true)).build().unwrap();
        backend.fail_elapsed(1);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "first")).unwrap();
        let recorder = {
            let ctx = ctx.clone();
            thread::spawn(move || ctx.submit(record_one_zone(&ctx, &LoomStream::new(1), "second")).unwrap())
        };
        let collector = {
            let ctx = ctx.clone();
            thread::spawn(move || ctx.collect().err().map_or(0, |e| e.report.errors))
        };
        recorder.join().unwrap();
        let errors = collector.join().unwrap();
        let flushed = ctx.flush().err().map_or(0, |e| e.report.errors);
        assert_eq!(errors + flushed, 2, "the failed read and the failed sink batch are both reported");
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected, stats.lists_failed), (0, 0, 2, 1));
        assert_eq!(received(&sink).len(), 1, "the list whose read failed is dropped, the other emitted");
    });
}

/// A flush races a collect over two submitted lists of two lanes: the flush keeps new readers
/// out and waits for one already reading, so once it returns both lists have reached the
/// sinks, each once, whichever call read them.
#[test]
fn a_flush_racing_a_collect_emits_every_list_once() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "x")).unwrap();
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(1), "y")).unwrap();
        let collector = {
            let ctx = ctx.clone();
            thread::spawn(move || drop(ctx.collect().unwrap()))
        };
        ctx.flush().unwrap();
        let mut names: Vec<String> = received(&sink).into_iter().map(|(name, _, _)| name).collect();
        names.sort();
        assert_eq!(names, ["x", "y"], "flush returned before a list read by the collector was emitted");
        collector.join().unwrap();
        assert_eq!(received(&sink).len(), 2);
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.submitted, stats.lists_collected), (0, 2));
    });
}
