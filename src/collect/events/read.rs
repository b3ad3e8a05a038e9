//! Phase 1 of collection, the read: run by every caller of `collect` at once, with no lock.
//!
//! Take every submitted list (one swap) and every list an earlier call found incomplete, sort
//! them by home lane and place in that lane's order, and read each list's times, one
//! `elapsed` per event, chained from the list's first event. Lists of one lane are read in
//! order and the reader stops at the first incomplete one (the lane's later lists cannot have
//! run yet): those go to the `retry` queue without a read. Read lists go to the `read` queue
//! with their zones built (times since their first event) and their first event placed on
//! the context's timeline (`clock::place`). The driver reads of concurrent callers overlap;
//! nothing here waits for the GPU (but a flush, which waits).
//!
//! The lists one caller takes form a [`Batch`] cut into pieces (a few lists of one lane);
//! every collector that enters its read phase meanwhile claims pieces of it too, so a backlog
//! is read by every collector at hand, not by the one that happened to take it. A backend
//! call that panics fails its list like any backend error (`guarded`): the lists taken are
//! never lost with an unwinding reader.

use super::bounds::PointBound;
use super::clock::{place, reading_bound, Anchors, Placed, Timeline};
use crate::backend::{guarded, host_now, Backend, BackendError, Elapsed, Lane, Placement};
use crate::error::{Error, TimeError};
use crate::shared::record::{EventRecord, ListKind};
use crate::shared::{own_lane, Inner};
use crate::sink::Zone;
use crate::slots::head::{HeadBatch, ListHead, Piece};
use crate::slots::submit::ListStack;
use crate::sync::{lock, Arc, AtomicU32, AtomicUsize, Mutex, Ordering};

/// What a read phase did.
#[derive(Debug, Default)]
pub(crate) struct ReadOutcome {
    pub(crate) read: usize,
    pub(crate) retried: usize,
    pub(crate) errors: usize,
    pub(crate) error: Option<Error>,
}

/// Lanes whose head list was found incomplete before that one contended read phase probes
/// again, besides the lane the calling thread submitted to last; the others go back to the
/// retry queue unread, for the next caller (a rotating start spreads the probes over the
/// lanes). With many threads collecting at once, each
/// would otherwise spend one driver read per lane whose GPU work is still queued.
const CONTENDED_REPROBES: usize = 2;

/// Most lists in one piece of a batch: lists of one lane, in place order. Small, so that the
/// collectors in their read phase share a backlog: a CUDA read is a driver call, and the
/// driver serves the threads calling it in turn, so one collector reading a backlog alone
/// gets one call in every (recorders + 1).
const PIECE_LISTS: usize = 4;

/// The lists one read phase took, in (lane, place) order, cut into pieces (runs of one lane,
/// at most [`PIECE_LISTS`] lists) that every collector in its read phase may claim, one at a
/// time. Each piece is claimed once (`next`), so each list has one reader. The collector that
/// took the lists claims pieces until none is left before it leaves its read phase: when no
/// collector is reading, every batch is claimed and read (what a flush waits for).
///
/// (Each piece is claimed once, by `HeadBatch::claim`: the hand-off of its lists' heads.)
type Batch = HeadBatch;

/// What the collectors in their read phase share: the timeline (the anchors they keep and
/// place lists against), the batches being read, and where a contended read starts
/// re-probing lanes.
pub(crate) struct ReadShare<B: Backend> {
    timeline: Arc<Timeline<B>>,
    batches: Mutex<Vec<Arc<Batch>>>,
    /// `batches.len()`, read without the lock by a collector looking for pieces to claim.
    published: AtomicUsize,
    probe_cursor: AtomicU32,
}

impl<B: Backend> ReadShare<B> {
    pub(crate) fn new(timeline: Arc<Timeline<B>>) -> Self {
        Self {
            timeline,
            batches: Mutex::new(Vec::new()),
            published: AtomicUsize::new(0),
            probe_cursor: AtomicU32::new(0),
        }
    }

    /// The batches other collectors are reading.
    fn published(&self) -> Vec<Arc<Batch>> {
        // Relaxed: only saves the lock when there is nothing to help with; a batch published
        // just after is read by its own collector.
        if self.published.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        lock(&self.batches).clone()
    }

