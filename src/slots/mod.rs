//! The slots: timing events in pages, the freelist and per-thread magazines that hand them
//! out, the per-thread counters, and the submission queue threaded through them.
//!
//! This layer moves slot indices between states and counts them; it knows nothing of lists,
//! zones, lanes or sinks (a slot's record is an opaque `R` to it) and never calls the backend
//! except to create a page's events.

pub mod freelist;
pub(crate) mod head;
pub mod magazine;
pub(crate) mod pool;
pub(crate) mod runs;
pub(crate) mod submit;
pub(crate) mod tally;

/// The loom models of this folder's list hand-offs (`loom-tests/head.rs`): built into the
/// crate because only slots/ can make the handles they check.
#[cfg(all(test, gpu_event_pool_loom))]
#[path = "../../loom-tests/head.rs"]
mod loom_head;
