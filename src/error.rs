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
    /// The list's own host reads cannot hold its GPU times: every event of a list runs after
    /// the host time read before its first record and before the host time read once it was
    /// found complete, so its GPU times span at most that host time, at the largest rate by
    /// which the two clocks can differ (500 ppm, docs/design.md, section 8). A read that is no
    /// distance gives one (Vulkan reads `i64::MAX` for a difference that does not fit), and so
    /// does a list over which the host clock stopped (a suspend) while the GPU ran. Nothing
    /// else about the clocks fails a list: a list whose times do not fit what the collector
    /// knew of the clocks is placed from its own reads.
    #[error(
        "list {list_id}: its GPU times span {gpu_span_ns} ns, more than the {host_span_ns} ns of host \
         time between its first record and its read allow"
    )]
    BeyondHostTime {
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// From its earliest GPU time to its latest (nanoseconds; saturated at `u64::MAX`).
        gpu_span_ns: u64,
        /// The host time from just before its first record to just after it was found
        /// complete.
        host_span_ns: i64,
    },
    /// Two reads of where the list's first event lies on the context's timeline (from an
    /// anchor) disagree, and neither fits the host times read around that anchor and the
    /// list (a read that is no distance, twice).
    #[error("list {list_id}: two reads of its place on the timeline disagree ({first_ns} and {second_ns} ns) and neither fits the host times read around it")]
    PlacementDisagrees {
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// The GPU time the first read gave its first event.
        first_ns: i64,
        /// The GPU time the second read gave it.
        second_ns: i64,
    },
    /// The list's first event reads (twice) as before an anchor that the collector had seen
    /// complete before the list's first record, or before the context's base event: the GPU's
    /// counter does not go back, so the read is no distance.

    #[error("list {list_id}: it reads {by_ns} ns before an anchor that was complete before it began")]
    BeforeAnchor {
        /// The list's id ([`EventList::id`](crate::EventList::id)).
        list_id: u64,
        /// How far before the anchor its earliest event reads.
        by_ns: u64,
    },
    /// The step from the collector's newest anchor to the next one it recorded is no

    /// distance: back in time (they run in order on one stream, each recorded once the one
    /// before was complete), or beyond `i64` nanoseconds. The anchor is dropped and a new one
    /// taken; no list is placed from it.
    #[error("an anchor read {step_ns} ns after the one before, which is no distance the GPU can have run: the anchor is dropped")]
    AnchorStep {
        /// The step read.
        step_ns: i64,
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
    /// The clocks' offset jumped: an anchor's host times fit no mapping of GPU time to host
    /// time that also fits the bounds before it (a suspend, a GPU counter that stopped, a
    /// host clock stepped or slewed faster than 500 ppm). Not a failure: a new clock segment
    /// begins at that anchor, every zone keeps coming with its bound, and the sinks mark it
    /// (`Sink::clock_discontinuity`). Reported once per discontinuity, counted in
    /// `Stats::clock_discontinuities`.
    #[error(
        "the clocks' offset jumped by {jump_ns} ns at GPU time {gpu_ns} ns (host time {host_ns} ns): \
         a new clock segment begins there"
    )]
    ClockDiscontinuity {
        /// The GPU time of the anchor that begins the new segment.
        gpu_ns: i64,
        /// Its host time, as the new segment places it.
        host_ns: i64,
        /// How far the host time of that GPU time moved from what the bounds before said (the
        /// middles of the two: positive when the host clock is later than they said).
        jump_ns: i64,
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
