//! The simulated GPU as an activity source: what CUPTI does for CUDA, without a GPU
//! ([`SimActivities`]).
//!
//! Every launch gets a correlation id, is linked at its call's entry to the zone open on the
//! launching thread (as CUPTI's launch callback does: [`current_zone`]), and reports one work
//! record once the simulated GPU has run it. What CUPTI does to records can be injected: a
//! launch that makes none (a host function), a failed launch, records dropped, records held
//! back to a later read (a buffer CUPTI holds until its other records complete), and ids about
//! to wrap.

use super::gpu::{SimBackend, SimGraph, SimGraphNode, SimStream};
use crate::backend::activity::{
    current_zone, Activity, ActivityBatch, ActivityLosses, ActivitySource, Link, ReadFor, Timing, WorkKind,
};
use crate::backend::{Backend, BackendError};
use crate::location::{DynamicLocation, Location};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The simulated GPU timed by activity records, as CUPTI times CUDA: the same lists, guards
/// and sinks as [`SimBackend`], with zones spanning the simulated kernels launched inside them
/// ([`launch`](Self::launch)). Cheap to clone: clones share the GPU and its records.
///
/// ```
/// use gpu_event_pool::{location, sim::{SimActivities, SimBackend}, sink::memory::MemorySink, TracingContext};
/// let gpu = SimActivities::new(SimBackend::manual());
/// let stream = gpu.sim().stream();
/// let zones = MemorySink::new();
/// let ctx = TracingContext::builder(gpu.clone()).sink(zones.clone()).build()?;
/// let mut list = ctx.list();
/// {
///     let _pass = list.zone(&stream, location!("pass"));
///     gpu.launch(&stream, 2_000); // a 2 µs kernel: a child zone of "pass"
///     gpu.launch(&stream, 3_000);
/// }
/// ctx.submit(list)?;
/// gpu.sim().advance(10_000);
/// ctx.flush()?;
/// let names: Vec<_> = zones.zones().iter().map(|z| (z.location.name().to_owned(), z.depth)).collect();
/// assert_eq!(names, [("pass".into(), 0), ("kernel".into(), 1), ("kernel".into(), 1)]);
/// assert_eq!(zones.zones()[0].gpu_end_ns - zones.zones()[0].gpu_begin_ns, 5_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SimActivities {
    sim: SimBackend,
    source: Arc<SimSource>,
}

#[derive(Debug)]
struct SimSource {
    sim: SimBackend,
    next_correlation: AtomicU32,
    /// Work launched and not read yet.
    pending: Mutex<Vec<Activity>>,
    links: Mutex<Vec<Link>>,
    /// Records of the next launches to lose, and to hold back for one read.
    to_drop: AtomicU32,
    to_hold: AtomicU32,
    held: Mutex<Vec<Activity>>,
    dropped: AtomicU64,
    incomplete: AtomicU64,
    /// Whether a context reads these records (one may, as with CUPTI).
    attached: std::sync::atomic::AtomicBool,
}

impl SimActivities {
    /// The simulated GPU `sim`, timed by activity records.
    pub fn new(sim: SimBackend) -> Self {
        let source = SimSource {
            sim: sim.clone(),
            next_correlation: AtomicU32::new(1),
            pending: Mutex::new(Vec::new()),
            links: Mutex::new(Vec::new()),
            to_drop: AtomicU32::new(0),
            to_hold: AtomicU32::new(0),
            held: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            incomplete: AtomicU64::new(0),
            attached: std::sync::atomic::AtomicBool::new(false),
        };
        Self { sim, source: Arc::new(source) }
    }

    /// The simulated GPU (its clock, its streams).
    pub fn sim(&self) -> &SimBackend {
        &self.sim
    }

    /// Launches a kernel named `kernel` of `duration_ns` on `stream`, as
    /// [`SimBackend::launch`] does; returns when it will finish.
    pub fn launch(&self, stream: &SimStream, duration_ns: i64) -> i64 {
        self.launch_named(stream, "kernel", duration_ns)
    }

