//! A queue as a lane of the trace: the order in which command buffers are submitted through
//! it is the order their lists are emitted in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The lane key of the backend's own clock stream (its anchors).
pub(super) const CLOCK_LANE: u64 = 0;

/// Lane keys handed out by [`WgpuQueue::new`] and [`WgpuQueue::new_lane`].
static NEXT_LANE: AtomicU64 = AtomicU64::new(CLOCK_LANE + 1);

/// A `wgpu::Queue` and one lane of the trace: lists submitted through it
/// (`TracingContext::queue_submit`) are ordered as their command buffers are on the queue.
///
/// Cheap to clone: clones are the same lane.
#[derive(Debug, Clone)]
pub struct WgpuQueue {
    queue: wgpu::Queue,
    lock: Arc<Mutex<()>>,
    lane: u64,
}

impl WgpuQueue {
    /// A new lane on `queue`.
    pub fn new(queue: &wgpu::Queue) -> Self {
        Self {
            queue: queue.clone(),
            lock: Arc::new(Mutex::new(())),
            lane: NEXT_LANE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Another lane on the same queue: its own order and its own track in the sinks, the
    /// submission lock shared.
    pub fn new_lane(&self) -> Self {
        Self { lane: NEXT_LANE.fetch_add(1, Ordering::Relaxed), ..self.clone() }
    }

    /// The queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The lane's key ([`Lane::Stream`](crate::Lane::Stream) of its zones).
    pub fn lane_key(&self) -> u64 {
        self.lane
    }

    /// Submits `command_buffers` to the queue under the lane's lock, then calls `then` still
    /// holding it (`TracingContext::queue_submit` submits the lists there, in the same order).
    pub(crate) fn submit_then(
        &self,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        then: impl FnOnce(),
    ) -> wgpu::SubmissionIndex {
        let _order = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let index = self.queue.submit(command_buffers);
        then();
        index
    }

    /// The lane's lock, for an application that submits on its own
    /// (`queue.submit`, then `TracingContext::submit` of the lists, both under it).
    pub fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
