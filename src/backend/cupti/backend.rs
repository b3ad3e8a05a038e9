//! [`CuptiBackend`]: CUDA timed by CUPTI's activity records, as a source of the one collector
//! (docs/cupti.md, docs/design.md section 13). It records no event: it ties each launching
//! API call to the zone open on the launching thread (the launch callback below), reads the
//! records of the work that ran (the flush thread, flush.rs), and puts their times on the
//! host clock (CUPTI reads the crate's clock itself, or an offset is measured).

use super::config::{fall_back, CuptiConfig};
use super::flush::{Flusher, RecordQueue};
use super::{call, ActivityTracer, CuptiError};
use crate::backend::activity::{
    current_zone, ActivityBatch, ActivityLosses, ActivitySource, Link, ReadFor, Timing, ZoneKey,
};
use crate::backend::cuda::{CudaBackend, Graph, GraphNode, TimingEvent};
use crate::backend::{Backend, BackendError};
use crossbeam_queue::SegQueue;
use cudarc::cupti::result::{self as cupti, activity};
use cudarc::cupti::sys;
use cudarc::driver::{CudaContext, CudaStream};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Where the host clock of CUPTI's records reads 0: one origin for the process, so that
/// CUPTI's timestamp callback (which takes no user pointer) reads the same clock as
/// [`Backend::host_now_ns`].
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// What the timestamp callback adds to the host clock: CUPTI may take 0 for "no time".
const CALLBACK_BIAS_NS: i64 = 1_000_000_000;

/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
const FLUSH_FORCED: u32 = 1;

fn origin() -> Instant {
    *ORIGIN.get_or_init(Instant::now)
}

/// The host clock of every [`CuptiBackend`] in the process, in nanoseconds since one
/// `Instant`: the clock of its zones' host times ([`Backend::host_now_ns`]; a sink made
/// before the context, such as `TracySink::new`, takes this function).
pub fn host_now_ns() -> i64 {
    i64::try_from(origin().elapsed().as_nanos()).unwrap_or(i64::MAX)
}

/// CUPTI's clock, when it takes ours: the host clock plus the bias, never 0.
unsafe extern "C" fn host_clock() -> u64 {
    (host_now_ns() + CALLBACK_BIAS_NS) as u64
}

/// Launch links, pushed by the launch callback on the launching threads, popped by the
/// collector's read. Bounded by `LINKS_MAX` (set by the running backend): past it a link is
/// dropped and counted, and its work comes out alone.
static LINKS: SegQueue<Link> = SegQueue::new();
static LINKS_LEN: AtomicUsize = AtomicUsize::new(0);
static LINKS_MAX: AtomicUsize = AtomicUsize::new(0);
static LINKS_DROPPED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The outermost linked call in progress on this thread (its correlation id) and how
    /// many linked calls are in progress inside it: a linked call made inside it (the
    /// runtime's `cudaLaunchKernel` calling the driver, or another runtime entry point) is
    /// the same launch.
    static OUTER_CALL: Cell<Option<(u32, u32)>> = const { Cell::new(None) };
}

fn push_link(link: Link) {
    if LINKS_LEN.fetch_add(1, Relaxed) < LINKS_MAX.load(Relaxed) {
        LINKS.push(link);
    } else {
        LINKS_LEN.fetch_sub(1, Relaxed);
        LINKS_DROPPED.fetch_add(1, Relaxed);
    }
}

type OnLaunch = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    sys::CUpti_CallbackDomain,
    sys::CUpti_CallbackId,
    *const std::ffi::c_void,
);

/// CUPTI's callback at the entry and exit of each launching API call (only those that make a
/// work record: `super::enable_launch_callbacks`): ties the call's correlation id to the zone
/// open on this thread, if any, and unties it if the call failed.
unsafe extern "C" fn on_launch(
    _user: *mut std::ffi::c_void,
    _domain: sys::CUpti_CallbackDomain,
    _cbid: sys::CUpti_CallbackId,
    data: *const std::ffi::c_void,
) {
    if data.is_null() {
        return;
    }
    // Safety: for the API domains CUPTI passes a `CUpti_CallbackData`, valid during the call.
    let data = unsafe { &*data.cast::<sys::CUpti_CallbackData>() };
    let Some(zone) = current_zone() else { return };
    let enter = data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER;
    // Safety: at the exit, CUPTI points `functionReturnValue` at the call's result, a
    // `CUresult` or `cudaError_t` (both 32-bit, 0 for success).
    let failed = !enter
        && !data.functionReturnValue.is_null()
        && unsafe { data.functionReturnValue.cast::<i32>().read_unaligned() } != 0;
    let _ = OUTER_CALL.try_with(|outer| {
        if let Some(link) = link_call(outer, enter, data.correlationId, failed, zone) {
            push_link(link);
        }
    });
}

