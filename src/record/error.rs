//! [`RecordError`]: why a recording call did not record what was asked.

use crate::backend::BackendError;

/// Why a recording call (`zone_begin`, `zone_end`, `zone_next` and their graph forms) did not
/// record what was asked. Recording always leaves the list usable: a failed begin still opens
/// a (dropped) zone, so the matching `zone_end` stays balanced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// `zone_end` or `zone_next` with no zone open in this list.
    #[error("no zone is open in this list")]
    NoOpenZone,
    /// The pool is at its maximum and has no free slot for the zone's begin and the one kept
    /// for its end (a zone that begins can always end): the zone was dropped (and counted).
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
    /// The backend failed to create, record or add an event, or panicked doing it or reading
    /// its host clock for the call (the panic is caught: `call` names the backend method,
    /// `code` is `"panicked: "` and its message): the zone was dropped, its slot went back to
    /// the list's reservation.
    #[error("zone dropped: {0}")]
    Backend(#[from] BackendError),
    /// The context's last handle is gone (its sinks are finished): the zone was dropped and
    /// counted. A zone begun before still ends, so nesting stays balanced.
    #[error("the tracing context was dropped: zone dropped")]
    ContextClosed,
    /// The backend cannot record this kind of zone: graph zones on a backend timed by
    /// activity records (CUPTI reports every node of a graph launch as work of its own). The
    /// zone was dropped (and counted), and nesting stays balanced.
    #[error("{call} is not supported by the {backend} backend: zone dropped")]
    Unsupported {
        /// The recording call.
        call: &'static str,
        /// The backend's name.
        backend: &'static str,
    },
}
