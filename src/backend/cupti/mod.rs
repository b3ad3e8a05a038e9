//! CUPTI activity records: what ran on the GPU (kernels, copies, memsets), when, on which
//! stream, read from CUPTI's activity API (docs/cupti.md, docs/design.md "CUPTI activity
//! path").
//!
//! An [`ActivityTracer`] enables the activity kinds and hands CUPTI buffers from a bounded
//! pool made at [`ActivityTracer::start`]; CUPTI fills them and gives them back through its
//! completed callback; [`ActivityTracer::drain`] reads them into [`ActivityRecord`]s and
//! returns them to the pool. When no buffer is free CUPTI gets none and drops records: both
//! counts are in [`ActivityTracer::losses`]. libcupti is opened at run time (cudarc's
//! dynamic loading); without it `start` fails with [`CuptiError::LibraryNotFound`].
//!
//! A [`CuptiBackend`] makes those records zones of a [`TracingContext`](crate::TracingContext),
//! with no CUDA event: every kernel, copy and memset on its stream's lane, nested in the
//! application's zones (the same lists and guards as on [`CudaBackend`](crate::backend::cuda::CudaBackend)),
//! on the crate's host clock, to the same sinks. Switching from CUDA events is the builder
//! line:
//!
//! ```no_run
//! use gpu_event_pool::backend::cupti::CuptiBackend;
//! use gpu_event_pool::{location, sink::memory::MemorySink, TracingContext};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cupti = CuptiBackend::new(0)?;
//! let stream = cupti.new_stream()?;
//! let zones = MemorySink::new();
//! let ctx = TracingContext::builder(cupti.clone()).name("gpu0").sink(zones.clone()).build()?;
//! let mut list = ctx.list();
//! {
//!     let _pass = list.zone(&stream, location!("pass"));
//!     // ... launch kernels on `stream`: each becomes a child zone of "pass" ...
//! }
//! ctx.submit(list)?;
//! stream.synchronize()?;
//! ctx.flush()?; // or `collect()` now and then while the work runs
//! assert_eq!(ctx.stats().activity.losses.records_dropped, 0);
//! # Ok(())
//! # }
//! ```
//!
//! The tracer alone gives the records:
//!
//! ```no_run
//! use gpu_event_pool::backend::cupti::{ActivityTracer, TracerConfig};
//!
//! let tracer = ActivityTracer::start(TracerConfig::default())?;
//! // ... launch work ...
//! tracer.flush()?;
//! tracer.drain(|record| println!("{:?} {} ns", record.name, record.end_ns - record.start_ns));
//! # Ok::<(), gpu_event_pool::backend::cupti::CuptiError>(())
//! ```

mod backend;
mod buffers;
mod config;
mod demangle;
mod flush;
// How its buffer callbacks reach the running tracer (`gate.rs`), and the hand-off of
// records between its flush thread and a collector (`handoff.rs`).
mod gate;
mod handoff;
mod record;

pub use backend::{host_now_ns, ClockSource, CuptiBackend};
pub use config::CuptiConfig;
pub use record::{ActivityKind, ActivityRecord};

use buffers::BufferPool;
use cudarc::cupti::result::{self as cupti, activity};
use cudarc::cupti::sys;
use cudarc::driver::CudaStream;
use gate::CallbackGate;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Why CUPTI could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CuptiError {
    /// libcupti could not be opened under any name cudarc looks for.
    #[error("libcupti could not be opened (tried {tried}); put its directory on LD_LIBRARY_PATH")]
    LibraryNotFound {
        /// The names tried, comma-separated.
        tried: String,
    },
    /// Another CUPTI client (a profiler such as Nsight Systems, PyTorch's Kineto, or another
    /// library) holds CUPTI: `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`. CUPTI takes
    /// one subscriber per process. To trace under such a tool, time zones with CUDA events:
    /// `CuptiConfig { fall_back_to_events: true, ..Default::default() }` (the same
    /// `CuptiBackend` type), or a `CudaBackend`.
    #[error(
        "{call}: another CUPTI subscriber (Nsight Systems, Kineto, a profiler?) holds CUPTI in this \
         process; to time zones with CUDA events instead, set CuptiConfig::fall_back_to_events \
         (or use CudaBackend)"
    )]
    OtherSubscriber {
        /// The call that reported it.
        call: &'static str,
    },
    /// The process may not profile the GPU: `CUPTI_ERROR_INSUFFICIENT_PRIVILEGES` (the
    /// driver's `NVreg_RestrictProfilingToAdminUsers`, or a virtualized device).
    #[error("{call}: not permitted to profile this GPU (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)")]
    NotPermitted {
        /// The call that reported it.
        call: &'static str,
    },
    /// An [`ActivityTracer`] is already running in this process: CUPTI's activity callbacks
    /// are process-wide, so there is one at a time.
    #[error("an ActivityTracer is already running in this process (one at a time)")]
    AlreadyStarted,
    /// A [`TracerConfig`] the pool cannot be made from.
    #[error("invalid TracerConfig: {0}")]
    Config(&'static str),
    /// The CUDA context could not be opened ([`CuptiBackend::new`]).
    #[error("CUDA: {0}")]
    Cuda(crate::backend::BackendError),
    /// Any other failure, with the CUPTI call and its `CUptiResult` name.
    #[error("{call} failed: {code}")]
    Call {
        /// The CUPTI call.
        call: &'static str,
        /// The `CUptiResult` variant's name.
        code: String,
    },
}

