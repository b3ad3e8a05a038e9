//! Collection: reads the times of completed lists, puts them in per-lane GPU order, hands
//! their zones to the sinks, and releases their slots. This layer reads and empties the
//! shared state's queues and is the only caller of sinks; it never records.
//!
//! Collection has two phases (docs/design.md, section 8; section 1 has the diagram):
//!
//! 1. **Read** (`events/read.rs`), run by every caller of `collect` at once, with no lock: take
//!    every submitted list (one swap) and every list an earlier call found incomplete, sort
//!    them by home lane and place in that lane's order, and read each list's times, one
//!    `elapsed` per event, chained from the list's first event, plus one that places its
//!    first event on the context's timeline. Lists of one lane are read in order and the
//!    reader stops at the first incomplete one (the lane's later lists cannot have run yet):
//!    those go to the `retry` queue without a read. Read lists go to the `read` queue. The
//!    lists one caller took are shared, a few lists of a lane at a time, with every caller
//!    that enters its read phase meanwhile. The driver reads of concurrent callers overlap;
//!    nothing here waits for the GPU.
//! 2. **Emit** (`events/emit/`; an activity source's: `activities/`), run by one caller at a time (the others return at once, their
//!    reading done, unless the emitting caller is in its last round: see
//!    `emit_handed_off`): take the read lists, and per lane emit every list whose place is next,
//!    in place order; release every emitted list's slots with one CAS. No backend read
//!    here but the anchors' (`events/clock.rs`), one every `anchor_interval`.
//!
//! The completion test is `elapsed` itself (CUDA: `cuEventElapsedTime` answering
//! `CUDA_ERROR_NOT_READY`): the collector never queries or synchronizes an event, so it cannot
//! invalidate another thread's stream capture.
//!
//! Time (`events/clock.rs`): within a list each event is measured from the one before, and a
//! list's first event is placed from the nearest anchor, in `i64` nanoseconds.
//!
//! [`Collector`] holds the protocol between concurrent callers: any number read at once; one
//! emits (`try_lock`), for at most [`ROUNDS`] rounds (its own, then for callers that found it
//! busy); a flush first collects beside them (`drain_alongside`), then keeps new readers out
//! (the FLUSHING bit of `state`) and waits for those inside. No call's work grows with what producers submit while it runs: a flush reads once,
//! and every holder of the emitter hands over after its rounds (docs/design.md, section 4).

mod activities;
mod deliver;
mod events;
mod report;
mod state;
mod watch;

pub use report::{CollectError, CollectReport, Collected};

use crate::backend::{Backend, Timing};
use crate::error::Error;
use crate::shared::config::Config;
use crate::shared::record::ListRecord;
use crate::shared::Inner;
use crate::sink::Sink;
use crate::slots::pool::Pool;
use crate::sync::{lock, spin_wait, try_lock, Arc, AtomicU64, Mutex, Ordering};
use activities::ActivityOrder;
use deliver::{Delivery, Phase};
use events::emit::EventOrder;
use events::read::{read_phase, ReadOutcome, ReadShare};
use state::{
    holding_any, holds, Flushing, Held, ReadPhase, Waiting, FLUSHING, FLUSH_WAITER, FLUSH_WAITERS,
    LAST_ROUND, MISSED, READERS, ROUNDS, ROUND_COUNT,
};

/// Which emit phase: a `collect`'s, a `flush`'s (an activity source is read until the lists
/// taken have their records, within the hold limit), or the last handle's (`force`: no list
/// can come any more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    Collect,
    Flush,
    Final,
}

/// What an exclusive pass (`Collector::exclusive`) is for: a flush (`begun`: the passes
/// begun when it began, `None` for the last handle's, which always reads), or a relief.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exclusive {
    Flush {
        force: bool,
        begun: Option<u64>,
    },
    #[cfg_attr(gpu_event_pool_loom, allow(dead_code))]
    Relief,
}

/// What the emitting collector holds, behind its lock: the order of the context's source
/// (events or activity records: docs/design.md, section 13) and the delivery to its sinks,
/// which serves both.
pub(crate) struct Emitter<B: Backend> {
    delivery: Delivery,
    order: Order<B>,
}

enum Order<B: Backend> {
    Events(Box<EventOrder<B>>),
    Activities(Box<ActivityOrder>),
}

