//! Recording: [`EventList`], one command buffer's zones, written by one thread with no lock.
//!
//! A list takes slots from the pool (through its thread's magazine), records events with the
//! backend, writes what each event means into its slot's record, takes its place on its home
//! lane, and at `submit` hands its events to the shared submission queue. It never reads a
//! time and never calls a sink: that is `collect`'s work.

mod error;
mod guard;
mod list;

pub use error::RecordError;

/// Whether recording is compiled in (the default feature `enable`). Without it, every
/// recording method returns at once, recording nothing: a branch on this constant, which the
/// compiler removes with everything after it (docs/watch.md, "Compiled out").
pub const ENABLED: bool = cfg!(feature = "enable");
pub use guard::ZoneGuard;
pub use list::{EventList, SubmitError};
