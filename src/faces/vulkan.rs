//! Submitting Vulkan command buffers and their lists in one order (feature `vulkan`).

use super::queue_submit::QueueSubmitError;
use crate::backend::vulkan::ash::vk;
use crate::backend::vulkan::{VulkanBackend, VulkanQueue};
use crate::context::TracingContext;
use crate::record::EventList;

#[cfg_attr(docsrs, doc(cfg(feature = "vulkan")))]
impl TracingContext<VulkanBackend> {
    /// Names `queue`'s lane for the sinks (a Chrome track, a Tracy lane), as
    /// [`name_stream`](Self::name_stream) names a stream: the zones of every command buffer
    /// submitted to it are there. A lane made with [`VulkanQueue::new_lane`] is another lane,
    /// named on its own.
    pub fn name_queue(&self, queue: &VulkanQueue, name: impl Into<String>) {
        self.name_lane(crate::backend::Lane::Stream(queue.lane_key()), name);
    }

    /// Submits `submits` to `queue` and then `lists` to this context, in that order, under the
    /// queue's lock: the lists take their places in the queue's lane exactly as their command
    /// buffers are ordered on the queue (a Vulkan list is placed at submission:
    /// [`Placement::Submit`](crate::Placement)). Checks every list first, so that either
    /// everything is submitted or nothing is.
    ///
    /// # Safety
    ///
    /// `submits` and `fence` are valid for `vkQueueSubmit` on `queue`, and the command
    /// buffers they name hold the zones of `lists` (and of no other list).
    pub unsafe fn queue_submit(
        &self,
        queue: &VulkanQueue,
        submits: &[vk::SubmitInfo<'_>],
        lists: Vec<EventList<VulkanBackend>>,
        fence: vk::Fence,
    ) -> Result<(), QueueSubmitError<VulkanBackend>> {
        let lists = self.submittable(lists)?;
        // Read before the submission: none of its work can have begun earlier.
        let before = crate::backend::host_now(self.backend()).ok();
        // Safety: the caller's submit infos and fence, valid for this queue.
        unsafe {
            queue.submit_then(submits, fence, || {
                for mut list in lists {
                    if let Some(before) = before {
                        list.submitted_after(before);
                    }
                    // Checked above: owned by this context, no open zone.
                    let _ = self.submit(list);
                }
            })
        }?;
        Ok(())
    }
}
