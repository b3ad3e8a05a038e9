#![cfg(gpu_event_pool_loom)]
//! Loom models of a context timed by activity records (docs/design.md, section 13), over a
//! fake source whose shared state is loom's: recording threads tie launches to the zones open
//! on them (the thread's stack of open zones), push the launch's link at its entry and its
//! record after (as CUPTI's callback and buffers do), and submit; collectors take the lists,
//! read the records, then the links (invariant L). Checked in every interleaving: each
//! launch's work comes out once, inside the zone it was launched in; nothing is left
//! pending; every slot is accounted for.

mod common;

use gpu_event_pool::backend::activity::{
    current_zone, Activity, ActivityBatch, ActivityLosses, ActivitySource, Link, ReadFor, Timing, WorkKind,
};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{Backend, BackendError, Collected, DynamicLocation, TracingContext};
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// What the fake GPU has reported: records of work that ran, and launch links.
#[derive(Debug, Default)]
struct Reported {
    records: Mutex<Vec<Activity>>,
    links: Mutex<Vec<Link>>,
}

/// A GPU timed by activity records, for loom: work completes as soon as it is launched.
#[derive(Debug, Clone)]
struct LoomActivities {
    next_correlation: Arc<AtomicU32>,
    reported: Arc<Reported>,
}

impl LoomActivities {
    fn new() -> Self {
        Self { next_correlation: Arc::new(AtomicU32::new(1)), reported: Arc::new(Reported::default()) }
    }

    /// A launch of a kernel named `name` on `stream`: its link at the call's entry, then its
    /// record (the work ran).
    fn launch(&self, stream: u64, name: &str) {
        let correlation = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        if let Some(zone) = current_zone() {
            self.reported.links.lock().unwrap().push(Link { correlation, zone: Some(zone), outer: None });
        }
        let begin = i64::from(correlation) * 10;
        let record = Activity {
            kind: WorkKind::Kernel,
            location: DynamicLocation::new(name).into(),
            lane: stream,
            correlation,
            begin_ns: begin,
            end_ns: begin + 5,
        };
        self.reported.records.lock().unwrap().push(record);
    }
}

impl ActivitySource for Reported {
    fn read(&self, _why: ReadFor, out: &mut ActivityBatch) -> Result<(), BackendError> {
        // Records first, then links: every record read has its link by then.
        out.activities.append(&mut self.records.lock().unwrap());
        out.links.append(&mut self.links.lock().unwrap());
        Ok(())
    }
    fn losses(&self) -> ActivityLosses {
        ActivityLosses::default()
    }
}

impl Backend for LoomActivities {
    type Event = ();
    type Stream = u64;
    type Graph = u64;
    type GraphNode = u64;
    const TIMING: Timing = Timing::Activities;

    fn name(&self) -> &'static str {
        "loom-activities"
    }
    fn create_event(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn create_stream(&self) -> Result<u64, BackendError> {
        Ok(0)
    }
    fn stream_key(&self, stream: &u64) -> u64 {
        *stream
    }
    fn graph_key(&self, graph: &u64) -> u64 {
        *graph
    }
    fn record(&self, _event: &(), _stream: &u64) -> Result<(), BackendError> {
        Ok(())
    }
    fn add_graph_record_node(&self, _: &(), _: &u64, _: &[u64]) -> Result<u64, BackendError> {
        Err(BackendError::new("loom", "no graphs"))
    }
    fn is_complete(&self, _event: &()) -> Result<bool, BackendError> {
        Ok(true)
    }
    fn wait(&self, _event: &()) -> Result<(), BackendError> {
        Ok(())
    }
    fn elapsed_ms(&self, _: &(), _: &()) -> Result<Option<f32>, BackendError> {
        Ok(Some(0.0))
    }
    /// No clock: the hold limit never passes, so nothing is emitted before it is complete.
    fn host_now_ns(&self) -> i64 {
        0
    }
    fn activity_source(&self) -> Option<&dyn ActivitySource> {
        Some(&*self.reported)
    }
}

