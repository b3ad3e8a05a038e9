//! wgpu timestamp queries (feature `wgpu`, wgpu 30). `docs/wgpu.md` is the user's guide; this
//! is how it works.
//!
//! | [`Backend`] call | wgpu                                                                  |
//! | ---------------- | --------------------------------------------------------------------- |
//! | `create_event`   | a [`TimestampEvent`]: a cell the event's ticks are stamped into (no query of its own) |
//! | `record_mark`    | the next query of the stream's current chunk (a query set of 128, from the pool, grown on demand); its owner, a `WgpuList`, writes it with `CommandEncoder::write_timestamp`, a pass's `write_timestamp`, or a pass's `timestamp_writes` ([`WgpuStream`]) |
//! | `record_anchor`  | a one-timestamp submission to the queue                               |
//! | `elapsed`        | the two events' stamped ticks, exact nanoseconds (`Queue::get_timestamp_period`), or `None` while a readback is pending |
//! | `is_complete`    | stamped, after a pump                                                 |
//! | `wait`           | pumps with sleeps, up to 10 s                                         |
//! | `host_now_ns`    | `Instant` since the backend was made                                  |
//!
//! # Readback: never waiting
//!
//! `WgpuList::resolve` resolves each chunk its stream used (`resolve_query_set` of its used
//! queries, a copy to a mappable buffer) and asks wgpu to map that buffer once the command
//! buffer is submitted (`map_buffer_on_submit`); the chunk's ticket goes on a lock-free
//! queue. Collectors pump: `device.poll(PollType::Poll)` (never `Wait`), then each mapped
//! chunk's ticks are stamped into its events and the chunk goes back to the pool. A readback
//! that never comes (list dropped unresolved, command buffer dropped unsubmitted, mapping
//! failed, held past [`WgpuBackend::set_readback_limit`]) stamps its events lost: their lists
//! fail, counted, and their lanes move on. The collector's own anchors are never let go: the
//! backend submits them itself, so they come; one past the limit is counted
//! ([`WgpuBackend::anchors_late`]), never reported as the application's loss.
//!
//! # Order: submission
//!
//! A queue runs command buffers in submission order, so [`Backend::PLACEMENT`] is
//! [`Placement::Submit`]: `TracingContext::queue_submit` submits the command buffers and the
//! lists under the lane's lock ([`WgpuQueue`]).
//!
//! [`Backend`]: crate::Backend
//! [`Backend::PLACEMENT`]: crate::Backend::PLACEMENT
//! [`Placement::Submit`]: crate::Placement::Submit

/// The `wgpu` this backend is built on.
pub use ::wgpu;

// The folder, each file importing only those listed before it: `errors.rs` (the codes) and
// `event.rs` (the events and their stamps) are leaves; `queries.rs` the query chunks and the
// device's timestamp features; `readback.rs` the pool of chunks, their tickets and the pump;
// `queue.rs` lanes; `stream.rs` the stream (a list's queries); `frames.rs` the lists' scopes
// and their frames (a list's readbacks say whether its times come); `backend.rs` the
// `WgpuBackend`. It never touches slots, lists or the collector: the lists and their scopes,
// `queue_submit` and the frames need lists and the context, so they live above, in
// `faces/wgpu/`.
mod backend;
mod errors;
mod event;
mod frames;
mod queries;
mod queue;
mod readback;
mod stream;

pub use backend::WgpuBackend;
pub use errors::{
    FOREIGN_EVENT, LOST, NO_PASS_TIMESTAMPS, NO_SITE, NO_TIMESTAMPS, PASS_OPEN, WAIT_TIMEOUT,
    ZERO_READBACK_LIMIT,
};
pub use event::TimestampEvent;
pub(crate) use frames::{FrameLog, ScopeShape};
pub use frames::{FrameResult, ScopeResult, WgpuFrames, WgpuFramesSink};
pub use queries::Timestamps;
pub use queue::WgpuQueue;
pub use stream::WgpuStream;
pub(crate) use stream::{write_on_encoder, Query, Site};
