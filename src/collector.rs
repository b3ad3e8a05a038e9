//! The collector: reads the times of completed lists, puts them in per-lane GPU order, hands
//! their zones to the sinks, and releases their slots.
//!
//! Collection has two phases (docs/design.md, section 8; section 1 has the diagram):
//!
//! 1. **Read** ([`read_phase`]), run by every caller of `collect` at once, with no lock: take
//!    every submitted list (one swap) and every list an earlier call found incomplete, sort
//!    them by home lane and place in that lane's order, and read each list's times, one
//!    `elapsed` per event, chained from the list's first event. Lists of one lane are read in
//!    order and the reader stops at the first incomplete one (the lane's later lists cannot
//!    have run yet): those go to the `retry` queue without a read. Read lists go to the `read`
//!    queue. The driver reads of concurrent callers overlap; nothing here waits for the GPU.
//! 2. **Emit** ([`Collector::emit_phase`]), run by one caller at a time (the others return
//!    at once, their reading done): take the read lists, and per lane emit every list whose
//!    place is next, in place order, with one more `elapsed` per list to place its first
//!    event on the context's timeline; release every emitted list's slots with one CAS.
//!
//! The completion test is `elapsed` itself (CUDA: `cuEventElapsedTime` answering
//! `CUDA_ERROR_NOT_READY`): the collector never queries or synchronizes an event, so it cannot
//! invalidate another thread's stream capture.
//!
//! Time. CUDA only measures the time between two completed events, as `f32` milliseconds.
//! An `f32` under 16 ms converts back to whole nanoseconds exactly (its step there is at most
//! 0.95 ns); above, up to half a step is lost (0.95 ns from 16 to 32 ms, 0.125 ms at one
//! hour). So every measured distance is kept short:
//!
//! - within a list, event `i` is measured from event `i - 1` and the steps are summed in
//!   `i64` nanoseconds: durations are exact whenever consecutive events of a list are less
//!   than 16 ms apart, however long the list and whenever it is collected;
//! - a list's first event is placed against the nearest *anchor*: an event the collector
//!   records on its own idle stream every `anchor_interval`, whose time is the previous
//!   anchor's plus the step between them. The last [`ANCHORS`] anchors are kept, so a list
//!   collected late still finds one near it.

use crate::backend::{Backend, Lane};
use crate::context::{Config, Inner};
use crate::error::{BackendError, Error};
use crate::freelist::Chain;
use crate::lanes::ENTRIES;
use crate::pool::{EventRecord, ListKind};
use crate::sink::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use crate::submit::SubmissionLinks;
use crate::sync::Ordering;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// In `Collector::waiting`, a place given up by a list dropped unsubmitted (no slot).
const VOID: u32 = crate::freelist::NIL;

/// Anchors kept for placing lists collected late: at one per `anchor_interval` (5 ms by
/// default), the last 320 ms or more.
pub(crate) const ANCHORS: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 64 };

/// Distances under this many nanoseconds (16 ms) survive `f32` milliseconds exactly: below
/// 16 ms an `f32` step is at most 2^-20 ms (0.95 ns), so rounding back to whole nanoseconds
/// recovers the integer.
const EXACT_NS: i64 = 16_000_000;

/// What one `collect` or `flush` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectReport {
    /// Lists collected (zones emitted, slots released), failed ones included.
    pub lists: usize,
    /// Zones delivered to the sinks.
    pub zones: usize,
    /// Lists whose times could not be read (zones dropped, slots released).
    pub failed_lists: usize,
    /// Submitted lists this call left waiting: for the GPU, or for an earlier list of their
    /// lane that is not submitted or not complete yet.
    pub pending_lists: usize,
    /// Lists whose times this call read (concurrent callers share the reading).
    pub read_lists: usize,
    /// Failures met by this call (backend reads, sinks); the first is the call's error.
    pub errors: usize,
}

/// How far a distance of `ns` read as `f32` milliseconds may be off once rounded to whole
/// nanoseconds: 0 under 16 ms; above, half an `f32` step (at most 2^-24 of the distance),
/// rounded up, plus the final rounding.
pub(crate) fn rounding_bound(ns: i64) -> i64 {
    let ns = ns.unsigned_abs();
    if ns < EXACT_NS as u64 {
        0
    } else {
        (ns >> 24) as i64 + 1
    }
}

