//! Phase 2 of collection for an event source, the emit: run by one caller at a time (the
//! others return at once, their reading done). Take the read lists, and per lane emit every
//! list whose place is next, in place order, at the time its reader placed it on the
//! context's timeline (or placed here, when that read failed: `clock.rs`); hand the zones to
//! the delivery (`deliver.rs`); release every emitted list's slots with one CAS.

use super::clock::{reads_bound, Observation, Timeline};
use super::concurrent::{ConcurrentLists, HomeSpan};
use super::mapping::{HostClock, ListReads, PointBound};
use crate::backend::{guarded, Backend, BackendError, Lane};
use crate::collect::deliver::{context_info, HeldLane, Phase};
use crate::error::Error;
use crate::shared::lanes::LaneSeq;
use crate::shared::record::{ListKind, ListRecord};
use crate::shared::Inner;
use crate::sink::{ContextInfo, Zone, ZoneBatch};
use crate::slots::freelist::{Chain, NIL};
use crate::slots::head::ListHead;
use crate::sync::{Arc, Ordering};
use span::ListSpan;
use std::collections::{BTreeMap, HashMap};
use unpassed::Unpassed;

/// In `Emitter::waiting` and its heads, a place given up by a list dropped unsubmitted (no
/// slot).
const VOID: u32 = NIL;

/// A place later lists of its lane wait for.
#[derive(Debug, Clone, Copy)]
struct Stall {
    place: u64,
    /// When the list holding it took it (`Holder::started_ns`); `None` once the list was
    /// handed to the collector (submitted or given up): it is on its way, and no limit applies.
    since: Option<i64>,
}

/// The order and clock of an event source: state only the emitting collector touches
/// (behind the collector's emitter lock).
pub(crate) struct EventOrder<B: Backend> {
    /// The anchors (kept by the readers), and the GPU-to-host mapping (the emitter's).
    timeline: Arc<Timeline<B>>,
    clock: HostClock,
    /// Calibrations taken from the timeline, reused from phase to phase.
    news: Vec<Observation>,
    /// Per lane-table entry: the place of the next list to emit.
    next_place: EntryPlaces,
    /// Read lists waiting for an earlier list of their lane: entry -> place -> the list's
    /// head (the emitter owns the list), or `None` for a void place.
    waiting: HashMap<u32, BTreeMap<u64, Option<ListHead>>>,
    waiting_lists: usize,
    /// Per lane, the latest end emitted on it (the order guard, see `keep_lane_order`).
    lane_end: HashMap<Lane, LaneEnd>,
    /// Discontinuities of the clock seen and not yet reported.
    discontinuities: Vec<crate::sink::ClockDiscontinuity>,
    concurrent: ConcurrentLists,
    /// Per lane-table entry whose later lists wait for a place: that place, and since when
    /// (host ns) its holder has held it (the hold limit).
    stalled: HashMap<u32, Stall>,
    taken: Vec<ListHead>,
    /// Failed lists' chains whose events the GPU has not passed yet (`unpassed.rs`).
    unpassed: Unpassed,
}

/// The latest end emitted on a lane (GPU time, and host time), and the bounds of the read
/// that placed it.
#[derive(Debug, Clone, Copy)]
struct LaneEnd {
    end: i64,
    host_end: Option<i64>,
    drift: i64,
    bound: i64,
}

impl<B: Backend> EventOrder<B> {
    /// Makes the order and its clock (the base event, recorded and waited for, like the
    /// seed's calibration), and what the sinks are told about the context.
    pub(crate) fn new(backend: &B, id: u32, name: &str) -> Result<(Self, ContextInfo), Error> {
        let (timeline, at) = Timeline::new(backend)?;
        let info = context_info(backend, id, name, at);
        // The start-up calibrations set the clock; sinks hear of anchors taken from now on.
        let (mut clock, mut news) = (HostClock::new(), Vec::new());
        timeline.take_news(&mut news);
        let mut discontinuities = Vec::new();
        for observation in news.drain(..) {
            discontinuities.extend(clock.anchor(bound_of(&observation), observation.drift));
        }
        let order = Self {
            timeline: Arc::new(timeline),
            clock,
            news,
            next_place: EntryPlaces::default(),
            waiting: HashMap::new(),
            waiting_lists: 0,
            lane_end: HashMap::new(),
            discontinuities,
            concurrent: ConcurrentLists::new(B::PLACEMENT),
            stalled: HashMap::new(),
            taken: Vec::new(),
            unpassed: Unpassed::default(),
        };
        Ok((order, info))
    }

