//! Loom model of the record hand-off of the CUPTI source (`backend/cupti/flush.rs`): the flush
//! thread's `RecordQueue::read` races a collector's, over the real code, with a stand-in for
//! CUPTI's completed buffers.
//!
//! Built into the crate's own tests (`backend::cupti::flush::loom_flush`): `RecordQueue` is
//! private to the CUPTI backend. Needs the `cupti` feature (cudarc builds without CUDA) and
//! `--cfg gpu_event_pool_loom`:
//!
//! ```sh
//! RUSTFLAGS="--cfg gpu_event_pool_loom" cargo test --release --features cupti --lib loom_flush
//! ```
//!
//! The rule it checks (`backend/cupti/handoff.rs`): a read holds the reading lock from
//! before it takes records out of CUPTI's buffers until its batch is queued, and a collector's
//! read waits for one in progress; so a collector that reads after the work completed finds
//! every record queued, whichever thread took it out of the buffers. Taking the records
//! before the lock, or queueing them after it was let go, fails the model.

#[path = "common/mod.rs"]
#[allow(unreachable_pub, dead_code, reason = "the loom runners are shared with the loom-tests targets")]
mod common;

use super::{Drain, RecordQueue};
use crate::backend::cupti::{ActivityKind, ActivityRecord, CuptiError};
use crate::sync::{lock, Arc, Mutex};
use loom::thread;

/// CUPTI's completed buffers: records of work that ran, not yet taken out.
struct Completed(Mutex<Vec<ActivityRecord>>);

impl Drain for Completed {
    fn drain(&self, mut f: impl FnMut(ActivityRecord)) -> Result<usize, CuptiError> {
        let records = std::mem::take(&mut *lock(&self.0));
        let n = records.len();
        records.into_iter().for_each(&mut f);
        Ok(n)
    }
}

/// A finished kernel's record, told apart by its correlation id.
fn kernel(correlation_id: u32) -> ActivityRecord {
    ActivityRecord {
        kind: ActivityKind::Kernel,
        name: Some("k".to_owned()),
        device_id: 0,
        context_id: 1,
        stream_id: 1,
        correlation_id,
        graph_id: 0,
        graph_node_id: 0,
        start_ns: 10,
        end_ns: 20,
        external_id: None,
    }
}

/// The flush thread reads (bounded) while a collector, after the work completed, reads and
/// takes what is queued: the collector gets every record, whoever took it out of the buffers,
/// and nothing is delivered twice.
#[test]
fn a_collector_read_after_work_completed_sees_every_record_whoever_read_it() {
    common::model(|| {
        let completed = Arc::new(Completed(Mutex::new(vec![kernel(1), kernel(2)])));
        let queue = Arc::new(RecordQueue::new(16, 0));
        let flusher = {
            let (completed, queue) = (Arc::clone(&completed), Arc::clone(&queue));
            thread::spawn(move || queue.read(&*completed, true))
        };
        // The collector: the work has completed, so its read and take must find all of it.
        queue.read(&*completed, false);
        let mut out = Vec::new();
        queue.take(&mut out).unwrap();
        let mut seen: Vec<u32> = out.iter().map(|a| a.correlation).collect();
        seen.sort_unstable();
        assert_eq!(seen, [1, 2], "every completed record, once");
        flusher.join().unwrap();
        queue.take(&mut out).unwrap();
        assert_eq!(out.len(), 2, "nothing delivered twice");
    });
}
