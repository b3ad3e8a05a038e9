//! A simulated GPU: streams that run simulated kernels asynchronously, timing events, and
//! graphs, with no GPU at all.
//!
//! Each stream keeps the time its queued work finishes (`busy_until`). Launching a kernel of
//! `d` ns starts it at `max(now, busy_until)` and moves `busy_until` past it; recording an
//! event stamps it with `max(now, busy_until)`. An event is complete once the clock passes
//! its stamp, so events really are incomplete for a while, exactly as on a GPU, without any
//! background thread.
//!
//! Two clocks:
//! - [`SimBackend::manual`]: time moves only when a test calls [`SimBackend::advance`] (or
//!   waits on an event, which moves the clock to it): deterministic stepping. Its host clock
//!   (`host_now_ns`) reads the simulated time (the crate's own tests can make it drift).
//! - [`SimBackend::realtime`]: time is the host's monotonic clock.
//!
//! The crate's own tests inject failures, panics, late records and a drifting host clock
//! through a hidden trait (`faults.rs`), not part of the API.
//!
//! Graphs follow the CUDA backend's rule (feature `cuda`): a graph's zones time its FIRST
//! launch only. Reading a graph zone's event before that launch fails with code
//! [`ErrorKind::GraphNotLaunched`](crate::ErrorKind::GraphNotLaunched) (the collector drops that list's zones, counts them, and goes on);
//! later launches run the graph's kernels but never stamp an event again, and an event that
//! was recorded elsewhere since it was added to a graph is no longer stamped by that graph.
//! So a relaunched graph can never rewrite the time of an event another list owns now.
//!
//! Unlike CUDA, whose event timestamps have a resolution of about half a microsecond, the
//! simulation stamps events to the nanosecond.
//!
//! [`SimActivities`] is the same GPU timed by activity records, as CUPTI times CUDA: each
//! launch a work record, tied to the zone open on the launching thread.

mod activities;
pub(crate) mod faults;
mod gpu;

pub use activities::SimActivities;
pub use gpu::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream, GRAPH_NOT_LAUNCHED};
