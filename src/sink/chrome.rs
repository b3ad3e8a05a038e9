//! Chrome trace event JSON (the "JSON Array Format"), loadable in Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing`.
//!
//! Each zone is one complete event (`"ph":"X"`) with `ts` and `dur` in microseconds written
//! with exactly three decimals, so nanoseconds survive and adjacent zones (`zone_next`) touch
//! without overlapping through floating-point rounding. Each context is a process (`pid` =
//! context id unless [`ChromeTraceSink::with_pid`] says otherwise, named after the context);
//! each stream or graph is a thread (`tid` numbered from 1 in order of first use, named by
//! [`TracingContext::name_stream`](crate::TracingContext::name_stream), else
//! `stream <key>` / `graph <key>`). `args` carry the file, line, function, list id, nesting
//! depth and the zone's GPU times (`gpu_begin_ns`, `gpu_end_ns`: nanoseconds since the
//! context's base event), whichever clock `ts` is on, and the zone's own arguments
//! ([`DynamicLocation::arg`](crate::DynamicLocation::arg)). A zone with a launch
//! ([`Builder::record_launches`](crate::Builder::record_launches)) also gets, on the host
//! clock, a slice on its recording thread's track in the trace's CPU process
//! ([`ChromeTrace::cpu_pid`]) and a flow arrow (`"ph":"s"` / `"f"`) from it to the zone.
//!
//! # Zones that overlap without nesting
//!
//! A viewer draws a track's nesting from times alone. Zones of one lane that overlap without
//! one being nested in the other (Vulkan commands without a barrier between them may run at
//! once) would be drawn as nested there, so such a zone goes to another row of its lane: a
//! track named `<lane> (overlapping N)`, the first row where every zone still open at its
//! begin is one of its recorded ancestors. Properly nested work (every CUDA stream, every
//! serial queue) stays on one track per lane.
//!
//! # Which clock `ts` is on
//!
//! [`ChromeClock::Host`], the default: `ts` is microseconds on std's monotonic clock
//! ([`Instant`]: `CLOCK_MONOTONIC` on Linux) since the sink's *origin*, an `Instant` that is
//! the moment the sink was made unless [`ChromeTraceSink::with_origin`] sets it. A CPU tracer
//! that writes microseconds since its own start `Instant` (`tracing-chrome` does) lines up
//! with the GPU zones when both share that origin (take the `Instant` right after building
//! the tracer, give it to `with_origin`, give the sink a `pid` of its own with
//! [`ChromeTraceSink::with_pid`], and concatenate the two JSON arrays); the crate's
//! `tracing` layer (feature `tracing`) writes CPU spans into the same trace with no
//! merging. A zone is placed through its host times
//! ([`Zone::host_begin_ns`](super::Zone::host_begin_ns)), which are
//! on the backend's host clock; the sink maps that clock onto `Instant`:
//!
//! - exactly, when it knows where the backend's host clock starts
//!   ([`ChromeTraceSink::with_backend_clock`], from
//!   [`Backend::host_clock_origin`]: the real-time simulation and CUDA);
//! - otherwise by reading `Instant::now()` when the context opens the sink, just after the
//!   context read its host clock for the base calibration pair
//!   ([`ContextInfo::base`]): late by the time between the two reads (microseconds, more if
//!   sinks added before this one are slow to open).
//!
//! [`ChromeClock::Gpu`]: `ts` is GPU time since the context's base event, the same numbers as
//! `args.gpu_begin_ns`; it lines up with nothing outside the context.
//!
//! # When the file is valid JSON
//!
//! A sink made by [`ChromeTraceSink::create`] writes the closing `]` on every flush (the
//! context's `flush`, and the last handle's) and moves back over it, so the next event
//! replaces it: the file on disk is a complete JSON array after every flush, even while lists
//! of a dropped context keep the sink alive. A sink on any other writer
//! ([`ChromeTraceSink::new`]) cannot move back, so it writes the `]` only when it is dropped
//! (with its context); until then its output is a valid trace in the array format, whose
//! closing bracket is optional, but not a complete JSON document.
//!
//! # Several contexts in one trace
//!
//! A [`ChromeTrace`] is one output that any number of sinks write into, one sink per context
//! (one context per GPU, say): [`ChromeTrace::sink`] makes them. Each context is its own
//! process in the trace (its `pid` is the context id, unique in the process, unless
//! [`ChromeTraceSink::with_pid`] says otherwise), and its tracks are numbered within it. The
//! sinks share the trace's origin, so on the host clock every context is on one timeline;
//! on [`ChromeClock::Gpu`] each context counts from its own base event and they do not line
//! up. The file rules above hold for the whole trace: a [`ChromeTrace::create`] file is a
//! complete JSON array after every flush of any of its sinks, and the closing `]` of any
//! other writer comes when the last of the trace and its sinks is dropped.
//! [`ChromeTraceSink::create`] and [`ChromeTraceSink::new`] are a trace with one sink.

