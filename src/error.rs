//! Typed errors. No error path panics; every error that takes ownership of a list hands it back.

use crate::backend::Backend;
use crate::list::EventList;

/// A failure reported by the GPU backend, with the call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {code}")]
pub struct BackendError {
    /// The backend call that failed (`cuEventRecord`, `sim::record`, ...).
    pub call: &'static str,
    /// The backend's name for the failure (for CUDA, the `CUresult` name).
    pub code: String,
}

impl BackendError {
    /// Makes an error for `call` with the backend's failure name.
    pub fn new(call: &'static str, code: impl Into<String>) -> Self {
        Self { call, code: code.into() }
    }
}

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

/// Why a recording call (`zone_begin`, `zone_end`, `zone_next` and their graph forms) did not
/// record what was asked. Recording always leaves the list usable: a failed begin still opens
/// a (dropped) zone, so the matching `zone_end` stays balanced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// `zone_end` or `zone_next` with no zone open in this list.
    #[error("no zone is open in this list")]
    NoOpenZone,
    /// The pool is at its maximum and has no free slot: the zone was dropped (and counted).
    #[error("event pool exhausted at its maximum capacity of {capacity}: zone dropped")]
    PoolExhausted {
        /// The pool's maximum capacity.
        capacity: u32,
    },
    /// Zones nest deeper than the list supports.
    #[error("zones nested deeper than {max_depth}: zone dropped")]
    TooDeep {
        /// The deepest nesting supported.
        max_depth: usize,
    },
    /// The backend failed to create, record or add an event: the zone was dropped, its slot
    /// went back to the list's reservation.
    #[error("zone dropped: {0}")]
    Backend(#[from] BackendError),
}

/// Why `submit` refused a list. The list is handed back unchanged.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError<B: Backend> {
    /// The list still has open zones: end them first.
    #[error("list has {open} open zone(s): end them before submitting")]
    OpenZones {
        /// How many zones are open.
        open: usize,
        /// The list, unchanged (boxed: it keeps the error small).
        list: Box<EventList<B>>,
    },
    /// The list belongs to another tracing context.
    #[error("list belongs to another tracing context")]
    WrongContext {
        /// The list, unchanged (boxed: it keeps the error small).
        list: Box<EventList<B>>,
    },
}

impl<B: Backend> SubmitError<B> {
    /// Takes the list back out of the error.
    pub fn into_list(self) -> EventList<B> {
        match self {
            Self::OpenZones { list, .. } | Self::WrongContext { list } => *list,
        }
    }
}

impl<B: Backend> std::fmt::Debug for SubmitError<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OpenZones { open, list } => {
                f.debug_struct("OpenZones").field("open", open).field("list", &list.id()).finish()
            }
            Self::WrongContext { list } => f.debug_struct("WrongContext").field("list", &list.id()).finish(),
        }
    }
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
}

/// A `collect` or `flush` that met a failure. It still did all it could: `report` says
/// what it collected, and `error` is the first failure (`report.errors` counts them all).
/// A failing list's zones are dropped and counted, its slots released; other lists go on.
#[derive(Debug, thiserror::Error)]
#[error("{error} ({} list(s) collected, {} failure(s) in this call)", report.lists, report.errors)]
pub struct CollectError {
    /// The first failure.
    #[source]
    pub error: Error,
    /// What the call collected all the same.
    pub report: crate::collector::CollectReport,
}
