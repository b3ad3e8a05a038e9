//! CUDA through `cudarc`'s driver API (feature `cuda`).
//!
//! The driver library is loaded at run time (`cudarc`'s `dynamic-loading`), so the crate
//! builds, and [`CudaBackend::new`] fails cleanly, on machines without CUDA;
//! [`is_no_device`] tells that failure apart from a real one.
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
//!   the graph's first launch fails with code `GRAPH_NOT_LAUNCHED` (its zones are dropped
//!   and counted, its slots released); the graph's zones are then abandoned, and its first
//!   launch runs untimed.
//! - Add every zone node before instantiating: adding one to an instantiated graph fails
//!   with code `GRAPH_ALREADY_INSTANTIATED`.
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

use super::Backend;
use crate::error::BackendError;
use cudarc::driver::result::DriverError;
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::cell::Cell;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// The `code` of the error [`CudaBackend::new`] returns when the driver library is missing.
pub const NO_DRIVER_LIBRARY: &str = "NO_DRIVER_LIBRARY";
/// The `code` of a read of a graph zone whose graph has not been launched.
pub const GRAPH_NOT_LAUNCHED: &str = "GRAPH_NOT_LAUNCHED";
/// The `code` of adding a zone node to a graph that has already been instantiated.
pub const GRAPH_ALREADY_INSTANTIATED: &str = "GRAPH_ALREADY_INSTANTIATED";

/// The spin kernel, NUL-terminated for `cuModuleLoadData`.
const SPIN_PTX: &str = concat!(include_str!("spin_kernel.ptx"), "\0");

fn error(call: &'static str, result: sys::CUresult) -> BackendError {
    // The variants of `CUresult` are named after the driver's codes.
    BackendError::new(call, format!("{result:?}"))
}

fn check(call: &'static str, result: sys::CUresult) -> Result<(), BackendError> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(error(call, other)),
    }
}

fn driver(call: &'static str) -> impl FnOnce(DriverError) -> BackendError {
    move |e| error(call, e.0)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `error` (from [`CudaBackend::new`]) means this machine has no usable CUDA GPU:
/// no driver library, no device, or only the driver's stub library. Tests and benchmarks
/// skip on it; any other error is a real failure.
pub fn is_no_device(error: &BackendError) -> bool {
    matches!(
        error.code.as_str(),
        NO_DRIVER_LIBRARY | "CUDA_ERROR_NO_DEVICE" | "CUDA_ERROR_STUB_LIBRARY" | "CUDA_ERROR_INVALID_DEVICE"
    )
}

/// CUDA on one device context. Cheap to clone: clones share the context and the host clock.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    /// The host clock's origin.
    origin: Instant,
}

