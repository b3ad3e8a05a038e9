//! CUDA through `cudarc`'s driver API (feature `cuda`).
//!
//! The driver library is loaded at run time (`cudarc`'s `dynamic-loading`), so the crate
//! builds, and [`CudaBackend::new`] fails cleanly, on machines without CUDA;
//! `error.kind() == Some(ErrorKind::NoDevice)` ([`ErrorKind`](crate::ErrorKind)) tells that failure apart from a real one.
//!
//! | [`Backend`] call       | driver call                                              |
//! | ---------------------- | -------------------------------------------------------- |
//! | `create_event`         | `cuEventCreate(CU_EVENT_DEFAULT)`: timing on             |
//! | `record`               | `cuEventRecord` on the stream                            |
//! | `add_graph_record_node`| `cuGraphAddEventRecordNode` after the dependencies       |
//! | `is_complete`          | `cuEventElapsedTime(e, e)`; `CUDA_ERROR_NOT_READY` is `false` |
//! | `wait`                 | `cuEventElapsedTime(e, e)` polled, sleeping between tries |
//! | `elapsed_ms`           | `cuEventElapsedTime`; `CUDA_ERROR_NOT_READY` is `None`   |
//!
//! The backend never calls `cuEventQuery` or `cuEventSynchronize`: while another thread
//! holds a global-mode stream capture (PyTorch's default), `cuEventQuery` fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` *and invalidates that thread's capture*, whereas
//! `cuEventElapsedTime` and `cuEventRecord` succeed (measured on an H200, driver 580). So a
//! collector (and `flush`) may run beside an application that captures graphs.
//! | `host_now_ns`          | `std::time::Instant` since the backend was made          |
//!
//! `elapsed_ms` never blocks: it calls `cuEventElapsedTime` directly, not `cudarc`'s
//! `CudaEvent::elapsed_ms` (which synchronizes both events first). Every call makes the
//! backend's context current on the calling thread if it is not already, and puts the
//! thread's previous context back before returning, so any thread may record and any thread
//! may collect, and a thread that also drives other contexts is never left switched. Failures are [`BackendError`]s with the
//! driver call in `call` and the `CUresult` name (`"CUDA_ERROR_INVALID_HANDLE"`) in `code`.
//!
//! # Graphs: zone nodes time the graph's first launch
//!
//! A graph's event-record nodes record their events again on every launch, long after the
//! list that owns the events has been collected and its slots handed to other lists. To keep
//! that from ever producing a wrong time, zones recorded in a [`Graph`] time exactly ONE
//! launch: the graph's first ([`GraphExec::launch`] returns [`GraphLaunch::Timed`]).
//! Right after it, and before any later launch of any instance of the graph, the instance's
//! zone nodes are pointed at private scratch events of its own
//! (`cuGraphExecEventRecordNodeSetEvent`, which leaves launches already queued untouched),
//! so later launches run the same work untimed ([`GraphLaunch::Untimed`]) and never touch a
//! pool event again. To time another launch, record the zones again into a new graph.
//!
//! The rules this enforces, each with a clear error rather than a wrong time:
//! - Submit a list with graph zones after the launch it should time. Collecting it before
//!   the graph's first launch fails with [`ErrorKind::GraphNotLaunched`](crate::ErrorKind::GraphNotLaunched) (its zones are dropped
//!   and counted, its slots released); the graph's zones are then abandoned, and its first
//!   launch runs untimed.
//! - Add every zone node before instantiating: adding one to an instantiated graph fails
//!   with [`ErrorKind::GraphAlreadyInstantiated`](crate::ErrorKind::GraphAlreadyInstantiated).
//! - Launch instances only with [`GraphExec::launch`] (a raw `cuGraphLaunch` would bypass
//!   the switch to scratch events).
//!
//! Recording a zone on a stream that is being captured into a graph is not supported: the
//! driver reports `CUDA_ERROR_CAPTURED_EVENT` for such an event when it is collected.
//!
//! ```no_run
//! use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
//! use gpu_event_pool::{location, sink::memory::MemorySink, TracingContext};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cuda = CudaBackend::new(0)?;
//! let stream = cuda.new_stream()?;
//! let spin = SpinKernel::load(&cuda)?;
//! let zones = MemorySink::new();
//! let ctx = TracingContext::builder(cuda.clone()).sink(zones.clone()).build()?;
//!
//! let mut list = ctx.list();
//! {
//!     let _dispatch = list.zone(&stream, location!("dispatch"));
//!     spin.launch(&stream, 2_000_000)?; // 2 ms of GPU work
//! } // the guard ends the zone
//! ctx.submit(list)?;
//! ctx.flush()?;
//! let zone = &zones.zones()[0];
//! println!("{} ns", zone.gpu_end_ns - zone.gpu_begin_ns);
//! # Ok(())
//! # }
//! ```