    fn publish(&self, batch: &Arc<Batch>) {
        let mut batches = lock(&self.batches);
        batches.push(Arc::clone(batch));
        self.published.store(batches.len(), Ordering::Relaxed);
    }

    fn retire(&self, batch: &Arc<Batch>) {
        let mut batches = lock(&self.batches);
        batches.retain(|b| !Arc::ptr_eq(b, batch));
        self.published.store(batches.len(), Ordering::Relaxed);
    }
}

/// Phase 1: claims the unread pieces of other collectors' batches, then takes every submitted
/// and retried list and reads the times of the completed ones, sharing them with the
/// collectors that come meanwhile (with `wait`, waits for each instead, alone). Any number of
/// threads may run it at once: each reads different lists. `contended`: other collectors
/// are reading too, so this one probes at most [`CONTENDED_REPROBES`] lanes found incomplete
/// before (new lists are always read).
pub(crate) fn read_phase<B: Backend>(
    ctx: &Inner<B>,
    share: &ReadShare<B>,
    wait: bool,
    contended: bool,
) -> ReadOutcome {
    let mut reader = Reader {
        ctx,
        anchors: share.timeline.anchors(),
        wait,
        reprobes: if contended && !wait { CONTENDED_REPROBES } else { usize::MAX },
        times: Vec::new(),
        latest: None,
        outcome: ReadOutcome::default(),
    };
    // Lists other collectors took first: they are older than those queued now.
    for batch in share.published() {
        reader.read_batch(&batch);
    }
    let mut taken = Vec::new();
    ctx.queue().take_all(ctx.pool(), &mut taken);
    ctx.retry().take_all(ctx.pool(), &mut taken);
    ctx.pool().sample_high_water();
    if taken.is_empty() {
        return reader.keep_anchors(share);
    }
    let mut keyed: Vec<(u32, u64, ListHead)> = taken
        .into_iter()
        .map(|head| {
            // The list was taken from a queue by this thread (one swap hands each list to
            // exactly one taker), so this thread alone owns its records until it pushes the
            // list on again or publishes it in a batch.
            let seq = head.read(ctx.pool(), |r| r.list_seq);
            (seq.entry, seq.seq, head)
        })
        .collect();
    keyed.sort_unstable();
    if contended {
        // Start at the next lane of those taken, in turn: every lane gets its re-probes.
        let mut lanes: Vec<u32> = keyed.iter().map(|&(entry, _, _)| entry).collect();
        lanes.dedup();
        // Relaxed: only spreads the probes; any value is correct.
        let turn = share.probe_cursor.fetch_add(1, Ordering::Relaxed) as usize % lanes.len();
        let split = keyed.partition_point(|&(entry, _, _)| entry < lanes[turn]);
        keyed.rotate_left(split);
    }
    let batch = Arc::new(Batch::new(keyed, PIECE_LISTS));
    // A flush reads alone; one piece is not worth sharing.
    let shared = !wait && batch.pieces() > 1;
    if shared {
        share.publish(&batch);
    }
    reader.read_batch(&batch);
    if shared {
        share.retire(&batch);
    }
    reader.keep_anchors(share)
}

/// One collector's read phase: what it reads with, and what it did.
struct Reader<'a, B: Backend> {
    ctx: &'a Inner<B>,
    anchors: &'a Anchors<B::Event>,
    wait: bool,
    /// Re-probes of lanes found incomplete before that this reader may still make.
    reprobes: usize,
    /// A list's times, reused from list to list.
    times: Vec<i64>,
    /// The latest GPU time of the lists read.
    latest: Option<i64>,

    outcome: ReadOutcome,
}

