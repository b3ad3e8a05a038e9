//! Tracy GPU context ids, taken from the top so that they never meet `tracy-client`'s, and the
//! kind of GPU a context shows.

use std::sync::atomic::{AtomicU16, Ordering};

/// Tracy's largest GPU context id, plus one: ids are `0..MAX_CONTEXTS`.
pub const MAX_CONTEXTS: u16 = 255;

/// The kind of GPU a Tracy context shows (Tracy's `GpuContextType`, `TracyQueue.hpp`; the
/// values are part of Tracy's protocol and stable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TracyGpuKind {
    /// Vulkan.
    Vulkan = 2,
    /// Any other GPU API (here: the simulated backend).
    Custom = 7,
    /// CUDA.
    Cuda = 8,
}

impl TracyGpuKind {
    /// The kind for a backend name ([`ContextInfo::backend`](crate::sink::ContextInfo::backend)).
    pub fn for_backend(backend: &str) -> Self {
        match backend {
            "cuda" | "cupti" => Self::Cuda,
            "vulkan" => Self::Vulkan,
            _ => Self::Custom,
        }
    }
}

/// Hands out Tracy GPU context ids from the top (254, 253, ... 0), so that they never meet the
/// ids `tracy-client` hands out from 0 upward until the process has made 255 contexts in all.
/// Ids are never given back: Tracy cannot forget a context.
#[derive(Debug)]
pub struct TracyContextIds {
    // A process-wide counter outside the pool's modelled concurrency: plain std atomics.
    taken: AtomicU16,
}

impl TracyContextIds {
    /// No id taken yet.
    pub const fn new() -> Self {
        Self { taken: AtomicU16::new(0) }
    }

    /// The next id, or `None` once all 255 are taken.
    pub fn take(&self) -> Option<u8> {
        let taken = self
            .taken
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < MAX_CONTEXTS).then_some(n + 1));
        // 254 - n for n < 255 fits a u8.
        taken.ok().map(|n| (MAX_CONTEXTS - 1 - n) as u8)
    }
}

impl Default for TracyContextIds {
    fn default() -> Self {
        Self::new()
    }
}
