//! The Tracy profiler (feature `tracy`): each tracing context is one calibrated Tracy GPU
//! context, and each collected zone one Tracy GPU zone.
//!
//! # What is sent, and why in this order
//!
//! The sink writes to a [`TracyApi`]: [`TracyClient`] is the real `tracy-client` 0.19, and
//! tests plug in a recorder. For every batch (one collected list) it walks the zones in begin
//! order and, using their depths, emits Tracy's messages in nesting order:
//!
//! ```text
//! zones (begin order, depth):  A(0) [ B(1) ] [ C(1) [ D(2) ] ]
//! messages:  begin A, time | begin B, time | end B, time | begin C, time | begin D, time
//!            | end D, time | end C, time | end A, time
//! ```
//!
//! Every begin and every end takes a fresh query id from a per-context wrapping `u16`
//! counter, and its timestamp is uploaded right after it. So:
//!
//! - Tracy's nesting is right. A context made through Tracy's C API keeps one zone stack for
//!   the whole context (the seed's defect 7); only the collector writes here, one list at a
//!   time, so begins and ends never interleave across recording threads.
//! - No query id is outstanding when [`Sink::zones`] returns, and an id comes back only after
//!   65536 later ones, each resolved long before: ids are never reused early (defect 6: the
//!   server assert hit by IREE and by `tracy-client`'s `GpuSpan` drop).
//! - Timestamps arrive in increasing order within a well-formed list (outer begin, inner begin,
//!   inner end, outer end), as Tracy asks. Tracy reads a time more than 2^31 ticks below the
//!   previous one as a timer wrap and shifts every later time; the sink refuses (with an
//!   error, sending nothing) a batch that would do that, rather than corrupt the capture.
//! - Dropped or never-submitted zones never reach a sink, so no placeholder time (the seed's 0)
//!   is ever sent.
//!
//! # Clocks and calibration
//!
//! GPU times are nanoseconds since the context's base event (period 1.0). The Tracy context is
//! created *calibrated* (type CUDA for the `cuda` backend, Custom otherwise). Tracy pairs the
//! GPU time in a context or calibration message with its own CPU clock *at the moment the
//! message is emitted*, so the sink first moves each calibration pair up to "now" with the host
//! clock it was given (the backend's): `gpu = pair.gpu + (now - pair.host) / rate`. The rate
//! (host ns per GPU ns) is measured from the base pair, and sent as Tracy's `cpuDelta` so that
//! Tracy's drift factor is `cpuDelta / gpuDelta = rate`. Tracy's zone time is then
//! `(t - gpu) * rate + cpu_at_emission`.
//!
//! # Context ids
//!
//! Tracy allows 255 GPU contexts per process (ids 0 to 254) and never frees one.
//! `tracy-client` hands out ids from 0 upward with a private counter, and its own GPU context
//! cannot be created calibrated or of type CUDA, so this sink creates its contexts through
//! `tracy_client::sys` and takes ids from the top, 254 downward ([`TracyContextIds`]). A
//! process that also makes contexts with `tracy_client::Client::new_gpu_context` must keep
//! the two together under 255. When the ids run out, [`Sink::open`] (and so building the
//! tracing context) fails with an error.

use super::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use crate::backend::Backend;
use crate::location::{Location, SourceLocation};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

/// Tracy's largest GPU context id, plus one: ids are `0..MAX_CONTEXTS`.
pub const MAX_CONTEXTS: u16 = 255;

/// Tracy reads a GPU time this far (in ticks) below the previous one as a timer wrap.
const WRAP_WINDOW: i64 = 1 << 31;

/// The kind of GPU a Tracy context shows (Tracy's `GpuContextType`, `TracyQueue.hpp`; the
/// values are part of Tracy's protocol and stable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TracyGpuKind {
    /// Any other GPU API (here: the simulated backend).
    Custom = 7,
    /// CUDA.
    Cuda = 8,
}