mod driver;
mod graph;

pub use graph::{Graph, GraphExec, GraphLaunch, GraphNode};

use super::Backend;
use super::BackendError;
use cudarc::driver::{sys, CudaContext, CudaStream};
use driver::{check, driver, error, lock, Current};
use graph::{GraphTemplate, GraphTiming};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

// The backend's failure codes, kept under their old names (hidden: `ErrorKind` is the API).
#[doc(hidden)]
pub const NO_DRIVER_LIBRARY: &str = crate::backend::codes::CUDA_NO_DRIVER_LIBRARY;
#[doc(hidden)]
pub const GRAPH_NOT_LAUNCHED: &str = crate::backend::codes::GRAPH_NOT_LAUNCHED;
#[doc(hidden)]
pub const GRAPH_ALREADY_INSTANTIATED: &str = crate::backend::codes::GRAPH_ALREADY_INSTANTIATED;

/// The spin kernel, NUL-terminated for `cuModuleLoadData`.
const SPIN_PTX: &str = concat!(include_str!("spin_kernel.ptx"), "\0");

/// Whether `error` means this machine has no usable CUDA GPU (hidden: the same as
/// `error.kind() == Some(ErrorKind::NoDevice)`).
#[doc(hidden)]
pub fn is_no_device(error: &BackendError) -> bool {
    error.kind() == Some(crate::backend::ErrorKind::NoDevice)
}

/// CUDA on one device context. Cheap to clone: clones share the context and the host clock.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    /// The host clock's origin.
    origin: Instant,
}

impl CudaBackend {
    /// The primary context of device `ordinal`. Fails with code `NO_DRIVER_LIBRARY` when
    /// `libcuda` cannot be loaded, and with the `CUresult` name otherwise; both are
    /// [`ErrorKind::NoDevice`](crate::ErrorKind::NoDevice) when this machine has no usable
    /// CUDA GPU.
    pub fn new(ordinal: usize) -> Result<Self, BackendError> {
        // Safety: only tries to dlopen the driver library; no driver call is made.
        if !unsafe { sys::is_culib_present() } {
            return Err(BackendError::new("dlopen(libcuda)", NO_DRIVER_LIBRARY));
        }
        cudarc::driver::result::init().map_err(driver("cuInit"))?;
        // `CudaContext::new` makes the new context current: put the thread's own back, so
        // that opening one backend per device leaves the opening thread as it was.
        let _restore = Current::saved()?;
        let ctx = CudaContext::new(ordinal).map_err(driver("cuDevicePrimaryCtxRetain"))?;
        Ok(Self::from_context(ctx))
    }

    /// A backend on an existing `cudarc` context.
    pub fn from_context(ctx: Arc<CudaContext>) -> Self {
        Self { ctx, origin: Instant::now() }
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A new stream (non-blocking) on the backend's context.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, BackendError> {
        let _current = self.bind()?;
        self.ctx.new_stream().map_err(driver("cuStreamCreate"))
    }

