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
//! **A step back is no step.** The anchors run in order on one stream, each recorded once the
//! one before was seen complete, so the step from one to the next cannot be negative, and a
//! sum of steps cannot leave `i64`: an anchor read so ([`TimeError::AnchorStep`]) is dropped
//! and another taken. Any other step is taken as read: one the host time between them cannot
//! explain (a suspend, a GPU counter that stopped) is a discontinuity of the clocks, which the
//! mapping sees in the anchor's bounds and begins a new segment for (`mapping.rs`).
//!
//! Every backend call here goes through [`guarded`]: a backend that panics fails the call,
//! it does not unwind through the collector.

use super::bounds::PointBound;
use crate::backend::{create_event, guarded, host_now, Backend, BackendError, Elapsed};
use crate::error::{Error, TimeError};
use crate::sink::Calibration;
use crate::sync::{lock, Arc, AtomicBool, Mutex, Ordering};
use std::collections::VecDeque;
use std::time::Duration;

/// Anchors kept for placing lists collected late: at one per `anchor_interval` (5 ms by
/// default), the last 320 ms or more.
pub(crate) const ANCHORS: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 64 };

/// Anchors taken after the base event when the context is made, each waited for: one, so that
/// the first lists are bounded by a tight interval beside the base's, and a wrong read at the
/// base shows at once as a discontinuity rather than at the first collect.
pub(crate) const STARTUP_PAIRS: usize = 1;

/// The latest GPU time the timeline holds: half of `i64`'s range, 146 years after the base
/// event. A step that reads past it is no distance: no GPU counter of a running process is
/// that far on (a suspend of a century is not one), and half the range keeps every later
/// time of a list, read from an anchor as a distance of up to as much again, within `i64`
/// (an anchor taken there made every list after it fail as out of range).
const TIMELINE_END: i64 = i64::MAX / 2;

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

/// What the host reads around an anchor at `gpu_ns` say of the offset there: the read before
/// its record is a lower bound, the read after it was seen complete an upper one (a read
/// before that is below the other is none: the earlier read is dropped).
pub(crate) fn reads_bound(gpu_ns: i64, recorded_ns: i64, observed_ns: i64) -> PointBound {
    PointBound::from_host(gpu_ns, (recorded_ns <= observed_ns).then_some(recorded_ns), Some(observed_ns))
}

/// When the keeper records a new anchor besides when the newest is older than the interval.
#[derive(Debug, Clone, Copy)]
enum Record {
    /// Now (a flush; a list placed from its own reads).
    Now,
    /// If lists were read up to this GPU time past the newest anchor, and the newest is older
    /// than [`poll_gap`].
    Past(Option<i64>),
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
    /// The host reads around it: before its record, after it was seen complete.
    bound: PointBound,
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
}

/// The time of `event` (complete) on the context's timeline, from the nearest anchor: one read
/// when the newest anchor is within the exact range, two when another is nearer. Also returns
/// the anchor's drift bound and how far this read may be off by rounding (0 within the exact
/// range), and the host reads around the anchor it was read from. Any collector may call it,
/// concurrently with the emitter's `refresh`. The sum saturates: a read that is no distance
/// places the event at an end of `i64`, which the caller refuses.
pub(crate) fn place<B: Backend>(
    backend: &B,
    anchors: &Anchors<B::Event>,
    event: &B::Event,
) -> Result<(Placed, PointBound), BackendError> {
    let read = |anchor: &Anchor<B::Event>| -> Result<(Placed, PointBound), BackendError> {
        match guarded("elapsed", || backend.elapsed(&anchor.event, event))? {
            Some(distance) => {
                let placed =
                    (anchor.at.gpu_ns.saturating_add(distance.ns), anchor.drift, reading_bound(distance));
                Ok((placed, anchor.bound))
            }
            None => Err(BackendError::new("elapsed", "a read event became not ready")),
        }
    };
    let newest = anchors.newest();
    let placed = read(&newest)?;
    let ((estimate, _, bound), _) = placed;
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
/// (its GPU time and host time, the backend's exact one where it gives one: what sinks are
/// told), and the bounds of its host time from the keeper's own reads: the host time read
/// just before it was recorded, or before a later ask that found it not complete yet (the GPU
/// reached it later), and just after it was found complete (the GPU reached it before). A backend's exact pair is not taken as a bound: the
/// reads around the record are, whatever the backend says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observation {
    pub(crate) at: Calibration,
    pub(crate) not_before_ns: i64,
    pub(crate) observed_ns: i64,
    /// How far `at.gpu_ns` may be off (the anchor's drift bound).
    pub(crate) drift: i64,
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
    /// Set by the emitter when a list's reads did not fit the clock it knew (a discontinuity
    /// no anchor has shown yet, or the host clock gone back): the next refresh records an
    /// anchor whatever the newest one's age.
    wanted: AtomicBool,
}

