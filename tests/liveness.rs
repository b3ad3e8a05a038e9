//! Issue 26, "Trust for hours": liveness and failure reporting. A flush or collect that
//! producers keep going, the hold limit measured from the wrong moment, a context kept alive
//! (its sinks unfinished) by a collector thread past its last handle, failures of the last
//! handle's flush and of the error handler itself reported nowhere. Each test failed before
//! its fix (the commit that added it says how).

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, Error, TracingContext};
use std::time::Duration;

/// Records one complete zone on `stream` and submits it.
fn submit_one(ctx: &TracingContext<SimBackend>, sim: &SimBackend, stream: &SimStream, name: &'static str) {
    let mut list = ctx.list();
    list.zone_begin(stream, gpu_event_pool::DynamicLocation::new(name)).unwrap();
    sim.launch(stream, 1_000);
    list.zone_end(stream).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(10_000);
}

/// The names of the zones a sink got, in order.
fn names(sink: &MemorySink) -> Vec<String> {
    sink.zones().iter().map(|z| z.location.name().to_owned()).collect()
}

/// Item 8: the hold limit runs from when the held list took its place (docs/design.md,
/// section 8), not from when the emitter first saw the stall. A list held open for 2 s
/// before anything was collected is past the default limit of 500 ms at the first flush,
/// which moves its lane on at once.
#[test]
fn a_list_held_past_the_hold_limit_before_any_collect_is_released_by_the_next_flush() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let zones = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(zones.clone()).build().unwrap();
    let mut held = ctx.list();
    held.zone_begin(&stream, location!("held open")).unwrap();
    submit_one(&ctx, &sim, &stream, "behind it");
    sim.advance(2_000_000_000);
    let error = match ctx.flush() {
        Ok(report) => panic!("the flush moved nothing on: {report:?}, zones {:?}", names(&zones)),
        Err(e) => e,
    };
    match &error.error {
        Error::LaneHeld { list_id, held_for, .. } => {
            assert_eq!(*list_id, held.id());
            assert!(*held_for >= Duration::from_secs(2), "held for {held_for:?}");
        }
        other => panic!("{other}"),
    }
    assert_eq!((error.report.lists, error.report.pending_lists), (1, 0), "{:?}", error.report);
    assert_eq!(names(&zones), ["behind it"]);

    held.zone_end(&stream).unwrap();
    ctx.submit(held).unwrap();
    ctx.flush().unwrap();
    assert_eq!(names(&zones), ["behind it", "held open"], "the held list is emitted late");
    let stats = ctx.stats();
    assert_eq!((stats.lanes_released, stats.lists_late, stats.unaccounted()), (1, 1, 0), "{stats:?}");
}

/// Item 8: lists held one after another on one lane, all opened at the same moment, each
/// past the limit: one collect moves the lane past all of them (each reported), instead of
/// one limit's wait per held list.
#[test]
fn lists_held_one_after_another_are_all_released_once_each_is_past_the_limit() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let zones = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone())
        .hold_limit(Duration::from_millis(10))
        .sink(zones.clone())
        .build()
        .unwrap();
    let mut held: Vec<_> = (0..3).map(|_| ctx.list()).collect();
    for list in &mut held {
        list.zone_begin(&stream, location!("held open")).unwrap();
    }
    submit_one(&ctx, &sim, &stream, "behind them");
    sim.advance(11_000_000);
    let error = ctx.collect().expect_err("three held lists past the limit are reported");
    assert!(matches!(error.error, Error::LaneHeld { .. }), "{error}");
    assert_eq!((error.report.lists, error.report.errors), (1, 3), "{:?}", error.report);
    assert_eq!(names(&zones), ["behind them"], "the lane waited for more than one limit");
    assert_eq!(ctx.stats().lanes_released, 3);
    for mut list in held {
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
    }
    ctx.flush().unwrap();
    let stats = ctx.stats();
    assert_eq!((stats.zones_emitted, stats.lists_late, stats.unaccounted()), (4, 3, 0), "{stats:?}");
}

/// A sink whose flush fails with an I/O error ("disk full"); batches go through.
struct FullAtFlush;

