//! The context's flush thread: asks CUPTI for its complete buffers every period and reads
//! them at once, so buffers go back to the pool however slow the collector is
//! (docs/design.md section 13, "One flush thread").

use super::{ActivityRecord, ActivityTracer, CuptiError};
use crossbeam_queue::SegQueue;
use cudarc::cupti::result::activity;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

/// Records read out of CUPTI's buffers, waiting for the collector: reading them at once gives
/// the buffers back to the pool, however long the collector takes.
#[derive(Default)]
pub(super) struct Reader {
    pub(super) batches: SegQueue<Vec<ActivityRecord>>,
    /// Records delivered without times (work not finished at a forced flush).
    pub(super) incomplete: AtomicU64,
    /// A failed read, for the next `collect` to return.
    pub(super) error: Mutex<Option<CuptiError>>,
    /// Held through a read, so that a collector's read waits for one the flush thread is in
    /// the middle of, and its batch, taken from the pool before, is queued when the
    /// collector looks (`flush` after synchronizing then has every record).
    reading: Mutex<()>,
}

impl Reader {
    /// Reads every buffer CUPTI completed into one batch.
    pub(super) fn read(&self, tracer: &ActivityTracer) {
        let _reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = Vec::new();
        let mut incomplete = 0;
        let read = tracer.drain(|r| {
            let timed =
                r.kind == super::ActivityKind::ExternalCorrelation || (r.start_ns != 0 && r.end_ns != 0);
            if timed {
                batch.push(r);
            } else {
                incomplete += 1;
            }
        });
        if let Err(e) = read {
            *self.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
        }
        self.incomplete.fetch_add(incomplete, Relaxed);
        if !batch.is_empty() {
            self.batches.push(batch);
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
    pub(super) fn start(period_ms: u32, tracer: &Arc<ActivityTracer>, reader: &Arc<Reader>) -> Self {
        if period_ms == 0 {
            return Self::none();
        }
        let (tracer, reader) = (Arc::clone(tracer), Arc::clone(reader));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let period = std::time::Duration::from_millis(u64::from(period_ms));
        let thread = std::thread::Builder::new()
            .name("cupti flush".to_owned())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    // A failure here leaves the buffers with CUPTI: `flush` forces them out.
                    let _ = activity::flush_all(0);
                    reader.read(&tracer);
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
