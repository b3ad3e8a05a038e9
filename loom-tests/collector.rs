#![cfg(gpu_event_pool_loom)]
//! Loom models of the collector's rules: one collector at a time, a second caller never
//! waits; and the end of a context while lists are still alive.

#[path = "common/backend.rs"]
mod backend;
mod common;

use backend::{
    assert_accounted, builder, context, received, record_one_zone, LoomBackend, LoomStream, INJECTED_PANIC,
};
use gpu_event_pool::sink::{ContextInfo, Sink, ZoneBatch};
use gpu_event_pool::{Collected, DynamicLocation, Error, Lane, TracingContext};
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

/// What `collect` returned on two threads calling it at once.
fn collect_on_two_threads(ctx: &TracingContext<LoomBackend>) -> Vec<Collected> {
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let ctx = ctx.clone();
            thread::spawn(move || ctx.collect().unwrap())
        })
        .collect();
    callers.into_iter().map(|c| c.join().unwrap()).collect()
}

/// Two threads race to `collect` one submitted list: it is collected exactly once, and a
/// caller that finds the other collecting gets `Busy` (seen in some interleaving).
#[test]
fn racing_collectors_collect_each_list_once() {
    static SAW_BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    common::model(|| {
        let (_backend, sink, ctx) = context(2, 2, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "submitted")).unwrap();
        let outcomes = collect_on_two_threads(&ctx);
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

/// Two threads collect two submitted lists of two lanes: one takes both, and the other may
/// claim the second lane's piece of that batch while the first reads (seen in some
/// interleaving). Each list is read once and emitted once, and no slot is lost.
#[test]
fn racing_collectors_share_a_batch_and_read_each_list_once() {
    static SAW_SHARED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "x")).unwrap();
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(1), "y")).unwrap();
        let read: Vec<usize> = collect_on_two_threads(&ctx)
            .into_iter()
            .map(|outcome| match outcome {
                Collected::Done(report) => report.read_lists,
                Collected::Busy => 0,
            })
            .collect();
        if read.iter().all(|&r| r > 0) {
            SAW_SHARED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        ctx.flush().unwrap();
        assert_eq!(names(&sink), ["x", "y"], "each list emitted once");
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.submitted, stats.lists_collected), (0, 2));
    });
    assert!(SAW_SHARED.load(std::sync::atomic::Ordering::Relaxed), "no interleaving shared the batch");
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
            thread::spawn(move || {
                ctx.collect().unwrap();
            })
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
                thread::spawn(move || {
                    ctx.collect().unwrap();
                })
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
            thread::spawn(move || {
                ctx.collect().unwrap();
            })
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

/// Two threads each submit a list and flush, at once. A flush that finds the other's pass
/// begun since it began reads nothing itself (that pass took its list): in every
/// interleaving, when a flush returns, its own list has reached the sinks, and each list
/// arrives once.
#[test]
fn concurrent_flushes_each_return_after_their_own_list_arrived() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        let other = {
            let (ctx, sink) = (ctx.clone(), sink.clone());
            thread::spawn(move || {
                ctx.submit(record_one_zone(&ctx, &LoomStream::new(1), "b")).unwrap();
                ctx.flush().unwrap();
                assert!(names(&sink).contains(&"b".to_owned()), "b's flush returned before b arrived");
            })
        };
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "a")).unwrap();
        ctx.flush().unwrap();
        assert!(names(&sink).contains(&"a".to_owned()), "a's flush returned before a arrived");
        other.join().unwrap();
        assert_eq!(names(&sink), ["a", "b"], "each list once");
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.submitted, stats.lists_collected), (0, 2));
    });
}

/// Sorted names of the zones the sink received.
fn names(sink: &gpu_event_pool::sink::memory::MemorySink) -> Vec<String> {
    let mut names: Vec<String> = received(sink).into_iter().map(|(name, _, _)| name).collect();
    names.sort();
    names
}

/// Issue 18, item 1. A thread records and submits a list, then collects, while another thread
/// flushes. The collect may find the emitter busy (the flush holds it: the list it read is emitted by
/// the flush when it looks at the read queue after unlocking), or be turned away while the
/// flush keeps readers out (`MISSED`: the flush collects once more before it returns), or run
/// before or after the flush. In every interleaving, once both calls have returned, both
/// lists have reached the sinks, exactly once. Both a `Busy` and a `Done` collect are reached.
#[test]
fn a_list_submitted_before_a_collect_racing_a_flush_is_emitted_before_both_return() {
    static SAW_BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    static SAW_DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "before the flush")).unwrap();
        let collector = {
            let ctx = ctx.clone();
            thread::spawn(move || {
                // Recorded on this thread: the flush sees the events complete only through
                // what this thread publishes (a flush collecting for a turned-away caller
                // relies on the caller's Release when it entered).
                ctx.submit(record_one_zone(&ctx, &LoomStream::new(1), "submitted, then collected")).unwrap();
                ctx.collect().unwrap()
            })
        };
        ctx.flush().unwrap();
        let outcome = collector.join().unwrap();
        let seen = if outcome == Collected::Busy { &SAW_BUSY } else { &SAW_DONE };
        seen.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            names(&sink),
            ["before the flush", "submitted, then collected"],
            "a list was left behind or emitted twice (collect: {outcome:?})"
        );
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 2));
    });
    assert!(
        SAW_BUSY.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving made the collect return Busy"
    );
    assert!(SAW_DONE.load(std::sync::atomic::Ordering::Relaxed), "no interleaving let the collect emit");
}

