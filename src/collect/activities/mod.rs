//! The emit phase for an activity source (docs/design.md, section 13): the source's work
//! records and launch links, and the lists the application submitted, assembled into zones
//! in each stream's GPU order (`assemble.rs`) and handed to the delivery (`deliver.rs`),
//! like an event source's. Run by one caller at a time, behind the emitter's lock.
//!
//! Each phase, in this order (invariant L): take the submitted lists (their zones; their
//! slots go back at once, in one CAS: an activity list's slots carry nothing but the list);
//! read the source (its records, then its links); give the assembler the links, then the
//! lists, then the records; emit what is ready.

mod assemble;
#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;

use super::deliver::{context_info, Phase};
use super::Pass;
use crate::backend::activity::{ActivityBatch, ActivitySource, ReadFor};
use crate::backend::{guarded, host_now, Backend, BackendError, Lane};
use crate::error::Error;
use crate::shared::record::{EventRecord, ListKind};
use crate::shared::Inner;
use crate::sink::{Calibration, ContextInfo, ZoneBatch};
use crate::slots::freelist::Chain;
use crate::slots::head::ListHead;
use crate::sync::Ordering;
use assemble::{Assembler, TakenList, UserZone};

/// The emitter's state for an activity source.
pub(crate) struct ActivityOrder {
    assembler: Assembler,
    /// What the source read, reused from phase to phase.
    batch: ActivityBatch,
    taken: Vec<ListHead>,
}

impl ActivityOrder {
    /// The order of a new context timed by `backend`'s activity source, and what the sinks
    /// are told about the context: GPU time 0 is the host time now (a zone's GPU and host
    /// times differ by that constant: the source's times are host times).
    pub(crate) fn new<B: Backend>(backend: &B, id: u32, name: &str) -> Result<(Self, ContextInfo), Error> {
        let Some(source) = backend.activity_source() else {
            return Err(Error::Backend(BackendError::new(
                "Backend::activity_source",
                "a backend timed by activities (TIMING) gave no activity source",
            )));
        };
        guarded("ActivitySource::attach", || source.attach())?;
        let now = host_now(backend)?;
        let info = context_info(backend, id, name, Calibration { gpu_ns: 0, host_ns: now });
        let order =
            Self { assembler: Assembler::new(id, now), batch: ActivityBatch::default(), taken: Vec::new() };
        Ok((order, info))
    }

    /// Lists taken and not emitted yet.
    pub(crate) fn waiting_lists(&self) -> usize {
        self.assembler.pending().1
    }

    /// One emit phase. `Pass::Flush` reads the source until every list taken has a record of
    /// each of its launches, or the hold limit has passed; `Pass::Final` forces everything
    /// out.
    pub(crate) fn emit_phase<B: Backend>(&mut self, ctx: &Inner<B>, phase: &mut Phase<'_>, pass: Pass) {
        let Some(source) = ctx.backend().activity_source() else { return };
        let hold = i64::try_from(ctx.config().hold_limit.as_nanos()).unwrap_or(i64::MAX);
        // Lists first: every link of their launches was made before they were submitted.
        let lists = self.take_lists(ctx);
        phase.report.read_lists += lists.len();
        let mut now = match host_now(ctx.backend()) {
            Ok(now) => now,
            Err(e) => return phase.fail(e.into()),
        };
        let started = now;
        let mut lists = Some(lists);
        loop {
            let why = match pass {
                Pass::Collect => ReadFor::Collect,
                Pass::Flush => ReadFor::Flush,
                Pass::Final => ReadFor::Final,
            };
            if let Err(e) = read(source, why, &mut self.batch) {
                phase.fail(e.into());
            }
            self.assembler.link(self.batch.links.drain(..), now);
            if let Some(lists) = lists.take() {
                self.assembler.take(lists, now);
            }
            self.assembler.records(self.batch.activities.drain(..), now);
            let waited = now.saturating_sub(started);
            if pass != Pass::Flush || self.assembler.lists_waiting() == 0 || waited >= hold {
                break;
            }
            pause();
            now = match host_now(ctx.backend()) {
                Ok(now) => now,
                Err(e) => {
                    phase.fail(e.into());
                    break;
                }
            };
        }
        let mut emitted = self.assembler.emit(now, hold, pass == Pass::Final);
        // The source's records are host times of its own making: their bound is its to say.
        let bound =
            guarded("ActivitySource::host_time_bound", || Ok(source.host_time_bound())).unwrap_or(u64::MAX);
        for (list_id, zones) in &mut emitted.batches {
            for zone in zones.iter_mut() {
                (zone.host_begin_bound_ns, zone.host_end_bound_ns) = (bound, bound);
            }
            let zones = &zones[..];
            let delivered = phase.delivery.zones(ctx, ZoneBatch { list_id: *list_id, zones });
            phase.check(delivered);
            phase.report.zones += zones.len();
        }
        let c = ctx.counters();
        phase.report.lists += emitted.lists;
        c.lists_collected.fetch_add(emitted.lists, Ordering::Relaxed);
        c.activities.fetch_add(emitted.activities, Ordering::Relaxed);
        c.empty_zones.fetch_add(emitted.empty_zones, Ordering::Relaxed);
        c.activities_late.fetch_add(emitted.late, Ordering::Relaxed);
        c.lists_partial.fetch_add(emitted.lists_partial, Ordering::Relaxed);
        for held in emitted.held {
            phase.lane_held(c, held);
        }
        phase.report.pending_lists = self.waiting_lists();
        let ended = phase.delivery.end_phase(ctx);
        phase.check(ended);
    }

