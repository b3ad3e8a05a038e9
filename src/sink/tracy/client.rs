//! The seam between the sink and Tracy ([`TracyApi`]), and its real implementation on
//! `tracy-client` ([`TracyClient`]).

use super::ids::{TracyContextIds, TracyGpuKind};
use crate::location::SourceLocation;

/// What the Tracy sink needs from Tracy: the seam between the sink and `tracy-client`.
///
/// The methods mirror `tracy-client`'s manual query-id API (`begin_span`, `begin_span_alloc`,
/// `end_span`, `upload_gpu_timestamp`) plus the calibrated-context messages it has no wrapper
/// for. Every method takes a context id the sink got from [`reserve_context`](Self::reserve_context).
pub trait TracyApi: Send {
    /// A static source location registered with Tracy.
    type Location: Copy + Send;

    /// Takes a context id for a new context, or `None` when Tracy's 255 are all taken.
    fn reserve_context(&mut self) -> Option<u8>;
    /// Registers a static source location with Tracy, once per location (the sink caches it).
    fn static_location(&mut self, location: &'static SourceLocation) -> Self::Location;
    /// Creates calibrated GPU context `context`: `gpu_time` (ns, period 1.0) is the GPU time
    /// at this call.
    fn new_context(&mut self, context: u8, kind: TracyGpuKind, gpu_time: i64);
    /// Names (or renames) a context.
    fn name_context(&mut self, context: u8, name: &str);
    /// A calibration: `gpu_time` is the GPU time at this call, and `cpu_delta / (gpu_time -
    /// previous gpu_time)` the host ns per GPU ns from now on.
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
    /// A point of plot `name` (`tracy_client::Client::plot`), at Tracy's clock now.
    fn plot(&mut self, name: &str, value: f64);
    /// A frame mark of the frame set `name` (`tracy_client::Client::secondary_frame_mark`),
    /// at Tracy's clock now.
    fn frame_mark(&mut self, name: &str);
    /// A message on Tracy's timeline now (`tracy_client::Client::message`): a discontinuity of
    /// the clocks.
    fn message(&mut self, text: &str) {
        let _ = text;
    }
}

/// Context ids taken by every [`TracyClient`] in this process.
static CLIENT_CONTEXT_IDS: TracyContextIds = TracyContextIds::new();

/// The real Tracy client (`tracy-client` 0.19, built with its `enable` feature by this crate's
/// `tracy` feature). Whether it listens on every interface or on localhost only is the
/// application's choice (`tracy-client/only-localhost`, or this crate's
/// `tracy-only-localhost`).
#[derive(Clone)]
pub struct TracyClient {
    client: tracy_client::Client,
}

impl std::fmt::Debug for TracyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracyClient").finish_non_exhaustive()
    }
}

impl TracyClient {
    /// Starts the Tracy client if it is not running yet.
    pub fn start() -> Self {
        Self { client: tracy_client::Client::start() }
    }
}

/// Leaked names by their text.
type Names<T> = std::sync::Mutex<std::collections::BTreeMap<String, T>>;

/// Tracy keeps a plot's or a frame set's name for the life of the process: each distinct
/// name is leaked once and reused (a sink has four plots and one frame set).
fn interned<T: Copy>(names: &Names<T>, name: &str, leak: impl FnOnce(String) -> T) -> T {
    let mut names = names.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&leaked) = names.get(name) {
        return leaked;
    }
    let leaked = leak(name.to_owned());
    names.insert(name.to_owned(), leaked);
    leaked
}

mod sys_calls {
    //! The calls into `tracy_client::sys` (feature `tracy` turns `tracy-client/enable` on, so
    //! they always exist). Each is called only through a [`TracyClient`](super::TracyClient),
    //! which holds a started `tracy_client::Client`: the profiler is running, as every `sys`
    //! call requires.

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

    pub(super) fn new_context(context: u8, kind: u8, gpu_time: i64) {
        let data = sys::___tracy_gpu_new_context_data {
            gpuTime: gpu_time,
            period: 1.0,
            context,
            flags: CALIBRATED,
            type_: kind,
        };
        // Safety: the profiler is running (see the module doc); `context` was reserved for this
        // sink alone (TracyContextIds), and the sink creates each reserved id once.
        unsafe { sys::___tracy_emit_gpu_new_context_serial(data) };
    }

    pub(super) fn name_context(context: u8, name: &str) {
        let mut len = name.len().min(usize::from(u16::MAX));
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let data =
            sys::___tracy_gpu_context_name_data { context, name: name.as_ptr().cast(), len: len as u16 };
        // Safety: the context exists (the sink names only contexts it created); Tracy copies
        // `len` bytes of `name`, which is valid for that long, before returning.
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

impl TracyApi for TracyClient {
    type Location = u64;

    fn reserve_context(&mut self) -> Option<u8> {
        CLIENT_CONTEXT_IDS.take()
    }
    fn static_location(&mut self, location: &'static SourceLocation) -> u64 {
        sys_calls::static_location(location)
    }
    fn new_context(&mut self, context: u8, kind: TracyGpuKind, gpu_time: i64) {
        sys_calls::new_context(context, kind as u8, gpu_time);
    }
    fn name_context(&mut self, context: u8, name: &str) {
        sys_calls::name_context(context, name);
    }
    fn calibrate(&mut self, context: u8, gpu_time: i64, cpu_delta: i64) {
        sys_calls::calibrate(context, gpu_time, cpu_delta);
    }
    fn begin_span(&mut self, context: u8, location: u64, query_id: u16) {
        sys_calls::begin_span(context, location, query_id);
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
        sys_calls::begin_span_alloc(context, name, function, file, line, query_id);
    }
    fn end_span(&mut self, context: u8, query_id: u16) {
        sys_calls::end_span(context, query_id);
    }
    fn upload_gpu_timestamp(&mut self, context: u8, query_id: u16, gpu_time: i64) {
        sys_calls::upload_gpu_timestamp(context, query_id, gpu_time);
    }
    fn plot(&mut self, name: &str, value: f64) {
        static PLOTS: Names<tracy_client::PlotName> = Names::new(std::collections::BTreeMap::new());
        self.client.plot(interned(&PLOTS, name, tracy_client::PlotName::new_leak), value);
    }
    fn frame_mark(&mut self, name: &str) {
        static FRAMES: Names<tracy_client::FrameName> = Names::new(std::collections::BTreeMap::new());
        self.client.secondary_frame_mark(interned(&FRAMES, name, tracy_client::FrameName::new_leak));
    }
    fn message(&mut self, text: &str) {
        self.client.message(text, 0);
    }
}