    /// Launches a kernel named `name`; returns when it will finish.
    pub fn launch_named(&self, stream: &SimStream, name: &str, duration_ns: i64) -> i64 {
        let correlation = self.enter();
        let end = self.sim.launch(stream, duration_ns);
        let record = Activity {
            kind: WorkKind::Kernel,
            location: Location::Dynamic(Arc::new(DynamicLocation::new(name))),
            lane: self.sim.stream_key(stream),
            correlation,
            begin_ns: end - duration_ns.max(0),
            end_ns: end,
        };
        if take_one(&self.source.to_drop) {
            self.source.dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            lock(&self.source.pending).push(record);
        }
        end
    }

    /// A call's entry: its id, and its link to the zone open on this thread, if any.
    fn enter(&self) -> u32 {
        let correlation = self.source.next_correlation.fetch_add(1, Ordering::Relaxed);
        if let Some(zone) = current_zone() {
            lock(&self.source.links).push(Link { correlation, zone: Some(zone), outer: None });
        }
        correlation
    }
}

impl ActivitySource for SimSource {
    /// The simulation's records are its own clock's: exact.
    fn host_time_bound(&self) -> u64 {
        0
    }
    fn read(&self, why: ReadFor, out: &mut ActivityBatch) -> Result<(), BackendError> {
        let force = why == ReadFor::Final;
        let now = self.sim.now();
        // Records first, links after (the contract: every record has its link by then).
        out.activities.append(&mut lock(&self.held));
        let mut pending = lock(&self.pending);
        let mut kept = Vec::new();
        for record in pending.drain(..) {
            if record.end_ns > now {
                if force {
                    self.incomplete.fetch_add(1, Ordering::Relaxed);
                } else {
                    kept.push(record);
                }
            } else if take_one(&self.to_hold) {
                lock(&self.held).push(record);
            } else {
                out.activities.push(record);
            }
        }
        *pending = kept;
        drop(pending);
        if force {
            out.activities.append(&mut lock(&self.held));
        }
        out.links.append(&mut lock(&self.links));
        Ok(())
    }

    fn attach(&self) -> Result<(), BackendError> {
        if self.attached.swap(true, Ordering::Relaxed) {
            return Err(BackendError::new(
                "SimActivities",
                "a second context on one source: build one context",
            ));
        }
        Ok(())
    }

    fn losses(&self) -> ActivityLosses {
        ActivityLosses {
            records_dropped: self.dropped.load(Ordering::Relaxed),
            records_incomplete: self.incomplete.load(Ordering::Relaxed),
            ..ActivityLosses::default()
        }
    }
}

impl Backend for SimActivities {
    /// No event: zones are timed by the work records.
    type Event = ();
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    const TIMING: Timing = Timing::Activities;

    crate::backend::activity::no_events!("sim-activities");

    fn name(&self) -> &'static str {
        "sim-activities"
    }
    fn create_stream(&self) -> Result<SimStream, BackendError> {
        Ok(self.sim.stream())
    }
    fn stream_key(&self, stream: &SimStream) -> u64 {
        self.sim.stream_key(stream)
    }
    fn graph_key(&self, graph: &SimGraph) -> u64 {
        self.sim.graph_key(graph)
    }
    fn host_now_ns(&self) -> i64 {
        self.sim.host_now_ns()
    }
    fn host_clock_origin(&self) -> Option<std::time::Instant> {
        self.sim.host_clock_origin()
    }
    fn activity_source(&self) -> Option<&dyn ActivitySource> {
        Some(&*self.source)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes one of the injections counted down in `counter`; whether there was one.
fn take_one(counter: &AtomicU32) -> bool {
    counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
}

impl super::faults::SimActivityFaults for SimActivities {
    fn launch_without_record(&self) {
        self.enter();
    }

    fn fail_launch(&self) {
        let correlation = self.enter();
        if current_zone().is_some() {
            lock(&self.source.links).push(Link { correlation, zone: None, outer: None });
        }
    }

    fn drop_records(&self, n: u32) {
        self.source.to_drop.store(n, Ordering::Relaxed);
    }

    fn hold_back_records(&self, n: u32) {
        self.source.to_hold.store(n, Ordering::Relaxed);
    }

    fn next_correlation(&self, id: u32) {
        self.source.next_correlation.store(id, Ordering::Relaxed);
    }
}