impl gpu_event_pool::sink::Sink for FullAtFlush {
    fn zones(
        &mut self,
        _: &gpu_event_pool::sink::ContextInfo,
        _: gpu_event_pool::sink::ZoneBatch<'_>,
    ) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Err(std::io::Error::other("disk full"))
    }
}

/// Item 10: the last handle's flush fails in a sink ("disk full"): the context's error
/// handler hears of it, with the context it happened in.
#[test]
fn a_failure_in_the_last_handles_flush_reaches_the_error_handler() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (failed, failures) = std::sync::mpsc::channel();
    let failed = std::sync::Mutex::new(failed);
    let ctx = TracingContext::builder(sim.clone())
        .name("gpu 9")
        .sink(FullAtFlush)
        .on_error(move |context, error| {
            let _ = failed.lock().unwrap().send(format!("{}: {error}", context.name));
        })
        .build()
        .unwrap();
    submit_one(&ctx, &sim, &stream, "flushed last");
    drop(ctx);
    let reported: Vec<String> = failures.try_iter().collect();
    assert!(
        matches!(&reported[..], [r] if r.starts_with("gpu 9: sink failed: disk full")),
        "the last flush's failure went to the handler: {reported:?}"
    );
}

/// Item 10: a sink's failed flush is counted in `Stats::sink_failures`, like a failed batch.
#[test]
fn a_sink_flush_that_fails_is_counted() {
    let sim = SimBackend::manual();
    let ctx = TracingContext::builder(sim.clone()).sink(FullAtFlush).build().unwrap();
    let error = ctx.flush().unwrap_err();
    assert!(error.to_string().contains("disk full"), "{error}");
    assert_eq!(ctx.stats().sink_failures, 1, "{:?}", ctx.stats());
}

/// A sink that takes a while over each batch: a collector thread is then often inside a
/// collect when the last handle goes.
struct Slow;

impl gpu_event_pool::sink::Sink for Slow {
    fn zones(
        &mut self,
        _: &gpu_event_pool::sink::ContextInfo,
        _: gpu_event_pool::sink::ZoneBatch<'_>,
    ) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_micros(300));
        Ok(())
    }
}

/// Iterations of the races below: a collector thread mid-collect when the last handle goes.
const DROP_ROUNDS: usize = if cfg!(miri) { 2 } else { 200 };

/// Records and submits a few lists on a realtime context, then drops its last handle while
/// a collector thread (a `CollectorThread`, or the context's own) collects it in a tight
/// loop: when `drop` returns, the Chrome trace (written to a file that cannot seek, so the
/// array is closed only when the sink is finished) is complete JSON with every zone.
fn the_trace_is_complete_when_the_last_handle_is_dropped(own_thread: bool) {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-liveness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let collector = gpu_event_pool::CollectorThread::spawn(Duration::from_micros(1)).unwrap();
    for round in 0..DROP_ROUNDS {
        let path = dir.join(format!("trace-{own_thread}-{round}.json"));
        let file = std::fs::File::create(&path).unwrap();
        let sim = SimBackend::realtime();
        let stream = sim.stream();
        let mut builder = TracingContext::builder(sim.clone())
            .sink(gpu_event_pool::sink::chrome::ChromeTrace::new(file).sink())
            .sink(Slow);
        if own_thread {
            builder = builder.collect_every(Duration::from_micros(1));
        }
        let ctx = builder.build().unwrap();
        if !own_thread {
            collector.add(&ctx);
        }
        for _ in 0..3 {
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("zone")).unwrap();
            sim.launch(&stream, 1_000);
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
        }
        // Let the collector thread find the lists and be in the slow sink, most rounds.
        std::thread::sleep(Duration::from_micros(500));
        drop(ctx);
        let text = std::fs::read_to_string(&path).unwrap();
        let events: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("round {round}: the trace is not complete JSON after the last drop ({e}): ...{}", {
                let tail = text.len().saturating_sub(120);
                &text[tail..]
            })
        });
        let zones = events.iter().filter(|e| e["name"] == "zone").count();
        assert_eq!(zones, 3, "round {round}");
        std::fs::remove_file(&path).ok();
    }
    std::fs::remove_dir(&dir).ok();
}