use super::chrome_cpu::{micros_raw, signed_ns, write_launch, CpuTracks, FlowEnd, ZoneArgs};
use super::{ContextInfo, Sink, ZoneBatch};
use crate::backend::{Backend, Lane};
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;
// The sinks' shared output is outside the pool's modelled concurrency (only collectors call
// sinks): plain std.
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Added to a context id that is the trace's CPU process id, when the sink has no pid of its
/// own (`ChromeTraceSink::with_pid`).
const CPU_PID_COLLISION: u32 = 1 << 16;

/// Which clock a [`ChromeTraceSink`] writes `ts` on (module docs, "Which clock").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChromeClock {
    /// Microseconds since the sink's origin on std's monotonic clock ([`Instant`]), through
    /// each zone's host times: lines up with a CPU trace that shares the origin.
    #[default]
    Host,
    /// Microseconds of GPU time since the context's base event.
    Gpu,
}

impl ChromeClock {
    fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Gpu => "gpu",
        }
    }
}

/// Both closing texts are this long, so one always covers the other.
const TRAILER_LEN: i64 = 3;

/// The text that closes the array after `events` events.
fn trailer(events: usize) -> &'static [u8] {
    if events == 0 {
        b"[]\n"
    } else {
        b"\n]\n"
    }
}

/// A writer the sink can move back in, to keep the file closed between flushes.
trait SeekWrite: Write + Seek + Send {}
impl<T: Write + Seek + Send> SeekWrite for T {}

enum Output {
    Seekable(Box<dyn SeekWrite>),
    Stream(Box<dyn Write + Send>),
}

impl Output {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Self::Seekable(out) => out,
            Self::Stream(out) => out,
        }
    }
}

/// The JSON array every sink of one [`ChromeTrace`] writes into. Closed (the trailer written)
/// when the last of the trace and its sinks drops it.
pub(super) struct TraceOutput {
    out: Output,
    /// Events in the array so far, from every sink.
    events: usize,
    /// The CPU process's tracks written so far, and the flow ids handed out.
    pub(super) cpu: CpuTracks,
}

impl TraceOutput {
    pub(super) fn write_event(&mut self, event: &str) -> std::io::Result<()> {
        let separator = if self.events == 0 { "[\n" } else { ",\n" };
        let out = self.out.writer();
        out.write_all(separator.as_bytes())?;
        out.write_all(event.as_bytes())?;
        self.events += 1;
        Ok(())
    }

    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        let end = trailer(self.events);
        match &mut self.out {
            Output::Stream(out) => out.flush(),
            Output::Seekable(out) => {
                out.write_all(end)?;
                out.flush()?;
                // The next event (or the final trailer, the same length) writes over it.
                out.seek(SeekFrom::Current(-TRAILER_LEN))?;
                Ok(())
            }
        }
    }
}

impl Drop for TraceOutput {
    fn drop(&mut self) {
        let end = trailer(self.events);
        let out = self.out.writer();
        // A failure here cannot be reported; the trace stays valid without the bracket.
        let _ = out.write_all(end).and_then(|()| out.flush());
    }
}