/// The link a launching call's entry or exit makes, if any; `outer` is the thread's
/// outermost linked call in progress and the depth of calls inside it ([`OUTER_CALL`]). At
/// the entry, before the driver enqueues anything, the call is tied to `zone`: the link is
/// queued before the work can finish, so before its record can be read (invariant L). A
/// call made inside another linked call is the same launch: CUPTI calls back for the
/// runtime's entry point and for the driver call under it (on CUDA 13 with the same
/// correlation id: no second link; a runtime entry point calling another may give each an id
/// of its own: linked as made inside the outermost), and the work's records carry one of
/// them. At the exit a call that failed launched nothing and is untied.
fn link_call(
    outer: &Cell<Option<(u32, u32)>>,
    enter: bool,
    correlation: u32,
    failed: bool,
    zone: ZoneKey,
) -> Option<Link> {
    if enter {
        return match outer.get() {
            None => {
                outer.set(Some((correlation, 1)));
                Some(Link { correlation, zone: Some(zone), outer: None })
            }
            Some((id, depth)) => {
                outer.set(Some((id, depth + 1)));
                (id != correlation).then_some(Link { correlation, zone: Some(zone), outer: Some(id) })
            }
        };
    }
    outer.set(match outer.get() {
        Some((id, depth)) if depth > 1 => Some((id, depth - 1)),
        _ => None,
    });
    failed.then_some(Link { correlation, zone: None, outer: None })
}

/// How CUPTI's times reach the host clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// CUPTI reads the host clock itself (`cuptiActivityRegisterTimestampCallback`): its
    /// times are host times, exactly.
    Callback,
    /// CUPTI keeps its own clock (nanoseconds since the Unix epoch); each read pairs it with
    /// the host clock (`cuptiGetTimestamp` between two host reads, the closest of three pairs)
    /// and shifts records by the difference.
    Offset,
}

/// CUDA timed by CUPTI's activity records: every kernel, copy and memset the process
/// launches is a zone on its stream's lane, with no CUDA event, nested in the zones open on
/// the launching thread (docs/cupti.md). Give it to [`TracingContext::builder`](crate::TracingContext::builder)
/// in place of a [`CudaBackend`]: streams are the same `Arc<CudaStream>`, and the same lists,
/// guards, frames and sinks work unchanged.
///
/// CUPTI's activity state is process-wide: one at a time ([`CuptiError::AlreadyStarted`]),
/// feeding one context (a second context built on it, or on a clone, fails: the records would
/// be split between them). CUPTI takes one subscriber per process: under another tool that
/// holds it, [`new`](Self::new) fails with [`CuptiError::OtherSubscriber`], or, with
/// [`CuptiConfig::fall_back_to_events`], times zones with CUDA events ([`timing`](Backend::timing)
/// says which). Cheap to clone: clones share the tracer.
///
/// ```no_run
/// use gpu_event_pool::backend::cupti::CuptiBackend;
/// use gpu_event_pool::{location, sink::memory::MemorySink, TracingContext};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cupti = CuptiBackend::new(0)?; // was: CudaBackend::new(0)?
/// let stream = cupti.new_stream()?;
/// let zones = MemorySink::new();
/// let ctx = TracingContext::builder(cupti.clone()).sink(zones.clone()).build()?;
/// let mut list = ctx.list();
/// {
///     let _pass = list.zone(&stream, location!("pass"));
///     // ... launch kernels on `stream`: each becomes a child zone of "pass" ...
/// }
/// ctx.submit(list)?;
/// stream.synchronize()?;
/// ctx.flush()?;
/// assert_eq!(ctx.stats().activity.losses.records_dropped, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CuptiBackend {
    cuda: CudaBackend,
    /// CUPTI's tracer and records; `None` once it fell back to CUDA events (another
    /// subscriber holds CUPTI): its events are then `cuda`'s.
    state: Option<Arc<CuptiState>>,
}

