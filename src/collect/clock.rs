//! The context's timeline: the anchors, and the one mapping of GPU time to host time.
//!
//! GPU times are nanoseconds since the context's base event. CUDA only measures the time
//! between two completed events, as `f32` milliseconds (a backend that reads integer ticks,
//! Vulkan, reports exact nanoseconds through `Backend::elapsed`: its bounds are 0). An `f32` under 16 ms converts back to
//! whole nanoseconds exactly (its step there is at most 0.95 ns); above, up to half a step is
//! lost (0.95 ns from 16 to 32 ms, 0.125 ms at one hour). So every measured distance is kept
//! short:
//!
//! - within a list, event `i` is measured from event `i - 1` and the steps are summed in
//!   `i64` nanoseconds (`read.rs`): durations are exact whenever consecutive events of a list
//!   are less than 16 ms apart, however long the list and whenever it is collected;
//! - a list's first event is placed against the nearest *anchor* ([`place`]): an event
//!   the collector records on its own idle stream every `anchor_interval`, whose time is the
//!   previous anchor's plus the step between them. The last [`ANCHORS`] anchors are kept, so
//!   a list collected late still finds one near it.
//!
//! Host times come from the one mapping (`mapping.rs`), the only place GPU time becomes host
//! time: every anchor is also a calibration pair for it.
//!
//! **No read is taken for a time the GPU cannot have run.** A backend may answer a read with a
//! number that is no distance (Vulkan's read of a difference that does not fit is
//! `i64::MAX`). Every anchor's step and every list's times are checked against what the GPU
//! can have run when they were read ([`Anchors::reach`]): nothing before the base event, and
//! nothing past the newest anchor plus the host time since it was recorded (at the fastest
//! plausible drift, [`MAX_DRIFT`]). A time outside fails its list, or its anchor, with a
//! [`TimeError`]: taken as true, it would move the mapping's frontier there and freeze the
//! mapping for every later list.
//!
//! Every backend call here goes through [`guarded`]: a backend that panics fails the call,
//! it does not unwind through the collector.

use super::estimator::MAX_DRIFT;
use crate::backend::{create_event, guarded, host_now, Backend, BackendError, Elapsed};
use crate::error::{Error, TimeError};
use crate::sink::Calibration;
use crate::sync::{lock, Arc, Mutex};
use std::collections::VecDeque;
use std::time::Duration;

/// Anchors kept for placing lists collected late: at one per `anchor_interval` (5 ms by
/// default), the last 320 ms or more.
pub(crate) const ANCHORS: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 64 };

/// Calibration pairs taken when the context is made, while its GPU is idle.
pub(crate) const STARTUP_PAIRS: usize = if cfg!(gpu_event_pool_loom) { 1 } else { 4 };

/// Distances under this many nanoseconds (16 ms) survive `f32` milliseconds exactly: below
/// 16 ms an `f32` step is at most 2^-20 ms (0.95 ns), so rounding back to whole nanoseconds
/// recovers the integer.
const EXACT_NS: i64 = 16_000_000;

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

/// How far a reading may be off: 0 when it is exact (a backend that reads integer ticks:
/// Vulkan), else [`rounding_bound`] (`f32` milliseconds rounded: CUDA).
pub(crate) fn reading_bound(elapsed: Elapsed) -> i64 {
    if elapsed.exact {
        0
    } else {
        rounding_bound(elapsed.ns)
    }
}

/// How far (ns) a time may lie outside what the GPU can have run before it is refused: host
/// clocks read with jitter, `f32` rounding (1 ms).
const REACH_SLACK_NS: i64 = 1_000_000;

/// The span of GPU time the GPU can have run by a given host time (both ends included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reach {
    pub(crate) earliest: i64,
    pub(crate) latest: i64,
}

impl Reach {
    pub(crate) fn holds(&self, gpu_ns: i64) -> bool {
        (self.earliest..=self.latest).contains(&gpu_ns)
    }
}

/// The least time between two asks whether the pending anchor is complete.
fn poll_gap(interval: Duration) -> i64 {
    i64::try_from(interval.as_nanos() / 16).unwrap_or(i64::MAX)
}