/// `f32` milliseconds to whole nanoseconds, rounded to nearest.
fn ms_to_ns(ms: f32) -> i64 {
    (f64::from(ms) * 1e6).round() as i64
}

/// Lists being linked through `next_submitted` for one push onto a collector queue.
#[derive(Default)]
struct ListChain {
    newest: Option<u32>,
    oldest: u32,
    len: usize,
}

impl ListChain {
    fn add(&mut self, links: &impl SubmissionLinks, first: u32) {
        match self.newest {
            None => self.oldest = first,
            // Relaxed: published by the Release CAS of `push_chain`.
            Some(newest) => links.next_submitted(first).store(newest, Ordering::Relaxed),
        }
        self.newest = Some(first);
        self.len += 1;
    }

    fn push_onto(self, queue: &crate::submit::SubmissionQueue, links: &impl SubmissionLinks) {
        if let Some(newest) = self.newest {
            queue.push_chain(links, newest, self.oldest);
        }
    }
}

/// What a read phase did.
#[derive(Debug, Default)]
pub(crate) struct ReadOutcome {
    pub(crate) read: usize,
    pub(crate) retried: usize,
    pub(crate) errors: usize,
    pub(crate) error: Option<Error>,
    /// Whether any list was taken at all.
    pub(crate) took: bool,
}

/// Lanes whose head list was found incomplete before that one contended read phase probes
/// again; the others go back to the retry queue unread, for the next caller (a rotating
/// start spreads the probes over the lanes). With many threads collecting at once, each
/// would otherwise spend one driver read per lane whose GPU work is still queued.
const CONTENDED_REPROBES: usize = 2;

/// Phase 1: takes every submitted and retried list and reads the times of the completed ones
/// (with `wait`, waits for each instead). Any number of threads may run it at once: each
/// takes different lists. `contended`: other collectors are reading too, so this one probes
/// at most [`CONTENDED_REPROBES`] lanes found incomplete before (new lists are always read).
pub(crate) fn read_phase<B: Backend>(ctx: &Inner<B>, wait: bool, contended: bool) -> ReadOutcome {
    let mut outcome = ReadOutcome::default();
    let mut taken = Vec::new();
    ctx.queue.take_all(&ctx.pool, &mut taken);
    ctx.retry.take_all(&ctx.pool, &mut taken);
    ctx.pool.sample_high_water();
    if taken.is_empty() {
        return outcome;
    }
    outcome.took = true;
    let mut keyed: Vec<(u32, u64, u32)> = taken
        .iter()
        .map(|&first| {
            // Safety: the list was taken from a queue by this thread (one swap hands each
            // list to exactly one taker), so this thread alone owns its records until it
            // pushes the list on again.
            let seq = ctx.pool.slot(first).record.with(|r| unsafe { (*r).list_seq });
            (seq.entry, seq.seq, first)
        })
        .collect();
    keyed.sort_unstable();
    if contended {
        // Start at the next lane of those taken, in turn: every lane gets its re-probes.
        let mut lanes: Vec<u32> = keyed.iter().map(|&(entry, _, _)| entry).collect();
        lanes.dedup();
        // Relaxed: only spreads the probes; any value is correct.
        let turn = ctx.probe_cursor.fetch_add(1, Ordering::Relaxed) as usize % lanes.len();
        let split = keyed.partition_point(|&(entry, _, _)| entry < lanes[turn]);
        keyed.rotate_left(split);
    }
    let (mut read, mut retry) = (ListChain::default(), ListChain::default());
    let mut blocked = None;
    let mut reprobes = if contended && !wait { CONTENDED_REPROBES } else { usize::MAX };
    let mut slots = Vec::new();
    for (entry, _, first) in keyed {
        if blocked == Some(entry) {
            retry.add(&ctx.pool, first);
            continue;
        }
        // Safety: as above, this thread owns the taken list.
        let probed = ctx.pool.slot(first).record.with(|r| unsafe { (*r).list_probed });
        if probed {
            if reprobes == 0 {
                blocked = Some(entry);
                retry.add(&ctx.pool, first);
                continue;
            }
            reprobes -= 1;
        }
        match read_list(ctx, first, wait, &mut slots) {
            Ok(true) => read.add(&ctx.pool, first),
            Ok(false) => {
                // Safety: as above.
                ctx.pool.slot(first).record.with_mut(|r| unsafe { (*r).list_probed = true });
                blocked = Some(entry);
                retry.add(&ctx.pool, first);
            }
            Err(e) => {
                // Safety: as above, this thread owns the taken list.
                ctx.pool.slot(first).record.with_mut(|r| unsafe { (*r).list_kind = ListKind::Failed });
                outcome.errors += 1;
                outcome.error.get_or_insert(e.into());
                read.add(&ctx.pool, first);
            }
        }
    }
    outcome.read = read.len;
    outcome.retried = retry.len;
    read.push_onto(&ctx.read, &ctx.pool);
    retry.push_onto(&ctx.retry, &ctx.pool);
    outcome
}

