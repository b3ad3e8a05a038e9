//! Submitting command buffers and their lists in one order (feature `vulkan`): what its
//! `queue_submit` checks before submitting anything (wgpu's lists check more: `wgpu/mod.rs`).

use crate::backend::{Backend, BackendError};
use crate::context::TracingContext;
use crate::record::EventList;

/// Why `TracingContext::queue_submit` submitted nothing, with the lists handed back (except
/// when the queue refused the work: then the lists are dropped, their slots released, nothing
/// emitted).
#[derive(Debug, thiserror::Error)]
pub enum QueueSubmitError<B: Backend + std::fmt::Debug> {
    /// A list still has open zones: nothing was submitted.
    #[error("list {index} has {open} open zones: nothing was submitted")]
    OpenZones {
        /// Which list.
        index: usize,
        /// How many zones it has open.
        open: usize,
        /// Every list, handed back.
        lists: Vec<EventList<B>>,
    },
    /// A list belongs to another tracing context: nothing was submitted.
    #[error("list {index} belongs to another tracing context: nothing was submitted")]
    WrongContext {
        /// Which list.
        index: usize,
        /// Every list, handed back.
        lists: Vec<EventList<B>>,
    },
    /// The queue refused the work (Vulkan's `vkQueueSubmit` failed): the lists were dropped
    /// (their zones are not emitted).
    #[error(transparent)]
    Queue(#[from] BackendError),
}

impl<B: Backend + std::fmt::Debug> TracingContext<B> {
    /// `lists`, if every one can be submitted to this context (its own, no open zone), so
    /// that either everything is submitted or nothing is.
    pub(super) fn submittable(
        &self,
        lists: Vec<EventList<B>>,
    ) -> Result<Vec<EventList<B>>, QueueSubmitError<B>> {
        for (index, list) in lists.iter().enumerate() {
            if !self.owns(list) {
                return Err(QueueSubmitError::WrongContext { index, lists });
            }
            if list.open_zones() > 0 {
                return Err(QueueSubmitError::OpenZones { index, open: list.open_zones(), lists });
            }
        }
        Ok(lists)
    }
}
