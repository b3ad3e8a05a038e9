//! Collection: reads the times of completed lists, puts them in per-lane GPU order, hands
//! their zones to the sinks, and releases their slots. This layer reads and empties the
//! shared state's queues and is the only caller of sinks; it never records.
//!
//! Collection has two phases (docs/design.md, section 8; section 1 has the diagram):
//!
//! 1. **Read** (`read.rs`), run by every caller of `collect` at once, with no lock: take
//!    every submitted list (one swap) and every list an earlier call found incomplete, sort
//!    them by home lane and place in that lane's order, and read each list's times, one
//!    `elapsed` per event, chained from the list's first event. Lists of one lane are read in
//!    order and the reader stops at the first incomplete one (the lane's later lists cannot
//!    have run yet): those go to the `retry` queue without a read. Read lists go to the `read`
//!    queue. The driver reads of concurrent callers overlap; nothing here waits for the GPU.
//! 2. **Emit** (`emit.rs`), run by one caller at a time (the others return
//!    at once, their reading done): take the read lists, and per lane emit every list whose
//!    place is next, in place order, with one more `elapsed` per list to place its first
//!    event on the context's timeline; release every emitted list's slots with one CAS.
//!
//! The completion test is `elapsed` itself (CUDA: `cuEventElapsedTime` answering
//! `CUDA_ERROR_NOT_READY`): the collector never queries or synchronizes an event, so it cannot
//! invalidate another thread's stream capture.
//!
//! Time (`clock.rs`): within a list each event is measured from the one before, and a
//! list's first event is placed from the nearest anchor, in `i64` nanoseconds.
//!
//! [`Collector`] holds the protocol between concurrent callers: any number read at once; one
//! emits (`try_lock`); a flush keeps new readers out (a Dekker pair of `readers` and
//! `flushing`) and waits for those inside.

mod clock;
mod emit;
mod mapping;
mod read;
mod report;

pub use report::{CollectError, CollectReport, Collected};

use crate::backend::Backend;
use crate::error::Error;
use crate::shared::config::Config;
use crate::shared::record::EventRecord;
use crate::shared::Inner;
use crate::sink::Sink;
use crate::slots::pool::Pool;
use crate::sync::{lock, spin_wait, try_lock, Arc, AtomicBool, AtomicU32, AtomicUsize, Mutex, Ordering};
use emit::Emitter;
use read::{read_phase, ReadOutcome};

/// One context's collection: the shared state it empties, the emitter's state behind its
/// lock, and the words of the read/flush hand-off.
pub(crate) struct Collector<B: Backend> {
    pub(crate) inner: Arc<Inner<B>>,
    /// The emitting collector's state: one emitter at a time.
    emitter: Mutex<Emitter<B>>,
    /// Collectors in their read phase now, and whether a flush keeps new ones out.
    readers: AtomicUsize,
    flushing: AtomicBool,
    /// Where a contended read phase starts re-probing lanes (read.rs).
    probe_cursor: AtomicU32,
}

impl<B: Backend> Collector<B> {
    /// The collection of a new context: makes the emitter's clock (the base event) and opens
    /// the sinks, then the shared state with what the sinks are told about the context.
    pub(crate) fn new(
        backend: B,
        config: Config,
        pool: Pool<B::Event, EventRecord>,
        id: u32,
        sinks: Vec<Box<dyn Sink>>,
    ) -> Result<Self, Error> {
        let (emitter, info) = Emitter::new(&backend, id, &config.name, sinks)?;
        Ok(Self {
            inner: Arc::new(Inner::new(backend, config, pool, info)),
            emitter: Mutex::new(emitter),
            readers: AtomicUsize::new(0),
            flushing: AtomicBool::new(false),
            probe_cursor: AtomicU32::new(0),
        })
    }

    /// `TracingContext::collect`.
    pub(crate) fn collect(&self) -> Result<Collected, CollectError> {
        let inner = &*self.inner;
        let outcome = self.read(false);
        let mut report =
            CollectReport { read_lists: outcome.read, errors: outcome.errors, ..Default::default() };
        let mut error = outcome.error;
        let mut emitted = false;
        // Lists read by a caller that found the emitter busy are emitted by the emitter: after
        // unlocking, it looks at the read queue once more. SeqCst fences on both sides (a
        // reader's push then try_lock; the emitter's unlock then look) make sure one of the
        // two sees the other, so no read list is left behind until the next collect.
        loop {
            crate::sync::fence_seq_cst();
            let Some(mut emitter) = try_lock(&self.emitter) else { break };
            if let Some(e) = emitter.emit_phase(inner, false, false, &mut report) {
                error.get_or_insert(e);
            }
            report.pending_lists = emitter.waiting_lists() + outcome.retried;
            emitted = true;
            drop(emitter);
            crate::sync::fence_seq_cst();
            if inner.read.is_empty_now() && lock(&inner.void_places).is_empty() {
                break;
            }
        }
        match error {
            Some(error) => Err(CollectError { error, report }),
            None if emitted => Ok(Collected::Done(report)),
            None => Ok(Collected::Busy),
        }
    }

    /// Phase 1 of a collect, unless a flush is running (then nothing: the flush reads).
    fn read(&self, wait: bool) -> ReadOutcome {
        // Dekker with the flush: each side writes its own word, then reads the other's with a
        // read-modify-write (SeqCst), which reads the latest value: either this reader sees
        // the flush's flag, or the flush sees this reader's count and waits for it. (A plain
        // SeqCst load would do on hardware; loom models only the RMW form as SeqCst.)
        let others = self.readers.fetch_add(1, Ordering::SeqCst);
        let outcome = if self.flushing.fetch_or(false, Ordering::SeqCst) {
            ReadOutcome::default()
        } else {
            read_phase(&self.inner, &self.probe_cursor, wait, others > 0)
        };
        // Release: the lists this reader pushed are visible to a flush that sees the count.
        self.readers.fetch_sub(1, Ordering::Release);
        outcome
    }

    /// Waits for everything submitted so far and collects it all; `force` also emits lists
    /// whose earlier lane neighbour never came (only when no list can come any more). Waits
    /// for a concurrent emitter first.
    pub(crate) fn flush(&self, force: bool) -> Result<CollectReport, CollectError> {
        let mut emitter = lock(&self.emitter);
        let inner = &*self.inner;
        let mut report = CollectReport::default();
        let mut error = None;
        // SeqCst RMWs: see `read`.
        self.flushing.swap(true, Ordering::SeqCst);
        // Also Acquire: pairs with the readers' Release decrement: their lists are on the
        // queues.
        while self.readers.fetch_add(0, Ordering::SeqCst) != 0 {
            spin_wait();
        }
        loop {
            let outcome = read_phase(inner, &self.probe_cursor, true, false);
            report.read_lists += outcome.read;
            report.errors += outcome.errors;
            if let Some(e) = outcome.error {
                error.get_or_insert(e);
            }
            if let Some(e) = emitter.emit_phase(inner, true, force, &mut report) {
                error.get_or_insert(e);
            }
            if !outcome.took {
                break;
            }
        }
        self.flushing.store(false, Ordering::SeqCst);
        report.pending_lists = emitter.waiting_lists();
        if let Some(e) = emitter.flush_sinks() {
            report.errors += 1;
            error.get_or_insert(e);
        }
        match error {
            None => Ok(report),
            Some(error) => Err(CollectError { error, report }),
        }
    }
}