/// Reads the times of the list at `first`, chaining each event from the one before, and
/// builds its zones (times since the list's first event) into the head record, clearing the
/// other records. `Ok(false)`: not complete yet (and `wait` is off).
fn read_list<B: Backend>(
    ctx: &Inner<B>,
    first: u32,
    wait: bool,
    slots: &mut Vec<u32>,
) -> Result<bool, BackendError> {
    let backend = &ctx.backend;
    // Safety: the caller took this list from a queue: it owns the records.
    let len = ctx.pool.slot(first).record.with(|r| unsafe { (*r).list_len });
    slots.clear();
    let mut index = first;
    for _ in 0..len {
        slots.push(index);
        // Relaxed: the list's links were published by the Release CAS that queued it.
        index = ctx.pool.slot(index).link.load(Ordering::Relaxed);
    }
    let step = |from: u32, to: u32| -> Result<Option<f32>, BackendError> {
        let (from, to) = (&ctx.pool.slot(from).event, &ctx.pool.slot(to).event);
        match backend.elapsed_ms(from, to)? {
            Some(ms) => Ok(Some(ms)),
            None if wait => {
                backend.wait(from)?;
                backend.wait(to)?;
                match backend.elapsed_ms(from, to)? {
                    Some(ms) => Ok(Some(ms)),
                    None => Err(BackendError::new("elapsed_ms", "event not ready after wait")),
                }
            }
            None => Ok(None),
        }
    };
    // The last step first: a list the GPU has not finished costs one read, not one per
    // finished event (its events run in order on its stream). A list of one event tests
    // that event against itself.
    let n = slots.len();
    let last_step = match n {
        1 => step(slots[0], slots[0])?,
        _ => step(slots[n - 2], slots[n - 1])?,
    };
    let Some(last_step) = last_step else { return Ok(false) };
    let mut times = Vec::with_capacity(n);
    times.push(0);
    for i in 1..n {
        let ms = if i == n - 1 {
            last_step
        } else {
            match step(slots[i - 1], slots[i])? {
                Some(ms) => ms,
                None => return Ok(false),
            }
        };
        times.push(times[i - 1] + ms_to_ns(ms));
    }
    let zones = build_zones(ctx, slots, &times);
    // Safety: as above.
    ctx.pool.slot(first).record.with_mut(|r| unsafe {
        (*r).list_kind = ListKind::Read;
        (*r).zones = zones;
    });
    Ok(true)
}

/// Replays the records of a read list (its `slots`, their `times` since its first event)
/// into zones in begin order, taking every record out of its slot (the head keeps its list
/// fields). Zones without an end can only come from a backend that reported success for an
/// event it did not record: they are dropped and counted.
fn build_zones<B: Backend>(ctx: &Inner<B>, slots: &[u32], times: &[i64]) -> Vec<Zone> {
    let mut zones: Vec<Zone> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for (i, (&index, &t)) in slots.iter().zip(times).enumerate() {
        // Safety: the reader owns the list (taken from a queue).
        let (lane, ends, begins) = ctx.pool.slot(index).record.with_mut(|r| unsafe {
            let r = &mut *r;
            let taken = (r.lane, r.ends, r.begins.take().filter(|_| !r.begin_dropped));
            if i > 0 {
                *r = EventRecord::default();
            }
            taken
        });
        if ends {
            if let Some(z) = open.pop() {
                zones[z].gpu_end_ns = t;
            }
        }
        if let Some(location) = begins {
            open.push(zones.len());
            zones.push(Zone {
                location,
                lane,
                depth: (open.len() - 1) as u32,
                gpu_begin_ns: t,
                gpu_end_ns: i64::MIN,
                host_begin_ns: 0,
                host_end_ns: 0,
            });
        }
    }
    let before = zones.len();
    zones.retain(|z| z.gpu_end_ns != i64::MIN);
    ctx.count_dropped(before - zones.len());
    zones
}