impl TracyGpuKind {
    /// The kind for a backend name ([`ContextInfo::backend`]).
    pub fn for_backend(backend: &str) -> Self {
        if backend == "cuda" {
            Self::Cuda
        } else {
            Self::Custom
        }
    }
}

/// Hands out Tracy GPU context ids from the top (254, 253, ... 0), so that they never meet the
/// ids `tracy-client` hands out from 0 upward until the process has made 255 contexts in all.
/// Ids are never given back: Tracy cannot forget a context.
#[derive(Debug)]
pub struct TracyContextIds {
    // A process-wide counter outside the pool's modelled concurrency: plain std atomics.
    taken: AtomicU16,
}

impl TracyContextIds {
    /// No id taken yet.
    pub const fn new() -> Self {
        Self { taken: AtomicU16::new(0) }
    }

    /// The next id, or `None` once all 255 are taken.
    pub fn take(&self) -> Option<u8> {
        let taken = self
            .taken
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < MAX_CONTEXTS).then_some(n + 1));
        // 254 - n for n < 255 fits a u8.
        taken.ok().map(|n| (MAX_CONTEXTS - 1 - n) as u8)
    }
}

impl Default for TracyContextIds {
    fn default() -> Self {
        Self::new()
    }
}

/// What the Tracy sink needs from Tracy: the seam between the sink and `tracy-client`.
///
/// The methods mirror `tracy-client`'s manual query-id API (`begin_span`, `begin_span_alloc`,
/// `end_span`, `upload_gpu_timestamp`) plus the calibrated-context messages it has no wrapper
/// for. Every method takes the context id the sink got from [`reserve_context`](Self::reserve_context).
pub trait TracyApi: Send {
    /// A static source location registered with Tracy.
    type Location: Copy + Send;

    /// Takes a context id for a new context, or `None` when Tracy's 255 are all taken.
    fn reserve_context(&mut self) -> Option<u8>;
    /// Registers a static source location with Tracy, once per location (the sink caches it).
    fn static_location(&mut self, location: &'static SourceLocation) -> Self::Location;
    /// Creates calibrated GPU context `context` named `name`: `gpu_time` (ns, period 1.0)
    /// is the GPU time at this call.
    fn new_context(&mut self, context: u8, kind: TracyGpuKind, gpu_time: i64, name: &str);
    /// A calibration: `gpu_time` is the GPU time at this call, and `cpu_delta` the host time
    /// (ns) since the previous calibration (or the context's creation).
    fn calibrate(&mut self, context: u8, gpu_time: i64, cpu_delta: i64);
    /// Begins a zone at a static location; its time will come with `query_id`.
    fn begin_span(&mut self, context: u8, location: Self::Location, query_id: u16);
    /// Begins a zone at a location made at run time (Tracy allocates a copy).
    fn begin_span_alloc(
        &mut self,
        context: u8,
        name: &str,
        function: &str,
        file: &str,
        line: u32,
        query_id: u16,
    );
    /// Ends the innermost open zone; its time will come with `query_id`.
    fn end_span(&mut self, context: u8, query_id: u16);
    /// The GPU time (ns) for `query_id`, which resolves it.
    fn upload_gpu_timestamp(&mut self, context: u8, query_id: u16, gpu_time: i64);
}

/// Context ids taken by every [`TracyClient`] in this process.
static CLIENT_CONTEXT_IDS: TracyContextIds = TracyContextIds::new();

/// The real Tracy client (`tracy-client` 0.19). With feature `tracy` alone `tracy-client` is
/// built without its `enable` feature and every call is a no-op (context ids are still
/// counted); feature `tracy-enable` turns the client on.
#[derive(Clone)]
pub struct TracyClient {
    _client: tracy_client::Client,
}

impl std::fmt::Debug for TracyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracyClient").field("enabled", &cfg!(feature = "tracy-enable")).finish()
    }
}

