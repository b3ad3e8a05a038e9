//! Vulkan timestamp queries through `ash` (feature `vulkan`). `docs/vulkan.md` is the user's
//! guide; this is how it works.
//!
//! The Vulkan loader is opened at run time (`ash`'s `loaded`), so the crate builds, and
//! [`VulkanDevice::open`] fails cleanly, where Vulkan is missing; `error.kind() == Some(ErrorKind::NoDevice)` ([`ErrorKind`](crate::ErrorKind)) tells that
//! failure apart from a real one.
//!
//! | [`Backend`] call   | Vulkan                                                              |
//! | ------------------ | ------------------------------------------------------------------- |
//! | `create_event`     | a query of a `VkQueryPool` of timestamps, pools made on demand as pages (64 queries, doubling up to 4096), reset from the host when made |
//! | `record_mark`      | `vkCmdWriteTimestamp` into the application's command buffer: a zone begin at `TOP_OF_PIPE`, an end (and a `zone_next`) at `BOTTOM_OF_PIPE` (the query is reset already) |
//! | `retire`           | `vkResetQueryPool` of the query (host, Vulkan 1.2), in the collector, when its collected list's slot goes back to the pool: off the recording path |
//! | `record_anchor`    | calibrated: `vkGetCalibratedTimestampsEXT` (device clock and `CLOCK_MONOTONIC` together); fallback: a one-command submission to queue 0 |
//! | `elapsed`          | `vkGetQueryPoolResults(TYPE_64, WITH_AVAILABILITY)`, never `WAIT`: exact nanoseconds, or `None` while unavailable |
//! | `is_complete`      | availability, as above                                              |
//! | `wait`             | availability polled with sleeps, up to [`VulkanBackend::wait_timeout`] |
//! | `host_now_ns`      | `Instant` since the backend was made (placed on `CLOCK_MONOTONIC` through calibrated timestamps, [`VulkanBackend::clock_origin_error_ns`]) |
//!
//! Ticks are masked to `timestampValidBits` and converted with `timestampPeriod` exactly
//! (`backend::ticks::TickScale`), so every time the collector reads is exact
//! ([`Elapsed::exact`](crate::Elapsed)): its rounding bounds are 0.
//!
//! # Order: submission, not recording
//!
//! On a Vulkan queue, work runs in the order command buffers are *submitted*, whatever order
//! they were recorded in. So this backend's [`Backend::PLACEMENT`] is [`Placement::Submit`]:
//! a list takes its place in its lane's order when it is submitted to the context, and the
//! application submits it beside its `vkQueueSubmit`, under the queue's lock:
//! `TracingContext::queue_submit` does both. A list still being recorded holds nothing back.
//!
//! # Overlap
//!
//! Commands without a barrier between them may run at once, so zones of one command buffer
//! (or of command buffers submitted one after the other) may overlap on the GPU, and a zone
//! begun after another ended may start before it. Times are reported as measured: the
//! collector never moves them (its order guard's tolerance is 0 for exact readings), and
//! every zone keeps the nesting it was recorded with. `docs/vulkan.md` says how each sink
//! shows overlapping zones.
//!
//! [`Backend`]: crate::Backend
//! [`Backend::PLACEMENT`]: crate::Backend::PLACEMENT
//! [`Placement::Submit`]: crate::Placement::Submit

/// The `ash` this backend is built on, for the application's own Vulkan calls.
pub use ash;

// The folder: the Vulkan backend, one file per idea, each importing only those listed before
// it. `errors.rs` holds the error codes and `vk_error` (a leaf); `handles.rs` what the crate
// holds of a device (`DeviceShared`); `queries.rs` the query pages and the
// `QueryWriter` (the device's reset and write functions, which the backend holds for the
// recording path); `queue.rs` the queues (lanes), command buffers (streams) and the anchor
// submitter; `device.rs` opens or wraps a device; `spin.rs` the spin shader; `backend.rs` the
// `VulkanBackend`. It never touches slots, lists or the collector: submitting a command
// buffer with its lists needs the context, so it lives above, in `faces/vulkan.rs`.
mod backend;
mod device;
mod errors;
mod handles;
mod queries;
mod queue;
mod spin;

pub use backend::{Anchors, CalibratedPair, VulkanBackend};
pub use device::{RawDevice, VulkanDevice};
pub use errors::{is_no_device, NOT_CALIBRATED, NO_DEVICE, NO_LOADER, WAIT_TIMEOUT};
pub use queries::TimestampQuery;
pub use queue::{Commands, VulkanQueue};
pub use spin::{SpinShader, NO_SHADER_CLOCK};
