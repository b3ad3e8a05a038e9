//! Loom models of the CUPTI callback gate (`backend/cupti/gate.rs`), over the real code:
//! a buffer callback racing the gate's closing (the tracer's drop) and its opening (a tracer
//! started while a late callback runs).
//!
//! Built into the crate's own tests (`backend::activity::gate::loom_gate`): the gate is
//! private to the crate. Needs `--cfg gpu_event_pool_loom`:
//!
//! ```sh
//! RUSTFLAGS="--cfg gpu_event_pool_loom" cargo test --release --features cupti --lib loom_gate
//! ```

#[path = "common/mod.rs"]
#[allow(unreachable_pub, dead_code, reason = "the loom runners are shared with the loom-tests targets")]
mod common;

use super::CallbackGate;
use crate::sync::Arc;
use loom::cell::UnsafeCell;
use loom::thread;

/// CUPTI's buffer callbacks find the tracer's state through a gate the tracer's drop closes
/// before freeing it: a callback racing the close either sees the state (and the close waits
/// for it to leave) or sees none. The state's payload is a loom cell: loom reports any access
/// after the owner's free-time write as a data race.
#[test]
fn a_callback_racing_the_gate_closing_never_touches_freed_state() {
    common::exhaustive(|| {
        let gate = Arc::new(CallbackGate::<UnsafeCell<u32>>::new());
        let state = Box::into_raw(Box::new(UnsafeCell::new(7)));
        // Safety: `state` lives until the gate is closed below.
        unsafe { gate.open(state) };
        let callback = {
            let gate = Arc::clone(&gate);
            thread::spawn(move || gate.with(|target| target.map(|cell| cell.with(|v| unsafe { *v }))))
        };
        let closed = gate.close();
        // Safety: the gate is closed and no callback is inside: this thread owns the state.
        let state = unsafe { Box::from_raw(closed) };
        state.with_mut(|v| unsafe { *v = 0 });
        drop(state);
        let seen = callback.join().unwrap();
        assert!(seen.is_none() || seen == Some(7), "{seen:?}");
    });
}

/// A callback racing the gate's opening (a tracer started while a late buffer callback, of
/// the tracer before or of another tool, runs): it sees no state, or the state as its owner
/// made it before opening. The callback's load of the target acquires the owner's store:
/// weakened to Relaxed, loom reports the callback's read of the state as a data race with the
/// owner's write.
#[test]
fn a_callback_racing_the_gate_opening_sees_the_state_as_made() {
    common::exhaustive(|| {
        let gate = Arc::new(CallbackGate::<UnsafeCell<u32>>::new());
        let callback = {
            let gate = Arc::clone(&gate);
            // Safety: a target the gate hands out is valid until `close` returns, and `close`
            // waits for this callback to leave.
            thread::spawn(move || gate.with(|target| target.map(|cell| cell.with(|v| unsafe { *v }))))
        };
        let state = Box::new(UnsafeCell::new(0));
        // Safety: no other thread can reach the state before the gate opens.
        state.with_mut(|v| unsafe { *v = 7 });
        let state = Box::into_raw(state);
        // Safety: `state` lives until the gate is closed below.
        unsafe { gate.open(state) };
        let closed = gate.close();
        // Safety: the gate is closed and no callback is inside: this thread owns the state.
        drop(unsafe { Box::from_raw(closed) });
        let seen = callback.join().unwrap();
        assert!(seen.is_none() || seen == Some(7), "{seen:?}");
    });
}