impl CudaBackend {
    /// The primary context of device `ordinal`. Fails with code [`NO_DRIVER_LIBRARY`] when
    /// `libcuda` cannot be loaded, and with the `CUresult` name otherwise (see
    /// [`is_no_device`]).
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

/// The backend's context made current on the calling thread for one call, and the thread's
/// previous current context put back when dropped: a thread that also drives another context
/// (another library's, or another device's) is never left switched.
///
/// When the backend's context is already current (the usual case) this costs one
/// `cuCtxGetCurrent` and changes nothing.
#[must_use = "the context is current only while this lives"]
struct Current {
    /// The context to restore (null: none was current), when the call changed it.
    previous: Option<sys::CUcontext>,
}

impl Current {
    fn bind(ctx: &CudaContext) -> Result<Self, BackendError> {
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
    fn saved() -> Result<Self, BackendError> {
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

    /// Fails with [`GRAPH_NOT_LAUNCHED`] if the event is a node of a graph whose timed launch
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

/// Whether a graph's zones may still be read, and whether its timed launch may still happen.
#[derive(Debug, Default)]
struct TimingState {
    /// An instance was made: no more zone nodes (existing instances would not have them).
    instantiated: bool,
    /// The timed launch was queued: the zone events hold its times.
    launched: bool,
    /// A zone event left the graph, or was read before the launch: no launch may record
    /// the pool's events any more.
    abandoned: bool,
}

/// The part of a graph its zone events point back to.
#[derive(Debug, Default)]
struct GraphTiming {
    state: Mutex<TimingState>,
}

impl GraphTiming {
    fn abandon(&self) {
        let mut state = lock(&self.state);
        if !state.launched {
            state.abandoned = true;
        }
    }

    /// Whether the timed launch happened; if not, the zones are abandoned (their reader is
    /// about to fail and release their slots).
    fn launched_or_abandon(&self) -> bool {
        let mut state = lock(&self.state);
        state.abandoned |= !state.launched;
        state.launched
    }
}

/// The graph itself, shared by [`Graph`] and its instances (which need its nodes).
struct GraphTemplate {
    raw: sys::CUgraph,
    ctx: Arc<CudaContext>,
    /// The zone (event-record) nodes, in the order they were added.
    zone_nodes: Mutex<Vec<GraphNode>>,
    timing: Arc<GraphTiming>,
}

// Safety: the graph is mutated only through `Graph`, which is `!Sync` (one thread at a
// time, as the driver requires); instances only read `zone_nodes`, under its mutex.
unsafe impl Send for GraphTemplate {}
// Safety: as above.
unsafe impl Sync for GraphTemplate {}

impl Drop for GraphTemplate {
    fn drop(&mut self) {
        let _current = Current::bind(&self.ctx);
        // Safety: the last owner destroys the graph once; its instances are already gone
        // (each holds an Arc to this template).
        let _ = unsafe { sys::cuGraphDestroy(self.raw) };
    }
}

/// A CUDA graph (`CUgraph`) built node by node: kernel nodes (your own through
/// [`raw`](Self::raw) and `cudarc::driver::sys`, or [`SpinKernel::add_to_graph`]) and zone
/// nodes ([`EventList::graph_zone_begin`](crate::EventList::graph_zone_begin) and friends).
/// Its zones time its first launch only: see the [module docs](self).
///
/// `Send` but not `Sync`: the driver requires one thread at a time per graph.
pub struct Graph {
    template: Arc<GraphTemplate>,
    _not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("raw", &self.template.raw).finish()
    }
}

impl Graph {
    /// The graph handle, to add your own nodes with `cudarc::driver::sys` (do not destroy
    /// it, and add zone nodes only through an [`EventList`](crate::EventList)).
    pub fn raw(&self) -> sys::CUgraph {
        self.template.raw
    }

    /// Makes a launchable instance. After this, zone nodes can no longer be added.
    pub fn instantiate(&self) -> Result<GraphExec, BackendError> {
        let template = &self.template;
        let _current = Current::bind(&template.ctx)?;
        lock(&template.timing.state).instantiated = true;
        let nodes = lock(&template.zone_nodes).clone();
        let mut exec = GraphExec {
            raw: std::ptr::null_mut(),
            template: Arc::clone(template),
            nodes,
            scratch: Vec::new(),
            detached: false,
            launches: 0,
        };
        // Safety: valid out-pointer; the graph is live and used by this thread only.
        let result = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec.raw, template.raw, 0) };
        check("cuGraphInstantiateWithFlags", result)?;
        for _ in 0..exec.nodes.len() {
            let mut raw = std::ptr::null_mut();
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            // Safety: valid out-pointer; the context is current.
            check("cuEventCreate", unsafe { sys::cuEventCreate(&mut raw, flags) })?;
            exec.scratch.push(raw);
        }
        Ok(exec)
    }
}

/// A node of a [`Graph`] (`CUgraphNode`), used as a dependency of later nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub struct GraphNode(sys::CUgraphNode);

// Safety: a node handle is an opaque identifier; it is only dereferenced by the driver in
// calls on its graph, which `Graph` serializes.
unsafe impl Send for GraphNode {}
// Safety: as above.
unsafe impl Sync for GraphNode {}

impl GraphNode {
    /// Wraps a node handle of a graph (one you added through `cudarc::driver::sys`).
    pub fn from_raw(raw: sys::CUgraphNode) -> Self {
        Self(raw)
    }