impl<B: Backend> Reader<'_, B> {
    /// Ends the read phase keeping the anchors, if no other collector keeps them now (with
    /// `wait`, a flush, waiting for a fresh one): here, by a reader, never by the emitter,
    /// because their driver calls wait behind every recording thread's, and the emitter must
    /// not wait.
    /// Lists read past the newest anchor ask for a new one (at most every sixteenth of the
    /// interval): recorded now, once they are complete, it bounds their host times from after
    /// them, not only from before.
    fn keep_anchors(mut self, share: &ReadShare<B>) -> ReadOutcome {
        let interval = self.ctx.config().anchor_interval;
        if let Err(e) = share.timeline.refresh(self.ctx.backend(), interval, self.wait, self.latest) {
            self.outcome.errors += 1;
            self.outcome.error.get_or_insert(e);
        }
        self.outcome
    }

    /// Claims and reads pieces of `batch` until none is left.
    fn read_batch(&mut self, batch: &Batch) {
        while let Some(piece) = batch.claim() {
            self.read_piece(piece);
        }
    }

    /// Reads the lists of one piece (one lane, in place order) up to the first incomplete
    /// one: the lane's later lists cannot have run yet, so they go to the retry queue unread.
    /// Read lists go to the read queue, for the emitter.
    fn read_piece(&mut self, piece: Piece<'_>) {
        let ctx = self.ctx;
        let (mut read, mut retry) = (ListStack::default(), ListStack::default());
        let mut blocked = false;
        // The lane of the list this thread submitted last is re-probed however contended the
        // read: as a thread that reads its own lists as soon as they are complete, it never
        // leaves one to bounce between other readers' limits (on the H200 at 16 threads the
        // CUDA bench went from 77-88% of the floor, with backpressure flushes, to 93-96%).
        let own = piece.group().is_some_and(|entry| own_lane() == entry);
        // This reader claimed the piece (or took the lists): it owns their records.
        for mut head in piece {
            if blocked {
                retry.add(ctx.pool(), head);
                continue;
            }
            let probed = head.read(ctx.pool(), |r| r.list_probed);
            if probed && !own {
                if self.reprobes == 0 {
                    blocked = true;
                    retry.add(ctx.pool(), head);
                    continue;
                }
                self.reprobes -= 1;
            }
            match read_list(ctx, self.anchors, &mut head, self.wait, &mut self.times, &mut self.latest) {
                Ok(true) => read.add(ctx.pool(), head),
                Ok(false) => {
                    head.write(ctx.pool(), |r| r.list_probed = true);
                    blocked = true;
                    retry.add(ctx.pool(), head);
                }
                Err(e) => {
                    head.write(ctx.pool(), |r| r.list_kind = ListKind::Failed);
                    self.outcome.errors += 1;
                    self.outcome.error.get_or_insert(e);
                    read.add(ctx.pool(), head);
                }
            }
        }
        self.outcome.read += read.len();
        self.outcome.retried += retry.len();
        read.push_onto(ctx.read(), ctx.pool());
        retry.push_onto(ctx.retry(), ctx.pool());
    }
}

/// Reads the times of the list of `head`, chaining each event from the one before, builds
/// its zones (times since the list's first event) into the head record, and gives the
/// emptied buffer of its records back. `Ok(false)`: not complete yet (and `wait` is off).
/// The records are read from the head's buffer, in order: no other slot's record is
/// touched, and no link followed. An error fails the list: its records are put back for the
/// emitter to count its zones as dropped, or, once its zones are built ([`build_zones`]),
/// counted here.
fn read_list<B: Backend>(
    ctx: &Inner<B>,
    anchors: &Anchors<B::Event>,
    head: &mut ListHead,
    wait: bool,
    times: &mut Vec<i64>,
    latest: &mut Option<i64>,
) -> Result<bool, Error> {
    // The caller took this list from a queue (it holds the head): it owns the records. They
    // are put back below (an unwinding backend is caught by `guarded`; only the list's
    // records, never its slots, could be lost with an unwinding allocation).
    let (mut events, list_id) = head.write(ctx.pool(), |r| (std::mem::take(&mut r.events), r.list_id));
    // Placed here rather than by the emitter, which is one thread and must not wait on a
    // driver call: the read that places the list is shared like the others. A list that
    // cannot be placed fails like one whose times cannot be read.
    let first_host_ns = head.read(ctx.pool(), |r| r.first_host_ns);
    // Times that cannot be true (a sum out of `i64`, a step back on a stream, a span its own
    // host reads cannot hold) are read once more: a read that is no distance is seldom read
    // twice. The second reading stands (a list over which the host clock stopped fails).
    let read = |times: &mut Vec<i64>| -> Result<Option<(i64, Span, OwnReads)>, Error> {
        let Some((rounding, span, seen_ns)) = read_times(ctx, list_id, &events, wait, times)? else {
            return Ok(None);
        };
        // Read once the list's events were found complete: the GPU ran them before. The read
        // right after the probe that found its last event complete bounds that event, the
        // latest of a list on one stream, as soon as it was seen; a list whose latest event
        // is on another stream is bounded by a read after all of them. With the host time
        // read before its first record, it bounds what the list can span.
        let last_is_latest = times.last() == Some(&span.1);
        let read_host_ns = if last_is_latest { seen_ns } else { host_now(ctx.backend())? };
        let reads = OwnReads { first_host_ns, read_host_ns };
        if !reads.hold_span(span, rounding) {
            let host_span_ns = first_host_ns.map_or(0, |f| reads.read_host_ns.saturating_sub(f));
            let gpu_span_ns = span.1.abs_diff(span.0);
            return Err(TimeError::BeyondHostTime { list_id, gpu_span_ns, host_span_ns }.into());
        }
        Ok(Some((rounding, span, reads)))
    };
    let read = match read(times) {
        Err(Error::Time(_)) => read(times),
        first => first,
    }
    .and_then(|read| {
        let Some((rounding, span, reads)) = read else { return Ok(None) };
        let placed = place_checked(ctx, anchors, head.first(), list_id, span, &reads)?;
        Ok(Some((placed, reads.read_host_ns, rounding, span)))
    });

    let (placed, read_host_ns, rounding, span) = match read {
        Ok(Some(read)) => read,
        Ok(None) | Err(_) => {
            head.write(ctx.pool(), |r| r.events = events);
            return read.map(|_| false);
        }
    };
    *latest = (*latest).max(placed.0.checked_add(span.1));
    let zones = build_zones(ctx, head, list_id, &mut events, times);

    ctx.record_buffers().give_back(events);
    let zones = zones?;
    head.write(ctx.pool(), |r| {
        r.list_kind = ListKind::Read;
        r.zones = zones;
        r.list_placed = Some(placed);
        r.read_host_ns = read_host_ns;
        r.list_rounding_ns = rounding;
    });
    Ok(true)
}

