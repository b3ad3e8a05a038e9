//! The public face of one context: [`TracingContext`] (the handle), its [`Builder`], its
//! [`Stats`], and the [`CollectorThread`] that serves several contexts.
//!
//! This is the top layer: it puts the shared state (`shared/`) and its collection
//! (`collect/`) behind a cheap, cloneable handle, and hands out lists (`record/`). It holds no
//! algorithm of its own: recording is in `record/`, collection in `collect/`. It names no
//! backend: what one GPU API adds to a context (submitting its command buffers with their
//! lists) is in `faces/`, the layer above.

mod builder;
#[cfg(not(gpu_event_pool_loom))]
mod collector_thread;
mod handle;
mod stats;
#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;

pub use builder::Builder;
#[cfg(not(gpu_event_pool_loom))]
pub use collector_thread::CollectorThread;
pub use handle::TracingContext;
pub use stats::{ActivityStats, Stats};