/// An event with a known time: GPU nanoseconds since the base event, and the host time.
#[derive(Debug)]
struct Anchor<E> {
    event: E,
    at: Calibration,
    /// How far `at.gpu_ns` may be off, summed over the steps from the base (0 while every
    /// step was under 16 ms).
    drift: i64,
}

/// State only the emitting collector touches (behind the context's emitter lock).
pub(crate) struct Collector<B: Backend> {
    stream: B::Stream,
    /// Completed anchors, oldest first; times strictly increase.
    anchors: VecDeque<Anchor<B::Event>>,
    /// An anchor recorded but not yet complete, with the host time it was recorded at.
    pending: Option<(B::Event, i64)>,
    /// Anchor events not in use.
    spare: Vec<B::Event>,
    /// Per lane-table entry: the place of the next list to emit.
    next_place: Vec<u64>,
    /// Read lists waiting for an earlier list of their lane: entry -> place -> first slot.
    waiting: HashMap<u32, BTreeMap<u64, u32>>,
    waiting_lists: usize,
    /// Per lane, the latest end emitted on it (the order guard, see `place_list`).
    lane_end: HashMap<Lane, LaneEnd>,
    taken: Vec<u32>,
    sinks: Vec<Box<dyn Sink>>,
    info: ContextInfo,
}

/// A time on the context's timeline, the drift bound of the anchor it was read from, and the
/// rounding bound of that read.
type Placed = (i64, i64, i64);

/// The latest end emitted on a lane, and the bounds of the read that placed it.
#[derive(Debug, Clone, Copy)]
struct LaneEnd {
    end: i64,
    drift: i64,
    bound: i64,
}

impl<B: Backend> Collector<B> {
    /// Makes the collector: its stream, the base event (recorded and waited for, like the
    /// seed's calibration), and opens the sinks.
    pub(crate) fn new(
        backend: &B,
        id: u32,
        config: &Config,
        sinks: Vec<Box<dyn Sink>>,
    ) -> Result<(Self, ContextInfo), Error> {
        let stream = backend.create_stream()?;
        let base = backend.create_event()?;
        let spare = backend.create_event()?;
        backend.record(&base, &stream)?;
        backend.wait(&base)?;
        let at = Calibration { gpu_ns: 0, host_ns: backend.host_now_ns() };
        let info = ContextInfo { id, name: config.name.clone(), backend: backend.name(), base: at };
        let mut collector = Self {
            stream,
            anchors: VecDeque::from([Anchor { event: base, at, drift: 0 }]),
            pending: None,
            spare: vec![spare],
            next_place: vec![0; ENTRIES],
            waiting: HashMap::new(),
            waiting_lists: 0,
            lane_end: HashMap::new(),
            taken: Vec::new(),
            sinks,
            info: info.clone(),
        };
        if let Some(e) = collector.each_sink(|sink, info| sink.open(info)) {
            return Err(e);
        }
        Ok((collector, info))
    }

