//! A list's recording steps: what `zone_begin`, `zone_next`, `zone_end` and their graph
//! twins do. A plain step (the list has recorded before; it ends a recorded zone and/or
//! begins one that is recorded, its slots already reserved) is inlined into those calls;
//! every other step (a list's first event, which takes the list's place on its lane; a
//! refill; a zone skipped, dropped, too deep or with launches or NVTX ranges) is made out of
//! line, by the general step.

use super::{holder, EventList, DROPPED, SKIPPED};
use crate::backend::{create_event, guarded, host_now, Backend, BackendError, Lane, Mark, Placement, Timing};
use crate::launch::{thread_number, Launch};
use crate::limits::MAX_DEPTH;
use crate::location::Location;
use crate::record::RecordError;
use crate::shared::config::BEGIN_SLOTS;
use crate::shared::lanes::LaneSeq;
use crate::shared::record::{push_record, EventRecord};
use crate::shared::Inner;
use crate::slots::pool::AcquireError;

/// The backend call a step makes to record its event (`record_mark` on a stream,
/// `add_graph_record_node` in a graph), returning what the caller gets back.
pub(super) trait RecordCall<B: Backend, R>:
    FnOnce(&B, &B::Event, Mark) -> Result<R, BackendError>
{
}

impl<B: Backend, R, F: FnOnce(&B, &B::Event, Mark) -> Result<R, BackendError>> RecordCall<B, R> for F {}

/// What one step does: on `lane`, optionally end the innermost zone (`end`), optionally begin
/// one at `begin`; `call` names the backend call for a caught panic.
pub(super) struct Step {
    pub(super) lane: Lane,
    pub(super) end: bool,
    pub(super) begin: Option<Location>,
    pub(super) call: &'static str,
}

impl<B: Backend> EventList<B> {
    /// One recording step: optionally end the innermost zone, optionally begin a new one, with
    /// at most one event. Every zone that cannot be recorded is counted as dropped.
    ///
    /// A plain step ([`is_plain`](Self::is_plain)) is inlined into the caller; every other
    /// one is made out of line ([`any_step`](Self::any_step)), as the magazines do.
    #[inline(always)]
    pub(super) fn step<R>(
        &mut self,
        step: Step,
        record: impl RecordCall<B, R>,
    ) -> Result<Option<R>, RecordError> {
        if self.is_plain(step.end, step.begin.as_ref()) {
            self.plain_step(step, record)
        } else {
            self.any_step(step, record)
        }
    }

    /// Whether a step is plain: the list has recorded an event before (the first takes its
    /// place on its lane), the zone the step ends (if it ends one) was recorded and has no
    /// NVTX range to pop, and the zone it begins (if it begins one) is to be recorded (the
    /// verbosity wants it; the context is open, records no launches and pushes no NVTX
    /// range; not too deep) with the slots it needs already reserved. A plain step records
    /// one event, and nothing but its backend call can fail.
    #[inline(always)]
    fn is_plain(&self, end: bool, begin: Option<&Location>) -> bool {
        // An activity source's zones also go on the thread's stack of open zones (a constant:
        // nothing is tested on an event backend).
        if self.runs.used() == 0 || self.ctx.backend().timing() == Timing::Activities {
            return false;
        }
        let (mut depth, mut reserved) = (self.depth, self.reserved);
        if end {
            if self.overflow > 0 || depth == 0 || self.stack[depth - 1] >= SKIPPED {
                return false;
            }
            // The general step pops the NVTX range of the zone it ends.
            #[cfg(feature = "nvtx")]
            if self.nvtx[depth - 1] != 0 {
                return false;
            }
            depth -= 1;
            reserved -= 1;
        }
        let Some(location) = begin else {
            // An end alone takes the slot its zone kept (`spare >= reserved` between calls).
            return end;
        };
        let switches = self.ctx.switches();
        #[cfg(feature = "nvtx")]
        if switches.nvtx() {
            return false;
        }
        depth < MAX_DEPTH
            && switches.level().records(location.level())
            && !switches.closed()
            && !switches.launches()
            && self.runs.spare() >= reserved + BEGIN_SLOTS
    }

    /// A plain step ([`is_plain`](Self::is_plain)).
    #[inline(always)]
    fn plain_step<R>(&mut self, step: Step, record: impl RecordCall<B, R>) -> Result<Option<R>, RecordError> {
        let Step { lane, end, begin, call } = step;
        let ended = end.then(|| {
            self.depth -= 1;
            // The slot kept for this end is the one the event below takes.
            self.reserved -= 1;
            self.stack[self.depth]
        });
        let begins = begin.is_some();
        let ctx = &*self.ctx;
        let (index, slot) = self.runs.take(ctx.pool());
        match guarded(call, || record(ctx.backend(), slot.event(), mark(end, begins))) {
            Ok(out) => {
                let position = self.runs.used();
                push_record(&mut self.records, index, lane, end, begin);
                self.runs.commit(ctx.pool(), index, ctx.pool().segment_len());
                if begins {
                    self.stack[self.depth] = position;
                    self.depth += 1;
                    self.reserved += 1;
                }
                Ok(Some(out))
            }
            Err(e) => {
                self.runs.untake(ctx.pool(), index);
                self.record_failed(ended, begins);
                if begins {
                    self.stack[self.depth] = DROPPED;
                    self.depth += 1;
                }
                Err(RecordError::Backend(e))
            }
        }
    }

