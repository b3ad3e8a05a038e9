//! The order of an event source (the simulation, CUDA events, Vulkan and wgpu queries): each
//! list's times read from its events (`read.rs`), placed on the context's timeline from the
//! anchors (`clock.rs`) through the model of the clocks' offset (`bounds.rs`, one side of
//! what is known of it; `mapping.rs`, segments and a list's bounds), lists recorded on one
//! stream at once (`concurrent.rs`), and the emit phase that puts read lists in each lane's
//! order and hands them to the delivery (`emit/`).
//!
//! Beside it, `activities/` is an activity source's order; both deliver through
//! `deliver.rs`. Nothing here touches the collect/flush protocol's state (`state.rs`) or
//! calls a sink but through `deliver.rs`.

pub(super) mod bounds;
pub(super) mod clock;
pub(super) mod concurrent;
pub(super) mod emit;
pub(super) mod mapping;
pub(super) mod read;
