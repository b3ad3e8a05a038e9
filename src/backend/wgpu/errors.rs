//! The backend's failure codes (the `code` of a [`BackendError`](crate::BackendError)). Leaf of
//! `wgpu/`.

/// A zone mark on a device without `Features::TIMESTAMP_QUERY`: nothing can time it. The
/// zone is dropped and counted ([`WgpuBackend::untimed`](super::WgpuBackend::untimed)).
pub const NO_TIMESTAMPS: &str = "the device has no TIMESTAMP_QUERY";
/// A zone mark inside a pass on a device without `Features::TIMESTAMP_QUERY_INSIDE_PASSES`:
/// the pass's own zone is timed (its `timestamp_writes`), the zones inside it are dropped
/// and counted.
pub const NO_PASS_TIMESTAMPS: &str = "the device has no TIMESTAMP_QUERY_INSIDE_PASSES";
/// `WgpuBackend::set_readback_limit(Duration::ZERO)`: every readback would be let go before it
/// could come.
pub const ZERO_READBACK_LIMIT: &str = "a readback limit of zero lets every readback go";
/// The time of a record never came back: its encoder was dropped unfinished, its command
/// buffer dropped unsubmitted, mapping the readback failed, or the readback was held past
/// the backend's readback limit ([`WgpuBackend::set_readback_limit`](super::WgpuBackend::set_readback_limit)).
pub const LOST: &str = "the timestamp's readback never came";
/// A mark on a stream whose owner said nowhere to write it: a `WgpuStream` is recorded
/// through its `WgpuList` (its scopes, `zone_begin`, `zone_next`, `zone_end`), which writes
/// each timestamp on the encoder or pass it is given.
pub const NO_SITE: &str = "a wgpu stream is recorded through its WgpuList";
/// `WgpuList::resolve` while a pass zone of the list is open: its end query is written when
/// the pass ends, after the resolve would read it.
pub const PASS_OPEN: &str = "a pass zone of the list is open";
/// An event made by another `WgpuBackend` (not a clone of this one) recorded here.
pub const FOREIGN_EVENT: &str = "the event belongs to another wgpu backend";
/// `Backend::wait` gave up: the readback did not come within the backend's wait timeout.
pub const WAIT_TIMEOUT: &str = "the timestamp's readback did not come in time";