impl<B: Backend> Emitter<B> {
    /// One emit phase of the context's source; the time it takes is `Stats::emitter_ns`.
    fn emit_phase(&mut self, ctx: &Inner<B>, pass: Pass, report: &mut CollectReport) -> Option<Error> {
        let started = std::time::Instant::now();
        let error = self.delivery.name_lanes(ctx, &mut report.errors);
        let mut phase = Phase { delivery: &mut self.delivery, report, error };
        match &mut self.order {
            Order::Events(order) => order.emit_phase(ctx, &mut phase, pass == Pass::Final),
            Order::Activities(order) => order.emit_phase(ctx, &mut phase, pass),
        }
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        ctx.counters().emitter_ns.fetch_add(spent, Ordering::Relaxed);
        phase.error
    }

    /// [`EventOrder::lanes_remembered`] of an event source; `None` for an activity source.
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn lanes_remembered(&self) -> Option<(usize, usize)> {
        match &self.order {
            Order::Events(order) => Some(order.lanes_remembered()),
            Order::Activities(_) => None,
        }
    }

    /// Lists held back: read and waiting for an earlier list of their lane, or taken and
    /// waiting for their records.
    fn waiting_lists(&self) -> usize {
        match &self.order {
            Order::Events(order) => order.waiting_lists(),
            Order::Activities(order) => order.waiting_lists(),
        }
    }
}

/// One context's collection: the shared state it empties, the emitter's state behind its
/// lock, and the word of the read/flush hand-off.
pub(crate) struct Collector<B: Backend> {
    pub(crate) inner: Arc<Inner<B>>,
    /// The emitting collector's state: one emitter at a time.
    emitter: Mutex<Emitter<B>>,
    /// [`FLUSHING`], [`MISSED`], the flushes waiting for the emitter ([`FLUSH_WAITERS`]) and
    /// the count of readers ([`READERS`]), in one word so that a reader entering and a flush
    /// starting or ending are ordered by one modification order: every change is a
    /// read-modify-write.
    state: AtomicU64,
    /// What the collectors in their read phase share (read.rs): an event source's only (an
    /// activity source has no event to read).
    share: Option<ReadShare<B>>,
    /// [`LAST_ROUND`] and the count of emit rounds begun: what a caller that found the
    /// emitter busy reads to know whether the holder will look at `read` again.
    handover: AtomicU64,
    /// The waiting reads (a flush's exclusive pass, `read_phase` with `wait`) begun: a flush
    /// that finds one begun since it started reads nothing itself (that pass took every list
    /// submitted before the flush began, and waited for it).
    passes: AtomicU64,
}

impl<B: Backend> Collector<B> {
    /// [`Emitter::lanes_remembered`], the emitter's lock taken.
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn lanes_remembered(&self) -> Option<(usize, usize)> {
        lock(&self.emitter).lanes_remembered()
    }

    /// The collection of a new context: makes the emitter's clock (the base event) and opens
    /// the sinks, then the shared state with what the sinks are told about the context.
    pub(crate) fn new(
        backend: B,
        config: Config,
        pool: Pool<B::Event, ListRecord>,
        id: u32,
        sinks: Vec<Box<dyn Sink>>,
    ) -> Result<Self, Error> {
        let (order, share, info) = match backend.timing() {
            Timing::Events => {
                let (order, info) = EventOrder::new(&backend, id, &config.name)?;
                let share = ReadShare::new(Arc::clone(order.timeline()));
                (Order::Events(Box::new(order)), Some(share), info)
            }
            Timing::Activities => {
                let (order, info) = ActivityOrder::new(&backend, id, &config.name)?;
                (Order::Activities(Box::new(order)), None, info)
            }
        };
        let emitter = Emitter { delivery: Delivery::open(sinks, info.clone())?, order };
        Ok(Self {
            inner: Arc::new(Inner::new(backend, config, pool, info)),
            emitter: Mutex::new(emitter),
            state: AtomicU64::new(0),
            share,
            handover: AtomicU64::new(0),
            passes: AtomicU64::new(0),
        })
    }

    /// `TracingContext::collect`.
    pub(crate) fn collect(&self) -> Result<Collected, CollectError> {
        self.collect_after(0)
    }

