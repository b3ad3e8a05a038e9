//! What a `collect` or `flush` did, and how it failed.

use crate::error::Error;

/// What one `collect` or `flush` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectReport {
    /// Lists collected (zones emitted, slots released), failed ones included.
    pub lists: usize,
    /// Zones delivered to the sinks.
    pub zones: usize,
    /// Lists whose times could not be read (zones dropped, slots released).
    pub failed_lists: usize,
    /// Submitted lists this call left waiting: for the GPU, or for an earlier list of their
    /// lane that is not submitted or not complete yet.
    pub pending_lists: usize,
    /// Lists whose times this call read (concurrent callers share the reading).
    pub read_lists: usize,
    /// Failures met by this call (backend reads, sinks); the first is the call's error.
    pub errors: usize,
}

/// The result of [`TracingContext::collect`](crate::TracingContext::collect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collected {
    /// This call collected; see the report.
    Done(CollectReport),
    /// Another thread is collecting: this call returned at once and did nothing.
    Busy,
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
    pub report: CollectReport,
}

impl CollectReport {
    /// Adds what a later round of the same call did (`pending_lists`: the later round's).
    pub(crate) fn absorb(&mut self, later: CollectReport) {
        self.lists += later.lists;
        self.zones += later.zones;
        self.failed_lists += later.failed_lists;
        self.pending_lists = later.pending_lists;
        self.read_lists += later.read_lists;
        self.errors += later.errors;
    }
}