    /// The node handle.
    pub fn raw(&self) -> sys::CUgraphNode {
        self.0
    }
}

/// What a [`GraphExec::launch`] timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphLaunch {
    /// The graph's first launch: its zones time this one.
    Timed,
    /// A later launch (or the graph's zones were abandoned): runs untimed.
    Untimed,
}

/// A launchable instance of a [`Graph`] (`CUgraphExec`). Launch it only through
/// [`launch`](Self::launch).
pub struct GraphExec {
    raw: sys::CUgraphExec,
    template: Arc<GraphTemplate>,
    /// The template's zone nodes when this instance was made.
    nodes: Vec<GraphNode>,
    /// One private event per zone node, recorded instead of the pool's after the timed
    /// launch.
    scratch: Vec<sys::CUevent>,
    /// Whether the zone nodes record the scratch events.
    detached: bool,
    launches: u64,
}

// Safety: an instance is launched through `&mut self` only (one thread at a time, as the
// driver requires); the template is `Send + Sync`.
unsafe impl Send for GraphExec {}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphExec")
            .field("raw", &self.raw)
            .field("zone_nodes", &self.nodes.len())
            .field("detached", &self.detached)
            .field("launches", &self.launches)
            .finish()
    }
}

impl GraphExec {
    /// Launches the instance on `stream`. The graph's first launch is [`GraphLaunch::Timed`]:
    /// its zones hold this launch's times once it completes (submit their list after this
    /// call). Every later launch, of this or any other instance, is untimed.
    pub fn launch(&mut self, stream: &CudaStream) -> Result<GraphLaunch, BackendError> {
        let _current = Current::bind(&self.template.ctx)?;
        if !self.detached {
            let timing = Arc::clone(&self.template.timing);
            let mut state = lock(&timing.state);
            if !state.launched && !state.abandoned {
                self.launch_raw(stream)?;
                state.launched = true;
                drop(state);
                // If this fails, the next launch retries it before launching.
                self.detach()?;
                return Ok(GraphLaunch::Timed);
            }
            drop(state);
            self.detach()?;
        }
        self.launch_raw(stream)?;
        Ok(GraphLaunch::Untimed)
    }

    /// Launches so far.
    pub fn launches(&self) -> u64 {
        self.launches
    }

    /// The instance handle (launch only through [`launch`](Self::launch)).
    pub fn raw(&self) -> sys::CUgraphExec {
        self.raw
    }

    fn launch_raw(&mut self, stream: &CudaStream) -> Result<(), BackendError> {
        // Safety: the instance and the stream are live; `&mut self` serializes launches.
        check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.raw, stream.cu_stream()) })?;
        self.launches += 1;
        Ok(())
    }

    /// Points every zone node of this instance at its scratch event.
    fn detach(&mut self) -> Result<(), BackendError> {
        for (node, &scratch) in self.nodes.iter().zip(&self.scratch) {
            // Safety: the node is an event-record node of the template this instance was
            // made from (kept alive by `self.template`); the scratch event is ours. Queued
            // launches keep the events they were launched with.
            let result = unsafe { sys::cuGraphExecEventRecordNodeSetEvent(self.raw, node.0, scratch) };
            check("cuGraphExecEventRecordNodeSetEvent", result)?;
        }
        self.detached = true;
        Ok(())
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let _current = Current::bind(&self.template.ctx);
        if !self.raw.is_null() {
            // Safety: made by `cuGraphInstantiateWithFlags`, destroyed only here; the driver
            // defers the release until launches in flight complete.
            let _ = unsafe { sys::cuGraphExecDestroy(self.raw) };
        }
        for &event in &self.scratch {
            // Safety: created by `instantiate` for this instance only; the instance that
            // recorded it is destroyed above.
            let _ = unsafe { sys::cuEventDestroy_v2(event) };
        }
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