/// An event with a known time: GPU nanoseconds since the base event, and the host time.
#[derive(Debug)]
pub(crate) struct Anchor<E> {
    event: E,
    at: Calibration,
    /// How far `at.gpu_ns` may be off, summed over the steps from the base (0 while every
    /// step was under 16 ms).
    drift: i64,
    /// A host time no later than when the GPU reached the anchor: the pair's host time, or
    /// the host time read once it was found complete if that is earlier (a pair reported
    /// too late).
    reached_by_ns: i64,
}

impl<E> Anchor<E> {
    /// What the GPU can have run by host time `now_ns`: from the base event (GPU time 0) to
    /// this anchor plus the host time since it, at the fastest plausible drift.
    fn reach(&self, now_ns: i64) -> Reach {
        let since = now_ns.saturating_sub(self.reached_by_ns).max(0);
        let ahead = since.saturating_add((since as f64 * MAX_DRIFT) as i64);
        Reach {
            earliest: -REACH_SLACK_NS,
            latest: self.at.gpu_ns.saturating_add(ahead).saturating_add(REACH_SLACK_NS),
        }
    }
}

/// A time on the context's timeline, the drift bound of the anchor it was read from, and the
/// rounding bound of that read.
pub(crate) type Placed = (i64, i64, i64);

/// The completed anchors, oldest first (times strictly increase), shared by the emitter, which
/// adds and retires them, and every reader, which places the lists it reads against them.
///
/// The lock is held only to pick an anchor, never across a backend call: a reader clones the
/// anchor's `Arc` and reads against it unlocked, so an anchor retired meanwhile stays valid
/// until that reader drops it (its event is recycled only once no reader holds it).
#[derive(Debug)]
pub(crate) struct Anchors<E> {
    list: Mutex<VecDeque<Arc<Anchor<E>>>>,
}

impl<E> Anchors<E> {
    fn newest(&self) -> Arc<Anchor<E>> {
        Arc::clone(lock(&self.list).back().expect("there is always an anchor"))
    }

    /// The anchor nearest `gpu_ns`.
    fn nearest(&self, gpu_ns: i64) -> Arc<Anchor<E>> {
        let list = lock(&self.list);
        let nearest = list.iter().min_by_key(|a| (a.at.gpu_ns - gpu_ns).unsigned_abs());
        Arc::clone(nearest.expect("there is always an anchor"))
    }

    /// GPU time of the oldest anchor kept: nothing emitted is placed from before it.
    pub(crate) fn oldest_gpu_ns(&self) -> i64 {
        lock(&self.list).front().map_or(i64::MIN, |a| a.at.gpu_ns)
    }

    /// What the GPU can have run by host time `now_ns`, read after the newest anchor was
    /// taken: nothing before the base event, nothing past the newest anchor plus the host
    /// time since it (at the fastest plausible drift, [`MAX_DRIFT`], and 1 ms for jitter).
    pub(crate) fn reach(&self, now_ns: i64) -> Reach {
        self.newest().reach(now_ns)
    }
}

/// The time of `event` (complete) on the context's timeline, from the nearest anchor: one read
/// when the newest anchor is within the exact range, two when another is nearer. Also returns
/// the anchor's drift bound and how far this read may be off by rounding (0 within the exact
/// range). Any collector may call it, concurrently with the emitter's `refresh`. The sum
/// saturates: a read that is no distance places the event at an end of `i64`, which the
/// caller refuses ([`Anchors::reach`]).
pub(crate) fn place<B: Backend>(
    backend: &B,
    anchors: &Anchors<B::Event>,
    event: &B::Event,
) -> Result<Placed, BackendError> {
    let read = |anchor: &Anchor<B::Event>| -> Result<Placed, BackendError> {
        match guarded("elapsed", || backend.elapsed(&anchor.event, event))? {
            Some(distance) => {
                Ok((anchor.at.gpu_ns.saturating_add(distance.ns), anchor.drift, reading_bound(distance)))
            }
            None => Err(BackendError::new("elapsed", "a read event became not ready")),
        }
    };
    let newest = anchors.newest();
    let placed = read(&newest)?;
    let (estimate, _, bound) = placed;
    if bound == 0 {
        return Ok(placed);
    }
    let nearest = anchors.nearest(estimate);
    if Arc::ptr_eq(&nearest, &newest) {
        return Ok(placed);
    }
    read(&nearest)
}