impl CuptiError {
    fn from_result(call: &'static str, error: cupti::CuptiError) -> Self {
        use sys::CUptiResult as R;
        match error.0 {
            R::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => Self::OtherSubscriber { call },
            R::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
            | R::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => Self::NotPermitted { call },
            // The variant's name, through the enum's own `Debug` (cudarc's error `Debug` asks
            // libcupti for a string and unwraps it).
            code => Self::Call { call, code: format!("{code:?}") },
        }
    }
}

/// `map_err` for a CUPTI call.
fn call(name: &'static str) -> impl FnOnce(cupti::CuptiError) -> CuptiError {
    move |e| CuptiError::from_result(name, e)
}

/// The bounded buffer pool of an [`ActivityTracer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracerConfig {
    /// Bytes per buffer. Default 8 MiB (CUPTI's samples' size).
    pub buffer_size: usize,
    /// Buffers, all allocated at `start`. Default 4.
    pub buffer_count: usize,
}

impl Default for TracerConfig {
    fn default() -> Self {
        Self { buffer_size: 8 << 20, buffer_count: 4 }
    }
}

/// Records lost so far, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Losses {
    /// Buffer requests answered with no buffer (all were in CUPTI's hands or waiting for a
    /// drain).
    pub buffers_refused: u64,
    /// Records CUPTI dropped for want of buffer space, summed over the buffers it completed
    /// (`cuptiActivityGetNumDroppedRecords` for each buffer's context and stream).
    pub records_dropped: u64,
}

/// What the callbacks reach: the pool and the drop count.
#[derive(Debug)]
struct CallbackState {
    pool: BufferPool,
    dropped: AtomicU64,
}

/// The running tracer's `CallbackState`, closed when none runs. CUPTI's buffer callbacks carry no
/// user pointer, so this is how they find it; the tracer's drop closes it and waits for the
/// callbacks inside before freeing.
#[cfg(not(gpu_event_pool_loom))]
static ACTIVE: CallbackGate<CallbackState> = CallbackGate::new();
// Under loom (whose atomics are not `const`), made at first use: only the CUPTI models built
// into the crate are run there, and they do not start a tracer.
#[cfg(gpu_event_pool_loom)]
loom::lazy_static! {
    static ref ACTIVE: CallbackGate<CallbackState> = CallbackGate::new();
}
/// Set from `start` until the tracer is dropped (or `start` fails).
static STARTED: AtomicBool = AtomicBool::new(false);

/// The activity kinds a tracer enables.
const KINDS: [sys::CUpti_ActivityKind; 5] = [
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    // Copies between devices (peer copies).
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY2,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
    // Without it CUPTI keeps pushed external ids to itself.
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
];

/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: flush buffers that are not full too.
const FLUSH_FORCED: u32 = 1;

/// CUPTI activity tracing for the whole process, one at a time (module doc).
#[derive(Debug)]
pub struct ActivityTracer {
    shared: *mut CallbackState,
    subscriber: sys::CUpti_SubscriberHandle,
}

// Safety: `shared` is only read through `&CallbackState` (its fields are atomics and lock-free
// queues), and the subscriber handle is an opaque value CUPTI accepts from any thread.
unsafe impl Send for ActivityTracer {}
// Safety: as for `Send`; `&self` methods touch only `CallbackState`'s atomics and queues.
unsafe impl Sync for ActivityTracer {}