    /// Calls `f` on every sink; a sink that fails or panics is reported (the first failure
    /// is returned) and the others are still called. A panic is caught so that no slot and no
    /// later list is lost with it.
    fn each_sink(
        &mut self,
        mut f: impl FnMut(&mut dyn Sink, &ContextInfo) -> std::io::Result<()>,
    ) -> Option<Error> {
        let mut error = None;
        for sink in &mut self.sinks {
            let call =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(sink.as_mut(), &self.info)));
            let failure = match call {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => Error::Sink(e),
                Err(panic) => Error::SinkPanicked(panic_message(panic.as_ref())),
            };
            error.get_or_insert(failure);
        }
        error
    }

    /// Phase 2: emits, lane by lane in place order, every read list whose turn has come,
    /// and releases their slots with one CAS. With `force`, emits every read list even if an
    /// earlier list of its lane never came (only when no list can come any more).
    pub(crate) fn emit_phase(
        &mut self,
        ctx: &Inner<B>,
        wait: bool,
        force: bool,
        report: &mut CollectReport,
    ) -> Option<Error> {
        let started = std::time::Instant::now();
        let mut error = None;
        let mut fail = |report: &mut CollectReport, e: Error| {
            report.errors += 1;
            error.get_or_insert(e);
        };
        let names = std::mem::take(&mut *crate::sync::lock(&ctx.lane_names));
        for (lane, name) in names {
            if let Some(e) = self.each_sink(|sink, info| sink.name_lane(info, lane, &name)) {
                fail(report, e);
            }
        }
        if let Err(e) = self.refresh_anchor(ctx, wait) {
            fail(report, e);
        }
        ctx.read.take_all(&ctx.pool, &mut self.taken);
        let mut touched = Vec::new();
        for first in self.taken.drain(..) {
            // Safety: taken from the read queue by the emitter, the list's only owner now.
            let seq = ctx.pool.slot(first).record.with(|r| unsafe { (*r).list_seq });
            self.waiting.entry(seq.entry).or_default().insert(seq.seq, first);
            self.waiting_lists += 1;
            touched.push(seq.entry);
        }
        // Places given up by lists dropped unsubmitted: skipped when their turn comes.
        for void in std::mem::take(&mut *crate::sync::lock(&ctx.void_places)) {
            self.waiting.entry(void.entry).or_default().insert(void.seq, VOID);
            touched.push(void.entry);
        }
        if force {
            touched.extend(self.waiting.keys().copied());
        }
        touched.sort_unstable();
        touched.dedup();
        // Lanes are merged by list id (the order lists were made): each lane's next list in
        // place order competes, so every lane keeps its own order.
        let mut heads = std::collections::BinaryHeap::new();
        for entry in touched {
            if let Some(head) = self.next_of(ctx, entry, force) {
                heads.push(head);
            }
        }
        let mut release: Option<Chain> = None;
        while let Some(std::cmp::Reverse((_, entry, place, first))) = heads.pop() {
            let lists = self.waiting.get_mut(&entry).expect("a head is waiting");
            lists.remove(&place);
            if lists.is_empty() {
                self.waiting.remove(&entry);
            }
            self.next_place[entry as usize] = place + 1;
            if first != VOID {
                self.waiting_lists -= 1;
                let (chain, failure) = self.emit_list(ctx, first, report);
                if let Some(e) = failure {
                    fail(report, e);
                }
                append(ctx, &mut release, chain);
            }
            if let Some(head) = self.next_of(ctx, entry, force) {
                heads.push(head);
            }
        }
        // Submitted -> Free: every collected list in one CAS.
        if let Some(chain) = release {
            ctx.pool.release_submitted(chain);
        }
        let oldest = self.anchors.front().map_or(i64::MIN, |a| a.at.gpu_ns);
        self.lane_end.retain(|_, lane| lane.end >= oldest);
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        ctx.counters.emitter_ns.fetch_add(spent, Ordering::Relaxed);
        error
    }

    /// The list of `entry` whose turn it is, as (list id, entry, place, first slot); with
    /// `force`, the earliest waiting one even if its turn has not come.
    fn next_of(
        &self,
        ctx: &Inner<B>,
        entry: u32,
        force: bool,
    ) -> Option<std::cmp::Reverse<(u64, u32, u64, u32)>> {
        let lists = self.waiting.get(&entry)?;
        let next = self.next_place[entry as usize];
        let (&place, &first) = match lists.get(&next) {
            Some(first) => (&next, first),
            None if force => lists.first_key_value()?,
            None => return None,
        };
        // Safety: the emitter owns every list in `waiting`. A void place goes first: it
        // only unblocks its lane.
        let id =
            if first == VOID { 0 } else { ctx.pool.slot(first).record.with(|r| unsafe { (*r).list_id }) };
        Some(std::cmp::Reverse((id, entry, place, first)))
    }

    /// Read lists held back for an earlier list of their lane.
    pub(crate) fn waiting_lists(&self) -> usize {
        self.waiting_lists
    }

    /// Promotes a completed pending anchor, and records a new one when the newest is older
    /// than `anchor_interval` (or when `wait`: flush ends on a fresh anchor).
    fn refresh_anchor(&mut self, ctx: &Inner<B>, wait: bool) -> Result<(), Error> {
        let backend = &ctx.backend;
        let (newest, drift) =
            self.anchors.back().map(|a| (a.at, a.drift)).expect("there is always an anchor");
        if self.pending.is_none() {
            let age = backend.host_now_ns() - newest.host_ns;
            let stale = u128::try_from(age).unwrap_or(0) >= ctx.config.anchor_interval.as_nanos();
            if stale || wait {
                let event = match self.spare.pop() {
                    Some(event) => event,
                    None if self.anchors.len() >= ANCHORS => self.anchors.pop_front().expect("full").event,
                    None => backend.create_event()?,
                };
                let host_ns = backend.host_now_ns();
                match backend.record(&event, &self.stream) {
                    Ok(()) => self.pending = Some((event, host_ns)),
                    Err(e) => {
                        self.spare.push(event);
                        return Err(e.into());
                    }
                }
            }
        }
        let Some((event, _)) = &self.pending else { return Ok(()) };
        let newest_event = &self.anchors.back().expect("there is always an anchor").event;
        if wait {
            backend.wait(event)?;
        }
        let Some(ms) = backend.elapsed_ms(newest_event, event)? else { return Ok(()) };
        let (event, host_ns) = self.pending.take().expect("checked above");
        let step = ms_to_ns(ms);
        let at = Calibration { gpu_ns: newest.gpu_ns + step, host_ns };
        self.anchors.push_back(Anchor { event, at, drift: drift + rounding_bound(step) });
        if self.anchors.len() > ANCHORS {
            let oldest = self.anchors.pop_front().expect("more than one");
            self.spare.push(oldest.event);
        }
        match self.each_sink(|sink, info| sink.calibrate(info, at)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The time of `event` (complete) on the context's timeline, from the nearest anchor: one
    /// read when the newest anchor is within the exact range, two when another is nearer.
    /// Also returns the anchor's drift bound and how far this read may be off by rounding (0
    /// within the exact range).
    fn place(&self, ctx: &Inner<B>, event: &B::Event) -> Result<Placed, BackendError> {
        let backend = &ctx.backend;
        let read = |anchor: &Anchor<B::Event>| -> Result<Placed, BackendError> {
            match backend.elapsed_ms(&anchor.event, event)? {
                Some(ms) => {
                    let distance = ms_to_ns(ms);
                    Ok((anchor.at.gpu_ns + distance, anchor.drift, rounding_bound(distance)))
                }
                None => Err(BackendError::new("elapsed_ms", "a read event became not ready")),
            }
        };
        let newest = self.anchors.back().expect("there is always an anchor");
        let placed = read(newest)?;
        let (estimate, _, bound) = placed;
        if bound == 0 {
            return Ok(placed);
        }
        let nearest = self
            .anchors
            .iter()
            .min_by_key(|a| (a.at.gpu_ns - estimate).unsigned_abs())
            .expect("there is always an anchor");
        if std::ptr::eq(nearest, newest) {
            return Ok(placed);
        }
        read(nearest)
    }

    /// Emits the list at `first` (a read list: its zones; a failed one: counted as dropped; a
    /// void one: nothing), clears its records, and returns its chain for release.
    fn emit_list(
        &mut self,
        ctx: &Inner<B>,
        first: u32,
        report: &mut CollectReport,
    ) -> (Chain, Option<Error>) {
        let head = ctx.pool.slot(first);
        // Safety: the emitter owns every list it took from the read queue.
        let mut record = head.record.with_mut(|r| unsafe { std::mem::take(&mut *r) });
        let chain = Chain { first, last: record.list_last, len: record.list_len };
        let mut failure = None;
        let placed = match record.list_kind {
            ListKind::Read => match self.place(ctx, &head.event) {
                Ok(placed) => Some(placed),
                Err(e) => {
                    failure = Some(e.into());
                    None
                }
            },
            ListKind::Failed | ListKind::Submitted => None,
        };
        report.lists += 1;
        ctx.counters.lists_collected.fetch_add(1, Ordering::Relaxed);
        let Some((base, drift, bound)) = placed else {
            report.failed_lists += 1;
            ctx.counters.lists_failed.fetch_add(1, Ordering::Relaxed);
            let dropped = match record.list_kind {
                ListKind::Read => record.zones.len(),
                _ => discard_records(ctx, &mut record, chain),
            };
            ctx.count_dropped(dropped);
            return (chain, failure);
        };
        let mut zones = std::mem::take(&mut record.zones);
        for zone in &mut zones {
            zone.gpu_begin_ns += base;
            zone.gpu_end_ns += base;
        }
        self.keep_lane_order(ctx, &mut zones, record.lane, drift, bound);
        let anchor = self.anchors.back().expect("there is always an anchor").at;
        for zone in &mut zones {
            zone.host_begin_ns = anchor.host_ns + (zone.gpu_begin_ns - anchor.gpu_ns);
            zone.host_end_ns = anchor.host_ns + (zone.gpu_end_ns - anchor.gpu_ns);
        }
        let batch = ZoneBatch { list_id: record.list_id, zones: &zones };
        if let Some(e) = self.each_sink(|sink, info| sink.zones(info, batch)) {
            ctx.counters.sink_failures.fetch_add(1, Ordering::Relaxed);
            failure.get_or_insert(e);
        }
        report.zones += zones.len();
        ctx.counters.zones_emitted.fetch_add(zones.len(), Ordering::Relaxed);
        (chain, failure)
    }

    /// The order guard: zones on a list's home lane never start before the latest end
    /// already emitted on that lane *by rounding*. Lists of a lane are emitted in GPU order and
    /// placed exactly whenever an anchor is less than 16 ms away, so this never moves
    /// anything then. Placed from further (a context collected rarely), two back-to-back lists
    /// could overlap by up to the sum of their rounding bounds: the later list is then moved
    /// (whole, so its durations stay exact) and counted in `Stats::lists_shifted`. A larger
    /// overlap is real (two lists recorded interleaved on one stream) and is left alone.
    fn keep_lane_order(&mut self, ctx: &Inner<B>, zones: &mut [Zone], home: Lane, drift: i64, bound: i64) {
        let on_home = |z: &&Zone| z.lane == home;
        let Some(begin) = zones.iter().filter(on_home).map(|z| z.gpu_begin_ns).min() else {
            return;
        };
        let last = self.lane_end.entry(home).or_insert(LaneEnd { end: i64::MIN, drift, bound: 0 });
        let overlap = last.end.saturating_sub(begin);
        let tolerance = (drift - last.drift).abs() + last.bound + bound;
        let mut shift = 0;
        if overlap > 0 && overlap <= tolerance {
            shift = overlap;
            for zone in zones.iter_mut() {
                zone.gpu_begin_ns += shift;
                zone.gpu_end_ns += shift;
            }
            ctx.counters.lists_shifted.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(end) = zones.iter().filter(on_home).map(|z| z.gpu_end_ns).max() {
            if end >= last.end {
                // A shifted list is off from its reads by the shift: the next list may be too.
                *last = LaneEnd { end, drift, bound: bound + shift };
            }
        }
    }

    pub(crate) fn flush_sinks(&mut self) -> Option<Error> {
        self.each_sink(|sink, _| sink.flush())
    }
}

/// Clears the records of a list whose times could not be read (`head`: its head record,
/// already taken) and returns how many zones it held, to count as dropped.
fn discard_records<B: Backend>(ctx: &Inner<B>, head: &mut EventRecord, chain: Chain) -> usize {
    let begun = |r: &EventRecord| usize::from(r.begins.is_some() && !r.begin_dropped);
    let mut zones = begun(head);
    // Relaxed: the list's links were published by the Release CAS that queued it.
    let mut index = ctx.pool.slot(chain.first).link.load(Ordering::Relaxed);
    for _ in 1..chain.len {
        let slot = ctx.pool.slot(index);
        // Safety: the emitter is the slot's only owner until it is released.
        zones += slot.record.with_mut(|r| unsafe { begun(&std::mem::take(&mut *r)) });
        index = slot.link.load(Ordering::Relaxed);
    }
    zones
}

/// Appends `list` to the chain of slots to release (linking the old tail to it).
fn append<B: Backend>(ctx: &Inner<B>, release: &mut Option<Chain>, list: Chain) {
    *release = Some(match release.take() {
        None => list,
        Some(chain) => {
            // Relaxed: published by the Release CAS of the push that releases the chain.
            ctx.pool.slot(chain.last).link.store(list.first, Ordering::Relaxed);
            Chain { first: chain.first, last: list.last, len: chain.len + list.len }
        }
    });
}

/// The message of a caught panic, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a sink panicked".to_owned()
    }
}
