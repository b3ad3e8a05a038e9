//! Every kernel, copy and memset as a zone, and the application's own zones around them, to
//! the crate's sinks: CUPTI's activity records with no CUDA event (docs/cupti.md,
//! docs/design.md section 13).

use super::assemble::{lane_key, Assembler, ClosedZone};
use super::flush::{Flusher, Reader};
use super::{call, ActivityRecord, ActivityTracer, CuptiError, TracerConfig};
use crate::launch::{thread_number, Launch};
use crate::location::Location;
use crate::sink::{Calibration, ContextInfo, Sink, ZoneBatch};
use crate::Lane;
use crossbeam_queue::SegQueue;
use cudarc::cupti::result::{self as cupti, activity};
use cudarc::cupti::sys;
use cudarc::driver::CudaStream;
use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// Where a [`CuptiContext`]'s host clock reads 0: one origin for the process, so that
/// CUPTI's timestamp callback (which takes no user pointer) reads the same clock.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// What the timestamp callback adds to the host clock: CUPTI may take 0 for "no time".
const CALLBACK_BIAS_NS: i64 = 1_000_000_000;

fn origin() -> Instant {
    *ORIGIN.get_or_init(Instant::now)
}

/// The host clock of every [`CuptiContext`] in the process, in nanoseconds: the clock of its
/// zones' host times (what [`CuptiContext::host_now_ns`] reads; a sink made before the context,
/// such as `TracySink::new`, takes this function).
pub fn host_now_ns() -> i64 {
    i64::try_from(origin().elapsed().as_nanos()).unwrap_or(i64::MAX)
}

/// CUPTI's clock, when it takes ours: the host clock plus the bias, never 0.
unsafe extern "C" fn host_clock() -> u64 {
    (host_now_ns() + CALLBACK_BIAS_NS) as u64
}

/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
const FLUSH_FORCED: u32 = 1;

/// (correlation id, zone) for each launch made inside a zone, pushed by `on_launch` on the
/// launching thread as the call enters, so before the zone's guard drops.
static LINKS: SegQueue<(u32, u64)> = SegQueue::new();

type OnLaunch = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    sys::CUpti_CallbackDomain,
    sys::CUpti_CallbackId,
    *const std::ffi::c_void,
);

/// CUPTI's callback at the entry and exit of a launching API call: ties its correlation id
/// to the zone open on this thread, if any, and unties it if the call failed.
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
    let zone = CURRENT.try_with(|c| c.get().0).unwrap_or(0);
    if zone == 0 {
        return;
    }
    if data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
        // At the entry, before the driver enqueues anything: the link is in `LINKS` before
        // the work can finish, so before its record can be delivered.
        LINKS.push((data.correlationId, zone));
    } else if !data.functionReturnValue.is_null() {
        // Safety: at the exit, CUPTI points `functionReturnValue` at the call's result, a
        // `CUresult` or `cudaError_t` (both 32-bit, 0 for success).
        let failed = unsafe { data.functionReturnValue.cast::<i32>().read_unaligned() } != 0;
        if failed {
            // It launched nothing: untie it (zone 0), after its link on the same queue.
            LINKS.push((data.correlationId, 0));
        }
    }
}

thread_local! {
    /// The innermost zone open on this thread (0: none) and the depth of the next one.
    static CURRENT: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// How CUPTI's times reach the host clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// CUPTI reads the context's host clock itself (`cuptiActivityRegisterTimestampCallback`):
    /// its times are host times, exactly.
    Callback,
    /// CUPTI keeps its own clock (nanoseconds since the Unix epoch); each collect pairs it
    /// with the host clock (`cuptiGetTimestamp` between two host reads, the closest of three
    /// pairs) and shifts records by the difference.
    Offset,
}

/// What one [`CuptiContext::collect`] or [`flush`](CuptiContext::flush) emitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CuptiCollected {
    /// User zones emitted.
    pub user_zones: usize,
    /// Kernels, copies and memsets emitted as zones.
    pub activities: usize,
}