impl TracyClient {
    /// Starts the Tracy client if it is not running yet.
    pub fn start() -> Self {
        Self { _client: tracy_client::Client::start() }
    }
}

#[cfg(feature = "tracy-enable")]
mod client {
    //! The calls into `tracy_client::sys`, only compiled when the client is enabled. Each is
    //! called only through a [`TracyClient`](super::TracyClient), which holds a started
    //! `tracy_client::Client`: the profiler is running, as every `sys` call requires.

    use crate::location::SourceLocation;
    use std::collections::BTreeMap;
    use std::ffi::{c_char, CString};
    use std::sync::Mutex;
    use tracy_client::sys;

    /// Tracy's flag for a calibrated GPU context (`GpuContextCalibration`, `TracyQueue.hpp`).
    const CALIBRATED: u8 = 1;

    /// A NUL-terminated copy of `s`, cut at its first NUL if it has one, leaked: Tracy reads
    /// static source locations whenever the profiler asks, for the life of the process.
    fn leaked_c_string(s: &str) -> *const c_char {
        let bytes: Vec<u8> = s.bytes().take_while(|&b| b != 0).collect();
        CString::new(bytes).unwrap_or_default().into_raw()
    }

    /// Tracy's address for a static location: one leaked `___tracy_source_location_data` per
    /// `SourceLocation`, shared by every sink in the process (so the leak is bounded by the
    /// number of `location!` sites).
    pub(super) fn static_location(location: &'static SourceLocation) -> u64 {
        static INTERNED: Mutex<BTreeMap<usize, u64>> = Mutex::new(BTreeMap::new());
        let key = location as *const SourceLocation as usize;
        let mut interned = INTERNED.lock().unwrap_or_else(|p| p.into_inner());
        *interned.entry(key).or_insert_with(|| {
            let data: &'static sys::___tracy_source_location_data =
                Box::leak(Box::new(sys::___tracy_source_location_data {
                    name: leaked_c_string(location.name),
                    function: leaked_c_string((location.function)()),
                    file: leaked_c_string(location.file),
                    line: location.line,
                    color: 0,
                }));
            data as *const sys::___tracy_source_location_data as usize as u64
        })
    }

    pub(super) fn new_context(context: u8, kind: u8, gpu_time: i64, name: &str) {
        let data = sys::___tracy_gpu_new_context_data {
            gpuTime: gpu_time,
            period: 1.0,
            context,
            flags: CALIBRATED,
            type_: kind,
        };
        // Safety: the profiler is running (see the module doc); `context` was reserved for this
        // sink alone (TracyContextIds), so this is its one and only creation.
        unsafe { sys::___tracy_emit_gpu_new_context_serial(data) };
        let mut len = name.len().min(usize::from(u16::MAX));
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let data =
            sys::___tracy_gpu_context_name_data { context, name: name.as_ptr().cast(), len: len as u16 };
        // Safety: the context exists (created just above); Tracy copies `len` bytes of `name`,
        // which is valid for that long, before returning.
        unsafe { sys::___tracy_emit_gpu_context_name_serial(data) };
    }

    pub(super) fn calibrate(context: u8, gpu_time: i64, cpu_delta: i64) {
        let data = sys::___tracy_gpu_calibration_data { gpuTime: gpu_time, cpuDelta: cpu_delta, context };
        // Safety: the context was created calibrated by this sink before any calibration.
        unsafe { sys::___tracy_emit_gpu_calibration_serial(data) };
    }

    pub(super) fn begin_span(context: u8, srcloc: u64, query_id: u16) {
        let data = sys::___tracy_gpu_zone_begin_data { srcloc, queryId: query_id, context };
        // Safety: `srcloc` is a leaked, never-freed location from `static_location`; the query
        // id is not outstanding (the sink resolves each id before taking the next).
        unsafe { sys::___tracy_emit_gpu_zone_begin_serial(data) };
    }

