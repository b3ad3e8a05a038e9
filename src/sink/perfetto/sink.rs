//! The sink: [`PerfettoSink`] writes one context's zones, launches, counters and frames into
//! its [`PerfettoTrace`]. `PerfettoTrace::sink` is here, so that the output knows no sink.

use super::output::{lock, PerfettoTrace, TraceOutput, Track};
use super::rows::{Placing, Rows};
use super::sequence::{Counter, Event, Kind, Name, Sequence, Value};
use crate::backend::Lane;
use crate::launch::Launch;
use crate::sink::counters::{CounterFilter, COUNTER_NAMES, LAG};
use crate::sink::{ContextInfo, CounterSample, FrameMark, Sink, Zone, ZoneBatch};
use rustc_hash::FxHashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Launch sequences (one per lane and recording thread) a sink keeps; past it, it starts
/// them all afresh.
const MAX_LAUNCH_SEQUENCES: usize = 4096;

impl PerfettoTrace {
    /// A new sink writing into this trace. Give each context its own.
    pub fn sink(&self) -> PerfettoSink {
        PerfettoSink {
            out: Arc::clone(&self.out),
            cpu_pid: self.cpu_pid,
            context: None,
            rows: Rows::default(),
            launches: FxHashMap::default(),
            counters: None,
            frames: None,
            gpu_times: false,
            zones: 0,
            ancestors: Vec::new(),
        }
    }
}

/// What the sink knows of its context once opened.
#[derive(Debug, Clone, Copy)]
struct Opened {
    /// The context's track.
    track: u64,
    /// Added to a backend host time to get `CLOCK_MONOTONIC` nanoseconds.
    host_offset_ns: i64,
}

/// The counters' tracks and the sequence their values are written on, and which samples are
/// written: at most one per `every_ns` of host time, and of it only the changed counters.
#[derive(Debug)]
struct CounterTracks {
    filter: CounterFilter,
    /// Made when the context opens.
    tracks: Option<([u64; 4], Sequence)>,
}

/// Writes a context's zones into a Perfetto trace (module docs: what goes where).
///
/// ```
/// use gpu_event_pool::sim::SimBackend;
/// use gpu_event_pool::sink::perfetto::PerfettoSink;
/// use gpu_event_pool::TracingContext;
///
/// let path = std::env::temp_dir().join("perfetto-sink-doc.pftrace");
/// let gpu = SimBackend::realtime();
/// let ctx = TracingContext::builder(gpu.clone()).sink(PerfettoSink::create(&path)?).build()?;
/// # drop(ctx);
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PerfettoSink {
    out: Arc<Mutex<TraceOutput>>,
    cpu_pid: u32,
    context: Option<Opened>,
    rows: Rows,
    /// Launch slices, one sequence per lane and recording thread: each in recording order.
    launches: FxHashMap<(Lane, u64), Sequence>,
    counters: Option<CounterTracks>,
    /// The frames' track and sequence.
    frames: Option<Sequence>,
    gpu_times: bool,
    zones: u64,
    /// The batch's zones still open at the zone being written (reused).
    ancestors: Vec<usize>,
}

impl std::fmt::Debug for PerfettoSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfettoSink").field("zones", &self.zones).finish_non_exhaustive()
    }
}