/// The anchors' stream, the anchor being recorded, and the spare anchor events: touched by
/// one collector at a time.
struct Keeper<B: Backend> {
    stream: B::Stream,
    /// An anchor recorded but not yet complete: the host time read before its record, and
    /// the backend's exact host time if it gave one.
    pending: Option<(B::Event, i64, Option<i64>)>,
    /// A host time the GPU had not reached the pending anchor by: read before its record, or
    /// before an ask that found it not complete (a lower bound, tighter while the GPU is late).
    not_before_ns: i64,
    /// Host time the pending anchor was last asked whether it is complete.
    polled_ns: i64,
    /// Anchor events not in use.
    spare: Vec<B::Event>,
}

impl<B: Backend> Timeline<B> {
    /// Makes the timeline: its stream and the base event (recorded and waited for, like the
    /// seed's calibration), GPU time 0, then [`STARTUP_PAIRS`] calibrations while the GPU is
    /// idle (waiting for each); the base's and theirs are left for the emitter. Returns the
    /// base calibration pair too.
    pub(crate) fn new(backend: &B) -> Result<(Self, Calibration), Error> {
        let stream = guarded("create_stream", || backend.create_stream())?;
        let base = create_event(backend)?;
        let spare = create_event(backend)?;
        let recorded_ns = host_now(backend)?;
        let exact = guarded("record_anchor", || backend.record_anchor(&base, &stream))?;
        guarded("wait", || backend.wait(&base))?;
        let observed_ns = host_now(backend)?;
        let host_ns = exact.unwrap_or(recorded_ns);
        let at = Calibration { gpu_ns: 0, host_ns };
        let bound = reads_bound(0, recorded_ns, observed_ns);
        let anchor = Anchor { event: base, at, drift: 0, bound };
        let list = VecDeque::from([Arc::new(anchor)]);
        let timeline = Self {
            anchors: Anchors { list: Mutex::new(list) },
            keeper: Mutex::new(Keeper {
                stream,
                pending: None,
                not_before_ns: i64::MIN,
                polled_ns: i64::MIN,
                spare: vec![spare],
            }),
            news: Mutex::new(vec![Observation { at, not_before_ns: recorded_ns, observed_ns, drift: 0 }]),
            wanted: AtomicBool::new(false),
        };
        for _ in 0..STARTUP_PAIRS {
            timeline.refresh(backend, Duration::ZERO, true, None)?;
        }
        Ok((timeline, at))
    }

    /// Promotes a completed pending anchor, and records a new one when the newest is older
    /// than `interval`; with `wait` (a flush, which ends on a fresh anchor), records one and
    /// waits for it. Without `wait`, does nothing when another collector keeps the anchors
    /// now. A new anchor's calibration is left for the emitter ([`take_news`](Self::take_news)).
    pub(crate) fn refresh(
        &self,
        backend: &B,
        interval: Duration,
        wait: bool,
        read: Option<i64>,
    ) -> Result<(), Error> {
        let mut keeper = if wait {
            lock(&self.keeper)
        } else {
            match crate::sync::try_lock(&self.keeper) {
                Some(keeper) => keeper,
                None => return Ok(()),
            }
        };
        // Relaxed: a hint; an anchor recorded one collect later is no less right.
        let wanted = self.wanted.swap(false, Ordering::Relaxed);
        let record = if wait || wanted { Record::Now } else { Record::Past(read) };
        if let Some(observation) = keeper.refresh(backend, &self.anchors, interval, wait, record)? {
            lock(&self.news).push(observation);
        }
        Ok(())
    }

