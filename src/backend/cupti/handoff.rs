//! [`RecordHandoff`]: records read by a source's own thread (CUPTI's flush thread), waiting
//! for the collector, bounded; and the one rule that makes a collector's read complete: a read
//! waits for a read in progress on another thread, whose records were taken from the source
//! before, so that they are queued when the collector looks (a flush after synchronizing then
//! has every record). Checked by the loom model of its CUPTI caller, `RecordQueue::read`
//! (`backend::cupti::flush::loom_flush`, `loom-tests/cupti_flush.rs`).

use crate::sync::{lock, AtomicUsize, Mutex, MutexGuard, Ordering};

/// Batches of records between the thread that reads them and the collector.
#[derive(Debug)]
pub(crate) struct RecordHandoff<T, S = ()> {
    /// Held through a read, with what the reader keeps from read to read (`S`).
    reading: Mutex<S>,
    batches: Mutex<Vec<Vec<T>>>,
    /// Records in `batches`.
    pending: AtomicUsize,
    max_pending: usize,
}

impl<T, S> RecordHandoff<T, S> {
    /// An empty hand-off of at most about `max_pending` records (a batch is queued whole).
    pub(crate) fn new(max_pending: usize, state: S) -> Self {
        Self {
            reading: Mutex::new(state),
            batches: Mutex::new(Vec::new()),
            pending: AtomicUsize::new(0),
            max_pending,
        }
    }

    /// Starts a read: waits for one in progress. `None` when `bounded` and the records
    /// waiting have reached the bound (the reader then leaves the source's records where they
    /// are).
    pub(crate) fn begin_read(&self, bounded: bool) -> Option<HandoffRead<'_, T, S>> {
        let guard = lock(&self.reading);
        if bounded && self.pending.load(Ordering::Relaxed) >= self.max_pending {
            return None;
        }
        Some(HandoffRead { handoff: self, state: guard })
    }

    /// Moves every queued record to `out`, oldest batch first.
    pub(crate) fn take(&self, out: &mut Vec<T>) {
        let batches = std::mem::take(&mut *lock(&self.batches));
        for mut batch in batches {
            self.pending.fetch_sub(batch.len(), Ordering::Relaxed);
            out.append(&mut batch);
        }
    }
}

/// A read in progress: others wait until it is dropped.
#[derive(Debug)]
pub(crate) struct HandoffRead<'a, T, S> {
    handoff: &'a RecordHandoff<T, S>,
    state: MutexGuard<'a, S>,
}

impl<T, S> HandoffRead<'_, T, S> {
    /// What the reader keeps from read to read.
    pub(crate) fn state(&mut self) -> &mut S {
        &mut self.state
    }

    /// Queues a batch for the collector, before this read ends.
    pub(crate) fn queue(&self, batch: Vec<T>) {
        if !batch.is_empty() {
            let mut batches = lock(&self.handoff.batches);
            self.handoff.pending.fetch_add(batch.len(), Ordering::Relaxed);
            batches.push(batch);
        }
    }
}