    /// Takes every submitted list: its zones out of its records, its slots back to the pool
    /// (one CAS for all), its record buffer back for later lists.
    fn take_lists<B: Backend>(&mut self, ctx: &Inner<B>) -> Vec<TakenList> {
        let pool = ctx.pool();
        let mut taken = std::mem::take(&mut self.taken);
        ctx.queue().take_all(pool, &mut taken);
        let mut lists = Vec::with_capacity(taken.len());
        let mut release: Option<Chain> = None;
        for mut head in taken.drain(..) {
            // Taken off the queue by this thread: it owns the list.
            let mut record = head.write(pool, std::mem::take);
            let zones = user_zones(&mut record.events, |slot| head.launch(pool, slot));
            ctx.record_buffers().give_back(std::mem::take(&mut record.events));
            lists.push(TakenList {
                id: record.list_id,
                frame: record.list_frame,
                zones,
                discarded: record.list_kind == ListKind::Discarded,
            });
            let chain = Chain { first: head.first(), last: record.list_last, len: record.list_len };
            release = Some(match release.take() {
                None => chain,
                Some(before) => before.then(pool, chain),
            });
        }
        self.taken = taken;
        // Submitted -> Free.
        if let Some(chain) = release {
            pool.release_submitted(chain);
        }
        lists
    }
}

/// The zones of a list, from its records (as the event reader replays them, without
/// times): each begin that was recorded opens one, nested in the zone open before it.
fn user_zones(events: &mut [EventRecord], launch: impl Fn(u32) -> crate::launch::Launch) -> Vec<UserZone> {
    let mut zones: Vec<UserZone> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for (position, record) in events.iter_mut().enumerate() {
        if record.ends {
            open.pop();
        }
        if let Some(location) = record.begins.take().filter(|_| !record.begin_dropped) {
            let Lane::Stream(lane) = record.lane else { continue };
            zones.push(UserZone {
                position: position as u32,
                parent: open.last().copied(),
                depth: open.len() as u32,
                location,
                lane,
                launch: record.launched.then(|| launch(record.slot)),
            });
            open.push(zones.len() - 1);
        }
    }
    zones
}

/// The source's read, a panic caught as its error.
fn read(source: &dyn ActivitySource, why: ReadFor, batch: &mut ActivityBatch) -> Result<(), BackendError> {
    guarded("ActivitySource::read", || source.read(why, batch))
}

/// Between two reads of a flush: the source's records come at its own pace.
fn pause() {
    #[cfg(gpu_event_pool_loom)]
    crate::sync::spin_wait();
    #[cfg(not(gpu_event_pool_loom))]
    std::thread::sleep(std::time::Duration::from_micros(500));
}