impl PerfettoSink {
    /// A sink writing to `out`: a [`PerfettoTrace`] with this one sink.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        PerfettoTrace::new(out).sink()
    }

    /// A sink writing to a new file at `path` (replacing any file there): a
    /// [`PerfettoTrace`] with this one sink. The file is a whole trace after every flush.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(PerfettoTrace::create(path)?.sink())
    }

    /// Also writes the context's counters ([`CounterSample`]) as counter tracks under the
    /// context's track: at most one sample per `every` of host time (`Duration::ZERO`: every
    /// sample), and of it only the counters that changed. Off unless asked.
    pub fn with_counters(mut self, every: Duration) -> Self {
        self.counters = Some(CounterTracks { filter: CounterFilter::new(every), tracks: None });
        self
    }

    /// Also writes every zone's GPU times (`gpu_begin_ns`, `gpu_end_ns`: nanoseconds since
    /// the context's base event) as arguments: two more arguments a zone. Off by default.
    pub fn with_gpu_times(mut self, on: bool) -> Self {
        self.gpu_times = on;
        self
    }

    /// Zones this sink wrote so far.
    pub fn zones_written(&self) -> u64 {
        self.zones
    }

    /// Events this sink wrote with an absolute timestamp because they were earlier than the
    /// event before them on their sequence (0 unless the sink's order assumptions fail; the
    /// trace stays valid either way).
    pub fn out_of_order(&self) -> u64 {
        let launches: u64 = self.launches.values().map(Sequence::out_of_order).sum();
        let counters =
            self.counters.as_ref().and_then(|c| c.tracks.as_ref()).map_or(0, |(_, s)| s.out_of_order());
        let frames = self.frames.as_ref().map_or(0, Sequence::out_of_order);
        self.rows.out_of_order() + launches + counters + frames
    }
}

/// Writes a zone's launch: a slice on the recording thread's track, named after the zone,
/// from just before the backend's record call to just after it, where flow `flow` starts.
fn write_launch(
    out: &mut TraceOutput,
    sequences: &mut FxHashMap<(Lane, u64), Sequence>,
    (cpu_pid, offset): (u32, i64),
    zone: &Zone,
    launch: &Launch,
    flow: u64,
) {
    let key = (zone.lane, launch.thread);
    if !sequences.contains_key(&key) {
        if sequences.len() >= MAX_LAUNCH_SEQUENCES {
            sequences.clear();
        }
        let track = out.cpu_thread_track(cpu_pid, launch.thread);
        sequences.insert(key, Sequence::new(out.sequence_id(), track));
    }
    let Some(sequence) = sequences.get_mut(&key) else { return };
    let begin = launch.host_begin_ns.saturating_add(offset);
    let end = launch.host_end_ns.saturating_add(offset).max(begin);
    let slice = Event {
        name: Name::Location(&zone.location),
        category: Some("launch"),
        flow_out: Some(flow),
        ..Event::new(Kind::Begin, begin)
    };
    sequence.write(out.staged(), &slice);
    sequence.write(out.staged(), &Event::new(Kind::End, end));
}

impl Sink for PerfettoSink {
    fn open(&mut self, context: &ContextInfo) -> std::io::Result<()> {
        let mut out = lock(&self.out);
        let clocks = out.clocks;
        let host_offset_ns = match context.host_clock_origin {
            Some(origin) => clocks.mono_ns(origin),
            // The context read its host clock (`base.host_ns`) just before opening its sinks.
            None => clocks.mono_ns(Instant::now()).saturating_sub(context.base.host_ns),
        };
        let track = out.uuid();
        let name = format!("{} ({})", context.name, context.backend);
        out.describe(Track { ordered_children: true, ..Track::named(track, &name) }, false);
        if let Some(counters) = self.counters.as_mut() {
            let mut tracks = [0; 4];
            for (uuid, name) in tracks.iter_mut().zip(COUNTER_NAMES) {
                *uuid = out.uuid();
                out.describe(
                    Track { parent: Some(track), counter: true, rank: Some(0), ..Track::named(*uuid, name) },
                    false,
                );
            }
            let sequence = Sequence::new(out.sequence_id(), tracks[0]);
            counters.tracks = Some((tracks, sequence));
        }
        let frames = out.uuid();
        out.describe(Track { parent: Some(track), rank: Some(0), ..Track::named(frames, "frames") }, false);
        self.frames = Some(Sequence::new(out.sequence_id(), frames));
        self.context = Some(Opened { track, host_offset_ns });
        out.write_staged(false)
    }

    fn name_lane(&mut self, _context: &ContextInfo, lane: Lane, name: &str) -> std::io::Result<()> {
        let Some(opened) = self.context else { return Ok(()) };
        let mut out = lock(&self.out);
        self.rows.name(&mut out, opened.track, lane, name);
        out.write_staged(false)
    }