    /// Phase 2: emits, lane by lane in place order, every read list whose turn has come,
    /// and releases their slots with one CAS. With `force`, emits every read list even if an
    /// earlier list of its lane never came (only when no list can come any more).
    pub(crate) fn emit_phase(&mut self, ctx: &Inner<B>, phase: &mut Phase<'_>, force: bool) {
        // The anchors completed since (the readers keep them: no backend call here).
        self.timeline.take_news(&mut self.news);
        let mut news = std::mem::take(&mut self.news);
        for observation in news.drain(..) {
            self.discontinuities.extend(self.clock.anchor(bound_of(&observation), observation.drift));
            let calibrated = phase.delivery.calibrate(observation.at);
            phase.check(calibrated);
        }
        self.news = news;
        for discontinuity in self.discontinuities.drain(..) {
            ctx.counters().clock_discontinuities.fetch_add(1, Ordering::Relaxed);
            let delivered = phase.delivery.discontinuity(discontinuity);
            phase.check(delivered);
            phase.fail(Error::ClockDiscontinuity {
                gpu_ns: discontinuity.gpu_ns,
                host_ns: discontinuity.host_ns,
                jump_ns: discontinuity.jump_ns,
            });
        }
        ctx.read().take_all(ctx.pool(), &mut self.taken);
        let mut touched = Vec::new();
        let mut release: Option<Chain> = None;
        let mut taken = std::mem::take(&mut self.taken);
        for head in taken.drain(..) {
            // Taken from the read queue by the emitter, the list's only owner now.
            let seq = head.read(ctx.pool(), |r| r.list_seq);
            if seq.seq < self.next_place[seq.entry as usize] {
                // Its lane moved on without it (the hold limit): emitted now, late.
                ctx.counters().lists_late.fetch_add(1, Ordering::Relaxed);
                ctx.lanes().settle(seq.entry, 1);
                let (chain, failure) = self.emit_list(ctx, phase, head);
                phase.check(failure);
                append(ctx, &mut release, chain);
                continue;
            }
            self.waiting.entry(seq.entry).or_default().insert(seq.seq, Some(head));
            self.waiting_lists += 1;
            touched.push(seq.entry);
        }
        self.taken = taken;
        // Places given up by lists dropped unsubmitted: skipped when their turn comes (or
        // already passed, by the hold limit).
        for void in ctx.void_places().take_all() {
            if void.seq >= self.next_place[void.entry as usize] {
                self.waiting.entry(void.entry).or_default().insert(void.seq, None);
                touched.push(void.entry);
            } else {
                ctx.lanes().settle(void.entry, 1);
            }
        }
        match self.release_held_lanes(ctx) {
            Ok(held) => {
                for (entry, lane) in held {
                    touched.push(entry);
                    phase.lane_held(ctx.counters(), lane);
                }
            }
            Err(e) => phase.fail(e),
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
        while let Some(std::cmp::Reverse((_, entry, place, first))) = heads.pop() {
            let lists = self.waiting.get_mut(&entry).expect("a head is waiting");
            let list = lists.remove(&place).expect("the head is waiting");
            debug_assert_eq!(list.as_ref().map_or(VOID, ListHead::first), first);
            if lists.is_empty() {
                self.waiting.remove(&entry);
            }
            self.next_place[entry as usize] = place + 1;
            ctx.lanes().settle(entry, 1);
            if let Some(head) = list {
                self.waiting_lists -= 1;
                let (chain, failure) = self.emit_list(ctx, phase, head);
                phase.check(failure);
                append(ctx, &mut release, chain);
            }
            if let Some(head) = self.next_of(ctx, entry, force) {
                heads.push(head);
            }
        }
        for concurrent in self.concurrent.take_reports() {
            phase.fail(concurrent);
        }
        for chain in self.unpassed.take_passed(ctx) {
            append(ctx, &mut release, Some(chain));
        }
        // Submitted -> Free: every collected list in one CAS, its events retired first
        // (`Backend::retire`: Vulkan resets its queries here, off the recording path).
        if let Some(chain) = release {
            retire_chain(ctx, &chain);
            ctx.pool().release_submitted(chain);
        }
        let ended = phase.delivery.end_phase(ctx);
        phase.check(ended);
        let oldest = self.timeline.oldest_gpu_ns();
        self.lane_end.retain(|_, lane| lane.end >= oldest);
        self.concurrent.forget_before(oldest);
    }

    /// Lanes whose ends are remembered, for lane order and for lists recorded side by side (a
    /// test's view of the pruning at the end of each emit phase).
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn lanes_remembered(&self) -> (usize, usize) {
        (self.lane_end.len(), self.concurrent.remembered())
    }

    /// Lanes whose next place is held by a list still being recorded for longer than the
    /// hold limit, measured from when that list took the place (`Holder::started_ns`), while
    /// later lists of the lane wait: each moves on past that place (the list is emitted late
    /// when it comes), and is reported once. A lane held by several such lists in a row moves
    /// past each that is over the limit, in this one call.
    ///
    /// The lane table is asked once when a lane is first seen waiting on a place, and again
    /// only once that place's holder is past the limit; never waiting for its lane lock,
    /// which recorders take (a lane a recorder holds now is asked at the next emit).
    /// The host clock is read once per call (once per emit phase), through `guarded`: a
    /// backend that fails or panics there fails this call's hold-limit check (the emit
    /// phase's error, counted; no lane moved), and never unwinds through the collector.
    fn release_held_lanes(&mut self, ctx: &Inner<B>) -> Result<Vec<(u32, HeldLane)>, Error> {
        let limit = i64::try_from(ctx.config().hold_limit.as_nanos()).unwrap_or(i64::MAX);
        let now = host_now(ctx.backend())?;
        let mut held = Vec::new();
        let (waiting, stalled, next_place) = (&self.waiting, &mut self.stalled, &mut self.next_place);
        stalled.retain(|entry, _| waiting.contains_key(entry));
        // In entry order, not the map's: under loom every execution must take the lane locks
        // below in the same order.
        let mut entries: Vec<u32> = waiting.keys().copied().collect();
        entries.sort_unstable();
        for entry in entries {
            let lists = &waiting[&entry];
            let next = &mut next_place[entry as usize];
            loop {
                if lists.contains_key(next) {
                    stalled.remove(&entry);
                    break;
                }
                let place = LaneSeq { entry, seq: *next };
                let stall = match stalled.get(&entry) {
                    Some(stall) if stall.place == *next => *stall,
                    _ => {
                        // A recorder holds the lane's holders' lock now: ask at the next emit.
                        let Some(holder) = ctx.lanes().try_holder(place) else { break };
                        let stall = Stall { place: *next, since: holder.map(|holder| holder.started_ns) };
                        stalled.insert(entry, stall);
                        stall
                    }
                };
                // Handed to the collector (submitted, or given up): it waits for the GPU or a
                // reader, not for its recorder.
                let Some(since) = stall.since else { break };
                if now.saturating_sub(since) < limit {
                    break;
                }
                let holder = match ctx.lanes().try_holder(place) {
                    None => break,
                    Some(None) => {
                        stalled.insert(entry, Stall { place: *next, since: None });
                        break;
                    }
                    Some(Some(holder)) => holder,
                };
                let held_for = now.saturating_sub(holder.started_ns);
                *next += 1;
                stalled.remove(&entry);
                let location = &holder.location;
                held.push((
                    entry,
                    HeldLane {
                        lane: holder.lane,
                        list_id: holder.list_id,
                        location: Some(format!(
                            "{} at {}:{}",
                            location.name(),
                            location.file(),
                            location.line()
                        )),
                        held_ns: held_for,
                    },
                ));
            }
        }
        Ok(held)
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
        let (&place, list) = match lists.get(&next) {
            Some(list) => (&next, list),
            None if force => lists.first_key_value()?,
            None => return None,
        };
        // The emitter owns every list in `waiting`. A void place goes first: it only unblocks
        // its lane.
        let (id, first) = match list {
            Some(head) => (head.read(ctx.pool(), |r| r.list_id), head.first()),
            None => (0, VOID),
        };
        Some(std::cmp::Reverse((id, entry, place, first)))
    }

    /// Read lists held back for an earlier list of their lane.
    pub(crate) fn waiting_lists(&self) -> usize {
        self.waiting_lists
    }

    /// The timeline, which readers keep and place lists against.
    pub(crate) fn timeline(&self) -> &Arc<Timeline<B>> {
        &self.timeline
    }

    /// Emits the list of `head` (a read list: its zones; a failed one: counted as dropped; a
    /// void one: nothing), clears its records, and returns its chain for release (a failed
    /// list's once the GPU has passed its events: `unpassed.rs`).
    fn emit_list(
        &mut self,
        ctx: &Inner<B>,
        phase: &mut Phase<'_>,
        mut head: ListHead,
    ) -> (Option<Chain>, Option<Error>) {
        // The emitter owns every list it took from the read queue.
        let mut record = head.write(ctx.pool(), std::mem::take);
        let chain = Chain { first: head.first(), last: record.list_last, len: record.list_len };
        let mut failure = None;
        // Read lists were placed by their reader (one that could not failed its list).
        let placed = match record.list_kind {
            ListKind::Read => record.list_placed,
            ListKind::Failed | ListKind::Submitted | ListKind::Discarded => None,
        };
        phase.report.lists += 1;
        ctx.counters().lists_collected.fetch_add(1, Ordering::Relaxed);
        let Some((base, drift, bound)) = placed else {
            phase.report.failed_lists += 1;
            ctx.counters().lists_failed.fetch_add(1, Ordering::Relaxed);
            let dropped = match record.list_kind {
                ListKind::Read => record.zones.len(),
                _ => discard_records(ctx, &mut record),
            };
            ctx.count_dropped(dropped);
            return (self.unpassed.release_when_passed(ctx, chain), failure);
        };
        let mut zones = std::mem::take(&mut record.zones);
        // One pass places the zones on their anchor's GPU time and gathers what the order
        // guard, the concurrency check and the host clock need of them (`ListSpan`): each
        // further pass over a list's zones cost about a nanosecond a zone (docs/design.md,
        // section 16).
        let mut span = ListSpan::default();
        for (index, zone) in zones.iter_mut().enumerate() {
            zone.gpu_begin_ns = zone.gpu_begin_ns.saturating_add(base);
            zone.gpu_end_ns = zone.gpu_end_ns.saturating_add(base);
            zone.frame = record.list_frame;
            span.add(index, zone, record.lane);
        }
        // The list's times may be off its anchor by the placing read's rounding and by its own
        // reads' (a step over 16 ms inside it): its end by both, which the next list's
        // overlap with it is weighed against.
        let list_bound = bound.saturating_add(record.list_rounding_ns);
        let shift = self.keep_lane_order(ctx, &mut zones, span.home, record.lane, drift, list_bound);
        if shift != 0 {
            span = ListSpan::of(&zones, record.lane);
        }
        self.concurrent.check(&ctx.counters().concurrent_lists, &record, &zones, span.home);
        // How far its GPU times may be off those of its anchor: the placing read and the reads
        // inside the list (`list_bound`), and the order guard's shift (the anchor's own
        // `drift` counts only as far as it differs from that of the bounds the list is placed
        // with).
        let rounding = list_bound.saturating_add(shift);
        self.place_on_host(ctx, &record, &mut zones, &span, drift, rounding.max(0));
        let batch = ZoneBatch { list_id: record.list_id, zones: &zones };
        if let Some(e) = phase.delivery.zones(ctx, batch) {
            failure.get_or_insert(e);
        }
        phase.report.zones += zones.len();
        ctx.zone_buffers().give_back(zones);
        (Some(chain), failure)
    }

    /// Places the list's zones on the host clock (`mapping.rs`): one offset for the whole
    /// list, given what its own reads say (the host time before its first record, its
    /// launches, the host time after it was read), raised so that no zone begins before its
    /// launch and the list does not begin on its home lane before the end of the list before
    /// it there; each zone's begin and end get their bound, plus how far its GPU times may
    /// be off (`rounding` from its anchor's, whose own is off by up to `drift`).
    fn place_on_host(
        &mut self,
        ctx: &Inner<B>,
        record: &ListRecord,
        zones: &mut [Zone],
        span: &ListSpan,
        drift: i64,
        rounding: i64,
    ) {
        if zones.is_empty() {
            return;
        }
        let home = record.lane;
        let ListSpan { first, last, home: on_home, launch } = *span;
        let lane_floor =
            on_home.and_then(|h| Some(self.lane_end.get(&home)?.host_end?.saturating_sub(h.begin)));
        let reads = ListReads {
            first_host_ns: record.first_host_ns,
            read_host_ns: record.read_host_ns,
            uncertain: rounding,
            drift,
        };
        let (placed, bound) = self.clock.place(first, last, reads, launch, launch.map(|t| t.at), lane_floor);
        let rounding = placed.uncertain as u64;

        if placed.alone {
            ctx.counters().lists_placed_alone.fetch_add(1, Ordering::Relaxed);
            // Its reads did not fit the clock: a fresh anchor says why (a discontinuity).
            self.timeline.want_anchor();
        }

        let mut host_end = None;
        for zone in zones.iter_mut() {
            zone.host_begin_ns = zone.gpu_begin_ns.saturating_add(placed.offset);
            zone.host_end_ns = zone.gpu_end_ns.saturating_add(placed.offset);
            zone.host_begin_bound_ns = bound.at(zone.gpu_begin_ns).saturating_add(rounding);
            zone.host_end_bound_ns = bound.at(zone.gpu_end_ns).saturating_add(rounding);
            if zone.lane == home {
                host_end = host_end.max(Some(zone.host_end_ns));
            }
        }
        if let (Some(lane), Some(end)) = (self.lane_end.get_mut(&home), host_end) {
            lane.host_end = lane.host_end.max(Some(end));
        }
    }

    /// The order guard: zones on a list's home lane never start before the latest end
    /// already emitted on that lane *by rounding*. Lists of a lane are emitted in GPU order and
    /// placed exactly whenever an anchor is less than 16 ms away and no step inside a list is
    /// longer, so this never moves anything then. Placed from further (a context collected
    /// rarely), or after a list with a longer step inside (its end rounded), two back-to-back
    /// lists could overlap by up to the sum of their rounding bounds (`bound`: the list's
    /// placing read's and its own reads'): the later list is then moved
    /// (whole, so its durations stay exact) and counted in `Stats::lists_shifted`. A larger
    /// overlap is real (two lists recorded interleaved on one stream) and is left alone.
    /// Returns the shift (0 but in that case).
    fn keep_lane_order(
        &mut self,
        ctx: &Inner<B>,
        zones: &mut [Zone],
        on_home: Option<HomeSpan>,
        home: Lane,
        drift: i64,
        bound: i64,
    ) -> i64 {
        let Some(HomeSpan { begin, end, .. }) = on_home else { return 0 };
        let last =
            self.lane_end.entry(home).or_insert(LaneEnd { end: i64::MIN, host_end: None, drift, bound: 0 });
        let overlap = last.end.saturating_sub(begin);
        let tolerance = (drift - last.drift).abs() + last.bound + bound;
        let mut shift = 0;
        if overlap > 0 && overlap <= tolerance {
            shift = overlap;
            for zone in zones.iter_mut() {
                zone.gpu_begin_ns += shift;
                zone.gpu_end_ns += shift;
            }
            ctx.counters().lists_shifted.fetch_add(1, Ordering::Relaxed);
        }
        let end = end + shift;
        if end >= last.end {
            // A shifted list is off from its reads by the shift: the next list may be too.
            *last = LaneEnd { end, host_end: last.host_end, drift, bound: bound + shift };
        }
        shift
    }
}

/// What an anchor's observation says of the offset at its GPU time (`clock::reads_bound`);
/// the mapping widens it by how far its drift is from its segment's.
fn bound_of(observation: &Observation) -> PointBound {
    reads_bound(observation.at.gpu_ns, observation.not_before_ns, observation.observed_ns)
}

/// Per lane-table entry, the place of the next list to emit: 0 for an entry not seen yet. It
/// grows with the table (with the lanes in use at once).
#[derive(Debug, Default)]
struct EntryPlaces(Vec<u64>);

impl std::ops::Index<usize> for EntryPlaces {
    type Output = u64;
    fn index(&self, entry: usize) -> &u64 {
        self.0.get(entry).unwrap_or(&0)
    }
}

impl std::ops::IndexMut<usize> for EntryPlaces {
    fn index_mut(&mut self, entry: usize) -> &mut u64 {
        if entry >= self.0.len() {
            self.0.resize(entry + 1, 0);
        }
        &mut self.0[entry]
    }
}

/// The backend's host clock, a panic caught as a failure (`guarded`).
fn host_now<B: Backend>(backend: &B) -> Result<i64, BackendError> {
    guarded("host_now_ns", || Ok(backend.host_now_ns()))
}

/// Clears the records of a list whose times could not be read (its head record, already
/// taken), gives their buffer back, and returns how many zones it held, to count as dropped.
/// Its events' records are in the head's buffer: no other slot is touched.
fn discard_records<B: Backend>(ctx: &Inner<B>, head: &mut ListRecord) -> usize {
    let mut events = std::mem::take(&mut head.events);
    let zones = events.drain(..).filter(|r| r.begins.is_some() && !r.begin_dropped).count();
    ctx.record_buffers().give_back(events);
    zones
}

/// Appends `list`, if any, to the chain of slots to release (linking the old tail to it).
fn append<B: Backend>(ctx: &Inner<B>, release: &mut Option<Chain>, list: Option<Chain>) {
    let Some(list) = list else { return };
    *release = Some(match release.take() {
        None => list,
        Some(chain) => chain.then(ctx.pool(), list),
    });
}

/// [`Backend::retire`] of every event of `chain`'s slots (nothing unless
/// [`Backend::RETIRES`]), a panic caught and the rest retired all the same.
fn retire_chain<B: Backend>(ctx: &Inner<B>, chain: &Chain) {
    if B::RETIRES {
        ctx.pool().for_each_event(chain, |event| {
            let _ = guarded("Backend::retire", || {
                ctx.backend().retire(event);
                Ok(())
            });
        });
    }
}

mod span;
#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
mod unpassed;