/// What a backend and its clones share; dropped with the last of them (after the context's
/// final read).
struct CuptiState {
    /// The thread that asks CUPTI for its complete buffers every period (stopped first).
    flusher: Flusher,
    /// Whether a context reads this backend's records (one may: `attach`).
    attached: std::sync::atomic::AtomicBool,
    queue: Arc<RecordQueue>,
    tracer: Arc<ActivityTracer>,
    clock: ClockSource,
}

impl std::fmt::Debug for CuptiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuptiState").field("clock", &self.clock).finish_non_exhaustive()
    }
}

impl CuptiBackend {
    /// CUPTI on the primary context of device `ordinal`, with the default settings.
    pub fn new(ordinal: usize) -> Result<Self, CuptiError> {
        let cuda = CudaBackend::new(ordinal).map_err(CuptiError::Cuda)?;
        Self::with_config(cuda, CuptiConfig::default())
    }

    /// CUPTI on an existing `cudarc` context, with the default settings.
    pub fn from_context(ctx: Arc<CudaContext>) -> Result<Self, CuptiError> {
        Self::with_config(CudaBackend::from_context(ctx), CuptiConfig::default())
    }

    /// CUPTI beside the CUDA backend `cuda` (its context, streams and graphs), with `config`.
    /// Fails when libcupti is missing, another CUPTI client is attached (unless
    /// [`CuptiConfig::fall_back_to_events`]: then zones are timed with CUDA events), profiling
    /// is not permitted, or CUPTI is already in use in this process; nothing is left behind
    /// then.
    pub fn with_config(cuda: CudaBackend, config: CuptiConfig) -> Result<Self, CuptiError> {
        super::library_present()?;
        if super::STARTED.load(std::sync::atomic::Ordering::Acquire) {
            // Leave the running tracer's clock alone.
            return Err(CuptiError::AlreadyStarted);
        }
        let _ = origin();
        // Before the tracer enables any kind, so that every record is on one clock.
        // Safety: `host_clock` is a plain function that touches only `ORIGIN`.
        let clock = match unsafe { sys::cuptiActivityRegisterTimestampCallback(Some(host_clock)) }.result() {
            Ok(()) => ClockSource::Callback,
            Err(_) => ClockSource::Offset,
        };
        let on_launch = config.launch_callback.then_some(on_launch as OnLaunch);
        let tracer = match ActivityTracer::start_with(config.buffers, on_launch) {
            Ok(tracer) => Arc::new(tracer),
            Err(e) => {
                if clock == ClockSource::Callback && e != CuptiError::AlreadyStarted {
                    // Safety: clearing the callback registered above; no tracer runs.
                    let _ = unsafe { sys::cuptiActivityRegisterTimestampCallback(None) };
                }
                fall_back(e, &config)?;
                log::warn!(
                    target: "gpu_event_pool",
                    "another CUPTI subscriber holds CUPTI: timing zones with CUDA events (CuptiConfig::fall_back_to_events)"
                );
                return Ok(Self { cuda, state: None });
            }
        };
        // Links of an earlier backend's zones: drop them.
        while LINKS.pop().is_some() {}
        LINKS_LEN.store(0, Relaxed);
        LINKS_MAX.store(config.max_pending_links, Relaxed);
        let queue = Arc::new(RecordQueue::new(config.max_pending_records, CALLBACK_BIAS_NS));
        let state = CuptiState {
            flusher: Flusher::start(config.flush_period, &tracer, &queue),
            attached: std::sync::atomic::AtomicBool::new(false),
            queue,
            tracer,
            clock,
        };
        state.measure_offset()?;
        Ok(Self { cuda, state: Some(Arc::new(state)) })
    }

    /// The CUDA backend beside it (context, streams, graphs, the spin kernel).
    pub fn cuda(&self) -> &CudaBackend {
        &self.cuda
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.cuda.context()
    }

    /// A new stream (non-blocking) on the backend's context.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, BackendError> {
        self.cuda.new_stream()
    }

    /// How CUPTI's times reach the host clock; `None` when the backend fell back to CUDA
    /// events ([`CuptiConfig::fall_back_to_events`]).
    pub fn clock_source(&self) -> Option<ClockSource> {
        self.state.as_ref().map(|state| state.clock)
    }
}