    /// Asks for a new anchor at the next refresh, whatever the newest one's age.
    pub(crate) fn want_anchor(&self) {
        self.wanted.store(true, Ordering::Relaxed);
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
    /// completed. With `record`, a new anchor is recorded whatever the newest one's age, or
    /// when lists were read past the newest and it is older than a sixteenth of the interval.
    fn refresh(
        &mut self,
        backend: &B,
        anchors: &Anchors<B::Event>,
        interval: Duration,
        wait: bool,
        record: Record,
    ) -> Result<Option<Observation>, Error> {
        let newest = anchors.newest();
        let mut fresh = false;
        if self.pending.is_none() {
            let age = host_now(backend)? - newest.at.host_ns;
            // A host clock gone back since (a step) makes it stale too.
            let stale = age < 0 || u128::try_from(age).unwrap_or(0) >= interval.as_nanos();
            let wanted = match record {
                Record::Now => true,
                Record::Past(read) => read > Some(newest.at.gpu_ns) && age >= poll_gap(interval),
            };
            if stale || wanted {
                let event = match self.spare.pop() {
                    Some(event) => event,
                    None => create_event(backend)?,
                };
                let record = || guarded("record_anchor", || backend.record_anchor(&event, &self.stream));
                let recorded = host_now(backend).and_then(|host_ns| Ok((host_ns, record()?)));
                match recorded {
                    Ok((host_ns, exact)) => {
                        self.pending = Some((event, host_ns, exact));
                        self.not_before_ns = host_ns;
                        self.polled_ns = host_ns;
                        fresh = true;
                    }
                    Err(e) => {
                        self.spare.push(event);
                        return Err(e.into());
                    }
                }
            }
        }
        let Some((event, _, _)) = &self.pending else { return Ok(None) };
        if wait {
            guarded("wait", || backend.wait(event))?;
        } else if !fresh {
            // Asked at most every sixteenth of the interval: on CUDA each ask is a driver call,
            // which waits behind every recording thread's. A new anchor is asked about once at
            // once: on an idle GPU it is complete already, and its bounds are then as tight as
            // the two host reads around its record.
            let now = host_now(backend)?;
            let since = now.saturating_sub(self.polled_ns);
            // (A host clock gone back since asks at once.)
            if (0..poll_gap(interval)).contains(&since) {
                return Ok(None);
            }
            self.polled_ns = now;
        }
        let read = || guarded("elapsed", || backend.elapsed(&newest.event, event));
        let Some(step) = read()? else {
            // Not reached when asked: the read before the ask bounds it from below, where an
            // event is seen complete the moment the GPU reaches it.
            if B::COMPLETE_WHEN_REACHED && !wait && !fresh {
                self.not_before_ns = self.not_before_ns.max(self.polled_ns);
            }
            return Ok(None);
        };
        // Read after the anchor was found complete: the GPU reached it before.
        let observed_ns = host_now(backend)?;
        let (_, recorded_ns, exact) = self.pending.as_ref().expect("checked above");
        let (recorded_ns, exact, not_before_ns) = (*recorded_ns, *exact, self.not_before_ns);
        // The anchor was recorded once the newest was seen complete, on the same stream: it
        // ran after it. A step back, or one past `i64`, is no distance. A step the host reads
        // around the two anchors cannot hold at the rate bound is read again: the same answer
        // is a discontinuity of the clocks (the mapping begins a new segment there), another
        // one that fits is the step, and two that disagree are no distance.
        let at_step = |step: Elapsed| {
            let gpu_ns =
                newest.at.gpu_ns.checked_add(step.ns).filter(|&g| step.ns >= 0 && g <= TIMELINE_END)?;
            Some((gpu_ns, reads_bound(gpu_ns, not_before_ns, observed_ns)))
        };
        let fits = |(_, bound): &(i64, PointBound)| bound.agrees(&newest.bound);
        let taken = match at_step(step).filter(fits) {
            Some(taken) => Some((taken, step)),
            None => {
                let again = read()?.filter(|again| {
                    at_step(*again).is_some_and(|a| fits(&a))
                        || again.ns.abs_diff(step.ns) <= reading_bound(step).unsigned_abs()
                });
                again.and_then(|again| at_step(again).map(|taken| (taken, again)))
            }
        };
        let (event, _, _) = self.pending.take().expect("checked above");
        let Some(((gpu_ns, bound), step)) = taken else {
            self.spare.push(event);
            return Err(TimeError::AnchorStep { step_ns: step.ns }.into());
        };
        let host_ns = exact.unwrap_or(recorded_ns);
        let at = Calibration { gpu_ns, host_ns };
        let drift = newest.drift.saturating_add(reading_bound(step));
        let anchor = Anchor { event, at, drift, bound };

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
        Ok(Some(Observation { at, not_before_ns, observed_ns, drift }))
    }
}
