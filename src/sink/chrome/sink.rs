//! The sink: [`ChromeTraceSink`] writes one context's zones into its [`ChromeTrace`], on the
//! clock [`ChromeClock`] says, each lane its own track (rows apart for zones that overlap
//! without nesting). `ChromeTrace::sink` is here, so that the output knows no sink.

use super::cpu::{write_launch, FlowEnd};
use super::event::{complete_event, EventPlace, LocationTexts};
use super::format::signed_ns;
use super::output::{lock, ChromeTrace, SinkWriter, TraceOutput};
use super::watch::{write_discontinuity, write_frame, CounterTracks};
use crate::backend::Lane;
use crate::sink::{ClockDiscontinuity, ContextInfo, CounterSample, FrameMark, Sink, ZoneBatch};
use rustc_hash::FxHashMap;
use serde_json::json;
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
            host_offset_ns: 0,
            pid: None,
            tracks: Tracks::default(),
            texts: LocationTexts::default(),
            events: 0,
            counters: None,
            base: None,
        }
    }
}

/// Writes zones as Chrome trace events.
///
/// ```
/// use gpu_event_pool::sim::SimBackend;
/// use gpu_event_pool::sink::chrome::ChromeTrace;
/// use gpu_event_pool::TracingContext;
/// use std::time::Instant;
///
/// let origin = Instant::now(); // the moment a CPU tracer counts from
/// let gpu = SimBackend::realtime();
/// let path = std::env::temp_dir().join("chrome-sink-doc.json");
/// let trace = ChromeTrace::create(&path)?.sink().with_origin(origin);
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
    /// Added to a backend host time to get nanoseconds since `origin` (set by `open`).
    host_offset_ns: i64,
    pid: Option<u32>,
    tracks: Tracks,
    texts: LocationTexts,
    /// Events this sink wrote.
    events: usize,
    /// Which counter samples it writes, when it asked for them (`with_counters`).
    counters: Option<CounterTracks>,
    /// The context's base pair (set by `open`): places host times on the GPU clock.
    base: Option<crate::sink::Calibration>,
}

/// The tracks (Chrome threads) of one sink's context: one per lane, numbered from 1 in order
/// of first use, and more where zones of a lane overlap without nesting.
#[derive(Debug, Default)]
struct Tracks {
    /// Looked up once per zone, so without SipHash (a sixth of the sink's cost in a
    /// profile): lanes are not chosen by an attacker.
    lanes: FxHashMap<Lane, LaneTracks>,
    /// The tracks written so far, over all lanes: the latest `tid`.
    count: u32,
}

/// One lane's tracks.
#[derive(Debug, Default)]
struct LaneTracks {
    /// The name given with `name_stream`, if any.
    name: Option<String>,
    /// Row 0 is the lane's track; later rows hold zones that overlap a zone of the rows
    /// before without being nested in it (Vulkan commands without barriers).
    rows: Vec<Row>,
}

/// One row of a lane: a track.
#[derive(Debug)]
struct Row {
    tid: u32,
    /// The zones still open at the latest begin written here, outermost first.
    open: Vec<OpenZone>,
}

/// A zone written on a row: its end, its list's id, its index in that list's batch.
type OpenZone = (i64, u64, usize);

/// A zone to place on a track: its begin and end on the trace's clock, its list's id, and its
/// index and its parent's in that list's batch.
#[derive(Debug, Clone, Copy)]
struct Placing {
    begin: i64,
    end: i64,
    list: u64,
    index: usize,
    parent: Option<usize>,
}

impl Row {
    /// Whether `zone` nests truly here: every zone still open at its begin is one of its
    /// ancestors (those ended by then are closed first).
    fn fits(&mut self, zone: Placing) -> bool {
        let open = &mut self.open;
        while open.last().is_some_and(|&(open_end, _, _)| open_end <= zone.begin) {
            open.pop();
        }
        match (open.last(), zone.parent) {
            (None, _) => true,
            (Some(&(open_end, open_list, open_index)), Some(parent)) => {
                open_list == zone.list && open_index == parent && zone.end <= open_end
            }
            (Some(_), None) => false,
        }
    }
}