/// Issue 18, item 3. The backend panics in the first time read, during a collect, while
/// another thread flushes: whichever call reads the list meets the panic (the crate catches
/// it: `backend::guarded`) and reports it, the flush returns, the list is failed and
/// counted, no slot is lost, and a later collect reads again (no reader is left counted in,
/// no flush flag left set).
#[test]
fn a_backend_panic_in_a_collect_racing_a_flush_fails_the_list_and_loses_nothing() {
    common::exhaustive(|| {
        let (backend, sink, ctx) = context(4, 4, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "read by a panicking backend")).unwrap();
        backend.panic_in_elapsed(1);
        let collector = {
            let ctx = ctx.clone();
            thread::spawn(move || match ctx.collect() {
                Ok(Collected::Done(report)) => (report, None),
                Ok(Collected::Busy) => (Default::default(), None),
                Err(e) => (e.report, Some(e.error)),
            })
        };
        let flushed = match ctx.flush() {
            Ok(report) => (report, None),
            Err(e) => (e.report, Some(e.error)),
        };
        let collected = collector.join().unwrap();
        let errors: Vec<&Error> = [&flushed.1, &collected.1].into_iter().flatten().collect();
        assert_eq!(errors.len(), 1, "the panic is reported by the call that met it: {errors:?}");
        assert!(matches!(errors[0], Error::Backend(e) if e.code.contains(INJECTED_PANIC)), "{}", errors[0]);
        // The reader reports the panic; the emitter (maybe the other call) counts the failed list.
        assert_eq!(flushed.0.errors + collected.0.errors, 1);
        assert_eq!(flushed.0.failed_lists + collected.0.failed_lists, 1);
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected, stats.lists_failed), (0, 0, 1, 1));
        assert_eq!(stats.dropped_zones, 1, "the failed list's zone is counted as dropped");

        ctx.submit(record_one_zone(&ctx, &LoomStream::new(1), "after")).unwrap();
        match ctx.collect().unwrap() {
            Collected::Done(report) => assert_eq!((report.lists, report.zones), (1, 1)),
            Collected::Busy => panic!("a collect after the panic was turned away"),
        }
        assert_eq!(received(&sink), [("after".to_owned(), Lane::Stream(1), 1_000)]);
        assert_accounted(&ctx);
    });
}

/// Issue 18, item 4. A flush runs while another thread keeps submitting (two lists of one
/// lane): the flush returns (it reads once, not until a round takes nothing; loom explores
/// every interleaving, so a flush that could keep going for as long as lists come would not
/// finish), and the list submitted before it was called has reached the sinks when it
/// returns. After a final flush every list has been emitted exactly once, the producer's two
/// in their order. Both a flush that took only the first list and one that also took both of
/// the producer's are reached.
#[test]
fn a_flush_while_another_thread_keeps_submitting_returns_and_every_list_is_emitted_once() {
    static FEWEST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);
    static MOST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    common::exhaustive(|| {
        let (_backend, sink, ctx) = context(8, 8, 2);
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "before the flush")).unwrap();
        let stream = LoomStream::new(1);
        let lists = [record_one_zone(&ctx, &stream, "during 1"), record_one_zone(&ctx, &stream, "during 2")];
        let producer = {
            let ctx = ctx.clone();
            thread::spawn(move || lists.into_iter().for_each(|list| ctx.submit(list).unwrap()))
        };
        let report = ctx.flush().unwrap();
        assert!(
            received(&sink).iter().any(|(name, _, _)| name == "before the flush"),
            "the flush returned before the list submitted before it was emitted"
        );
        FEWEST.fetch_min(report.lists, std::sync::atomic::Ordering::Relaxed);
        MOST.fetch_max(report.lists, std::sync::atomic::Ordering::Relaxed);
        producer.join().unwrap();
        ctx.flush().unwrap();
        let in_order: Vec<String> = received(&sink)
            .into_iter()
            .map(|(name, _, _)| name)
            .filter(|name| name.starts_with("during"))
            .collect();
        assert_eq!(in_order, ["during 1", "during 2"], "a lane's lists out of order, lost or repeated");
        assert_eq!(names(&sink), ["before the flush", "during 1", "during 2"]);
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 3));
    });
    assert_eq!(
        FEWEST.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no flush returned without the producer's lists"
    );
    assert_eq!(MOST.load(std::sync::atomic::Ordering::Relaxed), 3, "no flush took the producer's lists too");
}

