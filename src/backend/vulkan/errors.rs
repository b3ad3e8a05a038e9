//! The error codes of the Vulkan backend and the helper that turns a `vk::Result` into a
//! [`BackendError`]: a leaf, imported by every other file of `vulkan/` and importing none.

use crate::backend::BackendError;
use ash::vk;

/// The `code` of the error [`VulkanDevice::open`](super::VulkanDevice::open) returns when the
/// Vulkan loader cannot be opened (the message follows it).
pub const NO_LOADER: &str = "NO_VULKAN_LOADER";
/// The `code` of the error [`VulkanDevice::open`](super::VulkanDevice::open) returns when no
/// Vulkan 1.2 device with a compute queue that writes timestamps (and `hostQueryReset`)
/// exists.
pub const NO_DEVICE: &str = "NO_VULKAN_DEVICE";
/// The `code` of a [`Backend::wait`](crate::Backend::wait) that gave up after
/// [`VulkanBackend::wait_timeout`](super::VulkanBackend::wait_timeout) (a list submitted to
/// the context whose command buffer never reached the GPU).
pub const WAIT_TIMEOUT: &str = "WAIT_TIMEOUT";
/// The `code` of [`VulkanBackend::with_anchors`](super::VulkanBackend::with_anchors) asked
/// for calibrated anchors on a device without the extension.
pub const NOT_CALIBRATED: &str = "NO_CALIBRATED_TIMESTAMPS";

pub(super) fn vk_error(call: &'static str) -> impl Fn(vk::Result) -> BackendError {
    // `vk::Result`'s Debug is the driver's code ("ERROR_DEVICE_LOST").
    move |result| BackendError::new(call, format!("{result:?}"))
}

/// Whether `error` (from [`VulkanDevice::open`](super::VulkanDevice::open)) means this
/// machine has no usable Vulkan driver: tests and benchmarks skip on it; any other error is a
/// real failure.
pub fn is_no_device(error: &BackendError) -> bool {
    error.code.starts_with(NO_LOADER)
        || error.code.starts_with(NO_DEVICE)
        || error.code == "ERROR_INCOMPATIBLE_DRIVER"
        || error.code == "ERROR_INITIALIZATION_FAILED"
}