/// One Chrome trace (a JSON array of events) that any number of [`ChromeTraceSink`]s write
/// into: several tracing contexts, one per GPU say, in one file, each its own process (module
/// docs, "Several contexts in one trace").
///
/// Cheap to clone: clones and the sinks made from it share one output. A mutex serializes
/// the sinks' writes, taken once per call (a whole batch of zones at a time); only
/// collectors call sinks, so recording never waits for it.
///
/// ```
/// use gpu_event_pool::sim::SimBackend;
/// use gpu_event_pool::sink::chrome::ChromeTrace;
/// use gpu_event_pool::TracingContext;
///
/// let path = std::env::temp_dir().join("chrome-trace-doc.json");
/// let trace = ChromeTrace::create(&path)?;
/// let mut contexts = Vec::new();
/// for device in 0..2 {
///     let gpu = SimBackend::realtime();
///     let sink = trace.sink().with_backend_clock(&gpu); // pid: the context's id
///     let ctx = TracingContext::builder(gpu).name(format!("gpu {device}")).sink(sink).build()?;
///     contexts.push(ctx);
/// }
/// // ... record on both, collect both from one thread ...
/// for ctx in &contexts {
///     ctx.flush()?; // after each flush the file is a complete JSON array
/// }
/// drop(contexts);
/// drop(trace); // the last one closes the array
/// # let events: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
/// # assert_eq!(events.iter().filter(|e| e["name"] == "process_name").count(), 2);
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ChromeTrace {
    pub(super) out: Arc<Mutex<TraceOutput>>,
    pub(super) origin: Instant,
    /// Added to every `ts` (nanoseconds): where `origin` is on the wall clock's origin
    /// ([`ChromeTrace::with_wall_clock_origin`]); 0 otherwise.
    pub(super) origin_ns: i64,
    /// The process of CPU tracks (launches, the `tracing` layer's spans).
    pub(super) cpu_pid: u32,
}

impl std::fmt::Debug for ChromeTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromeTrace").field("events", &self.events()).finish_non_exhaustive()
    }
}

/// Locks the shared output, ignoring poisoning: a sink that panicked mid-write can at worst
/// leave one event cut short, which the next separator does not make worse.
pub(super) fn lock(out: &Mutex<TraceOutput>) -> MutexGuard<'_, TraceOutput> {
    out.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ChromeTrace {
    fn with_output(out: Output) -> Self {
        let out = TraceOutput { out, events: 0, cpu: CpuTracks::default() };
        Self {
            out: Arc::new(Mutex::new(out)),
            origin: Instant::now(),
            origin_ns: 0,
            cpu_pid: std::process::id(),
        }
    }

    /// A trace written to `out`, with its origin now. `out` cannot seek, so the closing `]`
    /// comes only when the trace and all its sinks are dropped (module docs).
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self::with_output(Output::Stream(Box::new(out)))
    }

    /// A trace written to a new file at `path` (replacing any file there), with its origin
    /// now. The file is a complete JSON array after every flush of any of its sinks.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = BufWriter::new(std::fs::File::create(path)?);
        Ok(Self::with_output(Output::Seekable(Box::new(file))))
    }

    /// On the host clock, `ts` 0 is `origin` for every sink made from now on (default: when
    /// the trace was made).
    pub fn with_origin(mut self, origin: Instant) -> Self {
        self.origin = origin;
        self.origin_ns = 0;
        self
    }

    /// A new sink writing into this trace, on the host clock from the trace's origin. Give
    /// each context its own.
    pub fn sink(&self) -> ChromeTraceSink {
        ChromeTraceSink {
            out: Arc::clone(&self.out),
            clock: ChromeClock::Host,
            origin: self.origin,
            origin_ns: self.origin_ns,
            cpu_pid: self.cpu_pid,
            backend_origin: None,
            host_offset_ns: 0,
            pid: None,
            tracks: Tracks::default(),
            events: 0,
        }
    }

    /// `ts` 0 on the host clock, for the sinks made from now on.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Events written so far by all its sinks (zones and metadata).
    pub fn events(&self) -> usize {
        lock(&self.out).events
    }
}

