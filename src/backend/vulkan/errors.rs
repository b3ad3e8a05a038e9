//! The error codes of the Vulkan backend (their strings in `backend/codes.rs`) and the helper
//! that turns a `vk::Result` into a [`BackendError`]: a leaf of `vulkan/`, imported by every
//! other file there and importing none of them.

use crate::backend::{codes, BackendError, ErrorKind};
use ash::vk;

// The backend's failure codes, kept under their old names (hidden: [`ErrorKind`] is the API).
#[doc(hidden)]
pub const NO_LOADER: &str = codes::VK_NO_LOADER;
#[doc(hidden)]
pub const NO_DEVICE: &str = codes::VK_NO_DEVICE;
#[doc(hidden)]
pub const WAIT_TIMEOUT: &str = codes::VK_WAIT_TIMEOUT;
#[doc(hidden)]
pub const NOT_CALIBRATED: &str = codes::VK_NOT_CALIBRATED;

pub(super) fn vk_error(call: &'static str) -> impl Fn(vk::Result) -> BackendError {
    // `vk::Result`'s Debug is the driver's code ("ERROR_DEVICE_LOST").
    move |result| BackendError::new(call, format!("{result:?}"))
}

/// Whether `error` means this machine has no usable Vulkan driver (hidden: the same as
/// `error.kind() == Some(ErrorKind::NoDevice)`).
#[doc(hidden)]
pub fn is_no_device(error: &BackendError) -> bool {
    error.kind() == Some(ErrorKind::NoDevice)
}