    /// A new, empty graph, for kernel nodes and zone nodes
    /// ([`EventList::graph_zone_begin`](crate::EventList::graph_zone_begin)).
    pub fn new_graph(&self) -> Result<Graph, BackendError> {
        let _current = self.bind()?;
        let mut raw = std::ptr::null_mut();
        // Safety: `raw` is a valid out-pointer; the context is current.
        check("cuGraphCreate", unsafe { sys::cuGraphCreate(&mut raw, 0) })?;
        let template = GraphTemplate {
            raw,
            ctx: Arc::clone(&self.ctx),
            zone_nodes: Mutex::new(Vec::new()),
            timing: Arc::new(GraphTiming::default()),
        };
        Ok(Graph { template: Arc::new(template), _not_sync: PhantomData })
    }

    fn bind(&self) -> Result<Current, BackendError> {
        Current::bind(&self.ctx)
    }
}

/// A timing event (`CU_EVENT_DEFAULT`), destroyed on drop.
///
/// Remembers the graph it was last added to, so that its time is never read before that
/// graph's timed launch and the graph never records it again once it is reused.
pub struct TimingEvent {
    raw: sys::CUevent,
    ctx: Arc<CudaContext>,
    /// Whether `graph` is `Some`: lets stream records skip the lock. Written only by the
    /// slot's owner; the pool's Release/Acquire hand-offs order it for the collector.
    in_graph: AtomicBool,
    graph: Mutex<Option<Arc<GraphTiming>>>,
}

// Safety: a CUevent is a driver handle that any thread may use; the driver synchronizes
// calls on it. The pool gives each event one owner at a time (a list, or the collector).
unsafe impl Send for TimingEvent {}
// Safety: as above; the only interior state (`in_graph`, `graph`) is an atomic and a mutex.
unsafe impl Sync for TimingEvent {}

impl std::fmt::Debug for TimingEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimingEvent")
            .field("raw", &self.raw)
            .field("in_graph", &self.in_graph.load(Ordering::Relaxed))
            .finish()
    }
}

impl TimingEvent {
    /// The event handle (do not destroy it).
    pub fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// Moves the event to `graph` (or to no graph, before a stream record). The graph it
    /// leaves, if it has not had its timed launch, must never record it: it is abandoned.
    fn rebind(&self, graph: Option<&Arc<GraphTiming>>) {
        if !self.in_graph.load(Ordering::Relaxed) && graph.is_none() {
            return;
        }
        let mut bound = lock(&self.graph);
        if let Some(old) = bound.take() {
            old.abandon();
        }
        *bound = graph.cloned();
        self.in_graph.store(graph.is_some(), Ordering::Relaxed);
    }

    /// Fails with [`ErrorKind::GraphNotLaunched`](crate::ErrorKind::GraphNotLaunched) if the event is a node of a graph whose timed launch
    /// has not happened (its state would be a previous owner's), abandoning that graph.
    fn check_launched(&self, call: &'static str) -> Result<(), BackendError> {
        if !self.in_graph.load(Ordering::Relaxed) {
            return Ok(());
        }
        match &*lock(&self.graph) {
            Some(timing) if !timing.launched_or_abandon() => Err(BackendError::new(call, GRAPH_NOT_LAUNCHED)),
            _ => Ok(()),
        }
    }
}

impl Drop for TimingEvent {
    fn drop(&mut self) {
        self.rebind(None);
        // Nothing can report a failure from here: binding and destroying are best effort.
        let _current = Current::bind(&self.ctx);
        // Safety: the event was created by `cuEventCreate`, is destroyed only here, and no
        // graph instance will record it again (`rebind` abandoned any untimed graph).
        let _ = unsafe { sys::cuEventDestroy_v2(self.raw) };
    }
}

