//! [`CallbackGate`]: how callbacks that carry no user pointer (CUPTI's buffer callbacks) reach
//! the state of the one running tracer, and how the tracer's drop waits for them before it
//! frees that state.
//!
//! ```text
//!  callback (any thread)                    owner's drop
//!  in_callback += 1        (RMW)            active.swap(null)        (RMW)
//!  target = active.load                     while in_callback.fetch_add(0) != 0 { wait }
//!  use target if non-null                   free the target
//!  in_callback -= 1        (RMW, Release)
//! ```
//!
//! The owner reads the count with a read-modify-write, so the callback's increment and the
//! owner's read are ordered in the count's modification order. If the increment comes first,
//! the owner reads a count above 0 and waits until it reads the callback's decrement, which
//! synchronizes with it: the callback's use of the target happens before the free. If the
//! owner's read comes first, the increment reads from it and synchronizes with it: the swap of
//! null happens before the callback's load, which reads null. (With a plain load instead of
//! the owner's RMW, both orders need SeqCst's single total order, which loom does not model:
//! the loom model below failed then.) Checked by the loom model `loom_gate`
//! (`a_callback_racing_the_gate_closing_never_touches_freed_state`, built into the crate's tests).

use crate::sync::{spin_wait, AtomicPtr, AtomicUsize, Ordering};

/// The state callbacks reach (`T`), published by its owner and closed before it is freed.
#[derive(Debug)]
pub(crate) struct CallbackGate<T> {
    active: AtomicPtr<T>,
    in_callback: AtomicUsize,
}

impl<T> CallbackGate<T> {
    /// A closed gate.
    #[cfg(not(gpu_event_pool_loom))]
    pub(crate) const fn new() -> Self {
        Self { active: AtomicPtr::new(std::ptr::null_mut()), in_callback: AtomicUsize::new(0) }
    }

    /// A closed gate (loom's atomics are not `const`).
    #[cfg(gpu_event_pool_loom)]
    pub(crate) fn new() -> Self {
        Self { active: AtomicPtr::new(std::ptr::null_mut()), in_callback: AtomicUsize::new(0) }
    }

    /// Opens the gate on `target`.
    ///
    /// # Safety
    /// `target` is null or valid for shared access from any thread until
    /// [`close`](Self::close) returns.
    pub(crate) unsafe fn open(&self, target: *mut T) {
        self.active.store(target, Ordering::SeqCst);
    }

    /// Calls `f` with the target, or `None` when the gate is closed; the owner's `close`
    /// waits for `f` to return.
    pub(crate) fn with<R>(&self, f: impl FnOnce(Option<&T>) -> R) -> R {
        // Acquire: when this reads from the owner's read of the count, the owner's swap of null
        // is seen below.
        self.in_callback.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.in_callback);
        let target = self.active.load(Ordering::Acquire);
        // Safety: a non-null target is valid until `close` returns, and `close` waits for
        // `in_callback` to reach 0, which it cannot while `_leave` lives (module doc).
        f(unsafe { target.as_ref() })
    }

    /// Closes the gate, waits for every callback inside, and returns the target it held (the
    /// caller frees it: no callback reaches it any more).
    pub(crate) fn close(&self) -> *mut T {
        let target = self.active.swap(std::ptr::null_mut(), Ordering::SeqCst);
        // A read-modify-write, not a load (module doc): Release for a callback whose
        // increment reads from it, Acquire for the decrements it reads.
        while self.in_callback.fetch_add(0, Ordering::SeqCst) != 0 {
            spin_wait();
        }
        target
    }
}

impl<T> Default for CallbackGate<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// A callback inside the gate: leaves it when dropped, also if `f` unwinds.
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        // Release: the callback's use of the target happens before the owner's free.
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The loom models of the gate (`loom-tests/gate.rs`): built into the crate, since the gate is
/// private.
#[cfg(all(test, gpu_event_pool_loom))]
#[path = "../../../loom-tests/gate.rs"]
mod loom_gate;
