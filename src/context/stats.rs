//! [`Stats`]: a snapshot of a context's slot counts and counters.

use crate::backend::activity::ActivityLosses;
use crate::backend::{Backend, Timing};
use crate::shared::{Inner, EVENTS_SUBMITTED, LISTS_DISCARDED, LISTS_SUBMITTED};
use crate::sync::{AtomicUsize, Ordering};

/// A snapshot of a context's statistics. Each counter is read on its own, so a snapshot
/// taken while other threads record is approximate; when they are quiet it is exact, and
/// `free + owned + submitted == capacity` ([`Stats::unaccounted`] is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// The backend that runs ([`Backend::name`]).
    pub backend: &'static str,
    /// How it times zones ([`Backend::timing`]): by events it records, or by the work records
    /// of its activity source (CUPTI). A `CuptiBackend` that fell back to CUDA events (another
    /// tool holds CUPTI: `CuptiConfig::fall_back_to_events`) says [`Timing::Events`].
    pub timing: Timing,
    /// Slots (events) created.
    pub capacity: usize,
    /// The most slots the pool may grow to.
    pub max_capacity: usize,
    /// Pages created.
    pub pages: usize,
    /// Free slots: on the freelist, or idle in threads' magazines (`in_magazines`).
    pub free: usize,
    /// Of the free slots, those in per-thread magazines (including those of exited threads
    /// until the pool moves them to the freelist): at most `magazine size x threads`.
    pub in_magazines: usize,
    /// Threads holding a magazine of this context now (each holds at most the magazine
    /// size in free slots); a thread hands its magazine back when it exits.
    pub threads_with_magazines: usize,
    /// Slots held by lists being recorded (including their unused reservations).
    pub owned: usize,
    /// Slots in submitted lists not yet collected (and, on a backend that retires events,
    /// of failed lists whose events the GPU has not passed yet:
    /// [`Backend::retire`](crate::Backend::retire)).
    pub submitted: usize,
    /// `owned + submitted`.
    pub in_use: usize,
    /// The most slots seen in use at once: sampled when the pool grows (the moment it is
    /// full), on every `stats()` call, and at the end of every emit phase while a sink takes
    /// counters ([`Sink::wants_counters`](crate::sink::Sink::wants_counters)); on every
    /// collect, the slots submitted then (the collector reads no thread's magazine).
    pub high_water: usize,
    /// Times the pool grew.
    pub grows: usize,
    /// Zones not recorded because of exhaustion, depth or a backend error.
    pub dropped_zones: usize,
    /// Lists submitted (including empty ones).
    pub lists_submitted: usize,
    /// Lists collected (including empty ones).
    pub lists_collected: usize,
    /// Lists whose times could not be read, or cannot be true (`Error::Time`); their zones
    /// are counted as dropped.
    pub lists_failed: usize,
    /// Lists dropped without being submitted (their events were released, nothing emitted).
    pub lists_discarded: usize,
    /// Events in submitted lists.
    pub events_submitted: usize,
    /// Zones delivered to the sinks.
    pub zones_emitted: usize,
    /// Lists moved later on their lane by the order guard because rounding would have made
    /// them overlap the list before (only possible when anchors were 16 ms or more apart,
    /// where an `f32` millisecond distance loses part of a nanosecond). 0 when the context
    /// is collected at least every
    /// `anchor_interval`.
    pub lists_shifted: usize,
    /// Discontinuities of the clocks: anchors whose host times no mapping of GPU time to host
    /// time fits together with the anchors and lists before them (a suspend, a GPU counter
    /// that stopped, a host clock stepped or slewed faster than 500 ppm). Each begins a new
    /// clock segment, is reported once (`Error::ClockDiscontinuity`) and is marked in the
    /// traces; zones keep coming (docs/design.md, section 8).
    pub clock_discontinuities: usize,
    /// Lists placed on the host clock from their own host reads alone (so with a wider
    /// bound): their reads did not fit their clock segment (read after a discontinuity no
    /// anchor had shown yet, or a placement read that is no distance), or they lay between
    /// two segments.
    pub lists_placed_alone: usize,
    /// Batches that a sink failed to take, and sink flushes that failed (an error or a
    /// caught panic; one per batch or flush, however many sinks failed it). The last handle's
    /// flush counts here too, and its failure also goes to the context's error handler
    /// ([`Builder::on_error`](crate::Builder::on_error)).
    pub sink_failures: usize,
    /// Sinks that panicked and are no longer called (each is reported once, as
    /// `Error::SinkPanicked`).
    pub sinks_stopped: usize,
    /// Times a lane moved on past a list still being recorded that held it longer than the
    /// hold limit (each reported as `Error::LaneHeld`).
    pub lanes_released: usize,
    /// Lists emitted after their lane moved on without them (late, shown apart from the
    /// lane's in-order zones).
    pub lists_late: usize,
    /// Lists that began on their first zone's stream before the list before them there had
    /// ended on the GPU: recorded on the stream at once (the first on each stream is
    /// reported as `Error::ConcurrentLists`). One list records on a stream at a time. Always
    /// 0 on Vulkan, whose lists are ordered at submission.
    pub concurrent_lists: usize,
    /// Host nanoseconds spent emitting: the part of collection that runs on one thread at a
    /// time (placing each list on the timeline, building its zones, the sinks, releasing
    /// slots). Reading times is not in it: concurrent `collect` callers share that.
    pub emitter_ns: u64,
    /// What a backend timed by activity records (CUPTI) emitted and lost: all 0 on an event
    /// backend.
    pub activity: ActivityStats,
    /// Calls of an error handler ([`Builder::on_error`](crate::Builder::on_error),
    /// [`CollectorThread::on_error`](crate::CollectorThread::on_error)) that panicked. The panic
    /// is caught: background collection goes on; the context's first one is logged as an
    /// error (`log`, target `gpu_event_pool`).
    pub error_handler_panics: usize,
}