/// Writes zones as Chrome trace events.
///
/// ```
/// use gpu_event_pool::sim::SimBackend;
/// use gpu_event_pool::sink::chrome::ChromeTraceSink;
/// use gpu_event_pool::TracingContext;
/// use std::time::Instant;
///
/// let origin = Instant::now(); // the moment a CPU tracer counts from
/// let gpu = SimBackend::realtime();
/// let path = std::env::temp_dir().join("chrome-sink-doc.json");
/// let trace = ChromeTraceSink::create(&path)?.with_origin(origin).with_backend_clock(&gpu);
/// let ctx = TracingContext::builder(gpu.clone()).sink(trace).build()?;
/// # drop(ctx);
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ChromeTraceSink {
    out: Arc<Mutex<TraceOutput>>,
    clock: ChromeClock,
    origin: Instant,
    /// Added to every `ts` (`ChromeTrace::with_wall_clock_origin`).
    origin_ns: i64,
    /// The process of launch slices (`ChromeTrace::with_cpu_pid`).
    cpu_pid: u32,
    /// Where the backend's host clock reads 0, when known (`with_backend_clock`).
    backend_origin: Option<Instant>,
    /// Added to a backend host time to get nanoseconds since `origin` (set by `open`).
    host_offset_ns: i64,
    pid: Option<u32>,
    tracks: Tracks,
    /// Events this sink wrote.
    events: usize,
}

/// The tracks (Chrome threads) of one sink's context: one per lane, numbered from 1 in order
/// of first use.
#[derive(Debug, Default)]
struct Tracks {
    /// Per lane, its rows: row 0 is the lane's track; later rows hold zones that overlap a
    /// zone of the rows before without being nested in it (Vulkan commands without barriers).
    tids: HashMap<(Lane, u32), u32>,
    /// Names given with `name_stream`, for tracks not written yet.
    names: HashMap<Lane, String>,
    /// Per row, the zones still open at the latest begin written there, outermost first.
    open: HashMap<(Lane, u32), Vec<OpenZone>>,
}

/// A zone written on a row: its end, its list's id, its index in that list's batch.
type OpenZone = (i64, u64, usize);

impl Tracks {
    /// The track of `lane`'s row `row`; a new one's metadata (name, order) goes to `out`
    /// first.
    fn tid(&mut self, pid: u32, lane: Lane, row: u32, out: &mut SinkWriter<'_>) -> std::io::Result<u32> {
        if let Some(&tid) = self.tids.get(&(lane, row)) {
            return Ok(tid);
        }
        let tid = self.tids.len() as u32 + 1;
        self.tids.insert((lane, row), tid);
        let name = match (self.names.get(&lane), lane) {
            (Some(name), _) => name.clone(),
            (None, Lane::Stream(key)) => format!("stream {key:#x}"),
            (None, Lane::Graph(key)) => format!("graph {key:#x}"),
        };
        let name = if row == 0 { name } else { format!("{name} (overlapping {row})") };
        out.write_event(&thread_name(pid, tid, &name))?;
        let order = json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}});
        out.write_event(&order.to_string())?;
        Ok(tid)
    }

    /// The first row of `lane` where the zone `(begin, end)` (index `index` of list `list`'s
    /// batch, whose parent is at `parent`) nests truly: every zone still open there at
    /// `begin` is one of its ancestors. A viewer draws a track's nesting from times alone, so
    /// a zone that overlaps one it is not nested in goes to a row of its own.
    fn row(
        &mut self,
        lane: Lane,
        (begin, end): (i64, i64),
        list: u64,
        index: usize,
        parent: Option<usize>,
    ) -> u32 {
        for row in 0.. {
            let open = self.open.entry((lane, row)).or_default();
            while open.last().is_some_and(|&(open_end, _, _)| open_end <= begin) {
                open.pop();
            }
            let fits = match (open.last(), parent) {
                (None, _) => true,
                (Some(&(open_end, open_list, open_index)), Some(parent)) => {
                    open_list == list && open_index == parent && end <= open_end
                }
                (Some(_), None) => false,
            };
            if fits {
                open.push((end, list, index));
                return row;
            }
        }
        unreachable!("an empty row always fits")
    }
}