/// Clears `STARTED` unless disarmed: `start`'s early returns leave no tracer behind.
struct StartedGuard(bool);

impl Drop for StartedGuard {
    fn drop(&mut self) {
        if self.0 {
            STARTED.store(false, Ordering::Release);
        }
    }
}

impl ActivityTracer {
    /// Opens libcupti, subscribes, allocates the buffer pool, registers the buffer callbacks
    /// and enables kernel, memcpy, memset and external-correlation records.
    pub fn start(config: TracerConfig) -> Result<Self, CuptiError> {
        Self::start_with(config, None)
    }

    /// `start`, and `on_launch` called on the launching thread at the entry and exit of every driver
    /// or runtime API call that launches work (kernels, graphs, copies, memsets).
    pub(super) fn start_with(
        config: TracerConfig,
        on_launch: sys::CUpti_CallbackFunc,
    ) -> Result<Self, CuptiError> {
        if STARTED.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(CuptiError::AlreadyStarted);
        }
        let mut started = StartedGuard(true);
        library_present()?;
        let pool = BufferPool::new(config.buffer_size, config.buffer_count)
            .ok_or(CuptiError::Config("buffer_size and buffer_count must be non-zero and allocatable"))?;
        let mut subscriber = std::ptr::null_mut();
        // Safety: `subscriber` is a valid out-pointer; the callback (if any) reads no user data.
        unsafe { cupti::subscribe(&mut subscriber, on_launch, std::ptr::null_mut()) }
            .map_err(call("cuptiSubscribe"))?;
        let shared = Box::into_raw(Box::new(CallbackState { pool, dropped: AtomicU64::new(0) }));
        // Safety: `shared` lives until `drop` has closed the gate (which waits for the
        // callbacks inside) and freed it.
        unsafe { ACTIVE.open(shared) };
        let tracer = Self { shared, subscriber };
        // From here `tracer`'s drop undoes whatever was done, `STARTED` included.
        started.0 = false;
        activity::register_callbacks(Some(buffer_requested), Some(buffer_completed))
            .map_err(call("cuptiActivityRegisterCallbacks"))?;
        for kind in KINDS {
            activity::enable(kind).map_err(call("cuptiActivityEnable"))?;
        }
        if on_launch.is_some() {
            enable_launch_callbacks(subscriber)?;
        }
        Ok(tracer)
    }

    fn shared(&self) -> &CallbackState {
        // Safety: `shared` came from `Box::into_raw` in `start` and is freed only in `drop`.
        unsafe { &*self.shared }
    }

    /// Asks CUPTI to complete every buffer it holds, full or not (`cuptiActivityFlushAll`
    /// forced): records of work that has finished are then ready for [`drain`](Self::drain).
    pub fn flush(&self) -> Result<(), CuptiError> {
        activity::flush_all(FLUSH_FORCED).map_err(call("cuptiActivityFlushAll"))
    }

    /// Reads every completed buffer, oldest first, calling `f` with each record of a kind the
    /// tracer enabled, and gives the buffers back to the pool. Returns the records read.
    pub fn drain(&self, mut f: impl FnMut(ActivityRecord)) -> Result<usize, CuptiError> {
        let pool = &self.shared().pool;
        let mut count = 0;
        while let Some(filled) = pool.next_filled() {
            let result = for_each_record(filled.buffer.as_ptr(), filled.valid_bytes, |record| {
                count += 1;
                f(record);
            });
            pool.give_back(filled.buffer);
            result?;
        }
        Ok(count)
    }

    /// Records lost so far.
    pub fn losses(&self) -> Losses {
        let shared = self.shared();
        Losses {
            buffers_refused: shared.pool.refused(),
            records_dropped: shared.dropped.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ActivityTracer {
    fn drop(&mut self) {
        for kind in KINDS {
            // Nothing to do about a failure here but go on undoing the rest.
            let _ = activity::disable(kind);
        }
        let _ = activity::flush_all(FLUSH_FORCED);
        // No callback reaches `shared` once this returns.
        ACTIVE.close();
        // Safety: the handle came from `cuptiSubscribe` in `start`.
        let _ = unsafe { cupti::unsubscribe(self.subscriber) };
        // Safety: from `Box::into_raw` in `start`; no callback can reach it any more (the gate
        // is closed and none is inside), and `&self` borrows ended with `drop`. The pool's
        // own drop frees the buffers only when CUPTI gave them all back, else leaks them.
        drop(unsafe { Box::from_raw(self.shared) });
        STARTED.store(false, Ordering::Release);
    }
}

/// CUPTI's id for `stream` (what [`ActivityRecord::stream_id`] holds for its work).
pub fn stream_id(stream: &CudaStream) -> Result<u32, CuptiError> {
    library_present()?;
    let mut id = 0;
    // Safety: the context and stream are live (borrowed); `id` is a valid out-pointer.
    unsafe { cupti::get_stream_id(stream.context().cu_ctx(), stream.cu_stream(), &mut id) }
        .map_err(call("cuptiGetStreamId"))?;
    Ok(id)
}

/// CUPTI's clock now: nanoseconds since the Unix epoch, the time base of
/// [`ActivityRecord::start_ns`] and `end_ns`.
pub fn timestamp_ns() -> Result<u64, CuptiError> {
    library_present()?;
    let mut ns = 0;
    // Safety: `ns` is a valid out-pointer.
    unsafe { sys::cuptiGetTimestamp(&mut ns) }.result().map_err(call("cuptiGetTimestamp"))?;
    Ok(ns)
}

/// The lane key of CUPTI's (context id, stream id): what [`ActivityRecord`]s of a stream's work
/// and [`CuptiBackend`]'s `stream_key` of that stream both give.
fn lane_key(context_id: u32, stream_id: u32) -> u64 {
    (u64::from(context_id) << 32) | u64::from(stream_id)
}

/// Whether the API call named `name` (in the driver domain, `cu...`, or the runtime's,
/// `cuda...`: `prefix`) launches work that CUPTI reports a record of: kernels, graphs,
/// copies and memsets. Not a host function (`cuLaunchHostFunc`), which runs on the host and
/// makes no record: a zone would wait for it.
fn makes_a_record(name: &[u8], prefix: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix.as_bytes()) else { return false };
    !rest.starts_with(b"LaunchHostFunc")
        && ["Launch", "GraphLaunch", "Memcpy", "Memset"].iter().any(|p| rest.starts_with(p.as_bytes()))
}

/// Enables the subscriber's callback for each driver and runtime API call that launches GPU
/// work with a record ([`makes_a_record`]), found by name: the ids differ between CUPTI
/// versions, the names do not.
fn enable_launch_callbacks(subscriber: sys::CUpti_SubscriberHandle) -> Result<(), CuptiError> {
    use sys::CUpti_CallbackDomain::{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API};
    for (domain, prefix) in [(CUPTI_CB_DOMAIN_DRIVER_API, "cu"), (CUPTI_CB_DOMAIN_RUNTIME_API, "cuda")] {
        // Above every id of the versions known (677 driver ids in CUDA 13.0).
        for cbid in 1..2048u32 {
            let mut name = std::ptr::null();
            // Safety: `name` is a valid out-pointer; CUPTI sets it to a static string.
            if unsafe { sys::cuptiGetCallbackName(domain, cbid, &mut name) }.result().is_err()
                || name.is_null()
            {
                continue;
            }
            // Safety: CUPTI returned a NUL-terminated static string.
            let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
            if makes_a_record(name, prefix) {
                // Safety: a live subscriber and an id CUPTI just named.
                unsafe { sys::cuptiEnableCallback(1, subscriber, domain, cbid) }
                    .result()
                    .map_err(call("cuptiEnableCallback"))?;
            }
        }
    }
    Ok(())
}

/// Whether libcupti opens under one of the names cudarc tries (in its order): cudarc panics
/// when none does.
fn library_present() -> Result<(), CuptiError> {
    let names = cudarc::get_lib_name_candidates("cupti");
    // Safety: opening libcupti runs its initializers, which cudarc's first call would run
    // anyway; the handle is closed at once (the loader keeps the library for cudarc's open).
    if names.iter().any(|name| unsafe { libloading::Library::new(name) }.is_ok()) {
        Ok(())
    } else {
        Err(CuptiError::LibraryNotFound { tried: names.join(", ") })
    }
}

/// Calls `f` with each enabled-kind record in `valid_bytes` bytes at `buffer`.
fn for_each_record(
    buffer: *mut u8,
    valid_bytes: usize,
    mut f: impl FnMut(ActivityRecord),
) -> Result<(), CuptiError> {
    let mut cursor: *mut sys::CUpti_Activity = std::ptr::null_mut();
    loop {
        // Safety: `buffer` is a pool buffer CUPTI completed with `valid_bytes` of records, no
        // longer in CUPTI's hands; `cursor` starts null and then holds what CUPTI set.
        match unsafe { activity::get_next_record(buffer, valid_bytes, &mut cursor) } {
            Ok(()) => {
                // Safety: CUPTI just pointed `cursor` at a whole record inside the buffer.
                if let Some(record) = unsafe { record::read(cursor) } {
                    f(record);
                }
            }
            Err(cupti::CuptiError(sys::CUptiResult::CUPTI_ERROR_MAX_LIMIT_REACHED)) => return Ok(()),
            Err(e) => return Err(CuptiError::from_result("cuptiActivityGetNextRecord", e)),
        }
    }
}

/// CUPTI asks for a buffer: a free one of the pool, or none (CUPTI then drops records).
unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let taken = ACTIVE.with(|shared| shared.and_then(|s| s.pool.take().map(|b| (b, s.pool.buffer_size()))));
    let (start, bytes) = match taken {
        Some((b, bytes)) => (b.as_ptr(), bytes),
        None => (std::ptr::null_mut(), 0),
    };
    // Safety: CUPTI passes valid out-pointers. `max_records` 0: as many as fit.
    unsafe {
        *buffer = start;
        *size = bytes;
        *max_records = 0;
    }
}

