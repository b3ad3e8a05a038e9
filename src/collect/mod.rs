//! Collection: reads the times of completed lists, puts them in per-lane GPU order, hands
//! their zones to the sinks, and releases their slots. This layer reads and empties the
//! shared state's queues and is the only caller of sinks; it never records.
//!
//! Collection has two phases (docs/design.md, section 8; section 1 has the diagram):
//!
//! 1. **Read** (`read.rs`), run by every caller of `collect` at once, with no lock: take
//!    every submitted list (one swap) and every list an earlier call found incomplete, sort
//!    them by home lane and place in that lane's order, and read each list's times, one
//!    `elapsed` per event, chained from the list's first event, plus one that places its
//!    first event on the context's timeline. Lists of one lane are read in order and the
//!    reader stops at the first incomplete one (the lane's later lists cannot have run yet):
//!    those go to the `retry` queue without a read. Read lists go to the `read` queue. The
//!    lists one caller took are shared, a few lists of a lane at a time, with every caller
//!    that enters its read phase meanwhile. The driver reads of concurrent callers overlap;
//!    nothing here waits for the GPU.
//! 2. **Emit** (`emit.rs`), run by one caller at a time (the others return at once, their
//!    reading done): take the read lists, and per lane emit every list whose place is next,
//!    in place order; release every emitted list's slots with one CAS. No backend read
//!    here but the anchors' (`clock.rs`), one every `anchor_interval`.
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
use crate::shared::record::ListRecord;
use crate::shared::Inner;
use crate::sink::Sink;
use crate::slots::pool::Pool;
use crate::sync::{lock, spin_wait, try_lock, Arc, AtomicU64, Mutex, Ordering};
use emit::Emitter;
use read::{read_phase, ReadOutcome, ReadShare};

/// `Collector::state`: set while a flush keeps new readers out.
const FLUSHING: u64 = 1 << 63;
/// `Collector::state`: a `collect` came while a flush kept readers out; the flush collects
/// once more for it before returning.
const MISSED: u64 = 1 << 62;
/// `Collector::state`: the collectors in their read phase now.
const READERS: u64 = MISSED - 1;

/// One context's collection: the shared state it empties, the emitter's state behind its
/// lock, and the word of the read/flush hand-off.
pub(crate) struct Collector<B: Backend> {
    pub(crate) inner: Arc<Inner<B>>,
    /// The emitting collector's state: one emitter at a time.
    emitter: Mutex<Emitter<B>>,
    /// [`FLUSHING`], [`MISSED`] and the count of readers ([`READERS`]), in one word so that
    /// a reader entering and a flush starting or ending are ordered by one modification
    /// order: every change is a read-modify-write.
    state: AtomicU64,
    /// What the collectors in their read phase share (read.rs).
    share: ReadShare<B::Event>,
}

/// A collector in its read phase: leaves it (`state` minus one reader) when dropped, also if
/// a backend or an allocation unwinds through the read.
struct Reading<'a>(&'a AtomicU64);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        // Release: the lists this reader pushed are visible to the flush that sees the count
        // drop (its SeqCst read-modify-write acquires).
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A flush keeping readers out: lets them in again when dropped, also if the flush unwinds.
struct Flushing<'a>(&'a AtomicU64);

impl Flushing<'_> {
    /// Lets readers in again; whether a `collect` was turned away meanwhile.
    fn end(self) -> bool {
        let missed = self.0.fetch_and(!(FLUSHING | MISSED), Ordering::SeqCst) & MISSED != 0;
        std::mem::forget(self);
        missed
    }
}

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.0.fetch_and(!(FLUSHING | MISSED), Ordering::SeqCst);
    }
}

impl<B: Backend> Collector<B> {
    /// The collection of a new context: makes the emitter's clock (the base event) and opens
    /// the sinks, then the shared state with what the sinks are told about the context.
    pub(crate) fn new(
        backend: B,
        config: Config,
        pool: Pool<B::Event, ListRecord>,
        id: u32,
        sinks: Vec<Box<dyn Sink>>,
    ) -> Result<Self, Error> {
        let (emitter, info) = Emitter::new(&backend, id, &config.name, sinks)?;
        let share = ReadShare::new(Arc::clone(emitter.anchors()));
        Ok(Self {
            inner: Arc::new(Inner::new(backend, config, pool, info)),
            emitter: Mutex::new(emitter),
            state: AtomicU64::new(0),
            share,
        })
    }

