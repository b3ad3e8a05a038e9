//! Failures reach the application: a sink that flushes its own context gets a typed error
//! instead of deadlocking it, and what went wrong in background collection comes back from
//! the next `flush`, with no error handler and no `log` backend installed.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::{ContextInfo, Sink, ZoneBatch};
use gpu_event_pool::{location, Error, TracingContext};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runs `f` on a thread of its own and fails the test if it has not returned in 20 s (a
/// deadlock), instead of hanging.
fn within_20_s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || done.send(f()).unwrap());
    result.recv_timeout(Duration::from_secs(20)).expect("deadlocked: no return within 20 s")
}

/// A sink that flushes its own context from inside `zones`, and keeps what that returned. It
/// reaches the context through a slot the test empties at the end: a handle kept in the sink
/// would keep the context, and so the sink, alive for ever (Miri reports the cycle as a leak).
struct FlushingSink {
    ctx: Arc<Mutex<Option<TracingContext<SimBackend>>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Sink for FlushingSink {
    fn zones(&mut self, _: &ContextInfo, _: ZoneBatch<'_>) -> std::io::Result<()> {
        if let Some(ctx) = self.ctx.lock().unwrap().as_ref() {
            let outcome = match ctx.flush() {
                Ok(_) => "ok".to_owned(),
                Err(e) if matches!(e.error, Error::FlushFromSink) => "FlushFromSink".to_owned(),
                Err(e) => e.to_string(),
            };
            self.seen.lock().unwrap().push(outcome);
        }
        Ok(())
    }
}

#[test]
fn a_sink_that_flushes_its_own_context_gets_a_typed_error_and_nothing_deadlocks() {
    let seen = within_20_s(|| {
        let sim = SimBackend::manual();
        let stream = sim.stream();
        let slot = Arc::new(Mutex::new(None));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = FlushingSink { ctx: Arc::clone(&slot), seen: Arc::clone(&seen) };
        let ctx = TracingContext::builder(sim.clone()).sink(sink).build().unwrap();
        *slot.lock().unwrap() = Some(ctx.clone());
        for _ in 0..2 {
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("zone")).unwrap();
            sim.launch(&stream, 1_000);
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
            sim.advance(10_000);
            ctx.collect().unwrap();
        }
        // The context still works: it collects and flushes (the sink keeps a handle of it).
        ctx.flush().unwrap();
        assert_eq!(ctx.stats().zones_emitted, 2);
        drop(ctx);
        // The last handle: its drop flushes (the sink finds the slot empty) and drops the sink.
        let last = slot.lock().unwrap().take();
        drop(last);
        assert_eq!(Arc::strong_count(&slot), 1, "the sink was dropped with the context");
        let seen = seen.lock().unwrap().clone();
        seen
    });
    assert_eq!(seen, ["FlushFromSink", "FlushFromSink"]);
}

/// Two lists recorded on one stream at once, collected by the context's own thread: the
/// failure (`Error::ConcurrentLists`) went only to the default handler, a `log` warning nobody
/// installed a logger for, and `flush` returned `Ok`. Now `flush` returns it.
#[test]
fn background_failures_come_back_from_the_next_flush() {
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).collect_every(Duration::from_millis(1)).build().unwrap();
    let mut first = ctx.list();
    let mut second = ctx.list();
    first.zone_begin(&stream, location!("first")).unwrap();
    second.zone_begin(&stream, location!("second")).unwrap();
    sim.launch(&stream, 50_000);
    first.zone_end(&stream).unwrap();
    second.zone_end(&stream).unwrap();
    ctx.submit(first).unwrap();
    ctx.submit(second).unwrap();
    // The collector thread collects them and fails. Its failure is kept when its collect
    // returns: a flush in the moment between (the lists counted, the failure not kept yet)
    // is clean, and the failure comes back from the one after.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ctx.stats().lists_collected < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let error = loop {
        match ctx.flush() {
            Err(error) => break error,
            Ok(_) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Ok(_) => panic!("no background failure came back in 10 s: {:?}", ctx.stats()),
        }
    };
    assert_eq!(ctx.stats().concurrent_lists, 1, "{:?}", ctx.stats());
    match &error.error {
        Error::Background { first, more: 0 } => {
            assert!(matches!(**first, Error::ConcurrentLists { .. }), "{first}")
        }
        other => panic!("{other}"),
    }
    assert!(error.to_string().contains("background collection failed since the last flush"), "{error}");
    ctx.flush().expect("returned once: the next flush is clean");
}