/// Item 9, with a `CollectorThread`: it holds the context only weakly, but held it strongly
/// for a whole collect (and the error handler's call), so the last handle's drop could leave
/// the sinks, and the trace, unfinished to that thread.
#[test]
#[cfg_attr(miri, ignore = "a collector thread on the real clock")]
fn a_collector_thread_never_keeps_the_sinks_of_a_dropped_context_alive() {
    the_trace_is_complete_when_the_last_handle_is_dropped(false);
}

/// Item 9, with the context's own collector thread (`Builder::collect_every`).
#[test]
#[cfg_attr(miri, ignore = "a collector thread on the real clock")]
fn the_contexts_own_collector_thread_never_keeps_its_sinks_alive() {
    the_trace_is_complete_when_the_last_handle_is_dropped(true);
}

/// A sink that fails every batch with an I/O error.
struct Full;

impl gpu_event_pool::sink::Sink for Full {
    fn zones(
        &mut self,
        _: &gpu_event_pool::sink::ContextInfo,
        _: gpu_event_pool::sink::ZoneBatch<'_>,
    ) -> std::io::Result<()> {
        Err(std::io::Error::other("disk full"))
    }
}

/// A logger that keeps every record of this test binary.
struct Kept(std::sync::Mutex<Vec<String>>);

impl log::Log for Kept {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        self.0.lock().unwrap().push(format!("{} {} {}", record.level(), record.target(), record.args()));
    }
    fn flush(&self) {}
}

static KEPT: Kept = Kept(std::sync::Mutex::new(Vec::new()));

/// The records logged so far (the logger is installed by the first caller).
fn logged() -> Vec<String> {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&KEPT).unwrap();
        log::set_max_level(log::LevelFilter::Warn);
    });
    KEPT.0.lock().unwrap().clone()
}

/// Waits until `done` holds, failing the test after a long while: a minute, which only a
/// failing run waits for all of (under ThreadSanitizer, with a dozen tests beside it on two
/// cores, a collector thread's pass has taken seconds).
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The error handler's bug: a panic, raised without the panic hook. The crate catches any
/// unwind alike; the hook's backtrace only slows the test (symbolizing it took 4 s under
/// ThreadSanitizer, and a CI run on two cores missed a 10 s deadline waiting for it).
fn handler_bug() -> ! {
    std::panic::resume_unwind(Box::new("error handler bug"))
}

