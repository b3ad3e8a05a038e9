//! The records between CUPTI and the collector: read out of CUPTI's buffers (by the flush
//! thread every period, or by a collector), converted to [`Activity`]s on the host clock, and
//! queued, up to a bound, for the collector (docs/design.md, section 13, "One flush thread").

use super::demangle::function_name;
use super::handoff::RecordHandoff;
use super::{ActivityKind, ActivityRecord, ActivityTracer, CuptiError};
use crate::backend::activity::{Activity, WorkKind};
use crate::location::{DynamicLocation, Location};
use cudarc::cupti::result::activity;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

/// Records read out of CUPTI's buffers, waiting for the collector: reading them at once gives
/// the buffers back to the pool, however long the collector takes. Bounded
/// (`RecordHandoff`): past `max_pending` records waiting, the flush thread leaves CUPTI's
/// completed buffers where they are (CUPTI then runs out of free ones and refuses requests,
/// counted in `ActivityLosses::buffers_refused`), so memory does not grow while nobody
/// collects. A collector's read waits for one the flush thread is in the middle of.
pub(super) struct RecordQueue {
    /// The records, and the kernel names seen (kept from read to read).
    handoff: RecordHandoff<Activity, Names>,
    /// Records delivered without times (work not finished at a forced flush).
    incomplete: AtomicU64,
    /// A failed read, for the next collector's read to return.
    error: Mutex<Option<CuptiError>>,
    /// What to subtract from CUPTI's times to put them on the host clock.
    offset_ns: AtomicI64,
}

impl RecordQueue {
    pub(super) fn new(max_pending: usize, offset_ns: i64) -> Self {
        Self {
            handoff: RecordHandoff::new(max_pending, Names::default()),
            incomplete: AtomicU64::new(0),
            error: Mutex::new(None),
            offset_ns: AtomicI64::new(offset_ns),
        }
    }

    /// Sets what is subtracted from CUPTI's times from now on.
    pub(super) fn set_offset(&self, offset_ns: i64) {
        self.offset_ns.store(offset_ns, Relaxed);
    }

    /// Reads every buffer CUPTI completed into one batch, unless `bounded` and the queue is
    /// full.
    pub(super) fn read(&self, tracer: &impl Drain, bounded: bool) {
        let Some(mut reading) = self.handoff.begin_read(bounded) else { return };
        let offset = self.offset_ns.load(Relaxed);
        let mut batch = Vec::new();
        let mut incomplete = 0;
        let names = reading.state();
        let read = tracer.drain(|r| {
            if r.kind == ActivityKind::ExternalCorrelation {
                return;
            }
            if r.start_ns == 0 || r.end_ns == 0 {
                incomplete += 1;
                return;
            }
            batch.push(names.activity(r, offset));
        });
        if let Err(e) = read {
            *self.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
        }
        self.incomplete.fetch_add(incomplete, Relaxed);
        reading.queue(batch);
    }