fn context() -> (LoomActivities, MemorySink, TracingContext<LoomActivities>) {
    let gpu = LoomActivities::new();
    let sink = MemorySink::new();
    let ctx =
        TracingContext::builder(gpu.clone()).capacity(4, 8).batch(2).sink(sink.clone()).build().unwrap();
    (gpu, sink, ctx)
}

/// (name, depth) of every zone, sorted.
fn zones(sink: &MemorySink) -> Vec<(String, u32)> {
    let mut zones: Vec<_> = sink.zones().iter().map(|z| (z.location.name().to_owned(), z.depth)).collect();
    zones.sort();
    zones
}

fn named(expected: &[(&str, u32)]) -> Vec<(String, u32)> {
    let mut v: Vec<_> = expected.iter().map(|&(n, d)| (n.to_owned(), d)).collect();
    v.sort();
    v
}

fn assert_accounted(ctx: &TracingContext<LoomActivities>) {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!((stats.owned, stats.submitted), (0, 0), "{stats:?}");
}

/// Two threads record a zone around a launch each, on streams of their own, and submit,
/// while a third collects: whichever collect takes a list, reads its records and links, every
/// kernel comes out once, inside its own zone, and the flush after leaves nothing pending.
#[test]
fn launches_of_racing_recorders_land_in_their_own_zones() {
    common::model(|| {
        let (gpu, sink, ctx) = context();
        let recorders: Vec<_> = (0..2u64)
            .map(|r| {
                let (gpu, ctx) = (gpu.clone(), ctx.clone());
                thread::spawn(move || {
                    let mut list = ctx.list();
                    {
                        let _zone = list.zone(&r, DynamicLocation::new(format!("zone {r}")));
                        gpu.launch(r, &format!("kernel {r}"));
                    }
                    ctx.submit(list).unwrap();
                })
            })
            .collect();
        let collector = {
            let ctx = ctx.clone();
            thread::spawn(move || match ctx.collect() {
                Ok(Collected::Done(report)) => report.lists,
                other => panic!("the only collector got {other:?}"),
            })
        };
        for recorder in recorders {
            recorder.join().unwrap();
        }
        let early = collector.join().unwrap();
        let report = ctx.flush().unwrap();
        assert_eq!(early + report.lists, 2, "each list emitted once");
        assert_eq!(
            zones(&sink),
            named(&[("kernel 0", 1), ("kernel 1", 1), ("zone 0", 0), ("zone 1", 0)]),
            "each kernel inside the zone it was launched in"
        );
        for (_, batch) in sink.batches() {
            let names: Vec<&str> = batch.iter().map(|z| z.location.name()).collect();
            assert!(names == ["zone 0", "kernel 0"] || names == ["zone 1", "kernel 1"], "{names:?}");
        }
        assert_eq!(ctx.stats().activity.lists_partial, 0);
        assert_accounted(&ctx);
    });
}

/// A list is dropped with its zone open after launching in it, while another thread
/// collects: its work comes out alone (never waiting for the list), the list counts as
/// discarded, and every slot comes back.
#[test]
fn work_of_a_dropped_list_comes_out_alone() {
    common::model(|| {
        let (gpu, sink, ctx) = context();
        let recorder = {
            let (gpu, ctx) = (gpu.clone(), ctx.clone());
            thread::spawn(move || {
                let mut list = ctx.list();
                list.zone_begin(&0, DynamicLocation::new("dropped")).unwrap();
                gpu.launch(0, "orphan");
                drop(list);
                // The thread's stack no longer holds the dropped zone.
                assert_eq!(current_zone(), None);
                gpu.launch(0, "after");
            })
        };
        let _ = ctx.collect().unwrap();
        recorder.join().unwrap();
        ctx.flush().unwrap();
        assert_eq!(zones(&sink), named(&[("after", 0), ("orphan", 0)]));
        let stats = ctx.stats();
        assert_eq!((stats.lists_discarded, stats.lanes_released), (1, 0), "{stats:?}");
        assert_accounted(&ctx);
    });
}
