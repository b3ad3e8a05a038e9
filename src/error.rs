//! The crate's top-level error, wrapping the errors of the layers that fail (each lives with
//! what fails: [`BackendError`] with the backend trait, [`RecordError`](crate::RecordError) and
//! [`SubmitError`](crate::SubmitError) with the list, [`CollectError`](crate::CollectError)
//! with collection), and the configuration error. No error path panics; every error that
//! takes ownership of a list hands it back.

use crate::backend::BackendError;

/// A configuration the pool cannot be built from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `initial_capacity` or `max_capacity` is zero.
    #[error("capacities must be at least 1 (initial {initial}, max {max})")]
    ZeroCapacity {
        /// The initial capacity asked for.
        initial: u32,
        /// The maximum capacity asked for.
        max: u32,
    },
    /// `initial_capacity` is above `max_capacity`.
    #[error("initial capacity {initial} is above the maximum {max}")]
    InvertedCapacity {
        /// The initial capacity asked for.
        initial: u32,
        /// The maximum capacity asked for.
        max: u32,
    },
    /// `max_capacity` is below what one zone needs: its begin event, and a slot kept for its
    /// end.
    #[error("max capacity {max} cannot hold one zone (its begin and a slot kept for its end): use at least {least}")]
    TooSmall {
        /// The maximum capacity asked for.
        max: u32,
        /// The least maximum capacity that records a zone.
        least: u32,
    },
    /// `max_capacity` cannot be reached with the page layout (or does not fit slot indices).
    #[error("max capacity {max} is too large: at most {limit} slots from an initial page of {initial}")]
    TooLarge {
        /// The initial capacity asked for (rounded up to a power of two).
        initial: u32,
        /// The maximum capacity asked for.
        max: u32,
        /// The largest maximum this initial capacity allows.
        limit: u64,
    },
    /// `initial_capacity` cannot be rounded up to a power of two in 32 bits.
    #[error("initial capacity {initial} is too large: it is rounded up to a power of two, at most 2^31")]
    InitialTooLarge {
        /// The initial capacity asked for.
        initial: u32,
    },
    /// The reservation batch is zero.
    #[error("reservation batch must be at least 1")]
    ZeroBatch,
}

/// GPU times read for one list that no GPU can produce (a backend or driver fault, or a zone
/// that began on one stream and ended on another that got there first). The list fails like
/// one whose times cannot be read: its zones are dropped (counted in `Stats::dropped_zones`),
/// the list is counted in `Stats::lists_failed`, its slots are released, and later lists are
/// still collected. An anchor of the collector's own whose time cannot be true
/// ([`TimeError::AnchorStep`]) is dropped the same way, and a new one taken.
///
/// Only a zone's own two events are compared across streams: a list that records on several
/// streams may go back in time from an event on one stream to the next on another
/// (docs/design.md, section 8).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// A zone ends before it begins.
    #[error(
        "list {list_id}: zone {zone} ends {by_ns} ns before it begins (begun on {begin_lane:?}, \
         ended on {end_lane:?})"
    )]
    EndsBeforeBegin {
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// The zone's name and source location (`name at file:line`).
        zone: String,
        /// Where its begin was recorded.
        begin_lane: crate::backend::Lane,
        /// Where its end was recorded.
        end_lane: crate::backend::Lane,
        /// How long before its begin it ends.
        by_ns: u64,
    },
    /// An event that ends a zone on a stream is earlier than an event the list recorded
    /// before it on that stream, with no event on another lane in between: a stream runs its
    /// events in order. Checked only on a backend whose lanes run events in the order they
    /// are recorded ([`Placement::FirstRecord`](crate::Placement::FirstRecord): CUDA, the
    /// simulation), and only for an end: a begin may come before the end recorded just
    /// before it where the backend writes begins early (Vulkan's top of the pipe), and a
    /// graph's nodes may run side by side.
    #[error("list {list_id}: GPU time goes back {by_ns} ns on {lane:?} at the list's event {event}, which ends a zone")]
    WentBack {
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// The stream.
        lane: crate::backend::Lane,
        /// The event's position in the list (0: its first event).
        event: usize,
        /// How far back it goes from the latest event before it.
        by_ns: u64,
    },
    /// A time of the list, summed from the steps between its events, is beyond what `i64`
    /// nanoseconds hold (about 292 years).
    #[error("list {list_id}: the time of its event {event} is out of range: the steps before it sum beyond i64 nanoseconds")]
    OutOfRange {
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// The event's position in the list (0: its first event).
        event: usize,
    },
    /// A time of the list is one the GPU cannot have run when the list was read: before the
    /// context's base event, or later than the collector's newest anchor plus the host time
    /// since it was recorded (at the fastest plausible drift, 0.1%, plus 1 ms). A read that
    /// is no distance gives one (Vulkan reads `i64::MAX` for a difference that does not fit);
    /// taken as a time, it would fix the GPU-to-host mapping up to there, for every later
    /// list (docs/design.md, section 8).
    #[error(
        "list {list_id}: its event {event} is at GPU time {gpu_ns} ns, which the GPU cannot have \
         run when the list was read ({earliest_ns} to {latest_ns} ns)"
    )]
    OutOfReach {
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// The event's position in the list (0: its first event).
        event: usize,
        /// Its GPU time (nanoseconds since the context's base event; an end of `i64` when the
        /// sum went beyond).
        gpu_ns: i64,
        /// The earliest GPU time the GPU can have run (the base event, less 1 ms).
        earliest_ns: i64,
        /// The latest GPU time the GPU can have run when the list was read.
        latest_ns: i64,
    },
    /// The step from the collector's newest anchor to the next one it recorded is one the GPU
    /// cannot have run: back in time (they run in order on one stream), or longer than the
    /// host time between recording the first and finding the second complete (at the
    /// fastest plausible drift, plus 1 ms). The anchor is dropped and a new one taken; no
    /// list is placed from it.
    #[error(
        "an anchor read {step_ns} ns after the one before, which the GPU cannot have run \
         ({earliest_ns} to {latest_ns} ns): the anchor is dropped"
    )]
    AnchorStep {
        /// The step read.
        step_ns: i64,
        /// The shortest step possible (a little below 0).
        earliest_ns: i64,
        /// The longest step possible.
        latest_ns: i64,
    },
}