/// A calibration taken by the keeper of the anchors, for the emitter: a new anchor's pair
/// (the host time read before it was recorded, a lower bound of the clocks' offset) and the
/// host time read just after it was found complete (an upper bound).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observation {
    pub(crate) at: Calibration,
    pub(crate) observed_ns: i64,
}

/// The context's timeline, shared by every collector: the completed anchors (readers place
/// lists against them), the keeper that records and completes new anchors (whichever
/// collector finds it free, in its read phase: never the emitter, whose lock must not wait
/// on a driver call), and the calibrations taken and not yet handed to the emitter.
pub(crate) struct Timeline<B: Backend> {
    anchors: Anchors<B::Event>,
    keeper: Mutex<Keeper<B>>,
    /// Observations for the emitter; the lock is held only to push or take them.
    news: Mutex<Vec<Observation>>,
}

/// The anchors' stream, the anchor being recorded, and the spare anchor events: touched by
/// one collector at a time.
struct Keeper<B: Backend> {
    stream: B::Stream,
    /// An anchor recorded but not yet complete, with the host time it was recorded at.
    pending: Option<(B::Event, i64)>,
    /// Host time the pending anchor was last asked whether it is complete.
    polled_ns: i64,
    /// Anchor events not in use.
    spare: Vec<B::Event>,
}

impl<B: Backend> Timeline<B> {
    /// Makes the timeline: its stream and the base event (recorded and waited for, like the
    /// seed's calibration), GPU time 0, then [`STARTUP_PAIRS`] calibrations while the GPU is
    /// idle (waiting for each), left for the emitter. Returns the base calibration pair too.
    pub(crate) fn new(backend: &B) -> Result<(Self, Calibration), Error> {
        let stream = guarded("create_stream", || backend.create_stream())?;
        let base = create_event(backend)?;
        let spare = create_event(backend)?;
        let recorded_ns = host_now(backend)?;
        let exact = guarded("record_anchor", || backend.record_anchor(&base, &stream))?;
        guarded("wait", || backend.wait(&base))?;
        let observed_ns = host_now(backend)?;
        let host_ns = exact.unwrap_or(observed_ns);
        let at = Calibration { gpu_ns: 0, host_ns };
        // The GPU reached the base after it was recorded: what it can have run since is
        // measured from then, not from the wait's end, which may come long after (a slow
        // readback), or a next anchor would seem to step past what the host time allows.
        let reached_by_ns = exact.unwrap_or(recorded_ns).min(observed_ns);
        let anchor = Anchor { event: base, at, drift: 0, reached_by_ns };
        let list = VecDeque::from([Arc::new(anchor)]);
        let timeline = Self {
            anchors: Anchors { list: Mutex::new(list) },
            keeper: Mutex::new(Keeper { stream, pending: None, polled_ns: i64::MIN, spare: vec![spare] }),
            news: Mutex::new(Vec::new()),
        };
        for _ in 0..STARTUP_PAIRS {
            timeline.refresh(backend, Duration::ZERO, true)?;
        }
        Ok((timeline, at))
    }

    /// Promotes a completed pending anchor, and records a new one when the newest is older
    /// than `interval`; with `wait` (a flush, which ends on a fresh anchor), records one and
    /// waits for it. Without `wait`, does nothing when another collector keeps the anchors
    /// now. A new anchor's calibration is left for the emitter ([`take_news`](Self::take_news)).
    pub(crate) fn refresh(&self, backend: &B, interval: Duration, wait: bool) -> Result<(), Error> {
        let mut keeper = if wait {
            lock(&self.keeper)
        } else {
            match crate::sync::try_lock(&self.keeper) {
                Some(keeper) => keeper,
                None => return Ok(()),
            }
        };
        if let Some(observation) = keeper.refresh(backend, &self.anchors, interval, wait)? {
            lock(&self.news).push(observation);
        }
        Ok(())
    }

