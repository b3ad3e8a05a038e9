//! The sink: [`PerfettoSink`] writes one context's zones, launches, counters and frames into
//! its [`PerfettoTrace`]. `PerfettoTrace::sink` is here, so that the output knows no sink.

use super::event::{Counter, Event, Kind, Name, Value};
use super::output::{lock, PerfettoTrace, TraceOutput, Track};
use super::rows::{Placing, Rows, IDLE_NS};
use super::sequence::Sequence;
use crate::backend::Lane;
use crate::launch::Launch;
use crate::location::Location;
use crate::sink::counters::{CounterFilter, COUNTERS, COUNTER_NAMES, LAG};
use crate::sink::{ClockDiscontinuity, ContextInfo, CounterSample, FrameMark, Sink, Zone, ZoneBatch};
use rustc_hash::FxHashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

impl PerfettoTrace {
    /// A new sink writing into this trace. Give each context its own.
    pub fn sink(&self) -> PerfettoSink {
        PerfettoSink {
            out: Arc::clone(&self.out),
            cpu_pid: self.cpu_pid,
            context: None,
            rows: Rows::default(),
            launches: Launches::default(),
            counters: None,
            frames: None,
            clock: None,
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
    tracks: Option<([u64; COUNTERS], Sequence)>,
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
    launches: Launches,
    counters: Option<CounterTracks>,
    /// The frames' track and sequence.
    frames: Option<Sequence>,
    /// The context's clock track: its discontinuities.
    clock: Option<Sequence>,
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

    /// Also names every zone's source location (file, function, line: 3 bytes a zone more).
    /// By default a zone names it only where it is the first of its location on its track,
    /// which defines it: a static location is one name, so its other zones are at the same
    /// place. Off by default. (A dynamic location's zones always name theirs.)
    pub fn with_source_locations(mut self, on: bool) -> Self {
        self.rows.every_location = on;
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
        let launches = self.launches.out_of_order();
        let counters =
            self.counters.as_ref().and_then(|c| c.tracks.as_ref()).map_or(0, |(_, s)| s.out_of_order());
        let frames = self.frames.as_ref().map_or(0, Sequence::out_of_order);
        self.rows.out_of_order() + launches + counters + frames
    }
}

/// The launch slices' sequences, one per lane and recording thread (a thread launches in
/// order on a lane, not across lanes), each with the end of its latest launch. They are
/// forgotten as the rows' lanes are (`rows.rs`): once idle for [`IDLE_NS`] of the launches'
/// time, at most once per `IDLE_NS`; a thread's track is the same whatever its sequence.
#[derive(Debug, Default)]
struct Launches {
    sequences: FxHashMap<(Lane, u64), (Sequence, i64)>,
    /// The latest end of a launch written.
    newest: i64,
    /// `newest` when idle sequences were last forgotten.
    swept_at: i64,
    /// Events written out of time order by the sequences forgotten.
    forgotten_out_of_order: u64,
}

impl Launches {
    /// Writes a zone's launch: a slice on the recording thread's track, named after the
    /// zone, from just before the backend's record call to just after it, where flow `flow`
    /// starts.
    fn write(
        &mut self,
        out: &mut TraceOutput,
        (cpu_pid, offset): (u32, i64),
        zone: &Zone,
        launch: &Launch,
        flow: u64,
    ) {
        if self.newest.saturating_sub(self.swept_at) >= IDLE_NS {
            let since = self.newest.saturating_sub(IDLE_NS);
            let forgotten = &mut self.forgotten_out_of_order;
            self.sequences.retain(|_, (sequence, last)| {
                let kept = *last >= since;
                if !kept {
                    *forgotten += sequence.out_of_order();
                }
                kept
            });
            self.swept_at = self.newest;
        }
        let begin = launch.host_begin_ns.saturating_add(offset);
        let end = launch.host_end_ns.saturating_add(offset).max(begin);
        let (sequence, last) = self.sequences.entry((zone.lane, launch.thread)).or_insert_with(|| {
            let track = out.cpu_thread_track(cpu_pid, launch.thread);
            (Sequence::new(out.sequence_id(), track, false), i64::MIN)
        });
        let slice = Event {
            name: Name::Location(&zone.location),
            category: Some("launch"),
            flow_out: Some(flow),
            ..Event::new(Kind::Begin, begin)
        };
        sequence.write(out.staged(), &slice);
        sequence.write(out.staged(), &Event::new(Kind::End, end));
        *last = end;
        self.newest = self.newest.max(end);
    }

    /// Events written out of time order, over every sequence.
    fn out_of_order(&self) -> u64 {
        let kept: u64 = self.sequences.values().map(|(sequence, _)| sequence.out_of_order()).sum();
        kept + self.forgotten_out_of_order
    }
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
            let mut tracks = [0; COUNTERS];
            for (uuid, name) in tracks.iter_mut().zip(COUNTER_NAMES) {
                *uuid = out.uuid();
                out.describe(
                    Track { parent: Some(track), counter: true, rank: Some(0), ..Track::named(*uuid, name) },
                    false,
                );
            }
            let sequence = Sequence::new(out.sequence_id(), tracks[0], false);
            counters.tracks = Some((tracks, sequence));
        }
        let frames = out.uuid();
        out.describe(Track { parent: Some(track), rank: Some(0), ..Track::named(frames, "frames") }, false);
        self.frames = Some(Sequence::new(out.sequence_id(), frames, false));
        let clock = out.uuid();
        out.describe(Track { parent: Some(track), rank: Some(0), ..Track::named(clock, "clock") }, false);
        self.clock = Some(Sequence::new(out.sequence_id(), clock, false));
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
        let gpu_times = self.gpu_times;
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
                self.launches.write(out, (self.cpu_pid, offset), zone, &launch, flow);
                flow
            });
            let row = self.rows.place(out, opened.track, zone.lane, placing);
            // Most zones: nested (no list or frame argument), no launch, a static location
            // whose begin the row's sequence has written before.
            if let (Some(_), None, false, Location::Static(source)) =
                (parent, flow, gpu_times, &zone.location)
            {
                if row.sequence.begin_known(out.staged(), begin, source) {
                    continue;
                }
            }
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
            let args = if gpu_times {
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

    fn clock_discontinuity(
        &mut self,
        _context: &ContextInfo,
        discontinuity: ClockDiscontinuity,
    ) -> std::io::Result<()> {
        let (Some(opened), Some(clock)) = (self.context, self.clock.as_mut()) else { return Ok(()) };
        let args =
            [("gpu_ns", Value::Int(discontinuity.gpu_ns)), ("jump_ns", Value::Int(discontinuity.jump_ns))];
        let ns = discontinuity.host_ns.saturating_add(opened.host_offset_ns);
        let event = Event {
            name: Name::Inline("clock discontinuity"),
            category: Some("clock"),
            args: &args,
            ..Event::new(Kind::Instant, ns)
        };
        let mut out = lock(&self.out);
        clock.write(out.staged(), &event);
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
