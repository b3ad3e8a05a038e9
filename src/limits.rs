//! The crate's size limits, in one place. Under `--cfg gpu_event_pool_loom` they shrink so
//! that the loom models stay small enough to explore; the `sync` facade only mirrors std and
//! loom and holds none of them.

/// Largest number of pages a pool can have (page k holds `initial << k` slots).
pub(crate) const MAX_PAGES: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 32 };
/// Deepest zone nesting one list supports.
pub(crate) const MAX_DEPTH: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 32 };
/// Most slots one thread's magazine holds for one pool (`magazine::Magazines`).
pub(crate) const MAGAZINE_SLOTS: u32 = if cfg!(gpu_event_pool_loom) { 2 } else { 128 };
