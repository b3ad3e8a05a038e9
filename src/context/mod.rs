//! The public face of one context: [`TracingContext`] (the handle), its [`Builder`], its
//! [`Stats`], and the [`CollectorThread`] that serves several contexts.
//!
//! This is the top layer: it puts the shared state (`shared/`) and its collection
//! (`collect/`) behind a cheap, cloneable handle, and hands out lists (`record/`). It holds no
//! algorithm of its own: recording is in `record/`, collection in `collect/`.

mod builder;
#[cfg(not(gpu_event_pool_loom))]
mod collector_thread;
mod handle;
#[cfg(feature = "vulkan")]
mod queue_submit;
mod stats;
#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;
#[cfg(feature = "vulkan")]
mod vulkan;
#[cfg(feature = "wgpu")]
mod wgpu;

pub use builder::Builder;
#[cfg(not(gpu_event_pool_loom))]
pub use collector_thread::CollectorThread;
pub use handle::TracingContext;
#[cfg(feature = "vulkan")]
pub use queue_submit::QueueSubmitError;
pub use stats::{ActivityStats, Stats};
#[cfg(feature = "wgpu")]
pub use wgpu::{PassScope, PassZone, Refused, Scope, Timestamped, WgpuList, WgpuSubmitError};
