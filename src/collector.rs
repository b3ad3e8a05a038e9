//! The collector: turns completed lists into zones, in submission order, and releases their
//! slots. One runs at a time (behind the context's collector lock; `collect` only tries it).
//!
//! Timestamps. CUDA only measures the time between two events, as `f32` milliseconds. The
//! seed measured every event against one base event made at start, so its resolution decayed
//! with uptime (an `f32` of 10 s in ms has a 1 µs step; of 17 min, 120 µs). Here every
//! event's time is `anchor.gpu_ns + elapsed(anchor, event)` against a recent *anchor*: an
//! event the collector records on its own stream every `anchor_interval`, whose time is in
//! turn `previous.gpu_ns + elapsed(previous, anchor)`. Times accumulate in `i64`
//! nanoseconds; each `f32` step is short, and a step under about 8 ms converts to whole
//! nanoseconds exactly.
//!
//! Lists are measured against an even closer reference when there is one: the last event of
//! the previous list collected on the same stream, which the collector *holds* (its slot
//! stays Submitted) until the next list of that stream is collected or `flush` ends. Every
//! event of a list is measured against that one reference, so consecutive lists on a stream
//! can never be reordered by rounding (a zone of the next list cannot start before the
//! previous list's last zone ends), and back-to-back lists are measured across short, exact
//! gaps even when the GPU runs far behind the host and the anchors.
//!
//! Each anchor is also a calibration pair (its GPU time, the host time when it was
//! recorded on the idle stream): host-aligned times are `anchor.host_ns + (t - anchor.gpu_ns)`.

use crate::backend::{Backend, Lane};
use crate::context::{Config, Inner};
use crate::error::{BackendError, Error};
use crate::freelist::{Chain, NIL};
use crate::pool::EventRecord;
use crate::sink::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use crate::sync::Ordering;
use std::collections::{HashMap, VecDeque};

/// What one `collect` or `flush` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectReport {
    /// Lists collected (zones emitted, slots released).
    pub lists: usize,
    /// Zones delivered to the sinks.
    pub zones: usize,
    /// Lists whose times could not be read (zones dropped, slots released).
    pub failed_lists: usize,
    /// Submitted lists still waiting for the GPU.
    pub pending_lists: usize,
}

/// What walking a list found.
struct WalkedList {
    list_id: u64,
    chain: Chain,
    /// The slot before `chain.last` (NIL for a list of one event).
    before_last: u32,
    /// The lane of the last event.
    last_lane: Lane,
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

/// An event with a known time: GPU nanoseconds since the base event, and the host time.
#[derive(Debug)]
struct Anchor<E> {
    event: E,
    at: Calibration,
}

/// State only the collector touches.
pub(crate) struct Collector<B: Backend> {
    stream: B::Stream,
    anchor: Anchor<B::Event>,
    /// An anchor recorded but not yet complete, with the host time it was recorded at.
    pending: Option<(B::Event, i64)>,
    /// The event the next anchor will be recorded with (the one before last, recycled).
    spare: Option<B::Event>,
    /// Submitted lists taken from the queue and not collected yet (their first slots).
    waiting: VecDeque<u32>,
    taken: Vec<u32>,
    times: Vec<i64>,
    /// Per lane, the last event of the last list collected there and its time (see above).
    held: HashMap<Lane, (u32, i64)>,
    zones: Vec<Zone>,
    open: Vec<usize>,
    sinks: Vec<Box<dyn Sink>>,
    info: ContextInfo,
}

/// `f32` milliseconds to whole nanoseconds, rounded to nearest.
fn ms_to_ns(ms: f32) -> i64 {
    (f64::from(ms) * 1e6).round() as i64
}

impl<B: Backend> Collector<B> {
    /// Makes the collector: its stream, the base event (recorded and waited for, like the
    /// seed's calibration), and opens the sinks.
    pub(crate) fn new(
        backend: &B,
        id: u32,
        config: &Config,
        mut sinks: Vec<Box<dyn Sink>>,
    ) -> Result<(Self, ContextInfo), Error> {
        let stream = backend.create_stream()?;
        let base = backend.create_event()?;
        let spare = backend.create_event()?;
        backend.record(&base, &stream)?;
        backend.wait(&base)?;
        let at = Calibration { gpu_ns: 0, host_ns: backend.host_now_ns() };
        let info = ContextInfo { id, name: config.name.clone(), backend: backend.name(), base: at };
        for sink in &mut sinks {
            sink.open(&info)?;
        }
        let collector = Self {
            stream,
            anchor: Anchor { event: base, at },
            pending: None,
            spare: Some(spare),
            waiting: VecDeque::new(),
            taken: Vec::new(),
            times: Vec::new(),
            held: HashMap::new(),
            zones: Vec::new(),
            open: Vec::new(),
            sinks,
            info: info.clone(),
        };
        Ok((collector, info))
    }