/// A [`CuptiContext`]'s counts since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuptiStats {
    /// User zones emitted.
    pub user_zones: u64,
    /// Kernels, copies and memsets emitted as zones.
    pub activities: u64,
    /// User zones that ended with no GPU work on their stream (nothing to time): not emitted.
    pub empty_zones: u64,
    /// Records and user zones held, waiting for the rest of their tree.
    pub pending: usize,
    /// Batches that began before the end of a batch their stream had already emitted: CUPTI
    /// held back the buffer of their records (it hands a buffer over only when every record
    /// in it is complete). Chrome shows them as they ran; a sink that assumes time order per
    /// stream (Tracy) may draw them out of place.
    pub late_batches: u64,
    /// Records CUPTI dropped for want of buffer space, as CUPTI reports them: with each
    /// buffer it completes, so drops on a stream that gets no buffer again are not in it (a
    /// lower bound).
    pub records_dropped: u64,
    /// Buffer requests CUPTI got no buffer for: above 0, records were lost.
    pub buffers_refused: u64,
    /// Records delivered without their times (a forced flush of work that had not finished):
    /// not emitted.
    pub records_incomplete: u64,
    /// Sinks that failed or panicked and were dropped.
    pub sink_failures: u64,
    /// How CUPTI's times reach the host clock.
    pub clock: ClockSource,
}

#[derive(Debug, Default)]
struct Counts {
    user_zones: AtomicU64,
    activities: AtomicU64,
    empty_zones: AtomicU64,
    pending: AtomicUsize,
    late_batches: AtomicU64,
    records_incomplete: AtomicU64,
    sink_failures: AtomicU64,
}

struct Collector {
    assembler: Assembler,
    sinks: Vec<Option<Box<dyn Sink>>>,
}

/// Builds a [`CuptiContext`].
pub struct CuptiBuilder {
    name: String,
    tracer: TracerConfig,
    flush_period_ms: u32,
    launch_callback: bool,
    sinks: Vec<Box<dyn Sink>>,
}

impl std::fmt::Debug for CuptiBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuptiBuilder")
            .field("name", &self.name)
            .field("tracer", &self.tracer)
            .field("flush_period_ms", &self.flush_period_ms)
            .field("launch_callback", &self.launch_callback)
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl CuptiBuilder {
    /// The context's name (sinks show it). Default `"cupti"`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// CUPTI's buffer pool. Default [`CuptiBuilder::DEFAULT_TRACER`]: CUPTI fills a buffer
    /// per stream with work in flight (and one for records of no stream), so give at least
    /// two per stream the process uses at once.
    pub fn tracer(mut self, config: TracerConfig) -> Self {
        self.tracer = config;
        self
    }

    /// How often the context's flush thread asks CUPTI for the buffers whose records are all
    /// complete, full or not (`cuptiActivityFlushAll`, not forced), in milliseconds; default
    /// [`DEFAULT_FLUSH_PERIOD_MS`](Self::DEFAULT_FLUSH_PERIOD_MS): `collect` reads what was
    /// handed over, so this bounds how late a zone comes out. One thread asks, not the
    /// threads that collect: measured on the H200, asking from busy recording threads bent
    /// CUPTI's times against the host clock by tens of microseconds. 0: no flush thread,
    /// and every `collect` asks.
    pub fn flush_period_ms(mut self, ms: u32) -> Self {
        self.flush_period_ms = ms;
        self
    }

    /// Whether CUPTI calls the context at each launching API call, to tie the launch to the
    /// zone open on the thread (default on). Off, launches cost CUPTI's record alone, every
    /// kernel, copy and memset comes out at depth 0, and user zones, with no work tied to
    /// them, are counted in [`CuptiStats::empty_zones`] instead of emitted.
    pub fn launch_callback(mut self, on: bool) -> Self {
        self.launch_callback = on;
        self
    }

    /// The default buffer pool of a context: 64 buffers of 1 MiB.
    pub const DEFAULT_TRACER: TracerConfig = TracerConfig { buffer_size: 1 << 20, buffer_count: 64 };
    /// The default flush period.
    pub const DEFAULT_FLUSH_PERIOD_MS: u32 = 5;

    /// Adds a sink.
    pub fn sink(mut self, sink: impl Sink + 'static) -> Self {
        self.sinks.push(Box::new(sink));
        self
    }

    /// Starts CUPTI's activity tracing and opens the sinks. Fails when libcupti is missing,
    /// another CUPTI client is attached, profiling is not permitted, or a context (or an
    /// [`ActivityTracer`]) already runs in this process; nothing is left behind then.
    pub fn build(self) -> Result<CuptiContext, CuptiError> {
        super::library_present()?;
        if super::STARTED.load(std::sync::atomic::Ordering::Acquire) {
            // Leave the running tracer's clock alone.
            return Err(CuptiError::AlreadyStarted);
        }
        let origin = origin();
        // Before the tracer enables any kind, so that every record is on one clock.
        // Safety: `host_clock` is a plain function that touches only `ORIGIN`.
        let clock = match unsafe { sys::cuptiActivityRegisterTimestampCallback(Some(host_clock)) }.result() {
            Ok(()) => ClockSource::Callback,
            Err(_) => ClockSource::Offset,
        };
        let tracer = match ActivityTracer::start_with(
            self.tracer,
            self.launch_callback.then_some(on_launch as OnLaunch),
        ) {
            Ok(tracer) => tracer,
            Err(e) => {
                if clock == ClockSource::Callback && e != CuptiError::AlreadyStarted {
                    // Safety: clearing the callback registered above; no tracer runs.
                    let _ = unsafe { sys::cuptiActivityRegisterTimestampCallback(None) };
                }
                return Err(e);
            }
        };
        // Links of an earlier context's zones: their ids are never reused, but drop them.
        while LINKS.pop().is_some() {}

        let base_host_ns = host_now_ns();
        let info = ContextInfo {
            id: crate::context::next_context_id(),
            name: self.name,
            backend: "cupti",
            base: Calibration { gpu_ns: 0, host_ns: base_host_ns },
            host_clock_origin: Some(origin),
        };
        let counts = Counts::default();
        let mut sinks = Vec::with_capacity(self.sinks.len());
        for mut sink in self.sinks {
            let opened = catch_unwind(AssertUnwindSafe(|| sink.open(&info)));
            if matches!(opened, Ok(Ok(()))) {
                sinks.push(Some(sink));
            } else {
                counts.sink_failures.fetch_add(1, Relaxed);
            }
        }
        let tracer = Arc::new(tracer);
        let reader = Arc::new(Reader::default());
        let context = CuptiContext {
            flusher: Flusher::start(self.flush_period_ms, &tracer, &reader),
            tracer,
            reader,
            info,
            clock,
            offset_ns: AtomicI64::new(0),
            next_id: AtomicU64::new(1),
            closed: SegQueue::new(),
            names: SegQueue::new(),
            collector: Mutex::new(Collector { assembler: Assembler::new(base_host_ns), sinks }),
            counts,
        };
        context.measure_offset()?;
        Ok(context)
    }
}