    /// Moves the calibrations taken since the last call into `into`, oldest first.
    pub(crate) fn take_news(&self, into: &mut Vec<Observation>) {
        into.append(&mut lock(&self.news));
    }

    /// The completed anchors, for the readers.
    pub(crate) fn anchors(&self) -> &Anchors<B::Event> {
        &self.anchors
    }

    /// GPU time of the oldest anchor kept: nothing emitted is placed from before it.
    pub(crate) fn oldest_gpu_ns(&self) -> i64 {
        self.anchors.oldest_gpu_ns()
    }
}

impl<B: Backend> Keeper<B> {
    /// [`Timeline::refresh`] with the keeper held: the new anchor's observation, if one
    /// completed.
    fn refresh(
        &mut self,
        backend: &B,
        anchors: &Anchors<B::Event>,
        interval: Duration,
        wait: bool,
    ) -> Result<Option<Observation>, Error> {
        let newest = anchors.newest();
        if self.pending.is_none() {
            let age = host_now(backend)? - newest.at.host_ns;
            let stale = u128::try_from(age).unwrap_or(0) >= interval.as_nanos();
            if stale || wait {
                let event = match self.spare.pop() {
                    Some(event) => event,
                    None => create_event(backend)?,
                };
                let record = || guarded("record_anchor", || backend.record_anchor(&event, &self.stream));
                let recorded = host_now(backend).and_then(|host_ns| Ok((host_ns, record()?)));
                match recorded {
                    Ok((host_ns, exact)) => self.pending = Some((event, exact.unwrap_or(host_ns))),
                    Err(e) => {
                        self.spare.push(event);
                        return Err(e.into());
                    }
                }
            }
        }
        let Some((event, _)) = &self.pending else { return Ok(None) };
        if wait {
            guarded("wait", || backend.wait(event))?;
        } else {
            // Asked at most every sixteenth of the interval: on CUDA each ask is a driver call,
            // which waits behind every recording thread's. An anchor found late is no less
            // exact.
            let now = host_now(backend)?;
            if now.saturating_sub(self.polled_ns) < poll_gap(interval) {
                return Ok(None);
            }
            self.polled_ns = now;
        }
        let Some(step) = guarded("elapsed", || backend.elapsed(&newest.event, event))? else {
            return Ok(None);
        };
        // Read after the anchor was found complete: the GPU reached it before.
        let observed_ns = host_now(backend)?;
        let (event, host_ns) = self.pending.take().expect("checked above");
        // The anchor was recorded after the newest, on the same stream, and has run by now.
        let gpu_ns = newest.at.gpu_ns.saturating_add(step.ns);
        let reach =
            Reach { earliest: newest.at.gpu_ns.saturating_sub(REACH_SLACK_NS), ..newest.reach(observed_ns) };
        if !reach.holds(gpu_ns) {
            self.spare.push(event);
            let (earliest_ns, latest_ns) =
                (reach.earliest - newest.at.gpu_ns, reach.latest - newest.at.gpu_ns);
            return Err(TimeError::AnchorStep { step_ns: step.ns, earliest_ns, latest_ns }.into());
        }
        let at = Calibration { gpu_ns, host_ns };
        let drift = newest.drift.saturating_add(reading_bound(step));
        let anchor = Anchor { event, at, drift, reached_by_ns: host_ns.min(observed_ns) };
        drop(newest);
        let retired = {
            let mut list = lock(&anchors.list);
            list.push_back(Arc::new(anchor));
            if list.len() > ANCHORS {
                list.pop_front()
            } else {
                None
            }
        };
        // An anchor a reader still holds is dropped by that reader (its event destroyed
        // there), not recycled: a new event is made for a later anchor instead.
        if let Some(Ok(oldest)) = retired.map(Arc::try_unwrap) {
            self.spare.push(oldest.event);
        }
        Ok(Some(Observation { at, observed_ns }))
    }
}