impl CuptiState {
    /// Sets the queue's offset: the callback's bias, or CUPTI's clock minus the host clock
    /// from the closest of three back-to-back pairs.
    fn measure_offset(&self) -> Result<(), CuptiError> {
        if self.clock == ClockSource::Offset {
            let mut best = (i64::MAX, 0);
            for _ in 0..3 {
                let before = host_now_ns();
                let cupti = super::timestamp_ns()? as i64;
                let after = host_now_ns();
                best = best.min((after - before, cupti - (before + (after - before) / 2)));
            }
            self.queue.set_offset(best.1);
        }
        Ok(())
    }
}

impl ActivitySource for CuptiState {
    fn read(&self, why: ReadFor, out: &mut ActivityBatch) -> Result<(), BackendError> {
        let failed = |e: CuptiError| BackendError::new("CUPTI", e.to_string());
        self.measure_offset().map_err(failed)?;
        // Records first: a record read now had its link queued before (at its launch's entry).
        // A collect leaves the buffers to the flush thread (when it runs); a flush asks CUPTI
        // for every buffer whose records are complete, so that work done before it is in it.
        if why == ReadFor::Final {
            activity::flush_all(FLUSH_FORCED).map_err(call("cuptiActivityFlushAll")).map_err(failed)?;
        } else if why == ReadFor::Flush || !self.flusher.running() {
            activity::flush_all(0).map_err(call("cuptiActivityFlushAll")).map_err(failed)?;
        }
        self.queue.read(&*self.tracer, false);
        self.queue.take(&mut out.activities).map_err(failed)?;
        // Then the links: those of every record above, and more.
        while let Some(link) = LINKS.pop() {
            LINKS_LEN.fetch_sub(1, Relaxed);
            out.links.push(link);
        }
        Ok(())
    }

    fn attach(&self) -> Result<(), BackendError> {
        if self.attached.swap(true, Relaxed) {
            return Err(BackendError::new(
                "CuptiBackend",
                "a second context on one CuptiBackend: its records would be split between them; build one context",
            ));
        }
        Ok(())
    }

    fn losses(&self) -> ActivityLosses {
        let losses = self.tracer.losses();
        ActivityLosses {
            records_dropped: losses.records_dropped,
            buffers_refused: losses.buffers_refused,
            records_incomplete: self.queue.incomplete(),
            links_dropped: LINKS_DROPPED.load(Relaxed),
        }
    }
}

impl Drop for CuptiState {
    fn drop(&mut self) {
        // The flush thread ends before the tracer does.
        self.flusher = Flusher::none();
        if self.clock == ClockSource::Callback {
            // Safety: clearing the callback; CUPTI goes back to its own clock.
            let _ = unsafe { sys::cuptiActivityRegisterTimestampCallback(None) };
        }
    }
}

/// The call a graph zone is refused with while CUPTI times zones.
const NO_GRAPH_ZONES: &str = "cupti::add_graph_record_node";

impl Backend for CuptiBackend {
    /// No event (`None`) while zones are timed by CUPTI's records; a CUDA event once the
    /// backend fell back to them.
    type Event = Option<TimingEvent>;
    type Stream = Arc<CudaStream>;
    type Graph = Graph;
    type GraphNode = GraphNode;

    const TIMING: Timing = Timing::Activities;