/// Times every kernel, memory copy and memset the process launches while it lives, with no
/// CUDA event, and the application's zones around them ([`zone`](Self::zone)); hands them to
/// its sinks on [`collect`](Self::collect) (module doc, docs/cupti.md).
///
/// CUPTI's activity state is process-wide: one context (or [`ActivityTracer`]) at a time.
pub struct CuptiContext {
    tracer: Arc<ActivityTracer>,
    /// Records read by the flush thread, for the collector.
    reader: Arc<Reader>,
    info: ContextInfo,
    clock: ClockSource,
    /// The thread that asks CUPTI for its complete buffers every flush period.
    flusher: Flusher,
    /// CUPTI's clock minus the host clock (Offset mode), or the callback's bias.
    offset_ns: AtomicI64,
    next_id: AtomicU64,
    /// Zones whose guard dropped, for the collector: pushed lock-free by recording threads.
    closed: SegQueue<ClosedZone>,
    names: SegQueue<(u64, String)>,
    collector: Mutex<Collector>,
    counts: Counts,
}

impl std::fmt::Debug for CuptiContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuptiContext").field("name", &self.info.name).field("stats", &self.stats()).finish()
    }
}

impl CuptiContext {
    /// A builder with no sink, named `"cupti"`, with the default buffer pool.
    pub fn builder() -> CuptiBuilder {
        CuptiBuilder {
            name: "cupti".to_owned(),
            tracer: CuptiBuilder::DEFAULT_TRACER,
            flush_period_ms: CuptiBuilder::DEFAULT_FLUSH_PERIOD_MS,
            launch_callback: true,
            sinks: Vec::new(),
        }
    }

    /// The host clock, in nanoseconds since [`host_clock_origin`](Self::host_clock_origin):
    /// the clock of every zone's host times.
    pub fn host_now_ns(&self) -> i64 {
        host_now_ns()
    }

    /// Where the host clock reads 0 (the same for every context in the process).
    pub fn host_clock_origin(&self) -> Instant {
        origin()
    }

    /// What the sinks were told about this context.
    pub fn info(&self) -> &ContextInfo {
        &self.info
    }