/// Item 12: an error handler that panics (the user's code) is caught: background collection
/// goes on (the handler is called again for the next failure), the panics are counted in
/// `Stats::error_handler_panics`, and the first is logged as an error.
fn a_panicking_error_handler_does_not_stop_background_collection(own_thread: bool) {
    logged();
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let name = if own_thread { "gpu 11 (own thread)" } else { "gpu 11 (collector thread)" };
    let handler = {
        let calls = std::sync::Arc::clone(&calls);
        move |_: &gpu_event_pool::sink::ContextInfo, _: &gpu_event_pool::CollectError| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            handler_bug();
        }
    };
    let collector = gpu_event_pool::CollectorThread::spawn(Duration::from_millis(1)).unwrap();
    let mut builder = TracingContext::builder(sim.clone()).name(name).sink(Full);
    if own_thread {
        builder = builder.collect_every(Duration::from_millis(1)).on_error(handler);
    } else {
        collector.on_error(handler);
    }
    let ctx = builder.build().unwrap();
    if !own_thread {
        collector.add(&ctx);
    }
    let count = || calls.load(std::sync::atomic::Ordering::Relaxed);
    submit_one(&ctx, &sim, &stream, "lost to a full disk");
    eventually("the handler was never called", || count() >= 1);
    submit_one(&ctx, &sim, &stream, "lost to a full disk too");
    eventually("background collection stopped after the error handler panicked", || count() >= 2);
    // The handler counts its call before it panics; the panic is counted once it is caught.
    eventually("the second panic was not counted", || ctx.stats().error_handler_panics >= 2);
    let errors: Vec<String> =
        logged().into_iter().filter(|l| l.starts_with("ERROR") && l.contains(name)).collect();
    assert!(
        matches!(&errors[..], [e] if e.contains("error handler") && e.contains("error handler bug")),
        "logged once, as an error: {errors:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore = "a collector thread on the real clock")]
fn a_panicking_error_handler_does_not_stop_the_contexts_own_collector_thread() {
    a_panicking_error_handler_does_not_stop_background_collection(true);
}

#[test]
#[cfg_attr(miri, ignore = "a collector thread on the real clock")]
fn a_panicking_error_handler_does_not_stop_a_collector_thread() {
    a_panicking_error_handler_does_not_stop_background_collection(false);
}

/// A sink that, for every batch it gets on the thread under test, asks the producer for one
/// more list, which the producer submits and then collects; it waits (a while at most) for
/// that collect to return. A producer that keeps work coming for as long as anyone emits,
/// and collects after each submit (the demo's `--recorders-collect`).
struct Feeder {
    on: std::thread::ThreadId,
    asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    answered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl gpu_event_pool::sink::Sink for Feeder {
    fn zones(
        &mut self,
        _: &gpu_event_pool::sink::ContextInfo,
        _: gpu_event_pool::sink::ZoneBatch<'_>,
    ) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if std::thread::current().id() == self.on {
            let asked = self.asked.fetch_add(1, SeqCst) + 1;
            // A collect that finds the emitter in its last round waits for it: not forever.
            let deadline = std::time::Instant::now() + Duration::from_millis(200);
            while self.answered.load(SeqCst) < asked && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

/// Which call the producer keeps going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Flush,
    Collect,
}

/// Item 7: one `flush` (or `collect`) on this thread while a producer submits one more list,
/// and collects it, for every batch that call emits. The call must return once it has done a
/// bounded amount of work (the list submitted before it emitted), not for as long as the
/// producer goes on; and every list is still emitted exactly once, in order, before the
/// producer's own collect returns or by that call.
fn a_call_returns_while_a_producer_keeps_submitting_and_collecting(call: Call) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let zones = MemorySink::new();
    let (asked, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let feeder = Feeder {
        on: std::thread::current().id(),
        asked: Arc::clone(&asked),
        answered: Arc::clone(&answered),
    };
    let ctx = TracingContext::builder(sim.clone()).sink(feeder).sink(zones.clone()).build().unwrap();
    let wait_for_gpu = |ctx: &TracingContext<SimBackend>| {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("list")).unwrap();
        list.zone_end(&stream).unwrap();
        list
    };
    let first = wait_for_gpu(&ctx);
    ctx.submit(first).unwrap();
    std::thread::sleep(Duration::from_millis(1)); // complete on the realtime clock
    let stop = AtomicBool::new(false);
    let (outcome, took, submitted) = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let mut submitted = 0;
            while !stop.load(SeqCst) {
                if asked.load(SeqCst) > answered.load(SeqCst) {
                    ctx.submit(wait_for_gpu(&ctx)).unwrap();
                    submitted += 1;
                    std::thread::sleep(Duration::from_micros(50)); // complete on the realtime clock
                    ctx.collect().unwrap();
                    answered.fetch_add(1, SeqCst);
                } else {
                    std::thread::yield_now();
                }
            }
            submitted
        });
        // Stops the producer if the call has not returned by then: the call then returns too,
        // late, and the test fails instead of hanging.
        let (returned, watch) = std::sync::mpsc::channel::<()>();
        let stopping = &stop;
        s.spawn(move || {
            if watch.recv_timeout(Duration::from_secs(5)).is_err() {
                stopping.store(true, SeqCst);
            }
        });
        let started = std::time::Instant::now();
        let outcome = match call {
            Call::Flush => ctx.flush().map(|r| r.lists).unwrap(),
            Call::Collect => match ctx.collect().unwrap() {
                gpu_event_pool::Collected::Done(r) => r.lists,
                gpu_event_pool::Collected::Busy => panic!("no other collector at first"),
            },
        };
        let took = started.elapsed();
        drop(returned);
        stop.store(true, SeqCst);
        (outcome, took, producer.join().unwrap())
    });
    assert!(
        outcome <= 8 && took < Duration::from_secs(5),
        "the {call:?} kept going while the producer did: {outcome} lists, {took:?}, {submitted} submitted"
    );
    ctx.flush().unwrap();
    let names = names(&zones);
    assert_eq!(names.len(), 1 + submitted, "every list once");
    let stats = ctx.stats();
    assert_eq!((stats.lists_collected, stats.unaccounted()), (1 + submitted, 0), "{stats:?}");
}

