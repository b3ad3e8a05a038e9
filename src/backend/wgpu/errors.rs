//! The backend's failure codes (the `code` of a [`BackendError`](crate::BackendError)). Leaf of
//! `wgpu/`.

/// A zone mark on a device without `Features::TIMESTAMP_QUERY`: nothing can time it. The
/// zone is dropped and counted ([`WgpuBackend::untimed`](super::WgpuBackend::untimed)).
pub const NO_TIMESTAMPS: &str = "the device has no TIMESTAMP_QUERY";
/// A zone mark inside a pass on a device without `Features::TIMESTAMP_QUERY_INSIDE_PASSES`:
/// the pass's own zone is timed (its `timestamp_writes`), the zones inside it are dropped
/// and counted.
pub const NO_PASS_TIMESTAMPS: &str = "the device has no TIMESTAMP_QUERY_INSIDE_PASSES";
/// The time of a record never came back: its encoder was dropped unfinished, its command
/// buffer dropped unsubmitted, mapping the readback failed, or the readback was held past
/// the backend's readback limit ([`WgpuBackend::set_readback_limit`](super::WgpuBackend::set_readback_limit)).
pub const LOST: &str = "the timestamp's readback never came";
/// A zone recorded into an encoder already finished (or into the backend's clock stream).
pub const FINISHED: &str = "the encoder is finished";
/// A zone recorded into an encoder that is borrowed ([`WgpuEncoder::encoder`](super::WgpuEncoder::encoder)
/// or a pass held by its scope).
pub const BUSY: &str = "the encoder is borrowed";
/// The encoder cannot be used while one of its passes is open.
pub const PASS_OPEN: &str = "a pass of the encoder is open";
/// A pass scope asked for a pass it does not have (the compute pass of a render pass's scope,
/// or a scope whose pass could not be opened).
pub const NO_PASS: &str = "no such pass is open";
/// `Backend::wait` gave up: the readback did not come within the backend's wait timeout.
pub const WAIT_TIMEOUT: &str = "the timestamp's readback did not come in time";