fn thread_name(pid: u32, tid: u32, name: &str) -> String {
    json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}).to_string()
}

/// The trace's output, locked by one sink for one call (so a batch is never split by
/// another sink's events), counting what that sink writes.
pub(super) struct SinkWriter<'a> {
    out: MutexGuard<'a, TraceOutput>,
    events: &'a mut usize,
}

impl<'a> SinkWriter<'a> {
    fn lock(out: &'a Mutex<TraceOutput>, events: &'a mut usize) -> Self {
        Self { out: lock(out), events }
    }

    /// The CPU tracks' state, in the same lock.
    pub(super) fn cpu(&mut self) -> &mut CpuTracks {
        &mut self.out.cpu
    }

    pub(super) fn write_event(&mut self, event: &str) -> std::io::Result<()> {
        self.out.write_event(event)?;
        *self.events += 1;
        Ok(())
    }
}

impl std::fmt::Debug for ChromeTraceSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromeTraceSink")
            .field("clock", &self.clock)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct CompleteEvent<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    pid: u32,
    tid: u32,
    /// Decimal literals: an `f64` could round ns away and make touching zones overlap.
    ts: Box<RawValue>,
    dur: Box<RawValue>,
    args: Args<'a>,
}

#[derive(Serialize)]
struct Args<'a> {
    file: &'a str,
    line: u32,
    function: &'a str,
    list: u64,
    depth: u32,
    gpu_begin_ns: i64,
    gpu_end_ns: i64,
    /// The zone's own arguments ([`DynamicLocation::arg`](crate::DynamicLocation::arg)).
    #[serde(flatten)]
    zone_args: ZoneArgs<'a>,
}

impl ChromeTraceSink {
    /// A sink writing to `out`, on the host clock from now: a [`ChromeTrace`] with this one
    /// sink. `out` cannot seek, so the closing `]` comes only when the sink is dropped (module
    /// docs, "When the file is valid JSON").
    pub fn new(out: impl Write + Send + 'static) -> Self {
        ChromeTrace::new(out).sink()
    }

    /// A sink writing to a new file at `path` (replacing any file there), on the host clock
    /// from now: a [`ChromeTrace`] with this one sink. The file is a complete JSON array
    /// after every flush.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(ChromeTrace::create(path)?.sink())
    }

    /// Writes `ts` on `clock` (default [`ChromeClock::Host`]).
    pub fn with_clock(mut self, clock: ChromeClock) -> Self {
        self.clock = clock;
        self
    }

    /// On the host clock, `ts` 0 is `origin` (default: its [`ChromeTrace`]'s origin, which
    /// for [`create`](Self::create) and [`new`](Self::new) is when the sink was made). Give it
    /// the `Instant` a CPU tracer counts from, so both traces share one timeline; sinks of one
    /// trace line up with each other when they keep the trace's origin
    /// ([`ChromeTrace::with_origin`]).
    pub fn with_origin(mut self, origin: Instant) -> Self {
        self.origin = origin;
        self.origin_ns = 0;
        self
    }

    /// Maps the host times of `backend`'s zones onto `Instant` exactly, through
    /// [`Backend::host_clock_origin`]; without it (or when the backend's host clock is not
    /// `Instant`-based) the mapping is estimated when the context opens the sink.
    pub fn with_backend_clock<B: Backend>(mut self, backend: &B) -> Self {
        self.backend_origin = backend.host_clock_origin();
        self
    }

    /// Writes the context's events under process id `pid` instead of the context id: pick
    /// one that no other sink of its [`ChromeTrace`] and no other trace merged with this one
    /// uses (`tracing-chrome` writes pid 1, and the first context's id is 1). Without it, a
    /// context whose id is the trace's CPU process id ([`ChromeTrace::cpu_pid`]: an
    /// application that is process 1 in a container) writes under its id plus 65536.
    pub fn with_pid(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self
    }

    /// `ts` 0 on the host clock.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The clock `ts` is on.
    pub fn clock(&self) -> ChromeClock {
        self.clock
    }

    /// Events this sink wrote so far (zones and metadata; [`ChromeTrace::events`] counts
    /// every sink's).
    pub fn events(&self) -> usize {
        self.events
    }

    fn pid(&self, context: &ContextInfo) -> u32 {
        match self.pid {
            Some(pid) => pid,
            None if context.id == self.cpu_pid => context.id.wrapping_add(CPU_PID_COLLISION),
            None => context.id,
        }
    }
}

