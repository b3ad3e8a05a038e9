//! The driver-call helpers every part of the CUDA backend uses: error codes, and the
//! context made current for the length of one call ([`Current`]).

use crate::backend::BackendError;
use cudarc::driver::result::DriverError;
use cudarc::driver::{sys, CudaContext};
use std::sync::{Mutex, MutexGuard, PoisonError};

pub(super) fn error(call: &'static str, result: sys::CUresult) -> BackendError {
    // The variants of `CUresult` are named after the driver's codes.
    BackendError::new(call, format!("{result:?}"))
}

pub(super) fn check(call: &'static str, result: sys::CUresult) -> Result<(), BackendError> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(error(call, other)),
    }
}

pub(super) fn driver(call: &'static str) -> impl FnOnce(DriverError) -> BackendError {
    move |e| error(call, e.0)
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The backend's context made current on the calling thread for one call, and the thread's
/// previous current context put back when dropped: a thread that also drives another context
/// (another library's, or another device's) is never left switched.
///
/// When the backend's context is already current (the usual case) this costs one
/// `cuCtxGetCurrent` and changes nothing.
#[must_use = "the context is current only while this lives"]
pub(super) struct Current {
    /// The context to restore (null: none was current), when the call changed it.
    previous: Option<sys::CUcontext>,
}

impl Current {
    pub(super) fn bind(ctx: &CudaContext) -> Result<Self, BackendError> {
        let previous = cudarc::driver::result::ctx::get_current().map_err(driver("cuCtxGetCurrent"))?;
        if previous == Some(ctx.cu_ctx()) {
            return Ok(Self { previous: None });
        }
        // Safety: the context is live (the backend holds an Arc to it).
        unsafe { cudarc::driver::result::ctx::set_current(ctx.cu_ctx()) }
            .map_err(driver("cuCtxSetCurrent"))?;
        Ok(Self { previous: Some(previous.unwrap_or(std::ptr::null_mut())) })
    }

    /// Puts the thread's current context (or none) back when dropped, whatever is made
    /// current meanwhile.
    pub(super) fn saved() -> Result<Self, BackendError> {
        let previous = cudarc::driver::result::ctx::get_current().map_err(driver("cuCtxGetCurrent"))?;
        Ok(Self { previous: Some(previous.unwrap_or(std::ptr::null_mut())) })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // Safety: the context that was current when the call began (or null, which
            // unbinds): it was live then, and it is not ours to destroy. Nothing can report
            // a failure from here.
            let _ = unsafe { cudarc::driver::result::ctx::set_current(previous) };
        }
    }
}