    /// A step's event could not be recorded: the zone it ends (its begin event at position
    /// `ended`) loses its begin (the collector skips it rather than pair later ends wrongly),
    /// and the zone it begins, if any, is dropped; both counted.
    #[cold]
    fn record_failed(&mut self, ended: Option<u32>, begins: bool) {
        if let Some(begin) = ended {
            self.records[begin as usize].begin_dropped = true;
            self.ctx.count_dropped(1);
        }
        if begins {
            self.ctx.count_dropped(1);
        }
    }

    /// Any step, plain or not, out of line.
    #[inline(never)]
    fn any_step<R>(&mut self, step: Step, record: impl RecordCall<B, R>) -> Result<Option<R>, RecordError> {
        let Step { lane, end, begin, call } = step;
        let ended = if !end {
            None
        } else if self.overflow > 0 {
            self.overflow -= 1;
            None
        } else if self.depth > 0 {
            self.depth -= 1;
            #[cfg(feature = "nvtx")]
            crate::nvtx::pop(std::mem::take(&mut self.nvtx[self.depth]));
            Some(self.stack[self.depth]).filter(|&s| s < SKIPPED)
        } else {
            return Err(RecordError::NoOpenZone);
        };
        if let Some(position) = ended {
            // The slot kept for this end is the one the event below takes.
            self.reserved -= 1;
            if self.ctx.backend().timing() == Timing::Activities {
                // Launches made on this thread from now on are no longer its work.
                self.zone_threads.close(self.zone_key(position));
            }
        }

        let mut error = None;
        let mut opened = None;
        let mut begin_location = None;
        let mut launches = false;
        if let Some(location) = begin {
            let switches = self.ctx.switches();
            let wanted = switches.level().records(location.level());
            if self.depth == MAX_DEPTH {
                if wanted {
                    self.ctx.count_dropped(1);
                    error = Some(RecordError::TooDeep { max_depth: MAX_DEPTH });
                }
                self.overflow += 1;
            } else if !wanted {
                opened = Some(SKIPPED);
            } else {
                // The range opens before the begin event is recorded, and covers the zone's
                // work on this thread; it is pushed for a zone that fails to record too
                // (refused for want of a slot, or failing in the backend).
                #[cfg(feature = "nvtx")]
                if switches.nvtx() {
                    self.nvtx[self.depth] = crate::nvtx::push(location.name());
                }
                if let Err(e) = self.refuse_begin(switches.closed()) {
                    self.ctx.count_dropped(1);
                    error = Some(e);
                    opened = Some(DROPPED);
                } else {
                    begin_location = Some(location);
                    launches = switches.launches();
                }
            }
        }

        let mut output = None;
        if ended.is_some() || begin_location.is_some() {
            let begins = begin_location.is_some();
            match self.record_event(lane, ended.is_some(), begin_location, launches, call, record) {
                Ok((event, out)) => {
                    output = Some(out);
                    if begins {
                        opened = Some(event);
                        self.reserved += 1;
                        if self.ctx.backend().timing() == Timing::Activities {
                            // Launches made on this thread from now on are its work.
                            let key = self.zone_key(event);
                            self.zone_threads.open(key);
                        }
                    }
                }
                Err(e) => {
                    self.record_failed(ended, begins);
                    if begins {
                        opened = Some(DROPPED);
                    }
                    error.get_or_insert(e);
                }
            }
        }
        if let Some(entry) = opened {
            self.stack[self.depth] = entry;
            self.depth += 1;
        }
        match error {
            Some(e) => Err(e),
            None => Ok(output),
        }
    }

    /// Why a zone that would be recorded cannot begin, if it cannot: the context is closed, or
    /// the reservation cannot hold a slot for its begin event and one kept for its end, besides
    /// those kept for the other open zones (a zone this step ends has given its kept slot
    /// back already: it becomes the begin event's).
    #[inline]
    fn refuse_begin(&mut self, closed: bool) -> Result<(), RecordError> {
        if closed {
            return Err(RecordError::ContextClosed);
        }
        let need = self.reserved + BEGIN_SLOTS;
        if self.runs.spare() < need {
            return self.reserve(need);
        }
        Ok(())
    }