impl Backend for CudaBackend {
    type Event = TimingEvent;
    type Stream = Arc<CudaStream>;
    type Graph = Graph;
    type GraphNode = GraphNode;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn create_event(&self) -> Result<TimingEvent, BackendError> {
        let _current = self.bind()?;
        let mut raw = std::ptr::null_mut();
        // Safety: `raw` is a valid out-pointer; the context is current. CU_EVENT_DEFAULT
        // keeps timing on (cudarc's `new_event(None)` would disable it).
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT as u32;
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut raw, flags) })?;
        Ok(TimingEvent {
            raw,
            ctx: Arc::clone(&self.ctx),
            in_graph: AtomicBool::new(false),
            graph: Mutex::new(None),
        })
    }

    fn create_stream(&self) -> Result<Arc<CudaStream>, BackendError> {
        self.new_stream()
    }

    fn stream_key(&self, stream: &Arc<CudaStream>) -> u64 {
        stream.cu_stream() as usize as u64
    }

    fn graph_key(&self, graph: &Graph) -> u64 {
        graph.template.raw as usize as u64
    }

    fn record(&self, event: &TimingEvent, stream: &Arc<CudaStream>) -> Result<(), BackendError> {
        if !Arc::ptr_eq(stream.context(), &self.ctx) && **stream.context() != *self.ctx {
            return Err(error("cuEventRecord", sys::CUresult::CUDA_ERROR_INVALID_CONTEXT));
        }
        let _current = self.bind()?;
        // Before the record: an untimed graph it leaves must not record it after this.
        event.rebind(None);
        // Safety: both handles are live (the event is owned by the caller's slot, the stream
        // by the Arc) and belong to the current context.
        check("cuEventRecord", unsafe { sys::cuEventRecord(event.raw, stream.cu_stream()) })
    }

    fn add_graph_record_node(
        &self,
        event: &TimingEvent,
        graph: &Graph,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, BackendError> {
        let template = &graph.template;
        if lock(&template.timing.state).instantiated {
            return Err(BackendError::new("cuGraphAddEventRecordNode", GRAPH_ALREADY_INSTANTIATED));
        }
        let _current = self.bind()?;
        event.rebind(Some(&template.timing));
        let mut node = std::ptr::null_mut();
        // Safety: `node` is a valid out-pointer; the graph is live and, being `!Sync`, used
        // by this thread only; `GraphNode` is `repr(transparent)` over `CUgraphNode`, so the
        // slice is an array of `dependencies.len()` node handles of this graph.
        let result = unsafe {
            sys::cuGraphAddEventRecordNode(
                &mut node,
                template.raw,
                dependencies.as_ptr().cast::<sys::CUgraphNode>(),
                dependencies.len(),
                event.raw,
            )
        };
        if let Err(e) = check("cuGraphAddEventRecordNode", result) {
            event.rebind(None);
            return Err(e);
        }
        lock(&template.zone_nodes).push(GraphNode(node));
        Ok(GraphNode(node))
    }

    fn is_complete(&self, event: &TimingEvent) -> Result<bool, BackendError> {
        // An event against itself: 0 ms once complete, NOT_READY before; capture-safe where
        // `cuEventQuery` is not (module docs).
        Ok(self.elapsed_ms(event, event)?.is_some())
    }

    fn wait(&self, event: &TimingEvent) -> Result<(), BackendError> {
        // Polled rather than `cuEventSynchronize`, for the same reason as `is_complete`.
        let mut pause = std::time::Duration::from_micros(10);
        while !self.is_complete(event)? {
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
        Ok(())
    }

    fn elapsed_ms(&self, start: &TimingEvent, end: &TimingEvent) -> Result<Option<f32>, BackendError> {
        start.check_launched("cuEventElapsedTime")?;
        end.check_launched("cuEventElapsedTime")?;
        let _current = self.bind()?;
        let mut ms = 0.0f32;
        // Safety: `ms` is a valid out-pointer; both events are live timing events.
        match unsafe { sys::cuEventElapsedTime(&mut ms, start.raw, end.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(Some(ms)),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(None),
            other => Err(error("cuEventElapsedTime", other)),
        }
    }

    fn host_now_ns(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    fn host_clock_origin(&self) -> Option<Instant> {
        Some(self.origin)
    }
}

/// A kernel that keeps one GPU thread busy until `%globaltimer` has advanced by a given
/// number of nanoseconds: GPU work of a known duration, for tests, demos and benchmarks.
///
/// Loaded from embedded, hand-written PTX (`sm_52`, PTX ISA 7.0) with `cuModuleLoadData`,
/// which JIT-compiles it for the device: no NVRTC needed.
pub struct SpinKernel {
    module: sys::CUmodule,
    function: sys::CUfunction,
    ctx: Arc<CudaContext>,
}

// Safety: module and function handles may be used from any thread; the driver synchronizes
// launches. The module is unloaded only on drop.
unsafe impl Send for SpinKernel {}
// Safety: as above; `SpinKernel` has no interior state.
unsafe impl Sync for SpinKernel {}

impl std::fmt::Debug for SpinKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinKernel").field("function", &self.function).finish()
    }
}

impl SpinKernel {
    /// Loads the kernel into the backend's context.
    pub fn load(backend: &CudaBackend) -> Result<Self, BackendError> {
        let _current = backend.bind()?;
        let mut module = std::ptr::null_mut();
        // Safety: valid out-pointer; the image is NUL-terminated PTX text.
        let result = unsafe { sys::cuModuleLoadData(&mut module, SPIN_PTX.as_ptr().cast::<c_void>()) };
        check("cuModuleLoadData", result)?;
        let mut function = std::ptr::null_mut();
        // Safety: valid out-pointer; the module is live; the name is NUL-terminated.
        let result = unsafe { sys::cuModuleGetFunction(&mut function, module, c"spin_ns".as_ptr()) };
        if let Err(e) = check("cuModuleGetFunction", result) {
            // Safety: loaded just above and not shared.
            let _ = unsafe { sys::cuModuleUnload(module) };
            return Err(e);
        }
        Ok(Self { module, function, ctx: Arc::clone(&backend.ctx) })
    }

    /// Queues a spin of `duration_ns` on `stream`.
    pub fn launch(&self, stream: &CudaStream, duration_ns: u64) -> Result<(), BackendError> {
        let _current = Current::bind(&self.ctx)?;
        let mut duration = duration_ns;
        let mut params = [(&mut duration as *mut u64).cast::<c_void>()];
        // Safety: the function is live (module loaded while `self` lives) and takes one u64
        // parameter, which `params` points to; the driver copies it before returning.
        let result = unsafe {
            sys::cuLaunchKernel(
                self.function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.cu_stream(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check("cuLaunchKernel", result)
    }

    /// Adds a kernel node spinning for `duration_ns` to `graph`, after `dependencies`.
    pub fn add_to_graph(
        &self,
        graph: &Graph,
        dependencies: &[GraphNode],
        duration_ns: u64,
    ) -> Result<GraphNode, BackendError> {
        let _current = Current::bind(&self.ctx)?;
        let mut duration = duration_ns;
        let mut params = [(&mut duration as *mut u64).cast::<c_void>()];
        // Safety: all-zero is a valid value of this plain C struct (null handles and
        // pointers, zero sizes); the fields that matter are set below.
        let mut node_params: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        node_params.func = self.function;
        node_params.gridDimX = 1;
        node_params.gridDimY = 1;
        node_params.gridDimZ = 1;
        node_params.blockDimX = 1;
        node_params.blockDimY = 1;
        node_params.blockDimZ = 1;
        node_params.kernelParams = params.as_mut_ptr();
        let mut node = std::ptr::null_mut();
        // Safety: valid out-pointer; the graph is live and used by this thread only; the
        // dependencies are nodes of it (`repr(transparent)` handles); the parameters are
        // copied by the driver before it returns.
        let result = unsafe {
            sys::cuGraphAddKernelNode_v2(
                &mut node,
                graph.template.raw,
                dependencies.as_ptr().cast::<sys::CUgraphNode>(),
                dependencies.len(),
                &node_params,
            )
        };
        check("cuGraphAddKernelNode", result)?;
        Ok(GraphNode(node))
    }
}

impl Drop for SpinKernel {
    fn drop(&mut self) {
        let _current = Current::bind(&self.ctx);
        // Safety: loaded in `load`, unloaded only here.
        let _ = unsafe { sys::cuModuleUnload(self.module) };
    }
}
