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
}