    /// Begins a zone on `stream`: the kernels, copies and memsets this thread launches until
    /// the guard drops become its children, and its GPU span is theirs (with the spans of
    /// zones nested in it) on `stream`. Drop nested guards innermost first (as scopes do).
    /// A zone with no work on `stream` is counted in [`CuptiStats::empty_zones`], not emitted.
    pub fn zone(&self, stream: &CudaStream, location: impl Into<Location>) -> CuptiZone<'_> {
        let host_begin = host_now_ns();
        let id = self.next_id.fetch_add(1, Relaxed);
        let lane = lane_of(stream).ok();
        let (parent, depth) = CURRENT.with(Cell::get);
        CURRENT.with(|c| c.set((id, depth + 1)));
        let launch = Launch::new(host_begin, host_now_ns(), thread_number());
        CuptiZone {
            context: self,
            zone: Some(ClosedZone { id, parent, depth, location: location.into(), lane, launch }),
            _thread: PhantomData,
        }
    }

    /// Names `stream`'s lane in the sinks (delivered before the next batch).
    pub fn name_stream(&self, stream: &CudaStream, name: &str) -> Result<(), CuptiError> {
        self.names.push((lane_of(stream)?, name.to_owned()));
        Ok(())
    }

    /// Reads the buffers CUPTI handed over (the flush thread asks for every buffer whose
    /// records are all complete once per flush period: [`CuptiBuilder::flush_period_ms`])
    /// and emits every zone whose tree is complete, each stream's in its GPU order. Returns
    /// at once, with nothing, while another thread collects.
    pub fn collect(&self) -> Result<CuptiCollected, CuptiError> {
        match self.collector.try_lock() {
            Ok(mut collector) => self.collect_locked(&mut collector, false),
            Err(std::sync::TryLockError::Poisoned(p)) => self.collect_locked(&mut p.into_inner(), false),
            Err(std::sync::TryLockError::WouldBlock) => Ok(CuptiCollected::default()),
        }
    }

    /// Emits everything: call it after synchronizing every stream the process traced. CUPTI
    /// hands over every buffer (forced flush); zones whose work CUPTI dropped go out with
    /// what arrived; work whose zone never ended goes out alone. Then flushes the sinks.
    pub fn flush(&self) -> Result<CuptiCollected, CuptiError> {
        let mut collector = self.collector.lock().unwrap_or_else(PoisonError::into_inner);
        let out = self.collect_locked(&mut collector, true)?;
        self.each_sink(&mut collector, |sink| sink.flush());
        Ok(out)
    }

    /// Counts so far.
    pub fn stats(&self) -> CuptiStats {
        let c = &self.counts;
        let losses = self.tracer.losses();
        CuptiStats {
            user_zones: c.user_zones.load(Relaxed),
            activities: c.activities.load(Relaxed),
            empty_zones: c.empty_zones.load(Relaxed),
            pending: c.pending.load(Relaxed) + self.closed.len(),
            late_batches: c.late_batches.load(Relaxed),
            records_dropped: losses.records_dropped,
            buffers_refused: losses.buffers_refused,
            records_incomplete: c.records_incomplete.load(Relaxed),
            sink_failures: c.sink_failures.load(Relaxed),
            clock: self.clock,
        }
    }

    /// Sets `offset_ns`: the callback's bias, or CUPTI's clock minus the host clock from the
    /// closest of three back-to-back pairs.
    fn measure_offset(&self) -> Result<(), CuptiError> {
        let offset = match self.clock {
            ClockSource::Callback => CALLBACK_BIAS_NS,
            ClockSource::Offset => {
                let mut best = (i64::MAX, 0);
                for _ in 0..3 {
                    let before = host_now_ns();
                    let cupti = super::timestamp_ns()? as i64;
                    let after = host_now_ns();
                    best = best.min((after - before, cupti - (before + (after - before) / 2)));
                }
                best.1
            }
        };
        self.offset_ns.store(offset, Relaxed);
        Ok(())
    }

    fn collect_locked(&self, collector: &mut Collector, force: bool) -> Result<CuptiCollected, CuptiError> {
        // Zones closed before now: every link of their launches is in `LINKS` (docs/design.md
        // section 13).
        while let Some(zone) = self.closed.pop() {
            collector.assembler.close(zone);
        }
        while let Some((lane, name)) = self.names.pop() {
            let info = &self.info;
            self.each_sink(collector, |sink| sink.name_lane(info, Lane::Stream(lane), &name));
        }
        self.measure_offset()?;
        // The records, after the zones and before the links: a record read before now had its
        // link pushed before (at its launch's entry), and so had every launch of the zones
        // closed before now.
        if force {
            activity::flush_all(FLUSH_FORCED).map_err(call("cuptiActivityFlushAll"))?;
        } else if !self.flusher.running() {
            activity::flush_all(0).map_err(call("cuptiActivityFlushAll"))?;
        }
        self.reader.read(&self.tracer);
        if let Some(e) = self.reader.error.lock().unwrap_or_else(PoisonError::into_inner).take() {
            return Err(e);
        }
        let mut records: Vec<ActivityRecord> = Vec::new();
        while let Some(batch) = self.reader.batches.pop() {
            records.extend(batch);
        }
        collector.assembler.set_now(host_now_ns());
        while let Some((correlation_id, zone)) = LINKS.pop() {
            collector.assembler.link(correlation_id, zone);
        }
        let incomplete = self.reader.incomplete.swap(0, Relaxed);
        let offset = self.offset_ns.load(Relaxed);
        collector.assembler.records(records, |ns| ns as i64 - offset);
        let emitted = collector.assembler.emit(force);
        for (list_id, zones) in &emitted.batches {
            let info = &self.info;
            let batch = ZoneBatch { list_id: *list_id, zones };
            self.each_sink(collector, |sink| sink.zones(info, batch));
        }
        let c = &self.counts;
        c.user_zones.fetch_add(emitted.user_zones as u64, Relaxed);
        c.activities.fetch_add(emitted.activities as u64, Relaxed);
        c.empty_zones.fetch_add(emitted.empty_zones as u64, Relaxed);
        c.late_batches.fetch_add(emitted.late_batches as u64, Relaxed);
        c.records_incomplete.fetch_add(incomplete, Relaxed);
        c.pending.store(collector.assembler.pending(), Relaxed);
        Ok(CuptiCollected { user_zones: emitted.user_zones, activities: emitted.activities })
    }

    /// Calls `f` on each live sink; one that fails or panics is dropped and counted.
    fn each_sink(&self, collector: &mut Collector, mut f: impl FnMut(&mut dyn Sink) -> std::io::Result<()>) {
        for slot in &mut collector.sinks {
            let Some(sink) = slot else { continue };
            if !matches!(catch_unwind(AssertUnwindSafe(|| f(sink.as_mut()))), Ok(Ok(()))) {
                *slot = None;
                self.counts.sink_failures.fetch_add(1, Relaxed);
            }
        }
    }
}