    fn name(&self) -> &'static str {
        "cupti"
    }
    fn timing(&self) -> Timing {
        if self.state.is_some() {
            Timing::Activities
        } else {
            Timing::Events
        }
    }
    fn create_event(&self) -> Result<Option<TimingEvent>, BackendError> {
        match self.state {
            Some(_) => Ok(None),
            None => self.cuda.create_event().map(Some),
        }
    }
    fn record(&self, event: &Option<TimingEvent>, stream: &Arc<CudaStream>) -> Result<(), BackendError> {
        match event {
            Some(event) => self.cuda.record(event, stream),
            None => Ok(()),
        }
    }
    fn add_graph_record_node(
        &self,
        event: &Option<TimingEvent>,
        graph: &Graph,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, BackendError> {
        match event {
            Some(event) => self.cuda.add_graph_record_node(event, graph, dependencies),
            None => Err(BackendError::new(NO_GRAPH_ZONES, "graph zones are not timed by activity records")),
        }
    }
    fn is_complete(&self, event: &Option<TimingEvent>) -> Result<bool, BackendError> {
        event.as_ref().map_or(Ok(true), |event| self.cuda.is_complete(event))
    }
    fn wait(&self, event: &Option<TimingEvent>) -> Result<(), BackendError> {
        event.as_ref().map_or(Ok(()), |event| self.cuda.wait(event))
    }
    fn elapsed_ms(
        &self,
        start: &Option<TimingEvent>,
        end: &Option<TimingEvent>,
    ) -> Result<Option<f32>, BackendError> {
        match (start, end) {
            (Some(start), Some(end)) => self.cuda.elapsed_ms(start, end),
            _ => Ok(Some(0.0)),
        }
    }
    fn create_stream(&self) -> Result<Arc<CudaStream>, BackendError> {
        self.cuda.new_stream()
    }
    /// CUPTI's ids of the stream's context and of the stream: the lane of its work's records
    /// (`u64::MAX` when CUPTI cannot name it: its zones then have no work of their own). The
    /// CUDA backend's key once it fell back to CUDA events.
    fn stream_key(&self, stream: &Arc<CudaStream>) -> u64 {
        if self.state.is_none() {
            return self.cuda.stream_key(stream);
        }
        let (mut context, mut id) = (0, 0);
        // Safety: the context and stream are live (borrowed); the ids are valid out-pointers.
        let named = unsafe {
            cupti::get_context_id(stream.context().cu_ctx(), &mut context).is_ok()
                && cupti::get_stream_id(stream.context().cu_ctx(), stream.cu_stream(), &mut id).is_ok()
        };
        if named {
            super::lane_key(context, id)
        } else {
            u64::MAX
        }
    }
    fn graph_key(&self, graph: &Graph) -> u64 {
        self.cuda.graph_key(graph)
    }
    fn host_now_ns(&self) -> i64 {
        host_now_ns()
    }
    fn host_clock_origin(&self) -> Option<Instant> {
        Some(origin())
    }
    fn activity_source(&self) -> Option<&dyn ActivitySource> {
        self.state.as_deref().map(|state| state as &dyn ActivitySource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::activity::ZoneKey;

    #[test]
    fn links_beyond_the_bound_are_dropped_and_counted() {
        LINKS_MAX.store(3, Relaxed);
        let dropped = LINKS_DROPPED.load(Relaxed);
        let zone = ZoneKey { context: 1, list: 1, position: 0 };
        for correlation in 0..5 {
            push_link(Link { correlation, zone: Some(zone), outer: None });
        }
        assert_eq!(LINKS_DROPPED.load(Relaxed) - dropped, 2);
        let mut kept = Vec::new();
        while let Some(link) = LINKS.pop() {
            LINKS_LEN.fetch_sub(1, Relaxed);
            kept.push(link.correlation);
        }
        assert_eq!(kept, [0, 1, 2], "the first three, in order");
        push_link(Link { correlation: 7, zone: Some(zone), outer: None });
        assert_eq!(LINKS.pop().map(|l| l.correlation), Some(7), "room again once collected");
        LINKS_LEN.fetch_sub(1, Relaxed);
    }

    #[test]
    fn calls_made_inside_a_linked_call_are_its_launch() {
        let zone = ZoneKey { context: 1, list: 1, position: 0 };
        let outer = Cell::new(None);
        let (enter, exit) = (true, false);
        let mut links = Vec::new();
        // cudaLaunchKernel and the driver call under it, one id (82: what CUDA 13 gives);
        // a runtime entry point (10) calling another (11) which calls the driver (12); a
        // failing memset (20) whose driver call (20) fails too.
        for (site, correlation, failed) in [
            (enter, 82, false),
            (enter, 82, false),
            (exit, 82, false),
            (exit, 82, false),
            (enter, 10, false),
            (enter, 11, false),
            (enter, 12, false),
            (exit, 12, false),
            (exit, 11, false),
            (exit, 10, false),
            (enter, 20, false),
            (enter, 20, false),
            (exit, 20, true),
            (exit, 20, true),
        ] {
            links.extend(link_call(&outer, site, correlation, failed, zone));
        }
        let tied = |correlation, outer| Link { correlation, zone: Some(zone), outer };
        let untied = |correlation| Link { correlation, zone: None, outer: None };
        assert_eq!(
            links,
            [
                tied(82, None),
                tied(10, None),
                tied(11, Some(10)),
                tied(12, Some(10)),
                tied(20, None),
                untied(20),
                untied(20)
            ]
        );
        assert_eq!(outer.get(), None, "no call in progress");
    }
}