impl Stats {
    /// A snapshot of `inner`'s statistics.
    pub(crate) fn of<B: Backend>(inner: &Inner<B>) -> Self {
        let p = inner.pool().counts();
        let c = inner.counters();
        let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let recorded = |field| c.recorded.sum(field).max(0) as usize;
        Stats {
            backend: inner.backend().name(),
            timing: inner.backend().timing(),
            capacity: p.capacity,
            max_capacity: p.max_capacity,
            pages: p.pages,
            free: p.free,
            in_magazines: p.in_magazines,
            threads_with_magazines: p.threads_with_magazines,
            owned: p.owned,
            submitted: p.submitted,
            in_use: p.owned + p.submitted,
            high_water: p.high_water,
            grows: p.grows,
            dropped_zones: get(&c.dropped_zones),
            lists_submitted: recorded(LISTS_SUBMITTED),
            lists_collected: get(&c.lists_collected),
            lists_failed: get(&c.lists_failed),
            lists_discarded: recorded(LISTS_DISCARDED),
            events_submitted: recorded(EVENTS_SUBMITTED),
            zones_emitted: get(&c.zones_emitted),
            lists_shifted: get(&c.lists_shifted),
            clock_discontinuities: get(&c.clock_discontinuities),
            lists_placed_alone: get(&c.lists_placed_alone),
            sink_failures: get(&c.sink_failures),
            sinks_stopped: get(&c.sinks_stopped),
            lanes_released: get(&c.lanes_released),
            lists_late: get(&c.lists_late),
            concurrent_lists: get(&c.concurrent_lists),
            emitter_ns: c.emitter_ns.load(Ordering::Relaxed),
            activity: ActivityStats {
                activities: get(&c.activities),
                empty_zones: get(&c.empty_zones),
                late: get(&c.activities_late),
                lists_partial: get(&c.lists_partial),
                losses: inner.backend().activity_source().map(|s| s.losses()).unwrap_or_default(),
            },
            error_handler_panics: get(&c.error_handler_panics),
        }
    }

    /// `capacity - (free + owned + submitted)`: 0 when every slot is accounted for.
    pub fn unaccounted(&self) -> i64 {
        self.capacity as i64 - (self.free + self.owned + self.submitted) as i64
    }
}

/// What a context timed by activity records emitted and lost ([`Stats::activity`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActivityStats {
    /// Work records (kernels, copies, memsets) emitted as zones: within their zone's list,
    /// or alone at depth 0 (work outside any zone, or on another stream than its zone's).
    pub activities: usize,
    /// Zones that ended with no work on their stream (nothing to time): not emitted.
    pub empty_zones: usize,
    /// Batches emitted after a later batch of their stream: the source held their records
    /// back (CUPTI hands a buffer over only once every record in it is complete). A Chrome
    /// trace shows them as they ran; Tracy may draw them out of place.
    pub late: usize,
    /// Lists emitted once the hold limit had passed without a record of every launch linked
    /// to their zones (a record the source dropped, a launch that makes none), with the work
    /// that arrived.
    pub lists_partial: usize,
    /// What the source lost: records dropped, buffers refused, records without times, links
    /// it could not keep.
    pub losses: ActivityLosses,
}
