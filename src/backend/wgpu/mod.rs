//! wgpu timestamp queries (feature `wgpu`, wgpu 30). `docs/wgpu.md` is the user's guide; this
//! is how it works.
//!
//! | [`Backend`] call | wgpu                                                                  |
//! | ---------------- | --------------------------------------------------------------------- |
//! | `create_event`   | a [`TimestampEvent`]: a cell the event's ticks are stamped into (no query of its own) |
//! | `record_mark`    | the next query of the encoder's current chunk (a query set of 128, from the pool, grown on demand), written with `CommandEncoder::write_timestamp`, the open pass's `write_timestamp`, or a pass's `timestamp_writes` ([`WgpuEncoder`]) |
//! | `record_anchor`  | a one-timestamp submission to the queue                               |
//! | `elapsed`        | the two events' stamped ticks, exact nanoseconds (`Queue::get_timestamp_period`), or `None` while a readback is pending |
//! | `is_complete`    | stamped, after a pump                                                 |
//! | `wait`           | pumps with sleeps, up to 10 s                                         |
//! | `host_now_ns`    | `Instant` since the backend was made                                  |
//!
//! # Readback: never waiting
//!
//! [`WgpuEncoder::finish`] resolves each chunk it used (`resolve_query_set` of its used
//! queries, a copy to a mappable buffer) and asks wgpu to map that buffer once the command
//! buffer is submitted (`map_buffer_on_submit`); the chunk's ticket goes on a lock-free
//! queue. Collectors pump: `device.poll(PollType::Poll)` (never `Wait`), then each mapped
//! chunk's ticks are stamped into its events and the chunk goes back to the pool. A readback
//! that never comes (encoder dropped, command buffer dropped unsubmitted, mapping failed,
//! held past [`WgpuBackend::set_readback_limit`]) stamps its events lost: their lists fail,
//! counted, and their lanes move on.
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
// `queue.rs` lanes; `encoder.rs` the stream; `backend.rs` the `WgpuBackend`. It never touches
// slots, lists or the collector: the scoped passes and `queue_submit` need lists and the
// context, so they live above, in `context/wgpu.rs`.
mod backend;
mod encoder;
mod errors;
mod event;
mod queries;
mod queue;
mod readback;

pub use backend::WgpuBackend;
pub(crate) use encoder::OpenPass;
pub use encoder::WgpuEncoder;
pub use errors::{BUSY, FINISHED, LOST, NO_PASS, NO_PASS_TIMESTAMPS, NO_TIMESTAMPS, PASS_OPEN, WAIT_TIMEOUT};
pub use event::TimestampEvent;
pub use queries::Timestamps;
pub use queue::WgpuQueue;
