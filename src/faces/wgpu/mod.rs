//! wgpu (feature `wgpu`): lists whose zones are timed on any encoder or pass
//! (`list.rs`, `scope.rs`), and submitting command buffers with their lists in one order
//! (here). `scope.rs` imports only the backend; `list.rs` imports `scope.rs`; this file both.

mod list;
mod scope;

pub use list::WgpuList;
pub use scope::{PassScope, PassZone, Scope, Timestamped};

use crate::backend::wgpu::{WgpuBackend, WgpuQueue};
use crate::context::TracingContext;

#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
impl TracingContext<WgpuBackend> {
    /// Names `queue`'s lane for the sinks (a Chrome track, a Tracy lane): the zones of every
    /// command buffer submitted through it are there.
    pub fn name_queue(&self, queue: &WgpuQueue, name: impl Into<String>) {
        self.name_lane(crate::backend::Lane::Stream(queue.lane_key()), name);
    }

    /// A new list for command buffers submitted through `queue`: its scopes time any encoder
    /// or pass ([`WgpuList::scope`]).
    pub fn wgpu_list(&self, queue: &WgpuQueue) -> WgpuList {
        WgpuList::new(self.list(), self.backend().stream(queue), self.backend())
    }

    /// Submits `command_buffers` to `queue` and then `lists` to this context, in that order,
    /// under the lane's lock: the lists take their places in the lane exactly as their
    /// command buffers are ordered on the queue (a wgpu list is placed at submission:
    /// [`Placement::Submit`](crate::Placement)). Checks every list first, so that either
    /// everything is submitted or nothing is: each must be this context's, made for `queue`,
    /// with no open zone and every query resolved ([`WgpuList::resolve`]) into one of the
    /// command buffers (or an earlier one).
    pub fn queue_submit(
        &self,
        queue: &WgpuQueue,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        lists: impl IntoIterator<Item = WgpuList>,
    ) -> Result<wgpu::SubmissionIndex, WgpuSubmitError> {
        let lists: Vec<WgpuList> = lists.into_iter().collect();
        if let Some((index, refused)) =
            lists.iter().enumerate().find_map(|(i, l)| Some((i, self.refusal(queue, l)?)))
        {
            return Err(WgpuSubmitError { index, refused, lists });
        }
        // Read before the submission: none of its work can have begun earlier.
        let before = crate::backend::host_now(self.backend()).ok();
        Ok(queue.submit_then(command_buffers, || {
            for list in lists {
                let (mut list, stream, frames) = list.into_parts();
                if let Some(before) = before {
                    list.submitted_after(before);
                }
                if let Some(frames) = frames {
                    frames.submitted(&list, &stream);
                }
                // Checked above: this context's, no open zone.
                let _ = self.submit(list);
            }
        }))
    }

    /// Why `list` cannot be submitted through `queue`, if it cannot.
    fn refusal(&self, queue: &WgpuQueue, list: &WgpuList) -> Option<Refused> {
        if !self.owns(list.event_list()) {
            Some(Refused::WrongContext)
        } else if list.lane_key() != queue.lane_key() {
            Some(Refused::WrongQueue)
        } else if list.open_zones() > 0 {
            Some(Refused::OpenZones(list.open_zones()))
        } else if list.unresolved() > 0 {
            Some(Refused::Unresolved(list.unresolved()))
        } else {
            None
        }
    }
}

/// Why [`queue_submit`](TracingContext::queue_submit) submitted nothing, with every list
/// handed back (as `wgpu-profiler`'s `end_frame` refuses unclosed and unresolved queries).
#[derive(Debug, thiserror::Error)]
#[error("list {index} of the submission: {refused}; nothing was submitted")]
#[non_exhaustive]
pub struct WgpuSubmitError {
    /// Which list.
    pub index: usize,
    /// What is wrong with it.
    pub refused: Refused,
    /// Every list, handed back unchanged.
    pub lists: Vec<WgpuList>,
}

/// What is wrong with a list handed to `queue_submit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// It has open zones: end them first.
    #[error("{0} open zone(s)")]
    OpenZones(usize),
    /// It has queries not resolved into any command buffer: [`WgpuList::resolve`] first.
    #[error("{0} unresolved quer(ies)")]
    Unresolved(u32),
    /// It belongs to another tracing context.
    #[error("it belongs to another tracing context")]
    WrongContext,
    /// It was made for another queue (lane): its zones would be ordered on that one.
    #[error("it was made for another queue")]
    WrongQueue,
}