impl Tracks {
    /// The track of `zone` on `lane`: the first row where it nests truly. A viewer draws a
    /// track's nesting from times alone, so a zone that overlaps one it is not nested in goes
    /// to a row of its own. A new row's metadata (name, order) goes to `out` first.
    fn place(
        &mut self,
        pid: u32,
        lane: Lane,
        zone: Placing,
        out: &mut SinkWriter<'_>,
    ) -> std::io::Result<u32> {
        let tracks = self.lanes.entry(lane).or_default();
        let open = (zone.end, zone.list, zone.index);
        for row in &mut tracks.rows {
            if row.fits(zone) {
                row.open.push(open);
                return Ok(row.tid);
            }
        }
        self.count += 1;
        let tid = self.count;
        let row = tracks.rows.len();
        tracks.rows.push(Row { tid, open: vec![open] });
        let name = match (&tracks.name, lane) {
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

impl ChromeTraceSink {
    /// Writes `ts` on `clock` (default [`ChromeClock::Host`]).
    pub fn with_clock(mut self, clock: ChromeClock) -> Self {
        self.clock = clock;
        self
    }

    /// On the host clock, `ts` 0 is `origin` (default: its [`ChromeTrace`]'s origin, when the
    /// trace was made). Give it
    /// the `Instant` a CPU tracer counts from, so both traces share one timeline; sinks of one
    /// trace line up with each other when they keep the trace's origin
    /// ([`ChromeTrace::with_origin`]).
    pub fn with_origin(mut self, origin: Instant) -> Self {
        self.origin = origin;
        self.origin_ns = 0;
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

    /// Also writes the context's counters ([`CounterSample`]: slots in use, zones dropped,
    /// lists pending, collection lag in µs) as counter events, a track per counter in the
    /// context's process: at most one sample per `every` of host time (`Duration::ZERO`: every
    /// sample, one per emit phase), and of it only the counters that changed since the last
    /// one written. Off unless asked: the collector samples nothing for a context none of
    /// whose sinks asked.
    pub fn with_counters(mut self, every: std::time::Duration) -> Self {
        self.counters = Some(CounterTracks::new(every));
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

    /// A host time of the backend (a frame mark's, a counter sample's) on the trace's clock:
    /// on [`ChromeClock::Gpu`], through the context's base pair (drift not counted).
    fn host_ts(&self, host_ns: i64) -> i64 {
        match (self.clock, self.base) {
            (ChromeClock::Gpu, Some(base)) => {
                host_ns.saturating_sub(base.host_ns).saturating_add(base.gpu_ns)
            }
            _ => host_ns.saturating_add(self.host_offset_ns),
        }
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
        self.host_offset_ns = match context.host_clock_origin {
            Some(backend_origin) => signed_ns(backend_origin, self.origin),
            // The context read its host clock (`base.host_ns`) just before opening its sinks.
            None => signed_ns(Instant::now(), self.origin) - context.base.host_ns,
        }
        .saturating_add(self.origin_ns);
        self.base = Some(context.base);
        let name = format!("{} ({})", context.name, context.backend);
        let pid = self.pid(context);
        let meta = json!({"name": "process_name", "ph": "M", "pid": pid,
            "args": {"name": name, "clock": self.clock.name()}});
        let mut out = SinkWriter::lock(&self.out, &mut self.events);
        out.write_event(&meta.to_string())?;
        out.finish()
    }

    fn name_lane(&mut self, context: &ContextInfo, lane: Lane, name: &str) -> std::io::Result<()> {
        let pid = self.pid(context);
        let tracks = self.tracks.lanes.entry(lane).or_default();
        tracks.name = Some(name.to_owned());
        match tracks.rows.first() {
            // A track already written gets the name now (the last `thread_name` wins); a new
            // one gets it with its first zone.
            Some(row) => {
                let mut out = SinkWriter::lock(&self.out, &mut self.events);
                out.write_event(&thread_name(pid, row.tid, name))?;
                out.finish()
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
            let list = batch.list_id;
            let placing = Placing { begin, end, list, index, parent };
            let tid = self.tracks.place(pid, zone.lane, placing, &mut out)?;
            let place = EventPlace { pid, tid, begin, end, list };
            complete_event(out.next_event()?, &mut self.texts, place, zone);
            if let (ChromeClock::Host, Some(launch)) = (self.clock, zone.launch) {
                let gpu = FlowEnd { pid, tid, ts_ns: begin };
                let name = zone.location.name();
                write_launch(&mut out, self.cpu_pid, &launch, self.host_offset_ns, name, gpu)?;
            }
        }
        out.finish()
    }

    fn frame(&mut self, context: &ContextInfo, mark: FrameMark) -> std::io::Result<()> {
        let (pid, ts) = (self.pid(context), self.host_ts(mark.host_ns));
        let mut out = SinkWriter::lock(&self.out, &mut self.events);
        write_frame(&mut out, pid, ts, mark)?;
        out.finish()
    }

    fn clock_discontinuity(
        &mut self,
        context: &ContextInfo,
        discontinuity: ClockDiscontinuity,
    ) -> std::io::Result<()> {
        let (pid, ts) = (self.pid(context), self.host_ts(discontinuity.host_ns));
        let mut out = SinkWriter::lock(&self.out, &mut self.events);
        write_discontinuity(&mut out, pid, ts, discontinuity)?;
        out.finish()
    }

    fn wants_counters(&self) -> bool {
        self.counters.is_some()
    }

    fn counters(&mut self, context: &ContextInfo, sample: &CounterSample) -> std::io::Result<()> {
        let (pid, ts) = (self.pid(context), self.host_ts(sample.host_ns));
        let Some(tracks) = self.counters.as_mut() else { return Ok(()) };
        let mut out = SinkWriter::lock(&self.out, &mut self.events);
        tracks.write(&mut out, pid, ts, sample)?;
        out.finish()
    }

    fn flush(&mut self) -> std::io::Result<()> {
        lock(&self.out).flush()
    }
}