    /// Moves every queued record to `out`, oldest batch first; a failed read since the last
    /// call is returned.
    pub(super) fn take(&self, out: &mut Vec<Activity>) -> Result<(), CuptiError> {
        self.handoff.take(out);
        match self.error.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Records delivered without times so far.
    pub(super) fn incomplete(&self) -> u64 {
        self.incomplete.load(Relaxed)
    }
}

/// Where [`RecordQueue::read`] takes its records from: CUPTI's completed buffers (the tracer),
/// or a stand-in in the loom model of the hand-off (`loom-tests/cupti_flush.rs`).
pub(super) trait Drain {
    /// Calls `f` with every completed record, oldest first; returns how many.
    fn drain(&self, f: impl FnMut(ActivityRecord)) -> Result<usize, CuptiError>;
}

impl Drain for ActivityTracer {
    fn drain(&self, f: impl FnMut(ActivityRecord)) -> Result<usize, CuptiError> {
        ActivityTracer::drain(self, f)
    }
}

/// The zone names of kernels seen, so that a record of a kernel seen before costs a lookup,
/// not a demangling.
#[derive(Default)]
struct Names {
    by_name: HashMap<String, Location>,
}

impl Names {
    /// `r` as work on the host clock: CUPTI's times minus `offset`, its lane the key of its
    /// stream, named after its kernel (or as a copy or memset), with its graph and node as
    /// arguments when it ran in a graph.
    fn activity(&mut self, r: ActivityRecord, offset: i64) -> Activity {
        let kind = match r.kind {
            ActivityKind::Kernel => WorkKind::Kernel,
            ActivityKind::Memcpy => WorkKind::Copy,
            _ => WorkKind::Set,
        };
        let name = match (&r.kind, r.name.as_deref()) {
            (ActivityKind::Kernel, Some(name)) => name,
            (ActivityKind::Kernel, None) => "kernel",
            (ActivityKind::Memcpy, _) => "memcpy",
            _ => "memset",
        };
        let location = if r.graph_id != 0 {
            DynamicLocation::new(function_name(name))
                .arg("graph", u64::from(r.graph_id))
                .arg("graph_node", r.graph_node_id)
                .into()
        } else if let Some(known) = self.by_name.get(name) {
            known.clone()
        } else {
            let location = Location::Dynamic(Arc::new(DynamicLocation::new(function_name(name))));
            self.by_name.insert(name.to_owned(), location.clone());
            location
        };
        Activity {
            kind,
            location,
            lane: super::lane_key(r.context_id, r.stream_id),
            correlation: r.correlation_id,
            begin_ns: (r.start_ns as i64).wrapping_sub(offset),
            end_ns: (r.end_ns as i64).wrapping_sub(offset),
        }
    }
}

/// Calls `cuptiActivityFlushAll(0)` and reads the buffers it completes every period, on a
/// thread of its own, until dropped.
pub(super) struct Flusher {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flusher {
    pub(super) fn start(
        period: std::time::Duration,
        tracer: &Arc<ActivityTracer>,
        queue: &Arc<RecordQueue>,
    ) -> Self {
        if period.is_zero() {
            return Self::none();
        }
        let (tracer, queue) = (Arc::clone(tracer), Arc::clone(queue));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cupti flush".to_owned())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    // A failure here leaves the buffers with CUPTI: the last read forces them
                    // out.
                    let _ = activity::flush_all(0);
                    queue.read(&*tracer, true);
                }
            })
            .ok();
        Self { stop: thread.as_ref().map(|_| stop), thread }
    }

    pub(super) fn none() -> Self {
        Self { stop: None, thread: None }
    }

    pub(super) fn running(&self) -> bool {
        self.thread.is_some()
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The loom model of the hand-off between the flush thread's read and a collector's
/// (`loom-tests/cupti_flush.rs`): built into the crate, since `RecordQueue` is private.
#[cfg(all(test, gpu_event_pool_loom))]
#[path = "../../../loom-tests/cupti_flush.rs"]
mod loom_flush;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::activity::WorkKind;

    fn work(n: usize) -> Vec<Activity> {
        let location = Location::Dynamic(Arc::new(DynamicLocation::new("k")));
        let one =
            Activity { kind: WorkKind::Kernel, location, lane: 1, correlation: 1, begin_ns: 0, end_ns: 1 };
        vec![one; n]
    }

    #[test]
    fn records_waiting_for_the_collector_are_bounded() {
        let queue = RecordQueue::new(10, 0);
        queue.handoff.begin_read(true).unwrap().queue(work(6));
        queue.handoff.begin_read(true).unwrap().queue(work(4));
        assert!(queue.handoff.begin_read(true).is_none(), "10 records wait: CUPTI's buffers stay unread");
        assert!(queue.handoff.begin_read(false).is_some(), "a collector's own read is not bounded");
        let mut out = Vec::new();
        queue.take(&mut out).unwrap();
        assert_eq!(out.len(), 10, "oldest batch first, all of them");
        assert!(queue.handoff.begin_read(true).is_some(), "a collect makes room");
    }

    #[test]
    fn a_record_on_the_host_clock_is_named_after_its_kernel() {
        let mut names = Names::default();
        let record = ActivityRecord {
            kind: ActivityKind::Kernel,
            name: Some("_Z7spin_nsy".to_owned()),
            device_id: 0,
            context_id: 2,
            stream_id: 7,
            correlation_id: 9,
            graph_id: 0,
            graph_node_id: 0,
            start_ns: 1_000_500,
            end_ns: 1_002_500,
            external_id: None,
        };
        let a = names.activity(record.clone(), 1_000_000);
        assert_eq!(
            (a.location.name(), a.lane, a.correlation, a.begin_ns, a.end_ns),
            ("spin_ns", (2 << 32) | 7, 9, 500, 2_500)
        );
        let again = names.activity(record, 1_000_000);
        assert!(
            matches!((&a.location, &again.location), (Location::Dynamic(x), Location::Dynamic(y)) if Arc::ptr_eq(x, y)),
            "one location per kernel name"
        );
    }
}