/// Errors of context creation, collection and flushing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The backend failed. During `collect` the failing list's zones are dropped (and
    /// counted), its slots are released, and the lists after it are still processed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A list's GPU times cannot be true: during `collect` its zones are dropped (and
    /// counted), its slots are released, and the lists after it are still processed.
    #[error(transparent)]
    Time(#[from] TimeError),
    /// A sink failed to write.
    #[error("sink failed: {0}")]
    Sink(#[from] std::io::Error),
    /// A sink panicked. The panic was caught: the list's slots were released, the other sinks
    /// still got the batch, and later lists are still collected.
    #[error("sink panicked: {0}")]
    SinkPanicked(String),
    /// A list still being recorded held its lane longer than the hold limit
    /// ([`Config::hold_limit`](crate::Config::hold_limit)): the lists submitted after it on
    /// that lane were emitted without it. When it is submitted it is still emitted (and
    /// counted in `Stats::lists_late`), shown apart from its lane's in-order zones.
    #[error(
        "list {list_id} (first zone {location}) held lane {lane:?} for {held_for:?} without being \
         submitted; the lane moved on without it"
    )]
    LaneHeld {
        /// The lane (stream) it held.
        lane: crate::backend::Lane,
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// Its first zone's name and source location (`name at file:line`).
        location: String,
        /// How long it had held the lane.
        held_for: std::time::Duration,
    },
    /// `flush` was called from a sink of the same context (or the context's last handle was
    /// dropped there): the collect that calls the sink holds the context's emitter, so the
    /// flush would wait for itself. Nothing was done; flush after the collect returns.
    #[error("flush called from a sink of its own context, inside the collect that holds its emitter: it would wait for itself")]
    FlushFromSink,
    /// Collection in the background (the context's collector thread, a `CollectorThread`,
    /// or a recording thread collecting when the pool was exhausted) failed since the last
    /// `flush`: the first failure, and how many more there were. Each also went to the error
    /// handler when it happened ([`Builder::on_error`](crate::Builder::on_error)).
    #[error("background collection failed since the last flush: {first}{}", if *.more > 0 { format!(" (and {} more)", .more) } else { String::new() })]
    Background {
        /// The first failure.
        first: Box<Error>,
        /// How many failed after it.
        more: usize,
    },
    /// A list began on a stream before the list before it there had ended on the GPU: the
    /// two were recorded on the stream at once, so their events interleave and each list's
    /// zones may take in the other's work. One list records on a stream at a time. Nothing is
    /// dropped: both lists are emitted, in the order of their first events. Reported once
    /// per stream (every such list is counted in `Stats::concurrent_lists`); found by GPU
    /// times on the stream of each list's first zone, on backends whose streams run events
    /// in recording order (CUDA, the simulation; not Vulkan, whose lists are ordered at
    /// submission and whose commands may overlap).
    #[error(
        "list {list_id} (first zone {} at {}:{}) began on {lane:?} before list {earlier_list_id} \
         (first zone {} at {}:{}) ended there: they were recorded on the stream at once and \
         their events interleave on the GPU; record one list on a stream at a time",
        .location.name(), .location.file(), .location.line(),
        .earlier_location.name(), .earlier_location.file(), .earlier_location.line()
    )]
    ConcurrentLists {
        /// The stream.
        lane: crate::backend::Lane,
        /// The later list ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// Its first zone on the stream.
        location: crate::location::Location,
        /// The list whose end on the stream came after the later list began.
        earlier_list_id: u64,
        /// That list's first zone on the stream.
        earlier_location: crate::location::Location,
    },
}
