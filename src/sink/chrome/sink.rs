//! The sink: [`ChromeTraceSink`] writes one context's zones into its [`ChromeTrace`], on the
//! clock [`ChromeClock`] says, each lane its own track (rows apart for zones that overlap
//! without nesting). `ChromeTrace::sink` is here, so that the output knows no sink.

use super::cpu::{write_launch, FlowEnd};
use super::format::{signed_ns, write_micros, write_str};
use super::output::{lock, ChromeTrace, SinkWriter, TraceOutput};
use crate::backend::{Backend, Lane};
use crate::sink::{ContextInfo, Sink, Zone, ZoneBatch};
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
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

impl ChromeTrace {
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
            event: Vec::new(),
        }
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
    /// The event being written, reused from zone to zone.
    event: Vec<u8>,
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

impl std::fmt::Debug for ChromeTraceSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromeTraceSink")
            .field("clock", &self.clock)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// Appends one zone as a complete ("X") event: `{"name", "cat": "gpu", "ph": "X", "pid",
/// "tid", "ts", "dur", "args": {"file", "line", "function", "list", "depth",
/// "gpu_begin_ns", "gpu_end_ns", and the zone's own arguments}}`. Written by hand into a
/// buffer the sink reuses: no allocation per zone (the serializer it replaced made four).
fn complete_event(out: &mut Vec<u8>, pid: u32, tid: u32, begin: i64, end: i64, list: u64, zone: &Zone) {
    use std::io::Write;
    let location = &zone.location;
    out.extend_from_slice(b"{\"name\":");
    write_str(out, location.name());
    // Writing into a Vec cannot fail.
    let _ = write!(out, ",\"cat\":\"gpu\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":");
    write_micros(out, begin);
    out.extend_from_slice(b",\"dur\":");
    write_micros(out, end - begin);
    out.extend_from_slice(b",\"args\":{\"file\":");
    write_str(out, location.file());
    let _ = write!(out, ",\"line\":{},\"function\":", location.line());
    write_str(out, location.function());
    let _ = write!(
        out,
        ",\"list\":{list},\"depth\":{},\"gpu_begin_ns\":{},\"gpu_end_ns\":{}",
        zone.depth, zone.gpu_begin_ns, zone.gpu_end_ns
    );
    for (key, value) in location.args() {
        out.push(b',');
        write_str(out, key);
        out.push(b':');
        let _ = serde_json::to_writer(&mut *out, value);
    }
    out.extend_from_slice(b"}}");
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
            let event = &mut self.event;
            event.clear();
            complete_event(event, pid, tid, begin, end, batch.list_id, zone);
            out.write_event_bytes(event)?;
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