    /// Collects completed lists in order; with `wait`, waits for each instead of stopping.
    pub(crate) fn run(&mut self, ctx: &Inner<B>, wait: bool) -> Result<CollectReport, Error> {
        ctx.queue.take_all(&ctx.pool, &mut self.taken);
        ctx.pool.sample_high_water();
        let mut first_error: Option<Error> = None;
        let names = std::mem::take(&mut *crate::sync::lock(&ctx.lane_names));
        for (lane, name) in names {
            for sink in &mut self.sinks {
                if let Err(e) = sink.name_lane(&self.info, lane, &name) {
                    first_error.get_or_insert(e.into());
                }
            }
        }
        self.waiting.extend(self.taken.drain(..));
        if let Err(e) = self.refresh_anchor(ctx, wait) {
            first_error = Some(e);
        }
        let mut report = CollectReport::default();
        let mut release: Option<Chain> = None;
        while let Some(&first) = self.waiting.front() {
            let outcome = self.read_times(ctx, first, wait);
            if matches!(outcome, Ok(false)) {
                break;
            }
            self.waiting.pop_front();
            let list = match outcome {
                Ok(_) => self.emit(ctx, first, &mut report, &mut first_error),
                Err(e) => {
                    report.failed_lists += 1;
                    ctx.counters.lists_failed.fetch_add(1, Ordering::Relaxed);
                    first_error.get_or_insert(e.into());
                    Some(self.discard(ctx, first))
                }
            };
            ctx.counters.lists_collected.fetch_add(1, Ordering::Relaxed);
            if let Some(list) = list {
                append(ctx, &mut release, list);
            }
        }
        if wait && self.waiting.is_empty() {
            for (_, (slot, _)) in self.held.drain() {
                append(ctx, &mut release, Chain { first: slot, last: slot, len: 1 });
            }
        }
        // Submitted -> Free: every collected list in one CAS.
        if let Some(chain) = release {
            ctx.pool.release_submitted(chain);
        }
        report.pending_lists = self.waiting.len();
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Promotes a completed pending anchor, and records a new one when the current is stale.
    fn refresh_anchor(&mut self, ctx: &Inner<B>, wait: bool) -> Result<(), Error> {
        let backend = &ctx.backend;
        if self.pending.is_none() {
            let age = backend.host_now_ns() - self.anchor.at.host_ns;
            let stale = u128::try_from(age).unwrap_or(0) >= ctx.config.anchor_interval.as_nanos();
            if stale || wait {
                if let Some(event) = self.spare.take() {
                    let host_ns = backend.host_now_ns();
                    match backend.record(&event, &self.stream) {
                        Ok(()) => self.pending = Some((event, host_ns)),
                        Err(e) => {
                            self.spare = Some(event);
                            return Err(e.into());
                        }
                    }
                }
            }
        }
        let ms = match &self.pending {
            None => return Ok(()),
            Some((event, _)) => {
                if wait {
                    backend.wait(event)?;
                }
                match backend.elapsed_ms(&self.anchor.event, event)? {
                    Some(ms) => ms,
                    None => return Ok(()),
                }
            }
        };
        let Some((event, host_ns)) = self.pending.take() else { return Ok(()) };
        let at = Calibration { gpu_ns: self.anchor.at.gpu_ns + ms_to_ns(ms), host_ns };
        let old = std::mem::replace(&mut self.anchor, Anchor { event, at });
        self.spare = Some(old.event);
        for sink in &mut self.sinks {
            sink.calibrate(&self.info, at)?;
        }
        Ok(())
    }

    /// Reads the times of the list starting at `first` into `self.times`. `Ok(false)` if an
    /// event has not completed (and `wait` is off).
    fn read_times(&mut self, ctx: &Inner<B>, first: u32, wait: bool) -> Result<bool, BackendError> {
        let backend = &ctx.backend;
        let head = ctx.pool.slot(first);
        // Safety: the list is Submitted and taken by this collector, which alone may touch
        // its records (the collector lock is held).
        let (len, lane, last) = head.record.with(|r| unsafe { ((*r).list_len, (*r).lane, (*r).list_last) });
        // One completion check before any time is read: a list the GPU has not finished
        // waits for the next collect without a read spent on each of its finished events
        // (which that collect would read again).
        if !wait && !backend.is_complete(&ctx.pool.slot(last).event)? {
            return Ok(false);
        }
        let (reference, reference_ns) = match self.held.get(&lane) {
            Some(&(slot, time)) => (&ctx.pool.slot(slot).event, time),
            None => (&self.anchor.event, self.anchor.at.gpu_ns),
        };
        self.times.clear();
        let mut index = first;
        for _ in 0..len {
            let slot = ctx.pool.slot(index);
            let ms = match backend.elapsed_ms(reference, &slot.event)? {
                Some(ms) => ms,
                None if wait => {
                    backend.wait(&slot.event)?;
                    backend
                        .elapsed_ms(reference, &slot.event)?
                        .ok_or_else(|| BackendError::new("elapsed_ms", "event not ready after wait"))?
                }
                None => return Ok(false),
            };
            self.times.push(reference_ns + ms_to_ns(ms));
            // Relaxed: the list's links were published by the submit's Release CAS.
            index = slot.link.load(Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Rebuilds the zones of the list at `first` from its records and times, sends them to
    /// the sinks, clears the records, and returns the list's chain for release.
    fn emit(
        &mut self,
        ctx: &Inner<B>,
        first: u32,
        report: &mut CollectReport,
        error: &mut Option<Error>,
    ) -> Option<Chain> {
        let anchor = self.anchor.at;
        let host = |gpu_ns: i64| anchor.host_ns + (gpu_ns - anchor.gpu_ns);
        self.zones.clear();
        self.open.clear();
        let walked = self.walk(ctx, first, |i, record, zones, open| {
            if record.ends {
                if let Some(z) = open.pop() {
                    let zone: &mut Zone = &mut zones[z];
                    zone.gpu_end_ns = i;
                    zone.host_end_ns = host(i);
                }
            }
            if let Some(location) = record.begins.take() {
                if !record.begin_dropped {
                    open.push(zones.len());
                    zones.push(Zone {
                        location,
                        lane: record.lane,
                        depth: (open.len() - 1) as u32,
                        gpu_begin_ns: i,
                        gpu_end_ns: i64::MIN,
                        host_begin_ns: host(i),
                        host_end_ns: i64::MIN,
                    });
                }
            }
        });
        // A zone without an end can only come from a list corrupted by a backend that
        // reported success for an event it did not record; never emit it.
        let before = self.zones.len();
        self.zones.retain(|z| z.gpu_end_ns != i64::MIN);
        ctx.count_dropped(before - self.zones.len());
        let batch = ZoneBatch { list_id: walked.list_id, zones: &self.zones };
        for sink in &mut self.sinks {
            if let Err(e) = sink.zones(&self.info, batch) {
                error.get_or_insert(e.into());
            }
        }
        report.lists += 1;
        report.zones += self.zones.len();
        ctx.counters.zones_emitted.fetch_add(self.zones.len(), Ordering::Relaxed);

        // Hold the list's last event as its lane's next reference; release the rest, and the
        // event held before.
        let chain = walked.chain;
        let last_time = self.times.last().copied().unwrap_or(self.anchor.at.gpu_ns);
        let mut release = (chain.len > 1).then_some(Chain {
            first: chain.first,
            last: walked.before_last,
            len: chain.len - 1,
        });
        if let Some((slot, _)) = self.held.insert(walked.last_lane, (chain.last, last_time)) {
            append(ctx, &mut release, Chain { first: slot, last: slot, len: 1 });
        }
        release
    }

    /// A list whose times could not be read: count its zones as dropped and clear it.
    fn discard(&mut self, ctx: &Inner<B>, first: u32) -> Chain {
        let mut zones = 0;
        let walked = self.walk(ctx, first, |_, record, _, _| {
            zones += usize::from(record.begins.is_some() && !record.begin_dropped);
        });
        ctx.count_dropped(zones);
        walked.chain
    }

    /// Visits each event of the list at `first` with its time (or 0 if unread), taking its
    /// record out of the slot (leaving it cleared for the next owner).
    fn walk(
        &mut self,
        ctx: &Inner<B>,
        first: u32,
        mut visit: impl FnMut(i64, &mut EventRecord, &mut Vec<Zone>, &mut Vec<usize>),
    ) -> WalkedList {
        let head = ctx.pool.slot(first);
        // Safety: the list is Submitted and held by this collector (lock held).
        let (len, last, list_id) =
            head.record.with(|r| unsafe { ((*r).list_len, (*r).list_last, (*r).list_id) });
        let mut walked = WalkedList {
            list_id,
            chain: Chain { first, last, len },
            before_last: NIL,
            last_lane: Lane::Stream(0),
        };
        let mut index = first;
        for i in 0..len as usize {
            let slot = ctx.pool.slot(index);
            // Safety: as above: the collector is the slot's only owner until it is released.
            let mut record = slot.record.with_mut(|r| unsafe { std::mem::take(&mut *r) });
            let time = self.times.get(i).copied().unwrap_or(0);
            walked.last_lane = record.lane;
            visit(time, &mut record, &mut self.zones, &mut self.open);
            if i + 1 < len as usize {
                walked.before_last = index;
            }
            index = slot.link.load(Ordering::Relaxed);
        }
        walked
    }

    pub(crate) fn flush_sinks(&mut self) -> Result<(), Error> {
        let mut result = Ok(());
        for sink in &mut self.sinks {
            if let Err(e) = sink.flush() {
                result = Err(e.into());
            }
        }
        result
    }
}