    pub(super) fn begin_span_alloc(
        context: u8,
        name: &str,
        function: &str,
        file: &str,
        line: u32,
        query_id: u16,
    ) {
        // Safety: each pointer is valid for its length during the call; Tracy copies the
        // strings into a location it allocates and frees itself.
        let srcloc = unsafe {
            sys::___tracy_alloc_srcloc_name(
                line,
                file.as_ptr().cast(),
                file.len(),
                function.as_ptr().cast(),
                function.len(),
                name.as_ptr().cast(),
                name.len(),
                0,
            )
        };
        let data = sys::___tracy_gpu_zone_begin_data { srcloc, queryId: query_id, context };
        // Safety: `srcloc` was just allocated by Tracy, which takes it over; the query id is
        // not outstanding.
        unsafe { sys::___tracy_emit_gpu_zone_begin_alloc_serial(data) };
    }

    pub(super) fn end_span(context: u8, query_id: u16) {
        let data = sys::___tracy_gpu_zone_end_data { queryId: query_id, context };
        // Safety: the sink only ends a zone it began on this context; the id is not outstanding.
        unsafe { sys::___tracy_emit_gpu_zone_end_serial(data) };
    }

    pub(super) fn upload_gpu_timestamp(context: u8, query_id: u16, gpu_time: i64) {
        let data = sys::___tracy_gpu_time_data { gpuTime: gpu_time, queryId: query_id, context };
        // Safety: `query_id` was just used by a begin or end on this context and not resolved.
        unsafe { sys::___tracy_emit_gpu_time_serial(data) };
    }
}

#[cfg(not(feature = "tracy-enable"))]
mod client {
    //! The client is disabled: every call is a no-op (as in `tracy-client` without `enable`).

    use crate::location::SourceLocation;

    pub(super) fn static_location(_location: &'static SourceLocation) -> u64 {
        0
    }
    pub(super) fn new_context(_context: u8, _kind: u8, _gpu_time: i64, _name: &str) {}
    pub(super) fn calibrate(_context: u8, _gpu_time: i64, _cpu_delta: i64) {}
    pub(super) fn begin_span(_context: u8, _srcloc: u64, _query_id: u16) {}
    pub(super) fn begin_span_alloc(_: u8, _: &str, _: &str, _: &str, _: u32, _: u16) {}
    pub(super) fn end_span(_context: u8, _query_id: u16) {}
    pub(super) fn upload_gpu_timestamp(_context: u8, _query_id: u16, _gpu_time: i64) {}
}

impl TracyApi for TracyClient {
    type Location = u64;

    fn reserve_context(&mut self) -> Option<u8> {
        CLIENT_CONTEXT_IDS.take()
    }
    fn static_location(&mut self, location: &'static SourceLocation) -> u64 {
        client::static_location(location)
    }
    fn new_context(&mut self, context: u8, kind: TracyGpuKind, gpu_time: i64, name: &str) {
        client::new_context(context, kind as u8, gpu_time, name);
    }
    fn calibrate(&mut self, context: u8, gpu_time: i64, cpu_delta: i64) {
        client::calibrate(context, gpu_time, cpu_delta);
    }
    fn begin_span(&mut self, context: u8, location: u64, query_id: u16) {
        client::begin_span(context, location, query_id);
    }
    fn begin_span_alloc(
        &mut self,
        context: u8,
        name: &str,
        function: &str,
        file: &str,
        line: u32,
        query_id: u16,
    ) {
        client::begin_span_alloc(context, name, function, file, line, query_id);
    }
    fn end_span(&mut self, context: u8, query_id: u16) {
        client::end_span(context, query_id);
    }
    fn upload_gpu_timestamp(&mut self, context: u8, query_id: u16, gpu_time: i64) {
        client::upload_gpu_timestamp(context, query_id, gpu_time);
    }
}

/// One message of a batch, in the order Tracy receives them.
#[derive(Debug, Clone, Copy)]
enum Step {
    Begin(usize),
    End(usize),
}

