//! A pool of GPU timing events, for tracing GPU work recorded by many threads: zones are
//! recorded with no lock, and a recording thread waits for another only in the few cases
//! that [`EventList`] lists.
//!
//! A rebuild of IREE's CUDA tracing context (one mutex around everything, a fixed pool of
//! 16128 events, `f32` timestamps since one base event) as:
//!
//! - a pool of timing events handed out by a tagged-index Treiber freelist
//!   (`slots/freelist.rs`), in pages created on demand, with a per-thread magazine of free slots in
//!   front of it (`slots/magazine/`) so that recording threads do not share a cache line;
//! - per-command-buffer [`EventList`]s that reserve slots in batches and record zones with
//!   no lock (`zone_next` joins adjacent zones with one event), taking a lock of their stream
//!   only at their first record there and at their submit or drop;
//! - an MPSC submission queue, drained by [`TracingContext::collect`]: any number of threads
//!   read times at once, one emits; zones of each stream reach the sinks in GPU order, no
//!   stream waits for another, nothing blocks on the GPU, and every collected slot goes back
//!   to the pool;
//! - timestamps chained within a list and placed from the nearest recent anchor, in `i64`
//!   nanoseconds;
//! - zones delivered to [`sink`]s: memory, results (each collected list's zones back to the
//!   application), statistics over the last frames ([`TracingContext::frame`]),
//!   Chrome/Perfetto JSON (with the pool's counters on its timeline, and, under feature
//!   `tracing`, a `tracing-subscriber` layer that writes the application's CPU spans into the
//!   same trace), Tracy (feature `tracy`); and, with feature `nvtx`, an NVTX range around
//!   each zone on the recording thread;
//! - with the default feature `enable` off, recording compiled out ([`ENABLED`]).
//!
//! The GPU is reached through the [`Backend`] trait: [`sim`] (a simulated GPU, the default),
//! `cuda` (feature `cuda`) or `vulkan` (feature `vulkan`). Every slot of the pool is in exactly one state: Free (on the
//! freelist or in a thread's magazine), Owned (by one list being recorded) or Submitted (in
//! the queue or held by a collector), so `free + owned + submitted == capacity` always
//! ([`Stats::unaccounted`] checks it).
//!
//! ```
//! use gpu_event_pool::{location, sim::SimBackend, sink::memory::MemorySink, TracingContext};
//! let sim = SimBackend::manual();
//! let stream = sim.stream();
//! let zones = MemorySink::new();
//! let ctx = TracingContext::builder(sim.clone()).sink(zones.clone()).build()?;
//!
//! let mut list = ctx.list();
//! {
//!     // Guards end their zones when dropped; a zone that cannot be recorded (pool
//!     // exhausted) is counted in the stats and the command buffer goes on recording.
//!     let mut command_buffer = list.zone(&stream, location!("command buffer"));
//!     for _ in 0..3 {
//!         let _dispatch = command_buffer.zone(&stream, location!("dispatch"));
//!         sim.launch(&stream, 1_000);
//!     }
//! }
//! ctx.submit(list)?;
//! ctx.flush()?;
//! assert_eq!(zones.zones().len(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// docs.rs (`--cfg docsrs`, nightly): "Available on crate feature ..." badges; the loom build's
// cfg is not the reader's concern.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(docsrs, doc(auto_cfg(hide(gpu_event_pool_loom))))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unsafe_op_in_unsafe_fn,
    unreachable_pub,
    rust_2018_idioms
)]

// The layers, lowest first (docs/design.md, "The layers"): each file imports only files of
// its own or a lower layer. Leaves: `sync`, `limits`, `location`, `launch`, `nvtx` (and `error`, which imports only
// the backend's error type); beside the layers,
// `backend` and `sink` (the traits and their implementations, which import only leaves and
// each other's traits); then `slots`, `shared`, `record`, `collect`, `context`, and `faces`
// (what one GPU API adds to a context: the only layer that names a backend's types).
pub mod backend;
mod collect;
mod context;
mod error;
mod faces;
pub mod launch;
mod limits;
pub mod location;
#[cfg(feature = "nvtx")]
#[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
pub mod nvtx;
mod record;
mod shared;
pub mod sink;
mod slots;
mod sync;

