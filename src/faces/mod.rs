//! What one GPU API adds to a context, over the backend of that API: submitting its command
//! buffers and their lists in one order, naming its queues' lanes, and (wgpu) lists whose
//! zones are timed on any encoder or pass.
//!
//! The top layer: it imports `context/`, `record/` and the backend of its API, and nothing
//! imports it but the crate's root (which re-exports its types). `context/` names no backend.

#[cfg(feature = "vulkan")]
mod queue_submit;
#[cfg(feature = "vulkan")]
mod vulkan;
#[cfg(feature = "wgpu")]
mod wgpu;

#[cfg(feature = "vulkan")]
pub use queue_submit::QueueSubmitError;
#[cfg(feature = "wgpu")]
pub use wgpu::{PassScope, PassZone, Refused, Scope, Timestamped, WgpuList, WgpuSubmitError};