    fn zones(&mut self, _context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        let Some(opened) = self.context else { return Ok(()) };
        let offset = opened.host_offset_ns;
        let mut guard = lock(&self.out);
        let out = &mut *guard;
        self.rows.begin_batch();
        // The batch is in begin (recording) order: a zone's parent is the nearest zone
        // before it one level up.
        let ancestors = &mut self.ancestors;
        ancestors.clear();
        for (index, zone) in batch.zones.iter().enumerate() {
            ancestors.truncate(zone.depth as usize);
            let parent = ancestors.last().copied().filter(|_| zone.depth > 0);
            ancestors.push(index);
            let begin = zone.host_begin_ns.saturating_add(offset);
            let end = zone.host_end_ns.saturating_add(offset).max(begin);
            let placing = Placing { begin, end, list: batch.list_id, index, parent };
            // The launch first: its flow starts before the zone that ends it, in the file too.
            let flow = zone.launch.map(|launch| {
                let flow = out.flow_id(self.cpu_pid);
                write_launch(out, &mut self.launches, (self.cpu_pid, offset), zone, &launch, flow);
                flow
            });
            let root = [
                ("list", Value::Uint(batch.list_id)),
                ("frame", Value::Uint(zone.frame.unwrap_or_default())),
            ];
            let root = match (parent, zone.frame) {
                (None, Some(_)) => &root[..],
                (None, None) => &root[..1],
                (Some(_), _) => &[],
            };
            let all;
            let args = if self.gpu_times {
                let times = [
                    ("gpu_begin_ns", Value::Int(zone.gpu_begin_ns)),
                    ("gpu_end_ns", Value::Int(zone.gpu_end_ns)),
                ];
                all = [root, &times[..]].concat();
                &all[..]
            } else {
                root
            };
            let event = Event {
                name: Name::Location(&zone.location),
                source: Some(&zone.location),
                flow_in: flow,
                args,
                ..Event::new(Kind::Begin, begin)
            };
            let row = self.rows.place(out, opened.track, zone.lane, placing);
            row.sequence.begin(out.staged(), &event);
        }
        self.rows.end_batch(out.staged());
        self.zones += batch.zones.len() as u64;
        out.write_staged(false)
    }

    fn frame(&mut self, _context: &ContextInfo, mark: FrameMark) -> std::io::Result<()> {
        let (Some(opened), Some(frames)) = (self.context, self.frames.as_mut()) else { return Ok(()) };
        let name = format!("frame {}", mark.id);
        let args = [("frame", Value::Uint(mark.id))];
        let ns = mark.host_ns.saturating_add(opened.host_offset_ns);
        let event = Event {
            name: Name::Inline(&name),
            category: Some("frame"),
            args: &args,
            ..Event::new(Kind::Instant, ns)
        };
        let mut out = lock(&self.out);
        frames.write(out.staged(), &event);
        out.write_staged(false)
    }

    fn wants_counters(&self) -> bool {
        self.counters.is_some()
    }

    fn counters(&mut self, _context: &ContextInfo, sample: &CounterSample) -> std::io::Result<()> {
        let (Some(opened), Some(counters)) = (self.context, self.counters.as_mut()) else { return Ok(()) };
        let Some((tracks, sequence)) = counters.tracks.as_mut() else { return Ok(()) };
        let values = counters.filter.changed(sample);
        let ns = sample.host_ns.saturating_add(opened.host_offset_ns);
        let mut out = lock(&self.out);
        for (index, value) in values.into_iter().enumerate() {
            let Some(value) = value else { continue };
            // The lag in microseconds, as the Chrome sink writes it.
            let counter =
                if index == LAG { Counter::Double(value as f64 / 1000.0) } else { Counter::Int(value) };
            let event =
                Event { track: Some(tracks[index]), counter: Some(counter), ..Event::new(Kind::Counter, ns) };
            sequence.write(out.staged(), &event);
        }
        out.write_staged(false)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        lock(&self.out).flush()
    }
}