    /// `TracingContext::collect`.
    pub(crate) fn collect(&self) -> Result<Collected, CollectError> {
        // Turned away by a flush: it collects once more for this call before it returns.
        let Some(outcome) = self.read() else { return Ok(Collected::Busy) };
        let mut report =
            CollectReport { read_lists: outcome.read, errors: outcome.errors, ..Default::default() };
        let mut error = outcome.error;
        let emitted = self.emit_handed_off(&mut report, &mut error, outcome.retried);
        match error {
            Some(error) => Err(CollectError { error, report }),
            None if emitted => Ok(Collected::Done(report)),
            None => Ok(Collected::Busy),
        }
    }

    /// Emits what is read, if no one else is emitting: lists read by a caller that found the
    /// emitter busy are emitted by the emitter, which looks at the read queue once more after
    /// unlocking. SeqCst fences on both sides (a reader's push then `try_lock`; the emitter's
    /// unlock then look) make sure one of the two sees the other, so no read list is left
    /// behind until the next collect. Whether this call emitted.
    fn emit_handed_off(&self, report: &mut CollectReport, error: &mut Option<Error>, retried: usize) -> bool {
        let inner = &*self.inner;
        let mut emitted = false;
        loop {
            crate::sync::fence_seq_cst();
            let Some(mut emitter) = try_lock(&self.emitter) else { break };
            if let Some(e) = emitter.emit_phase(inner, false, false, report) {
                error.get_or_insert(e);
            }
            report.pending_lists = emitter.waiting_lists() + retried;
            emitted = true;
            drop(emitter);
            crate::sync::fence_seq_cst();
            if inner.read.is_empty_now() && inner.void_places.is_empty() {
                break;
            }
        }
        emitted
    }

    /// Phase 1 of a collect; `None` when a flush keeps readers out (it is told, and collects
    /// once more before it returns).
    fn read(&self) -> Option<ReadOutcome> {
        // One read-modify-write (SeqCst) on the word the flush also changes with RMWs: either
        // this reader enters before the flush starts (and the flush waits for it to leave),
        // or it sees the flush and marks itself missed before the flush ends (and the flush
        // collects again), or it comes after the flush ended and reads as usual.
        let entered = self.state.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
            Some(if s & FLUSHING != 0 { s | MISSED } else { s + 1 })
        });
        let before = entered.unwrap_or_else(|s| s);
        if before & FLUSHING != 0 {
            return None;
        }
        let _reading = Reading(&self.state);
        Some(read_phase(&self.inner, &self.share, false, before & READERS > 0))
    }

    /// Waits for every list submitted before the call, collects them all in one round, and
    /// flushes the sinks; `force` also emits lists whose earlier lane neighbour never came
    /// (only when no list can come any more). Waits for a concurrent emitter first. Lists
    /// submitted during the flush are not waited for (a producer that never stops cannot
    /// keep it running); those read meanwhile by other collectors are emitted before it
    /// returns, as are those of a `collect` it turned away.
    pub(crate) fn flush(&self, force: bool) -> Result<CollectReport, CollectError> {
        let inner = &*self.inner;
        let mut report = CollectReport::default();
        let mut error = None;
        let mut emitter = lock(&self.emitter);
        // SeqCst RMWs: see `read`.
        self.state.fetch_or(FLUSHING, Ordering::SeqCst);
        let flushing = Flushing(&self.state);
        // Also Acquire: pairs with the readers' Release decrement: their lists are on the
        // queues.
        while self.state.fetch_add(0, Ordering::SeqCst) & READERS != 0 {
            spin_wait();
        }
        let outcome = read_phase(inner, &self.share, true, false);
        report.read_lists += outcome.read;
        report.errors += outcome.errors;
        if let Some(e) = outcome.error {
            error.get_or_insert(e);
        }
        if let Some(e) = emitter.emit_phase(inner, true, force, &mut report) {
            error.get_or_insert(e);
        }
        let missed = flushing.end();
        report.pending_lists = emitter.waiting_lists();
        if let Some(e) = emitter.flush_sinks(inner) {
            report.errors += 1;
            error.get_or_insert(e);
        }
        drop(emitter);
        if missed {
            match self.collect() {
                Ok(Collected::Done(more)) => report.absorb(more),
                Ok(Collected::Busy) => {}
                Err(e) => {
                    report.absorb(e.report);
                    error.get_or_insert(e.error);
                }
            }
        } else {
            let pending = report.pending_lists;
            let mut more = CollectReport::default();
            if self.emit_handed_off(&mut more, &mut error, 0) {
                report.absorb(more);
            } else {
                report.pending_lists = pending;
            }
        }
        match error {
            None => Ok(report),
            Some(error) => Err(CollectError { error, report }),
        }
    }
}