/// The times of a list's `events` since its first, into `times`, how far any of them may be
/// off by rounding (the sum of its steps' rounding bounds: 0 while every step is under 16 ms
/// or the backend reads exact ticks), the earliest and latest of them, and the host time read
/// right after the read that found its last event complete. `Ok(None)`: not complete yet (and `wait`
/// is off). Times that cannot be true are an error ([`TimeError::OutOfRange`],
/// [`TimeError::WentBack`]).
fn read_times<B: Backend>(
    ctx: &Inner<B>,
    list_id: u64,
    events: &[EventRecord],
    wait: bool,
    times: &mut Vec<i64>,
) -> Result<Option<(i64, Span, i64)>, Error> {
    let (backend, pool) = (ctx.backend(), ctx.pool());
    // Each event's backend event is looked up once: a step reads it as its `to`, the next
    // step as its `from` (a lookup finds the slot's page from its index; looking up both
    // events in every step cost 24 of the read phase's 297 instructions a zone, callgrind).
    let event = |record: &EventRecord| pool.event(record.slot);
    let step = |from: &B::Event, to: &B::Event| -> Result<Option<Elapsed>, BackendError> {
        let elapsed = || guarded("elapsed", || backend.elapsed(from, to));
        match elapsed()? {
            Some(elapsed) => Ok(Some(elapsed)),
            None if wait => {
                guarded("wait", || backend.wait(from))?;
                guarded("wait", || backend.wait(to))?;
                match elapsed()? {
                    Some(elapsed) => Ok(Some(elapsed)),
                    None => Err(BackendError::new("elapsed", "event not ready after wait")),
                }
            }
            None => Ok(None),
        }
    };
    // The last step first: a list the GPU has not finished costs one read, not one per
    // finished event (its events run in order on its stream). A list of one event tests
    // that event against itself.
    let n = events.len();
    let last_step = match n {
        1 => step(event(&events[0]), event(&events[0]))?,
        _ => step(event(&events[n - 2]), event(&events[n - 1]))?,
    };
    let Some(last_step) = last_step else { return Ok(None) };
    let seen_ns = host_now(backend)?;
    times.clear();
    times.push(0);
    let mut rounding = 0i64;
    let mut span: Span = (0, 0);
    // The latest time of the run of events recorded one after the other on the lane of the
    // event before `i`.
    let mut run_latest = 0;
    // The backend event of `events[i - 1]`.
    let mut from = event(&events[0]);
    for i in 1..n {
        let elapsed = if i == n - 1 {
            last_step
        } else {
            let to = event(&events[i]);
            let read = step(from, to)?;
            from = to;
            match read {
                Some(elapsed) => elapsed,
                None => return Ok(None),
            }
        };
        rounding = rounding.saturating_add(reading_bound(elapsed));
        let t = times[i - 1].checked_add(elapsed.ns).ok_or(TimeError::OutOfRange { list_id, event: i })?;
        let (before, here) = (&events[i - 1], &events[i]);
        if here.lane != before.lane {
            // Steps between streams may go back.
            run_latest = t;
        } else {
            // Only where a lane runs events in recording order (not Vulkan: command buffers
            // of one queue run in submission order), and only an end: a begin may be written
            // before earlier work is done (Vulkan's top of the pipe), a graph's nodes side by
            // side.
            let in_order = B::PLACEMENT == Placement::FirstRecord && matches!(here.lane, Lane::Stream(_));
            if in_order && here.ends && t < run_latest {
                let by_ns = run_latest.abs_diff(t);
                return Err(TimeError::WentBack { list_id, lane: here.lane, event: i, by_ns }.into());
            }
            run_latest = run_latest.max(t);
        }
        span = (span.0.min(t), span.1.max(t));
        times.push(t);
    }
    Ok(Some((rounding, span, seen_ns)))
}