/// A sink that, for every batch it gets while `feeding`, asks the producer for one more
/// list and waits until it is submitted: a producer that keeps work queued for as long as
/// anyone emits (the threaded version is in `tests/failures.rs`).
struct Feeder {
    feeding: Arc<AtomicBool>,
    asked: Arc<AtomicUsize>,
    submitted: Arc<AtomicUsize>,
}

impl Sink for Feeder {
    fn zones(&mut self, _context: &ContextInfo, _batch: ZoneBatch<'_>) -> std::io::Result<()> {
        // Acquire: pairs with the Release store that stops the feeding.
        if self.feeding.load(Ordering::Acquire) {
            let asked = self.asked.fetch_add(1, Ordering::Release) + 1;
            // Acquire: pairs with the producer's Release count after its submit.
            while self.submitted.load(Ordering::Acquire) < asked {
                thread::yield_now();
            }
        }
        Ok(())
    }
}

/// Issue 18, item 4, with a producer that never stops on its own: every batch the flush
/// emits makes the producer submit one more list before the batch returns. A flush that
/// collected until a round took nothing would never return here (each execution would go on
/// until loom's branch limit fails it); this one reads once, so it returns, and the list
/// submitted before it was called has reached the sinks by then.
#[test]
fn a_flush_returns_while_every_batch_it_emits_brings_another_list() {
    common::exhaustive(|| {
        let feeding = Arc::new(AtomicBool::new(true));
        let asked = Arc::new(AtomicUsize::new(0));
        let submitted = Arc::new(AtomicUsize::new(0));
        let feeder = Feeder { feeding: feeding.clone(), asked: asked.clone(), submitted: submitted.clone() };
        let (_backend, sink, builder) = builder(8, 8, 2);
        let ctx = builder.sink(feeder).build().unwrap();
        ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "before the flush")).unwrap();
        let producer = {
            let (ctx, feeding) = (ctx.clone(), feeding.clone());
            thread::spawn(move || {
                let stream = LoomStream::new(1);
                loop {
                    // Acquire: pairs with the feeder's Release request.
                    if asked.load(Ordering::Acquire) > submitted.load(Ordering::Relaxed) {
                        ctx.submit(record_one_zone(&ctx, &stream, "fed")).unwrap();
                        submitted.fetch_add(1, Ordering::Release);
                    } else if !feeding.load(Ordering::Acquire) {
                        return;
                    } else {
                        thread::yield_now();
                    }
                }
            })
        };
        ctx.flush().unwrap();
        assert!(
            received(&sink).iter().any(|(name, _, _)| name == "before the flush"),
            "the flush returned before the list submitted before it was emitted"
        );
        // Release: the feeder, which only this thread's flushes call from now on, stops.
        feeding.store(false, Ordering::Release);
        producer.join().unwrap();
    });
}

/// A list dropped unsubmitted gives its place on its lane up (void places, sharded per
/// thread): a later list of the lane, submitted already, waits on that place until the
/// emitter learns of the void. The thread that dropped the list then flushes while another
/// collects: when its flush returns, the later list has been emitted, in every interleaving
/// (a void seen too late would leave it waiting until some later collect).
#[test]
fn a_list_dropped_unsubmitted_frees_its_lane_for_a_flush_that_follows() {
    common::model(|| {
        let (_backend, sink, ctx) = context(4, 4, 2);
        let stream = LoomStream::new(0);
        let a = record_one_zone(&ctx, &stream, "a");
        let b = record_one_zone(&ctx, &stream, "b");
        ctx.submit(b).unwrap();
        let dropper = {
            let (ctx, sink) = (ctx.clone(), sink.clone());
            thread::spawn(move || {
                drop(a);
                ctx.flush().unwrap();
                assert_eq!(names(&sink), ["b"], "the flush returned with b behind a's given-up place");
            })
        };
        ctx.collect().unwrap();
        dropper.join().unwrap();
        assert_eq!(names(&sink), ["b"]);
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 1));
    });
}

/// What the producer of the next model is told.
enum Ask {
    /// Submit one more list, and collect.
    More,
    /// The collect under test returned: stop.
    Stop,
}

/// A sink that, for every batch it gets on the thread that made it (the holder under test),
/// asks the producer for one more list. It waits for nothing: the producer's collect may wait
/// for this very round to end. (A channel, which loom blocks on, not a spinning flag: the
/// model stays small.)
struct AskingFeeder {
    on: loom::thread::ThreadId,
    ask: loom::sync::mpsc::Sender<Ask>,
}