    /// `collect`, as if it had emitted `rounds` rounds already: 0 for a caller's own, or
    /// `ROUNDS - 1` for one round at most (`drain_alongside`).
    fn collect_after(&self, rounds: u32) -> Result<Collected, CollectError> {
        // Turned away by a flush: it collects once more for this call before it returns.
        let Some(outcome) = self.read() else { return Ok(Collected::Busy) };
        let mut report =
            CollectReport { read_lists: outcome.read, errors: outcome.errors, ..Default::default() };
        let mut error = outcome.error;
        // Lists this call read, or a place this thread gave up: left to the emitter if busy.
        let hand_over = outcome.read > 0 || !self.inner.void_places().is_empty();
        let emitted = self.emit_handed_off(&mut report, &mut error, outcome.retried, rounds, hand_over);
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
    ///
    /// Bounded: one holder emits at most [`ROUNDS`] rounds (`rounds`: those this call already
    /// did, a flush's own). Its last round is announced before that round's take (`handover`,
    /// then a fence): a caller that then finds the emitter busy, with something to hand over,
    /// waits for that round to end (and emits itself) or for another to begin (whose take has
    /// its lists), never longer. While a flush waits for the emitter, every list read so far is
    /// that flush's (it waits for the readers inside, then takes `read`): holders stop and
    /// callers leave. docs/verification.md gives the C11 argument, section "The collect/flush
    /// hand-off".
    fn emit_handed_off(
        &self,
        report: &mut CollectReport,
        error: &mut Option<Error>,
        retried: usize,
        mut rounds: u32,
        hand_over: bool,
    ) -> bool {
        let inner = &*self.inner;
        let mut emitted = false;
        loop {
            crate::sync::fence_seq_cst();
            if self.flush_waiting() {
                break;
            }
            // Read before the `try_lock`: a round begun after this read takes what this call
            // pushed; one begun before it, if it is the holder's last, may not have.
            let seen = (rounds == 0 && hand_over).then(|| self.handover.load(Ordering::SeqCst));
            let mut emitter = match (try_lock(&self.emitter), seen) {
                (Some(emitter), _) => Held::new(self.address(), emitter),
                (None, Some(seen)) => match self.take_over_from_last_round(seen) {
                    Some(emitter) => emitter,
                    None => break,
                },
                (None, None) => break,
            };
            rounds += 1;
            let last = rounds >= ROUNDS;
            self.begin_round(last);
            if let Some(e) = emitter.emit_phase(inner, Pass::Collect, report) {
                error.get_or_insert(e);
            }
            report.pending_lists = emitter.waiting_lists() + retried;
            emitted = true;
            drop(emitter);
            if last {
                break;
            }
            crate::sync::fence_seq_cst();
            if self.flush_waiting() || (inner.read().is_empty_now() && inner.void_places().is_empty()) {
                break;
            }
        }
        emitted
    }

    /// Begins a round of the emitter's holder (called holding it, before the round takes the
    /// read queue): counts it in `handover`, marked [`LAST_ROUND`] when the holder will not
    /// look at `read` after it, then a SeqCst fence. A caller that failed its `try_lock` and
    /// read `handover` before this update has its lists in this round's take; one that read
    /// it after sees whether this is the last round.
    fn begin_round(&self, last: bool) {
        let mark = if last { LAST_ROUND } else { 0 };
        // SeqCst RMW, then the fence: docs/verification.md, "The collect/flush hand-off".
        let _ = self.handover.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
            Some(((word & ROUND_COUNT).wrapping_add(1) & ROUND_COUNT) | mark)
        });
        crate::sync::fence_seq_cst();
    }

    /// For a caller that found the emitter busy and has lists to hand over, `seen` the
    /// `handover` it read before its `try_lock`: `None` unless that was a last round (the
    /// holder of any other round looks at `read` after unlocking, or a later round takes
    /// them). In a last round, waits until the emitter is free (then returns it: this caller
    /// emits), or another round has begun (its take has them), or a flush waits (it takes
    /// them): at most the rest of one round. Never on a thread that holds an emitter (a sink
    /// calling `collect`): that would wait for itself.
    fn take_over_from_last_round(&self, seen: u64) -> Option<Held<'_, Emitter<B>>> {
        if seen & LAST_ROUND == 0 || holding_any() {
            return None;
        }
        loop {
            spin_wait();
            if let Some(emitter) = try_lock(&self.emitter) {
                return Some(Held::new(self.address(), emitter));
            }
            if self.flush_waiting() || self.handover.load(Ordering::SeqCst) != seen {
                return None;
            }
        }
    }

    /// This collector's address: what `state.rs` records for its emitter while held.
    fn address(&self) -> usize {
        self as *const Self as usize
    }

    /// Whether this thread holds this collector's emitter (a sink calling back into it).
    fn held_here(&self) -> bool {
        holds(self.address())
    }

    /// Whether a flush waits for the emitter. SeqCst; a stale answer either way is safe
    /// (docs/verification.md).
    fn flush_waiting(&self) -> bool {
        self.state.load(Ordering::SeqCst) & FLUSH_WAITERS != 0
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
        let _reading = ReadPhase(&self.state);
        Some(match &self.share {
            Some(share) => read_phase(&self.inner, share, false, before & READERS > 0),
            None => ReadOutcome::default(),
        })
    }

    /// Waits for every list submitted before the call, collects them all in one round, and
    /// flushes the sinks; `force` also emits lists whose earlier lane neighbour never came
    /// (only when no list can come any more). Waits for a concurrent emitter first (announced:
    /// it stops at the end of its round, and new callers leave the emitter to this flush).
    /// Lists submitted during the flush are not waited for (a producer that never stops cannot
    /// keep it running); those read meanwhile by other collectors are emitted before it
    /// returns (within this flush's rounds, or by the caller itself: `emit_handed_off`), as
    /// are those of a `collect` it turned away.
    pub(crate) fn flush(&self, force: bool) -> Result<CollectReport, CollectError> {
        let inner = &*self.inner;
        let mut report = CollectReport::default();
        if self.held_here() {
            // A sink of this context, inside the collect that holds the emitter: waiting for
            // the emitter would wait for itself.
            report.errors = 1;
            return Err(CollectError { error: Error::FlushFromSink, report });
        }
        // Where this flush begins: every list submitted before it was pushed before this
        // mark; a pass begun after it takes them all (docs/design.md, section 4). The last
        // handle's flush (`force`) always reads.
        let begun = (!force).then(|| {
            inner.queue().mark();
            self.passes.load(Ordering::Acquire)
        });
        let mut error = None;
        #[cfg(not(gpu_event_pool_loom))]
        if !force {
            self.drain_alongside(&mut report, &mut error);
        }
        self.exclusive(Exclusive::Flush { force, begun }, &mut report, &mut error);
        match error {
            None => Ok(report),
            Some(error) => Err(CollectError { error, report }),
        }
    }

    /// For a recording thread that found the pool exhausted (`Inner::relief`; docs/design.md
    /// section 5, "The relief"): whether a list's slots came back meanwhile, by this call or
    /// another collector's. A `collect` beside the other collectors first; if no list came
    /// back, one exclusive pass that waits for no GPU work. Nothing on a thread that holds
    /// this collector's emitter (a sink that records): it would wait for itself. What failed
    /// meanwhile comes with the answer, as a `collect` reports it. (Not under loom, whose
    /// models install no relief: the exclusive pass is the flush's, which they model.)
    #[cfg_attr(gpu_event_pool_loom, allow(dead_code))]
    pub(crate) fn relieve(&self) -> (bool, Option<CollectError>) {
        let pool = self.inner.pool();
        let before = pool.releases();
        let mut report = CollectReport::default();
        let mut error = None;
        match self.collect() {
            Ok(Collected::Done(more)) => report.absorb(more),
            Ok(Collected::Busy) => {}
            Err(e) => {
                report.absorb(e.report);
                error = Some(e.error);
            }
        }
        if pool.releases() == before && !self.held_here() {
            self.exclusive(Exclusive::Relief, &mut report, &mut error);
        }
        (pool.releases() != before, error.map(|error| CollectError { error, report }))
    }

    /// The exclusive part of a flush (or of a relief): waits for the emitter (announced: its
    /// holder stops at the end of its round, and new callers leave the emitter to this pass),
    /// keeps new readers out and waits for those inside, reads every lane alone (a flush
    /// waiting for each list, a relief for none) and emits, then collects once more for a
    /// `collect` it turned away, or emits what other collectors handed over meanwhile.
    fn exclusive(&self, mode: Exclusive, report: &mut CollectReport, error: &mut Option<Error>) {
        let inner = &*self.inner;
        // SeqCst RMWs: see `read`.
        self.state.fetch_add(FLUSH_WAITER, Ordering::SeqCst);
        let waiting = Waiting(&self.state);
        let mut emitter = Held::new(self.address(), lock(&self.emitter));
        // One RMW: no longer waiting, and keeping new readers out.
        let _ = self
            .state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| Some((s - FLUSH_WAITER) | FLUSHING));
        std::mem::forget(waiting);
        let flushing = Flushing(&self.state);
        // Also Acquire: pairs with the readers' Release decrement: their lists are on the
        // queues.
        while self.state.fetch_add(0, Ordering::SeqCst) & READERS != 0 {
            spin_wait();
        }
        let outcome = match (&self.share, mode) {
            (None, _) => ReadOutcome::default(),
            // Every lane from its head, waiting for none.
            (Some(share), Exclusive::Relief) => read_phase(inner, share, false, false),
            // A pass begun since this flush began (and ended: this flush holds the emitter)
            // took and waited for every list submitted before it: flushes that start while
            // one waits for the GPU make one pass, not one each.
            (Some(_), Exclusive::Flush { begun: Some(begun), .. })
                if self.passes.load(Ordering::Relaxed) != begun =>
            {
                ReadOutcome::default()
            }
            (Some(share), Exclusive::Flush { .. }) => {
                // Before the pass's take (Release: `SubmissionQueue::take_all`).
                self.passes.fetch_add(1, Ordering::Relaxed);
                read_phase(inner, share, true, false)
            }
        };
        report.read_lists += outcome.read;
        report.errors += outcome.errors;
        if let Some(e) = outcome.error {
            error.get_or_insert(e);
        }
        // This pass's first round (ROUNDS > 1: never the last).
        self.begin_round(false);
        let pass = match mode {
            Exclusive::Flush { force: true, .. } => Pass::Final,
            Exclusive::Flush { force: false, .. } => Pass::Flush,
            Exclusive::Relief => Pass::Collect,
        };
        if let Some(e) = emitter.emit_phase(inner, pass, report) {
            error.get_or_insert(e);
        }
        let missed = flushing.end();
        report.pending_lists = emitter.waiting_lists();
        if let Exclusive::Flush { .. } = mode {
            if let Some(e) = emitter.delivery.flush(inner) {
                report.errors += 1;
                error.get_or_insert(e);
            }
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
            if self.emit_handed_off(&mut more, error, 0, 1, false) {
                report.absorb(more);
            } else {
                report.pending_lists = pending;
            }
        }
    }

    /// A flush's first part, beside the other collectors (docs/design.md, section 4): collects
    /// as any caller of `collect` does, keeping no one out, until as many lists have been
    /// collected as had been submitted when it began, a round of its own collected nothing
    /// (what is left waits for the GPU, or for a list not submitted yet), or the hold limit has
    /// passed. What it collected and what failed go into the flush's report and error.
    #[cfg(not(gpu_event_pool_loom))]
    fn drain_alongside(&self, report: &mut CollectReport, error: &mut Option<Error>) {
        use crate::shared::LISTS_SUBMITTED;
        let counters = self.inner.counters();
        // Submitted lists only: a list dropped unsubmitted is never counted as collected (an
        // event source skips its place, an activity source lets its work go out alone).
        let target = usize::try_from(counters.recorded.sum(LISTS_SUBMITTED)).unwrap_or(0);
        // Relaxed: a count read late only ends this part sooner or later; the exclusive part
        // that follows decides what the flush has seen.
        let collected = || counters.lists_collected.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + self.inner.config().hold_limit;
        while collected() < target && std::time::Instant::now() < deadline {
            let before = collected();
            let pending = report.pending_lists;
            // One round at most (announced as a last round): this part adds one round to
            // what a flush may emit for lists submitted meanwhile, not `ROUNDS`.
            let emitted = match self.collect_after(ROUNDS - 1) {
                Ok(Collected::Done(more)) => {
                    report.absorb(more);
                    true
                }
                // Another collector emits: what this call read is in its hands.
                Ok(Collected::Busy) => false,
                Err(e) => {
                    report.absorb(e.report);
                    error.get_or_insert(e.error);
                    true
                }
            };
            // The exclusive part sets what is still pending.
            report.pending_lists = pending;
            if emitted && collected() == before {
                break;
            }
            if !emitted {
                std::thread::yield_now();
            }
        }
    }

    /// The last handle's end: a final flush (`force`: no list can come any more), then the
    /// sinks finished (dropped, each in turn), here and now, whatever thread still holds the
    /// context (a collector thread's collect then finds no sink).
    pub(crate) fn finish(&self) -> Result<CollectReport, CollectError> {
        let flushed = self.flush(true);
        if self.held_here() {
            // The last handle dropped by a sink: the sinks are being called; the emitter's
            // holder finishes nothing it is in the middle of (its own drop does).
            return flushed;
        }
        let finished = Held::new(self.address(), lock(&self.emitter)).delivery.finish(&self.inner);
        match (flushed, finished) {
            (flushed, None) => flushed,
            (Ok(mut report), Some(error)) => {
                report.errors += 1;
                Err(CollectError { error, report })
            }
            (Err(mut e), Some(_)) => {
                e.report.errors += 1;
                Err(e)
            }
        }
    }
}