impl Step {
    fn time(self, zones: &[Zone]) -> i64 {
        match self {
            Self::Begin(z) => zones[z].gpu_begin_ns,
            Self::End(z) => zones[z].gpu_end_ns,
        }
    }
}

/// Walks a batch in nesting order: a zone ends before the next zone at its depth or above
/// begins, or before a zone that begins after it ended (a parent that was dropped leaves a
/// gap in depths; times keep siblings apart then).
fn walk(zones: &[Zone], open: &mut Vec<usize>, mut step: impl FnMut(Step)) {
    open.clear();
    for (i, zone) in zones.iter().enumerate() {
        while let Some(&top) = open.last() {
            let parent = &zones[top];
            if parent.depth < zone.depth && parent.gpu_end_ns > zone.gpu_begin_ns {
                break;
            }
            open.pop();
            step(Step::End(top));
        }
        step(Step::Begin(i));
        open.push(i);
    }
    while let Some(top) = open.pop() {
        step(Step::End(top));
    }
}

/// The context a sink was opened for.
#[derive(Debug, Clone, Copy)]
struct Opened {
    context: u8,
    base: Calibration,
    /// The GPU time of the latest context or calibration message sent.
    sent_gpu_ns: i64,
}

/// Sends zones to the Tracy profiler: one calibrated Tracy GPU context per tracing context.
///
/// ```
/// use gpu_event_pool::{location, sim::SimBackend, sink::tracy::TracySink, TracingContext};
/// let sim = SimBackend::manual();
/// let ctx = TracingContext::builder(sim.clone())
///     .name("render queue")
///     .sink(TracySink::for_backend(&sim))
///     .build()?;
/// # Ok::<(), gpu_event_pool::Error>(())
/// ```
pub struct TracySink<A: TracyApi = TracyClient> {
    api: A,
    host_clock: Box<dyn Fn() -> i64 + Send>,
    opened: Option<Opened>,
    /// The next query id (wrapping): every id is resolved before the next is taken.
    next_query: u16,
    /// The last GPU time uploaded (Tracy's wrap heuristic compares against it).
    last_time: i64,
    /// Tracy locations of the static locations seen so far, by `SourceLocation` address.
    locations: HashMap<usize, A::Location>,
    open: Vec<usize>,
}

impl<A: TracyApi> std::fmt::Debug for TracySink<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracySink")
            .field("context", &self.opened.map(|o| o.context))
            .field("next_query", &self.next_query)
            .field("locations", &self.locations.len())
            .finish()
    }
}

impl TracySink<TracyClient> {
    /// A sink on the real Tracy client. `host_clock` must read the backend's host clock
    /// ([`Backend::host_now_ns`]): calibration pairs are on that clock.
    pub fn new(host_clock: impl Fn() -> i64 + Send + 'static) -> Self {
        Self::with_api(TracyClient::start(), host_clock)
    }

    /// A sink on the real Tracy client, reading `backend`'s host clock.
    pub fn for_backend<B: Backend + Clone>(backend: &B) -> Self {
        let backend = backend.clone();
        Self::new(move || backend.host_now_ns())
    }
}

impl<A: TracyApi> TracySink<A> {
    /// A sink writing to `api` (a recorder in tests); `host_clock` as in [`TracySink::new`].
    pub fn with_api(api: A, host_clock: impl Fn() -> i64 + Send + 'static) -> Self {
        Self {
            api,
            host_clock: Box::new(host_clock),
            opened: None,
            next_query: 0,
            last_time: 0,
            locations: HashMap::new(),
            open: Vec::new(),
        }
    }

    /// The Tracy context id this sink was given, once opened.
    pub fn context_id(&self) -> Option<u8> {
        self.opened.map(|o| o.context)
    }

    fn take_query(&mut self) -> u16 {
        let id = self.next_query;
        self.next_query = self.next_query.wrapping_add(1);
        id
    }