    /// Takes a slot, records its event, appends it and its record to the list, and returns
    /// the event's position in the list. The list's first event also takes the list's place
    /// on its lane, in the same step.
    fn record_event<R>(
        &mut self,
        lane: Lane,
        ends: bool,
        begins: Option<Location>,
        launches: bool,
        call: &'static str,
        record: impl RecordCall<B, R>,
    ) -> Result<(u32, R), RecordError> {
        if self.runs.spare() == 0 {
            self.reserve(1)?;
        }
        let ctx = &*self.ctx;
        let (index, slot) = self.runs.take(ctx.pool());
        let mark = mark(ends, begins.is_some());
        // A backend that panics loses the event, not the slot: `guarded` makes the panic its
        // error, in every backend call made here (the host clock's too). With launches on,
        // the record call's host times are kept.
        let event = || {
            let begin = if launches { Some(host_now(ctx.backend())?) } else { None };
            let out = guarded(call, || record(ctx.backend(), slot.event(), mark))?;
            let launch = match begin {
                Some(begin) => Some(Launch::new(begin, host_now(ctx.backend())?, thread_number())),
                None => None,
            };
            Ok((out, launch))
        };
        let first = self.runs.used() == 0;
        // An activity source orders lists by their work's records: they take no place.
        let takes_place = B::PLACEMENT == Placement::FirstRecord && ctx.backend().timing() == Timing::Events;
        let recorded = if first && takes_place {
            record_first(ctx, self.id, lane, begins.as_ref(), event).map(|(home, started, out)| {
                self.home = Some(home);
                self.first_host_ns = Some(started);
                out
            })
        } else {
            event()
        };
        let (out, launch) = match recorded {
            Ok(recorded) => recorded,
            Err(e) => {
                self.runs.untake(ctx.pool(), index);
                return Err(RecordError::Backend(e));
            }
        };
        let launched = launch.is_some();
        if let Some(launch) = launch {
            // The slot is Owned by this list (taken from its reservation): no other thread
            // reads or writes its launch until the list is submitted or dropped.
            slot.set_launch(launch);
        }
        if first && self.records.capacity() == 0 {
            self.records = ctx.record_buffers().take_for_list();
        }
        self.records.push(EventRecord { slot: index, lane, ends, begin_dropped: false, launched, begins });
        let position = self.runs.used();
        self.runs.commit(ctx.pool(), index, ctx.pool().segment_len());
        Ok((position, out))
    }

    /// Refills the reservation until it holds `n` slots: what is missing, up to a batch, as
    /// whole segments from the thread's magazine (a batch each, or what is left of one). Out
    /// of line: once per batch.
    #[cold]
    #[inline(never)]
    pub(super) fn reserve(&mut self, n: u32) -> Result<(), RecordError> {
        while self.runs.spare() < n {
            let ctx = &self.ctx;
            let lack = n - self.runs.spare();
            let chain = loop {
                match ctx.pool().acquire(lack, ctx.config().batch.max(lack), || create_event(ctx.backend())) {
                    // Out of slots at the maximum: collect rather than drop the zone, again
                    // while lists come back (docs/design.md section 5, "The relief").
                    Err(AcquireError::Exhausted) if ctx.relieve() => {}
                    acquired => break acquired,
                }
            };
            let chain = chain.map_err(|e| match e {
                AcquireError::Exhausted => RecordError::PoolExhausted { capacity: ctx.config().max_capacity },
                AcquireError::Backend(e) => RecordError::Backend(e),
            })?;
            self.runs.append(ctx.pool(), chain);
        }
        Ok(())
    }
}

/// What an event that `ends` a zone and/or `begins` one marks, for the backend.
#[inline(always)]
fn mark(ends: bool, begins: bool) -> Mark {
    match (ends, begins) {
        (true, true) => Mark::EndAndBegin,
        (true, false) => Mark::End,
        _ => Mark::Begin,
    }
}

/// Records list `list_id`'s first event (`event`) and takes the list's place on `lane` in one
/// step, under the lane's place lock (`Placement::FirstRecord`); returns the place, the host time
/// read just before, and what `event` returned. Out of line: once per list.
#[cold]
#[inline(never)]
fn record_first<B: Backend, T>(
    ctx: &Inner<B>,
    list_id: u64,
    lane: Lane,
    begins: Option<&Location>,
    event: impl FnOnce() -> Result<T, BackendError>,
) -> Result<(LaneSeq, i64, T), BackendError> {
    // The holder's start is read before the lane is locked, so that the only call made under
    // the lock is the record.
    let started = host_now(ctx.backend())?;
    let holder = || holder(list_id, lane, begins, started);
    let (home, out) = ctx.lanes().record_first(lane, event, holder)?;
    Ok((home, started, out))
}