impl Sink for ChromeTraceSink {
    fn open(&mut self, context: &ContextInfo) -> std::io::Result<()> {
        self.host_offset_ns = match self.backend_origin {
            Some(backend_origin) => signed_ns(backend_origin, self.origin),
            // The context read its host clock (`base.host_ns`) just before opening its sinks.
            None => signed_ns(Instant::now(), self.origin) - context.base.host_ns,
        }
        .saturating_add(self.origin_ns);
        let name = format!("{} ({})", context.name, context.backend);
        let pid = self.pid(context);
        let meta = json!({"name": "process_name", "ph": "M", "pid": pid,
            "args": {"name": name, "clock": self.clock.name()}});
        SinkWriter::lock(&self.out, &mut self.events).write_event(&meta.to_string())
    }

    fn name_lane(&mut self, context: &ContextInfo, lane: Lane, name: &str) -> std::io::Result<()> {
        let pid = self.pid(context);
        self.tracks.names.insert(lane, name.to_owned());
        match self.tracks.tids.get(&(lane, 0)) {
            // A track already written gets the name now (the last `thread_name` wins); a new
            // one gets it with its first zone.
            Some(&tid) => {
                SinkWriter::lock(&self.out, &mut self.events).write_event(&thread_name(pid, tid, name))
            }
            None => Ok(()),
        }
    }

    fn zones(&mut self, context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        let pid = self.pid(context);
        let mut out = SinkWriter::lock(&self.out, &mut self.events);
        // The batch is in begin (recording) order: a zone's parent is the nearest zone before
        // it one level up.
        let mut ancestors: Vec<usize> = Vec::new();
        for (index, zone) in batch.zones.iter().enumerate() {
            ancestors.truncate(zone.depth as usize);
            let parent = ancestors.last().copied().filter(|_| zone.depth > 0);
            ancestors.push(index);
            let (begin, end) = match self.clock {
                ChromeClock::Host => (
                    zone.host_begin_ns.saturating_add(self.host_offset_ns),
                    zone.host_end_ns.saturating_add(self.host_offset_ns),
                ),
                ChromeClock::Gpu => (zone.gpu_begin_ns, zone.gpu_end_ns),
            };
            let row = self.tracks.row(zone.lane, (begin, end), batch.list_id, index, parent);
            let tid = self.tracks.tid(pid, zone.lane, row, &mut out)?;
            let location = &zone.location;
            let event = CompleteEvent {
                name: location.name(),
                cat: "gpu",
                ph: "X",
                pid,
                tid,
                ts: micros_raw(begin)?,
                dur: micros_raw(end - begin)?,
                args: Args {
                    file: location.file(),
                    line: location.line(),
                    function: location.function(),
                    list: batch.list_id,
                    depth: zone.depth,
                    gpu_begin_ns: zone.gpu_begin_ns,
                    gpu_end_ns: zone.gpu_end_ns,
                    zone_args: ZoneArgs(location.args()),
                },
            };
            out.write_event(&serde_json::to_string(&event)?)?;
            if let (ChromeClock::Host, Some(launch)) = (self.clock, zone.launch) {
                let gpu = FlowEnd { pid, tid, ts_ns: begin };
                write_launch(&mut out, self.cpu_pid, &launch, self.host_offset_ns, location.name(), gpu)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        lock(&self.out).flush()
    }
}

#[cfg(test)]
mod tests {
    use super::{trailer, TRAILER_LEN};

    #[test]
    fn both_trailers_have_the_length_the_flush_moves_back_over() {
        assert_eq!(trailer(0).len() as i64, TRAILER_LEN);
        assert_eq!(trailer(1).len() as i64, TRAILER_LEN);
    }
}