/// The earliest and latest of a list's times since its first.
type Span = (i64, i64);

/// A list's own host reads: before its first record (unknown for a list placed at its
/// submission) and once it was found complete.
struct OwnReads {
    first_host_ns: Option<i64>,
    read_host_ns: i64,
}

impl OwnReads {
    /// What they say of the offset at the list's earliest and latest GPU times, the list's
    /// first event at `first`: every event ran after the read before its first record and
    /// before the read once it was complete.
    fn bounds(&self, first: i64, (earliest, latest): Span) -> Option<(PointBound, PointBound)> {
        let (earliest, latest) = (first.checked_add(earliest)?, first.checked_add(latest)?);
        Some((
            PointBound::from_host(earliest, self.first_host_ns, None),
            PointBound::from_host(latest, None, Some(self.read_host_ns)),
        ))
    }

    /// Whether the list's times (since its first event, off by at most `rounding`) fit its own
    /// reads: no mapping within the rate bound takes its earliest time after its first read
    /// and its latest before its last otherwise.
    fn hold_span(&self, span: Span, rounding: i64) -> bool {
        let Some((early, late)) = self.bounds(0, span) else { return false };
        let late = PointBound { upper: late.upper.map(|u| u.saturating_add(rounding)), ..late };
        early.agrees(&late)
    }
}

/// The list's first event (slot `first_slot`) placed on the context's timeline
/// (`clock::place`), checked against the host reads around the anchor it was read from and
/// the list's own: a place they cannot hold at the rate bound is read again. The same answer
/// is kept (a discontinuity of the clocks between the anchor and the list: the emitter places
/// the list from its own reads), another that fits is the place, and two that disagree are
/// no distance ([`TimeError::PlacementDisagrees`]). A place that takes a time out of `i64`
/// fails the list ([`TimeError::OutOfRange`]).
fn place_checked<B: Backend>(
    ctx: &Inner<B>,
    anchors: &Anchors<B::Event>,
    first_slot: u32,
    list_id: u64,
    span: Span,
    reads: &OwnReads,
) -> Result<Placed, Error> {
    let event = ctx.pool().event(first_slot);
    let fits = |(placed, anchor): &(Placed, PointBound)| {
        reads
            .bounds(placed.0, span)
            .is_some_and(|(early, late)| anchor.agrees(&early) && anchor.agrees(&late))
    };
    let in_range = |(placed, _): &(Placed, PointBound)| {
        placed.0 != i64::MAX && placed.0 != i64::MIN && reads.bounds(placed.0, span).is_some()
    };
    // How far before an anchor seen complete before the list began its earliest event lies
    // (the base event, GPU time 0, was seen complete before any list began): the GPU's
    // counter does not go back, so that is impossible.
    let before_anchor = |(placed, anchor): &(Placed, PointBound)| {
        let earliest = placed.0.saturating_add(span.0);
        let slack = placed.1.saturating_add(placed.2);
        let seen = anchor.upper.map(|u| u.saturating_add(anchor.gpu));
        let after_anchor = reads.first_host_ns.zip(seen).is_some_and(|(first, seen)| first >= seen);
        let floor = if after_anchor { anchor.gpu.max(0) } else { 0 };
        (earliest < floor.saturating_sub(slack)).then(|| floor.abs_diff(earliest))
    };
    let first = place(ctx.backend(), anchors, event)?;
    if fits(&first) {
        return Ok(first.0);
    }
    let again = place(ctx.backend(), anchors, event)?;
    let same = again.0 .0.abs_diff(first.0 .0) <= (first.0 .2 + again.0 .2).unsigned_abs();
    if fits(&again) || (same && in_range(&again) && before_anchor(&again).is_none()) {
        return Ok(again.0);
    }
    Err(match (in_range(&again), before_anchor(&again)) {
        (false, _) if !same => {
            TimeError::PlacementDisagrees { list_id, first_ns: first.0 .0, second_ns: again.0 .0 }
        }
        (false, _) => TimeError::OutOfRange { list_id, event: 0 },
        (true, Some(by_ns)) if same => TimeError::BeforeAnchor { list_id, by_ns },
        _ => TimeError::PlacementDisagrees { list_id, first_ns: first.0 .0, second_ns: again.0 .0 },
    }
    .into())
}

