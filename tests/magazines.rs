//! Per-thread magazines seen from the public API: a tiny pool shared by 16 threads, the
//! exhaustion policy, threads that exit, threads that use several contexts, and contexts
//! dropped while threads still hold magazines for them.
//!
//! Every context here reserves one slot at a time (`batch(1)`), so that a list holds only the
//! slots it recorded, and a one-zone list takes two slots. The magazine size is
//! `max_capacity / 16`, at least 2: 2 for every pool here.

use gpu_event_pool::{location, Backend, BackendError, EventList, RecordError, Stats, TracingContext};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

/// A backend whose events complete at once, counting the events alive.
#[derive(Debug, Clone, Default)]
struct Counting {
    live: Arc<AtomicUsize>,
    next_stream: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Event(Arc<AtomicUsize>);

impl Drop for Event {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Backend for Counting {
    type Event = Event;
    type Stream = u64;
    type Graph = ();
    type GraphNode = ();

    fn name(&self) -> &'static str {
        "counting"
    }
    fn create_event(&self) -> Result<Event, BackendError> {
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok(Event(self.live.clone()))
    }
    fn create_stream(&self) -> Result<u64, BackendError> {
        Ok(self.next_stream.fetch_add(1, Ordering::Relaxed))
    }
    fn stream_key(&self, stream: &u64) -> u64 {
        *stream
    }
    fn graph_key(&self, _graph: &()) -> u64 {
        0
    }
    fn record(&self, _event: &Event, _stream: &u64) -> Result<(), BackendError> {
        Ok(())
    }
    fn add_graph_record_node(&self, _event: &Event, _graph: &(), _deps: &[()]) -> Result<(), BackendError> {
        Ok(())
    }
    fn is_complete(&self, _event: &Event) -> Result<bool, BackendError> {
        Ok(true)
    }
    fn wait(&self, _event: &Event) -> Result<(), BackendError> {
        Ok(())
    }
    fn elapsed_ms(&self, _start: &Event, _end: &Event) -> Result<Option<f32>, BackendError> {
        Ok(Some(0.0))
    }
    fn host_now_ns(&self) -> i64 {
        0
    }
}

/// Joins threads, propagating a panic. An explicit join waits for the thread's thread-local
/// destructors (which return its magazines); the end of a `thread::scope` may not.
fn join_all<'scope>(threads: impl IntoIterator<Item = std::thread::ScopedJoinHandle<'scope, ()>>) {
    for thread in threads {
        thread.join().expect("thread panicked");
    }
}

/// A context of exactly `capacity` slots, reserving one slot at a time.
fn context(backend: &Counting, capacity: u32) -> TracingContext<Counting> {
    TracingContext::builder(backend.clone()).capacity(capacity, capacity).batch(1).build().unwrap()
}

/// Records one zone (two slots) on a fresh list, and hands the list back unsubmitted.
fn one_zone(ctx: &TracingContext<Counting>, stream: u64) -> (EventList<Counting>, Result<(), RecordError>) {
    let mut list = ctx.list();
    let begun = list.zone_begin(&stream, location!("zone"));
    let ended = list.zone_end(&stream);
    (list, begun.and(ended))
}

/// The accounting invariant, and the audit: walking the freelist and every magazine finds
/// exactly the free slots.
fn assert_accounted(ctx: &TracingContext<Counting>) -> Stats {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.free, "the walk disagrees with the counters: {stats:?}");
    assert!(stats.in_magazines <= stats.free, "{stats:?}");
    stats
}

/// 16 threads share 4 slots, each recording one-zone lists and dropping them (their slots go
/// back to the thread's magazine), retrying when a zone is dropped for exhaustion. Every
/// thread gets its zones, no slot is lost or duplicated, and when all have exited every slot
/// is free again: magazines of exited threads included, and the audit walk agrees.
#[test]
fn a_tiny_pool_serves_16_threads_and_strands_no_slot() {
    const THREADS: u64 = 16;
    let zones_each = if cfg!(miri) { 3 } else { 200 };
    let backend = Counting::default();
    let ctx = context(&backend, 4);
    let exhausted = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|stream| {
                let (ctx, exhausted) = (&ctx, &exhausted);
                s.spawn(move || {
                    let mut recorded = 0;
                    while recorded < zones_each {
                        match one_zone(ctx, stream).1 {
                            Ok(()) => recorded += 1,
                            Err(RecordError::PoolExhausted { capacity: 4 }) => {
                                exhausted.fetch_add(1, Ordering::Relaxed);
                                std::thread::yield_now();
                            }
                            Err(other) => panic!("only exhaustion can fail here: {other}"),
                        }
                    }
                })
            })
            .collect();
        join_all(threads);
    });
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.capacity, stats.free, stats.owned, stats.submitted), (4, 4, 0, 0), "{stats:?}");
    assert!(stats.lists_discarded >= (THREADS * zones_each) as usize, "{stats:?}");
    assert_eq!(stats.dropped_zones, exhausted.load(Ordering::Relaxed), "one dropped zone per failure");
    drop(ctx);
    assert_eq!(backend.live.load(Ordering::Relaxed), 0, "every event destroyed with the pool");
}

