//! CUDA graphs built node by node ([`Graph`]), their instances ([`GraphExec`]), and the state
//! that keeps a graph's zone events from being read before its timed launch.

use super::driver::{check, lock, Current};
use crate::backend::BackendError;
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

/// Whether a graph's zones may still be read, and whether its timed launch may still happen.
#[derive(Debug, Default)]
pub(super) struct TimingState {
    /// An instance was made: no more zone nodes (existing instances would not have them).
    pub(super) instantiated: bool,
    /// The timed launch was queued: the zone events hold its times.
    pub(super) launched: bool,
    /// A zone event left the graph, or was read before the launch: no launch may record
    /// the pool's events any more.
    pub(super) abandoned: bool,
}

/// The part of a graph its zone events point back to.
#[derive(Debug, Default)]
pub(super) struct GraphTiming {
    pub(super) state: Mutex<TimingState>,
}

impl GraphTiming {
    pub(super) fn abandon(&self) {
        let mut state = lock(&self.state);
        if !state.launched {
            state.abandoned = true;
        }
    }

    /// Whether the timed launch happened; if not, the zones are abandoned (their reader is
    /// about to fail and release their slots).
    pub(super) fn launched_or_abandon(&self) -> bool {
        let mut state = lock(&self.state);
        state.abandoned |= !state.launched;
        state.launched
    }
}

/// The graph itself, shared by [`Graph`] and its instances (which need its nodes).
pub(super) struct GraphTemplate {
    pub(super) raw: sys::CUgraph,
    pub(super) ctx: Arc<CudaContext>,
    /// The zone (event-record) nodes, in the order they were added.
    pub(super) zone_nodes: Mutex<Vec<GraphNode>>,
    pub(super) timing: Arc<GraphTiming>,
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
/// [`raw`](Self::raw) and `cudarc::driver::sys`, or [`SpinKernel::add_to_graph`](super::SpinKernel::add_to_graph)) and zone
/// nodes ([`EventList::graph_zone_begin`](crate::EventList::graph_zone_begin) and friends).
/// Its zones time its first launch only: see the [module docs](super).
///
/// `Send` but not `Sync`: the driver requires one thread at a time per graph.
pub struct Graph {
    pub(super) template: Arc<GraphTemplate>,
    pub(super) _not_sync: PhantomData<Cell<()>>,
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
pub struct GraphNode(pub(super) sys::CUgraphNode);

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
