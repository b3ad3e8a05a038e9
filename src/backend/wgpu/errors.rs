//! The backend's failure codes (the `code` of a [`BackendError`](crate::BackendError)), kept
//! under their old names: their strings are in `backend/codes.rs`, and
//! [`ErrorKind`](crate::backend::ErrorKind) is the API (hidden here). Leaf of `wgpu/`.

use crate::backend::codes;

#[doc(hidden)]
pub const NO_TIMESTAMPS: &str = codes::WGPU_NO_TIMESTAMPS;
#[doc(hidden)]
pub const NO_PASS_TIMESTAMPS: &str = codes::WGPU_NO_PASS_TIMESTAMPS;
#[doc(hidden)]
pub const ZERO_READBACK_LIMIT: &str = codes::WGPU_ZERO_READBACK_LIMIT;
#[doc(hidden)]
pub const LOST: &str = codes::WGPU_LOST;
#[doc(hidden)]
pub const NO_SITE: &str = codes::WGPU_NO_SITE;
#[doc(hidden)]
pub const PASS_OPEN: &str = codes::WGPU_PASS_OPEN;
#[doc(hidden)]
pub const FOREIGN_EVENT: &str = codes::WGPU_FOREIGN_EVENT;
#[doc(hidden)]
pub const WAIT_TIMEOUT: &str = codes::WGPU_WAIT_TIMEOUT;