/// CUPTI gives a buffer back: queue it for `drain`, and count what CUPTI dropped.
unsafe extern "C" fn buffer_completed(
    context: cudarc::driver::sys::CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid_bytes: usize,
) {
    ACTIVE.with(|shared| {
        if let Some(shared) = shared {
            // Safety: CUPTI's own context and stream id for this buffer.
            unsafe { completed(shared, context, stream_id, buffer, valid_bytes) }
        }
    });
}

/// A completed buffer: queued for `drain`, and what CUPTI dropped counted.
///
/// # Safety
/// `context` (possibly null) and `stream_id` are what CUPTI passed with `buffer`.
unsafe fn completed(
    shared: &CallbackState,
    context: cudarc::driver::sys::CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    valid_bytes: usize,
) {
    let mut dropped = 0;
    // Safety: the context (possibly null) and stream id are the ones CUPTI passed for this
    // buffer; `dropped` is a valid out-pointer.
    if unsafe { activity::get_num_dropped_records(context, stream_id, &mut dropped) }.is_ok() {
        shared.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
    }
    if !buffer.is_null() {
        shared.pool.complete(buffer, valid_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::CUptiResult as R;

    fn error(result: R) -> CuptiError {
        CuptiError::from_result("cuptiActivityEnable", cupti::CuptiError(result))
    }

    #[test]
    fn only_calls_that_make_a_record_are_linked() {
        for name in
            ["cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch", "cuMemcpyAsync", "cuMemsetD8Async"]
        {
            assert!(makes_a_record(name.as_bytes(), "cu"), "{name}");
        }
        for name in ["cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyPeerAsync"] {
            assert!(makes_a_record(name.as_bytes(), "cuda"), "{name}");
        }
        for (name, prefix) in [
            ("cuLaunchHostFunc", "cu"),
            ("cudaLaunchHostFunc", "cuda"),
            ("cuEventRecord", "cu"),
            ("cudaMalloc", "cuda"),
        ] {
            assert!(!makes_a_record(name.as_bytes(), prefix), "{name}");
        }
    }

    #[test]
    fn cupti_results_name_their_cause() {
        let call = "cuptiActivityEnable";
        assert_eq!(
            error(R::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED),
            CuptiError::OtherSubscriber { call }
        );
        assert_eq!(error(R::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES), CuptiError::NotPermitted { call });
        assert_eq!(
            error(R::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES),
            CuptiError::NotPermitted { call }
        );
        assert_eq!(
            error(R::CUPTI_ERROR_NOT_INITIALIZED).to_string(),
            "cuptiActivityEnable failed: CUPTI_ERROR_NOT_INITIALIZED"
        );
    }

    /// CUPTI held by another tool (Nsight Systems, Kineto): the error says so and names the
    /// one-line way to trace anyway.
    #[test]
    fn another_subscriber_says_how_to_fall_back_to_cuda_events() {
        let message = CuptiError::from_result(
            "cuptiSubscribe",
            cupti::CuptiError(R::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED),
        )
        .to_string();
        assert!(message.starts_with("cuptiSubscribe: another CUPTI subscriber"), "{message}");
        assert!(message.contains("CuptiConfig::fall_back_to_events"), "{message}");
    }
}