/// The one room for what the crate's own tests, loom models (loom-tests/) and benchmarks
/// (benches/) reach and a user does not: the freelist and the magazines, and the faults the
/// simulated GPU injects. Hidden from the documentation, not part of the API, and free to
/// change in any release.
#[doc(hidden)]
pub mod testing {
    pub use crate::backend::sim::faults::{SimActivityFaults, SimFaults};
    pub use crate::slots::{freelist, magazine};
}

/// The README's examples, compiled and run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Chrome guide's smallest example, run as a doctest.
#[cfg(all(doctest, feature = "enable"))]
#[doc = include_str!("../docs/chrome.md")]
pub struct ChromeGuideDoctests;

/// The examples of docs/watch.md (counters, frames, statistics), run as doctests.
#[cfg(all(doctest, feature = "enable"))]
#[doc = include_str!("../docs/watch.md")]
pub struct WatchGuideDoctests;

/// The CUPTI guide's example, compiled as a doctest.
#[cfg(all(doctest, feature = "cupti"))]
#[doc = include_str!("../docs/cupti.md")]
pub struct CuptiGuideDoctests;

/// The CUDA guide's examples, compiled as doctests (they need a GPU to run).
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../docs/cuda.md")]
pub struct CudaGuideDoctests;

/// The Tracy guide's example, run as a doctest (the client on, no profiler connected).
#[cfg(all(doctest, feature = "tracy"))]
#[doc = include_str!("../docs/tracy.md")]
pub struct TracyGuideDoctests;

/// The NVTX guide's example, run as a doctest.
#[cfg(all(doctest, feature = "nvtx"))]
#[doc = include_str!("../docs/nvtx.md")]
pub struct NvtxGuideDoctests;

/// The Perfetto guide's examples, run as doctests.
#[cfg(all(doctest, feature = "perfetto"))]
#[doc = include_str!("../docs/perfetto.md")]
pub struct PerfettoGuideDoctests;

/// The Vulkan guide's example, compiled as a doctest.
#[cfg(all(doctest, feature = "vulkan"))]
#[doc = include_str!("../docs/vulkan.md")]
pub struct VulkanGuideDoctests;

/// The wgpu guide's examples, compiled as doctests.
#[cfg(all(doctest, feature = "wgpu"))]
#[doc = include_str!("../docs/wgpu.md")]
pub struct WgpuGuideDoctests;

#[cfg(feature = "cupti")]
#[cfg_attr(docsrs, doc(cfg(feature = "cupti")))]
pub use backend::cupti::{
    ActivityKind, ActivityRecord, ActivityTracer, CuptiBackend, CuptiConfig, CuptiError, Losses, TracerConfig,
};
pub use backend::{sim, ActivityLosses, Backend, BackendError, Elapsed, ErrorKind, Lane, Mark, Placement};
pub use collect::{CollectError, CollectReport, Collected};
#[cfg(not(gpu_event_pool_loom))]
pub use context::CollectorThread;
pub use context::{ActivityStats, Builder, Stats, TracingContext};
pub use error::{ConfigError, Error, TimeError};
#[cfg(feature = "vulkan")]
#[cfg_attr(docsrs, doc(cfg(feature = "vulkan")))]
pub use faces::QueueSubmitError;
#[cfg(feature = "wgpu")]
#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
pub use faces::{PassScope, PassZone, Refused, Scope, Timestamped, WgpuList, WgpuSubmitError};
pub use launch::Launch;
pub use location::{ArgValue, DynamicLocation, Location, SourceLocation, Verbosity};
pub use record::{EventList, RecordError, SubmitError, ZoneGuard, ENABLED};
pub use shared::config::Config;