    fn emit(&mut self, context: u8, zones: &[Zone], step: Step) {
        let query = self.take_query();
        match step {
            Step::Begin(z) => match &zones[z].location {
                Location::Static(location) => {
                    let key = *location as *const SourceLocation as usize;
                    let api = &mut self.api;
                    let tracy = *self.locations.entry(key).or_insert_with(|| api.static_location(location));
                    self.api.begin_span(context, tracy, query);
                }
                Location::Dynamic(location) => self.api.begin_span_alloc(
                    context,
                    &location.name,
                    &location.function,
                    &location.file,
                    location.line,
                    query,
                ),
            },
            Step::End(_) => self.api.end_span(context, query),
        }
        let time = step.time(zones);
        self.api.upload_gpu_timestamp(context, query, time);
        self.last_time = time;
    }
}

fn not_opened() -> io::Error {
    io::Error::other("Tracy sink used before open: it has no Tracy GPU context")
}

impl<A: TracyApi> Sink for TracySink<A> {
    fn open(&mut self, info: &ContextInfo) -> io::Result<()> {
        if self.opened.is_some() {
            return Err(io::Error::other(format!(
                "Tracy sink opened twice (for context {:?}): give each tracing context its own sink",
                info.name
            )));
        }
        let context = self.api.reserve_context().ok_or_else(|| {
            io::Error::other(format!(
                "cannot create a Tracy GPU context for {:?}: Tracy allows {MAX_CONTEXTS} GPU \
                 contexts per process and all are taken",
                info.name
            ))
        })?;
        // The GPU time now, on the base pair's clock: the pair is a moment old.
        let gpu_now = info.base.gpu_ns + ((self.host_clock)() - info.base.host_ns).max(0);
        self.api.new_context(context, TracyGpuKind::for_backend(info.backend), gpu_now, &info.name);
        self.opened = Some(Opened { context, base: info.base, sent_gpu_ns: gpu_now });
        Ok(())
    }

    fn calibrate(&mut self, _info: &ContextInfo, pair: Calibration) -> io::Result<()> {
        let opened = self.opened.as_mut().ok_or_else(not_opened)?;
        let (gpu_span, host_span) = (pair.gpu_ns - opened.base.gpu_ns, pair.host_ns - opened.base.host_ns);
        // Host ns per GPU ns, over the whole run so far.
        let rate = if gpu_span > 0 && host_span > 0 { host_span as f64 / gpu_span as f64 } else { 1.0 };
        let gpu_now = pair.gpu_ns + (((self.host_clock)() - pair.host_ns) as f64 / rate).round() as i64;
        let cpu_delta = (rate * (gpu_now - opened.sent_gpu_ns) as f64).round() as i64;
        // Tracy divides by the GPU step: a pair that does not move forward cannot be sent.
        if gpu_now <= opened.sent_gpu_ns || cpu_delta <= 0 {
            return Ok(());
        }
        opened.sent_gpu_ns = gpu_now;
        let context = opened.context;
        self.api.calibrate(context, gpu_now, cpu_delta);
        Ok(())
    }

    fn zones(&mut self, _info: &ContextInfo, batch: ZoneBatch<'_>) -> io::Result<()> {
        let context = self.opened.ok_or_else(not_opened)?.context;
        let zones = batch.zones;
        let mut open = std::mem::take(&mut self.open);
        // First pass: would any time look like a timer wrap to Tracy?
        let (mut last, mut back) = (self.last_time, 0);
        walk(zones, &mut open, |step| {
            let t = step.time(zones);
            back = back.max(last - t);
            last = t;
        });
        if back >= WRAP_WINDOW {
            self.open = open;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "Tracy sink: list {} not sent: its GPU times go back {back} ns, which Tracy would \
                     read as a timer wrap (more than 2^31 ns); were streams of one context more \
                     than 2.1 s apart?",
                    batch.list_id
                ),
            ));
        }
        walk(zones, &mut open, |step| self.emit(context, zones, step));
        self.open = open;
        Ok(())
    }
}