/// The exhaustion policy, step by step, with 16 threads and 32 slots. Each thread records a
/// zone and drops the list: its two slots stay in its magazine, and all 32 slots sit idle in
/// the 16 magazines. The pool then reports exhaustion (the one case the policy allows: the
/// free slots are in magazines of threads that have not called since the pool ran out), and
/// starves the magazines. One thread's next call empties its magazine onto the freelist, so
/// the next zone succeeds; a thread that exits returns its magazine to the pool, and the
/// slots in it are used before exhaustion is reported again.
#[test]
fn exhaustion_is_reported_only_while_free_slots_sit_with_threads_that_have_not_called_since() {
    const THREADS: usize = 16;
    let backend = Counting::default();
    let ctx = context(&backend, 32);
    let filled = Barrier::new(THREADS + 1);
    let starved = Barrier::new(THREADS + 1);
    let called = Barrier::new(2);
    let next = Barrier::new(THREADS + 1);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (ctx, filled, starved, called, next) = (&ctx, &filled, &starved, &called, &next);
                s.spawn(move || {
                    let (list, recorded) = one_zone(ctx, t as u64);
                    recorded.unwrap();
                    drop(list);
                    filled.wait();
                    starved.wait();
                    if t == 0 {
                        let (list, recorded) = one_zone(ctx, t as u64);
                        recorded.expect("this thread's own magazine went to the freelist first");
                        drop(list);
                        called.wait();
                    }
                    next.wait();
                })
            })
            .collect();

        filled.wait();
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.free, stats.in_magazines), (32, 32), "every slot idle in a magazine: {stats:?}");
        let (held, recorded) = one_zone(&ctx, 99);
        assert_eq!(recorded, Err(RecordError::PoolExhausted { capacity: 32 }));
        drop(held);
        starved.wait();

        called.wait();
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.free, stats.in_magazines), (32, 30), "thread 0's two slots left its magazine");
        let (held, recorded) = one_zone(&ctx, 99);
        recorded.expect("thread 0 called since the pool ran out: its slots were free for others");
        let (_, recorded) = one_zone(&ctx, 99);
        assert_eq!(
            recorded,
            Err(RecordError::PoolExhausted { capacity: 32 }),
            "the other 15 have not called"
        );
        next.wait();
        join_all(threads);
        drop(held);
    });
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.free, stats.owned), (32, 0), "{stats:?}");
    let mut lists = Vec::new();
    for _ in 0..16 {
        let (list, recorded) = one_zone(&ctx, 99);
        recorded.expect("the exited threads' magazines are back in the pool");
        lists.push(list);
    }
    let (_, recorded) = one_zone(&ctx, 99);
    assert_eq!(recorded, Err(RecordError::PoolExhausted { capacity: 32 }), "all 32 slots are in 16 lists");
    drop(lists);
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.free, stats.owned), (32, 0), "{stats:?}");
}

/// A thread's magazine is handed back when the thread exits: its slots are counted as free at
/// once, walk as free, and are the next ones used (the pool is at its maximum: no growth).
#[test]
fn a_thread_that_exits_returns_its_magazine() {
    let backend = Counting::default();
    let ctx = context(&backend, 4);
    std::thread::scope(|s| join_all([s.spawn(|| drop(one_zone(&ctx, 1).0))]));
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.free, stats.owned, stats.in_magazines), (4, 0, 2), "{stats:?}");
    assert_eq!(stats.threads_with_magazines, 0, "handed back at exit: {stats:?}");
    let stream = 2;
    let mut list = ctx.list();
    // Two nested zones take the four slots: their begins, and one kept for each end.
    for _ in 0..2 {
        list.zone_begin(&stream, location!("nested"))
            .expect("four free slots, two of them from the exited thread");
    }
    assert_eq!(
        list.zone_begin(&stream, location!("nested")),
        Err(RecordError::PoolExhausted { capacity: 4 })
    );
    let stats = assert_accounted(&ctx);
    assert_eq!((stats.free, stats.owned, stats.in_magazines), (0, 4, 0), "{stats:?}");
}

/// One thread records in two contexts, alternately: each context has its own magazine for it,
/// and the accounting of each stays exact.
#[test]
fn one_thread_keeps_a_magazine_per_context() {
    let backend = Counting::default();
    let (a, b) = (context(&backend, 16), context(&backend, 32));
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            for _ in 0..10 {
                one_zone(&a, 1).1.unwrap();
                one_zone(&b, 1).1.unwrap();
            }
            for ctx in [&a, &b] {
                let stats = assert_accounted(ctx);
                assert_eq!((stats.owned, stats.in_magazines), (0, 2), "{stats:?}");
            }
        });
        join_all([thread]);
    });
    for (ctx, capacity) in [(&a, 16), (&b, 32)] {
        let stats = assert_accounted(ctx);
        assert_eq!((stats.capacity, stats.free, stats.owned), (capacity, capacity, 0), "{stats:?}");
    }
}

/// A context dropped while another thread still holds a magazine for it destroys every event
/// at once; the thread then goes on with a new context and exits cleanly. (Under Miri, this
/// also shows that the thread's record of the dead context is freed.)
#[test]
fn a_context_dropped_while_threads_hold_magazines_leaks_nothing() {
    let backend = Counting::default();
    let first = context(&backend, 8);
    let holding = Barrier::new(2);
    let dropped = Barrier::new(2);
    std::thread::scope(|s| {
        let (mine, backend, holding, dropped) = (first.clone(), &backend, &holding, &dropped);
        let thread = s.spawn(move || {
            one_zone(&mine, 1).1.unwrap();
            drop(mine);
            holding.wait();
            dropped.wait();
            let second = context(backend, 8);
            one_zone(&second, 1).1.unwrap();
            let stats = assert_accounted(&second);
            assert_eq!((stats.free, stats.in_magazines), (8, 2), "{stats:?}");
        });
        holding.wait();
        let stats = assert_accounted(&first);
        assert_eq!((stats.in_magazines, stats.threads_with_magazines), (2, 1), "{stats:?}");
        drop(first);
        assert_eq!(backend.live.load(Ordering::Relaxed), 0, "the events went with the context");
        dropped.wait();
        join_all([thread]);
    });
    assert_eq!(backend.live.load(Ordering::Relaxed), 0);
}