#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn a_flush_returns_while_a_producer_keeps_submitting_and_collecting() {
    a_call_returns_while_a_producer_keeps_submitting_and_collecting(Call::Flush);
}

#[test]
#[cfg_attr(miri, ignore = "threads wait on each other with real timeouts")]
fn a_collect_returns_while_a_producer_keeps_submitting_and_collecting() {
    a_call_returns_while_a_producer_keeps_submitting_and_collecting(Call::Collect);
}

/// Item 12: a recording thread that finds the pool exhausted collects (its relief), and a
/// failure there goes to the error handler: a handler that panics is caught there too, so
/// the panic does not unwind through the application's `zone_begin`.
#[test]
fn a_panicking_error_handler_does_not_unwind_through_a_recording_thread() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .capacity(8, 8)
        .batch(2)
        .sink(Full)
        .on_error(|_, _| handler_bug())
        .build()
        .unwrap();
    for _ in 0..4 {
        submit_one(&ctx, &sim, &stream, "lost to a full disk");
    }
    // Every slot is in a list not collected yet: this begin collects, the sink fails.
    let recorded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("after")).map(|_| ())
    }));
    assert!(recorded.is_ok(), "the error handler's panic unwound through zone_begin");
    assert!(ctx.stats().error_handler_panics >= 1, "{:?}", ctx.stats());
}

/// A sink that submits one more list for each batch it gets while it holds a handle: a
/// producer that gives every collect round a list to collect.
struct ListPerBatch {
    ctx: std::sync::Arc<std::sync::Mutex<Option<TracingContext<SimBackend>>>>,
    sim: SimBackend,
    stream: SimStream,
    fed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl gpu_event_pool::sink::Sink for ListPerBatch {
    fn zones(
        &mut self,
        _: &gpu_event_pool::sink::ContextInfo,
        _: gpu_event_pool::sink::ZoneBatch<'_>,
    ) -> std::io::Result<()> {
        let ctx = self.ctx.lock().unwrap().clone();
        if let Some(ctx) = ctx {
            submit_one(&ctx, &self.sim, &self.stream, "fed");
            self.fed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A flush's first part collects beside the other collectors until as many lists were
/// collected as had been submitted when it began. Lists dropped unsubmitted were counted in
/// that target too, though never collected: with fifty dropped, the first part went on for
/// fifty more rounds while a producer kept each round busy (one list each), instead of
/// stopping once the one list submitted before the flush was collected.
#[test]
fn lists_dropped_unsubmitted_do_not_keep_a_flush_collecting_beside_a_producer() {
    let sim = SimBackend::manual();
    let handle = std::sync::Arc::new(std::sync::Mutex::new(None));
    let fed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stream = sim.stream();
    let feeder =
        ListPerBatch { ctx: handle.clone(), sim: sim.clone(), stream: stream.clone(), fed: fed.clone() };
    let ctx = TracingContext::builder(sim.clone())
        .hold_limit(Duration::from_secs(60))
        .sink(feeder)
        .build()
        .unwrap();
    for _ in 0..50 {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("dropped")).unwrap();
        list.zone_end(&stream).unwrap();
        drop(list);
    }
    submit_one(&ctx, &sim, &stream, "submitted");
    *handle.lock().unwrap() = Some(ctx.clone());
    ctx.flush().unwrap();
    *handle.lock().unwrap() = None;
    let fed = fed.load(std::sync::atomic::Ordering::SeqCst);
    assert!(fed <= 3, "the flush collected {fed} lists submitted while it ran");
    assert_eq!(ctx.stats().lists_discarded, 50);
}
