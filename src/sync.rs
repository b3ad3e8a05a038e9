//! The one place that chooses between `loom` and `std`.
//!
//! Every other module imports its atomics, cells, `Arc`, `Mutex` and spin hint from here and
//! never knows which it got. Under `--cfg gpu_event_pool_loom` the types are loom's
//! model-checked ones (the size limits that shrink under loom live in `limits`, not here).
//! The cfg is the crate's own, not plain `loom`: a downstream crate
//! running its own loom tests with `--cfg loom` gets this crate with `std` atomics, as it
//! should (tokio and sharded-slab gate the same way).

#[cfg(gpu_event_pool_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
#[cfg(gpu_event_pool_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

#[cfg(not(gpu_event_pool_loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
#[cfg(not(gpu_event_pool_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

/// A thread-local with a constant initializer: `std` then skips lazy initialization, and for
/// a type without destructor reaches it with no check of its state at all (one load from the
/// thread's block). loom's macro takes the plain expression; its thread-locals are per model
/// thread and dropped when that thread ends, as std's are.
#[cfg(not(gpu_event_pool_loom))]
macro_rules! const_thread_local {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        std::thread_local! { $(#[$attr])* static $name: $t = const { $init }; }
    };
}
#[cfg(gpu_event_pool_loom)]
macro_rules! const_thread_local {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        loom::thread_local! { $(#[$attr])* static $name: $t = $init; }
    };
}
pub(crate) use const_thread_local;

pub(crate) use std::sync::atomic::Ordering;

/// A sequentially consistent fence (loom's under loom).
#[inline]
pub(crate) fn fence_seq_cst() {
    #[cfg(gpu_event_pool_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(not(gpu_event_pool_loom))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Tells the scheduler this thread is waiting for another. Loom needs an explicit yield in
/// every spin loop or it explores the spinning thread forever.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(gpu_event_pool_loom)]
    loom::thread::yield_now();
    #[cfg(not(gpu_event_pool_loom))]
    std::thread::yield_now();
}

/// An `UnsafeCell` with loom's `with` / `with_mut` API, so that loom can check every access.
#[cfg(gpu_event_pool_loom)]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(loom::cell::UnsafeCell<T>);

#[cfg(gpu_event_pool_loom)]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::cell::UnsafeCell::new(value))
    }
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        self.0.with(f)
    }
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        self.0.with_mut(f)
    }
}

/// An `UnsafeCell` with loom's `with` / `with_mut` API, so that loom can check every access.
#[cfg(not(gpu_event_pool_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(gpu_event_pool_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Locks a mutex, ignoring poisoning: the data behind our mutexes stays consistent even if a
/// user's sink panicked while the lock was held (every update is completed before user code
/// runs, or is redone on the next call).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Locks a `std` mutex (one that loom never models: the collector thread's stop flag),
/// ignoring poisoning as [`lock`] does.
pub(crate) fn lock_std<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Tries to lock a mutex without waiting; `None` when another thread holds it.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    // loom's `Mutex::try_lock` returns std's `TryLockResult` too.
    use std::sync::TryLockError;
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