/// Replays the records of a read list (`events`, their `times` since its first event) into
/// zones in begin order, emptying `events`. Zones without an end can only come from a
/// backend that reported success for an event it did not record: they are dropped and
/// counted. A zone that ends before it begins fails the list
/// ([`TimeError::EndsBeforeBegin`], the first one): all its zones are dropped and counted.
fn build_zones<B: Backend>(
    ctx: &Inner<B>,
    head: &ListHead,
    list_id: u64,
    events: &mut Vec<EventRecord>,
    times: &[i64],
) -> Result<Vec<Zone>, TimeError> {
    // A list of n events has at most n zones (every zone begins at an event of its own).
    let mut zones: Vec<Zone> = ctx.zone_buffers().take();
    zones.reserve(events.len());
    let mut open: Vec<usize> = Vec::new();
    let mut backwards = None;
    // By reference, the location taken out (the buffer is cleared after): no copy of each
    // record out of the buffer and back.
    for (record, &t) in events.iter_mut().zip(times) {
        if record.ends {
            if let Some(z) = open.pop() {
                let zone = &mut zones[z];
                zone.gpu_end_ns = t;
                if t < zone.gpu_begin_ns && backwards.is_none() {
                    let location = &zone.location;
                    backwards = Some(TimeError::EndsBeforeBegin {
                        list_id,
                        zone: format!("{} at {}:{}", location.name(), location.file(), location.line()),
                        begin_lane: zone.lane,
                        end_lane: record.lane,
                        by_ns: zone.gpu_begin_ns.abs_diff(t),
                    });
                }
            }
        }
        if let Some(location) = record.begins.take().filter(|_| !record.begin_dropped) {
            // The reader owns the list (it holds the head), so the slot; the launch was
            // written with the event, before submission.
            let launch = record.launched.then(|| head.launch(ctx.pool(), record.slot));
            let at = zones.len();
            open.push(at);
            // Written in place, not built and then copied by `push`: a zone is 136 bytes, past
            // what the compiler copies inline, and that `memcpy` was 4 ns of a zone's 28 in
            // the read phase (`phases` serial_batch32 on the 2-core machine; docs/design.md,
            // section 16). The buffer has room: it was reserved for one zone per event.
            zones.reserve(1);
            zones.spare_capacity_mut()[0].write(Zone {
                location,
                lane: record.lane,
                depth: (open.len() - 1) as u32,
                gpu_begin_ns: t,
                gpu_end_ns: i64::MIN,
                host_begin_ns: 0,
                host_end_ns: 0,
                host_begin_bound_ns: 0,
                host_end_bound_ns: 0,
                launch,
                frame: None,
            });
            // Safety: the element at `at` (the first spare one) was written just above, so the
            // first `at + 1` elements are initialized, and `at + 1` is within the capacity.
            unsafe { zones.set_len(at + 1) };
        }
    }
    events.clear();
    let before = zones.len();
    zones.retain(|z| z.gpu_end_ns != i64::MIN);
    ctx.count_dropped(before - zones.len());
    match backwards {
        None => Ok(zones),
        Some(error) => {
            ctx.count_dropped(zones.len());
            ctx.zone_buffers().give_back(zones);
            Err(error)
        }
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