impl Drop for CuptiContext {
    fn drop(&mut self) {
        // The flush thread ends before the tracer does.
        self.flusher = Flusher::none();
        // Whatever finished still reaches the sinks; the rest is counted as incomplete.
        let _ = self.flush();
        if self.clock == ClockSource::Callback {
            // Safety: clearing the callback; CUPTI goes back to its own clock.
            let _ = unsafe { sys::cuptiActivityRegisterTimestampCallback(None) };
        }
    }
}

/// The lane key of `stream`: CUPTI's ids of its context and of it.
fn lane_of(stream: &CudaStream) -> Result<u64, CuptiError> {
    let (mut context, mut id) = (0, 0);
    // Safety: the context and stream are live (borrowed); the ids are valid out-pointers.
    unsafe {
        cupti::get_context_id(stream.context().cu_ctx(), &mut context).map_err(call("cuptiGetContextId"))?;
        cupti::get_stream_id(stream.context().cu_ctx(), stream.cu_stream(), &mut id)
            .map_err(call("cuptiGetStreamId"))?;
    }
    Ok(lane_key(context, id))
}

/// An open zone of a [`CuptiContext`]; dropping it ends the zone. Not `Send`: CUPTI ties
/// launches to the zones open on the launching thread.
#[must_use = "the zone ends when the guard drops"]
pub struct CuptiZone<'c> {
    context: &'c CuptiContext,
    zone: Option<ClosedZone>,
    _thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for CuptiZone<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuptiZone").field("zone", &self.zone).finish()
    }
}

impl Drop for CuptiZone<'_> {
    fn drop(&mut self) {
        let Some(zone) = self.zone.take() else { return };
        CURRENT.with(|c| c.set((zone.parent, zone.depth)));
        self.context.closed.push(zone);
    }
}