impl Sink for AskingFeeder {
    fn zones(&mut self, _context: &ContextInfo, _batch: ZoneBatch<'_>) -> std::io::Result<()> {
        if thread::current().id() == self.on {
            let _ = self.ask.send(Ask::More);
        }
        Ok(())
    }
}

/// The call a model keeps going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Collect,
    Flush,
}

/// Issue 26, item 7. For every batch the call under test (on main) emits, a producer submits
/// one more list and collects (three times at most): in the interleavings where the producer
/// keeps up, each round of that call brings a list that a caller which found the emitter busy
/// read and left behind, or that a flush turned away, and each round takes one list (the next
/// is submitted only once the round's take is done). The call returns after its rounds (two
/// under loom, `ROUNDS`; a flush's own round and, for a turned-away caller, a collect's two),
/// not for as long as the producer goes on; and no read list is left behind: the producer's
/// collect that finds the holder in its last round waits for that round to end and emits its
/// list itself (or sees another round begin). Once both calls returned, every list has
/// reached the sinks exactly once. Returns whether the producer took the emitter over from
/// the call's last round.
fn call_returns_after_its_rounds_while_a_producer_keeps_collecting(held: Held) -> bool {
    let (ask, asked) = loom::sync::mpsc::channel();
    let feeder = AskingFeeder { on: thread::current().id(), ask: ask.clone() };
    let (_backend, sink, builder) = builder(8, 8, 2);
    let ctx = builder.sink(feeder).build().unwrap();
    ctx.submit(record_one_zone(&ctx, &LoomStream::new(0), "before")).unwrap();
    let producer = {
        let ctx = ctx.clone();
        thread::spawn(move || {
            let stream = LoomStream::new(1);
            let mut outcomes = Vec::new();
            loop {
                match asked.recv().unwrap() {
                    Ask::More if outcomes.len() < 3 => {
                        ctx.submit(record_one_zone(&ctx, &stream, "fed")).unwrap();
                        outcomes.push(ctx.collect().unwrap());
                    }
                    Ask::More => {}
                    Ask::Stop => return outcomes,
                }
            }
        })
    };
    let (report, bound) = match held {
        Held::Collect => match ctx.collect().unwrap() {
            Collected::Done(report) => (report, 2),
            Collected::Busy => panic!("no other caller had the emitter yet"),
        },
        Held::Flush => (ctx.flush().unwrap(), 3),
    };
    assert!(report.lists <= bound, "the {held:?} kept going: {report:?}");
    ask.send(Ask::Stop).unwrap();
    let outcomes = producer.join().unwrap();
    assert_eq!(
        names(&sink).len(),
        1 + outcomes.len(),
        "a list was left behind after both returned (producer: {outcomes:?}; {held:?}: {report:?})"
    );
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.owned, stats.submitted, stats.lists_collected), (0, 0, 1 + outcomes.len()));
    report.lists == bound && outcomes.last().is_some_and(|o| matches!(o, Collected::Done(_)))
}

/// Item 7 with a collect under test: see [`call_returns_after_its_rounds_while_a_producer_keeps_collecting`].
/// A producer that took the emitter over from the collect's last round is reached (asserted).
///
/// Shown to fail: with the emitter looking at `read` after every round without a bound (the
/// code before), "the Collect kept going" (three rounds, three lists); with the caller never
/// waiting for a last round (`take_over_from_last_round` returning `None`), "a list was left
/// behind" after both returned.
#[test]
fn a_collect_returns_after_its_rounds_while_a_producer_keeps_collecting_and_no_list_is_left_behind() {
    static SAW_TAKE_OVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    common::model(|| {
        if call_returns_after_its_rounds_while_a_producer_keeps_collecting(Held::Collect) {
            SAW_TAKE_OVER.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(
        SAW_TAKE_OVER.load(std::sync::atomic::Ordering::Relaxed),
        "no producer took the emitter over from the collect's last round"
    );
}

/// Item 7 with a flush under test: its own round, then (for the producer's collect it turned
/// away, or lists read while it flushed its sinks) at most two more. A producer that took the
/// emitter over from the flush's last round is reached (asserted).
///
/// Shown to fail like the collect's model: "the Flush kept going" on the code before, "a list
/// was left behind" with the caller never waiting for a last round.
#[test]
fn a_flush_returns_after_its_rounds_while_a_producer_keeps_collecting_and_no_list_is_left_behind() {
    static SAW_TAKE_OVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    common::model(|| {
        if call_returns_after_its_rounds_while_a_producer_keeps_collecting(Held::Flush) {
            SAW_TAKE_OVER.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(
        SAW_TAKE_OVER.load(std::sync::atomic::Ordering::Relaxed),
        "no producer took the emitter over from the flush's last round"
    );
}
