//! The Tracy profiler (feature `tracy`): every stream of a tracing context is its own
//! calibrated Tracy GPU context (a *lane* in Tracy's GPU timeline), and each collected zone
//! one Tracy GPU zone. Connect with the Tracy profiler 0.14.x (protocol 82, the client
//! `tracy-client` 0.19 bundles through `tracy-client-sys` 0.30); which interfaces the client
//! listens on is the application's choice (`tracy-client/only-localhost`, or this crate's
//! `tracy-only-localhost`). This is how the sink works.
//!
//! # Lanes
//!
//! Tracy keeps one zone stack per GPU context and draws a context's zones assuming they are
//! sorted in time, so concurrent streams must not share one (Tracy's own Vulkan and D3D12
//! clients make one context per queue). The collector hands this sink each stream's lists in
//! that stream's GPU order; the sink sends every list, whole, to the Tracy context of its first
//! zone's lane (the lane the collector ordered it on), so each context sees one stream's
//! zones in the order they ran.
//!
//! Tracy allows 255 GPU contexts per process and cannot forget one, while lanes can come and
//! go (a CUDA graph per step). So, per sink:
//!
//! ```text
//! Lane::Stream(k), first `max_stream_lanes` streams  ->  "<context> / <name>" or "<context> / stream N"
//! Lane::Stream(k), any later stream                  ->  "<context> / other streams" (shared)
//! Lane::Graph(_),  every graph                       ->  "<context> / graphs"        (shared)
//! a list emitted late (its lane moved on without it) ->  "<context> / late lists"    (shared)
//! ```
//!
//! A context is made when its lane first emits a zone (never for a named but unused stream).
//! `N` counts the sink's own stream lanes in order of first use; a name given with
//! [`TracingContext::name_stream`](crate::TracingContext::name_stream) replaces it (and
//! renames the context if it already exists). A list that begins before the end of the one
//! before it on its lane by no more than the two times' bounds (the one before was placed
//! high within its own, and the clock learnt better since: their true times are in order)
//! stays on its lane, at its placed times: in Tracy, as in every sink, a zone is where the
//! collector placed it. A list whose lane moved on without it by more (it was held open past
//! the collector's hold limit, `Config::hold_limit`) would go back in time on its stream's
//! lane: it is shown on the late lane instead. A sink therefore holds at
//! most `max_stream_lanes + 3` contexts ([`TracySink::with_max_stream_lanes`], default
//! [`DEFAULT_MAX_STREAM_LANES`]). Shared lanes cannot promise time order: graphs or streams
//! that run at the same time cross there.
//!
//! # What is sent, and why in this order
//!
//! For every batch (one collected list) the sink walks the zones in begin order and, using
//! their depths, emits Tracy's messages in nesting order:
//!
//! ```text
//! zones (begin order, depth):  A(0) [ B(1) ] [ C(1) [ D(2) ] ]
//! messages:  begin A, time | begin B, time | end B, time | begin C, time | begin D, time
//!            | end D, time | end C, time | end A, time
//! ```
//!
//! Every begin and every end takes a fresh query id from a wrapping `u16` counter, and its
//! timestamp is uploaded right after it. So no query id is outstanding when [`Sink::zones`]
//! returns, and an id comes back only after 65536 later ones, each resolved long before (the
//! seed's defect 6). Only the collector writes here, one list at a time, so begins and ends
//! never interleave across recording threads (defect 7). Tracy reads a time more than 2^31
//! ticks below its context's previous one as a timer wrap; the sink refuses (with an error,
//! sending nothing) a batch that would do that. Dropped or never-submitted zones never reach
//! a sink, so no placeholder time is ever sent.
//!
//! # Clocks
//!
//! Tracy shows a GPU time `t` of a calibrated context at `(t - gpu) + cpu`, where `gpu` is the
//! time given with the context's *new context* message and `cpu` Tracy's clock when that
//! message was emitted. This sink uploads each zone's *host* times (`Zone::host_begin_ns`,
//! `Zone::host_end_ns`): placed once by the collector for every sink, one offset per list (so
//! durations are the GPU's, exact, the same as the Chrome trace's `dur`), each within its
//! bound of the truth. Each context is created with `gpu` = the host clock's reading at that
//! moment, so Tracy shows a zone at the host time the collector gave it, on Tracy's timeline.
//! No calibration message is ever sent: the placement is already applied, so one would only
//! restate it, and a calibration that moved a context would make back-to-back zones overlap
//! in the viewer. A discontinuity of the clocks is a Tracy message (`TracyApi::message`). Tracy's own clock and the host clock
//! (`CLOCK_MONOTONIC`) may drift apart by a few ppm over a long capture; CPU zones and GPU
//! zones then slide by that much.
//!
//! # Counters and frames
//!
//! With [`TracySink::with_plots`], each counter sample ([`CounterSample`]) is a point of one
//! Tracy plot per counter, `"<context> / slots in use"` and so on. Each frame start
//! ([`TracingContext::frame`](crate::TracingContext::frame)) is a frame mark of the frame set
//! `"<context> / frames"`. Tracy stamps plot points and frame marks when they are sent: a
//! sample when it was taken, a frame mark at the end of the emit phase after the `frame`
//! call (up to one collection interval late).
//!
//! # Context ids
//!
//! `tracy-client` hands out ids from 0 upward with a private counter, and its own GPU context
//! cannot be created calibrated or of type CUDA, so this sink creates its contexts through
//! `tracy_client::sys` and takes ids from the top, 254 downward ([`TracyContextIds`]). A
//! process that also makes contexts with `tracy_client::Client::new_gpu_context` must keep
//! the two together under 255. [`Sink::open`] takes the first id (so building the tracing
//! context fails with an error when none is left); a lane that finds no id left joins the
//! sink's "other streams" lane, or its first lane: no zone is ever lost for want of an id.

mod client;
mod ids;

pub use client::{TracyApi, TracyClient};
pub use ids::{TracyContextIds, TracyGpuKind, MAX_CONTEXTS};

use super::{ClockDiscontinuity, ContextInfo, CounterSample, FrameMark, Sink, Zone, ZoneBatch};
use crate::backend::{Backend, Lane};
use crate::location::{ArgValue, Location, SourceLocation};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io;

/// Stream lanes of one sink that get a Tracy context of their own, unless
/// [`TracySink::with_max_stream_lanes`] says otherwise; later streams share one.
pub const DEFAULT_MAX_STREAM_LANES: usize = 16;

/// Tracy reads a GPU time this far (in ticks) below the previous one as a timer wrap.
const WRAP_WINDOW: i64 = 1 << 31;

/// One message of a batch, in the order Tracy receives them.
#[derive(Debug, Clone, Copy)]
enum Step {
    Begin(usize),
    End(usize),
}

impl Step {
    /// The time uploaded for the step: the zone's host time (module doc, "Clocks").
    fn time(self, zones: &[Zone]) -> i64 {
        match self {
            Self::Begin(z) => zones[z].host_begin_ns,
            Self::End(z) => zones[z].host_end_ns,
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

/// One Tracy GPU context of this sink: one lane in Tracy's GPU timeline.
#[derive(Debug)]
struct Track {
    id: u8,
    /// The stream this context was made for; `None` for a shared one (graphs, other streams).
    lane: Option<Lane>,
    /// The last time uploaded (Tracy's wrap check compares against it), or the time the
    /// context was made.
    last_time: i64,
    /// The latest time uploaded, once any was, and its bound (`Zone::host_end_bound_ns`).
    latest: Option<(i64, u64)>,
}

/// The tracing context a sink was opened for.
#[derive(Debug)]
struct Opened {
    name: String,
    kind: TracyGpuKind,
    /// The id taken at open, for the first lane that emits.
    reserved: Option<u8>,
    /// The frame set's name and the plots' (`PLOTS` after the context's name).
    frames: String,
    plots: [String; 5],
}

/// The shared lanes.
#[derive(Debug, Clone, Copy)]
enum Shared {
    Graphs,
    OtherStreams,
    /// Lists emitted after their lane moved on without them (the collector's hold limit).
    Late,
}

/// Sends zones to the Tracy profiler: one calibrated Tracy GPU context per stream lane (the
/// module doc says how lanes, ids and calibration work).
///
/// ```
/// use gpu_event_pool::{location, sim::SimBackend, sink::tracy::TracySink, TracingContext};
/// let sim = SimBackend::manual();
/// let ctx = TracingContext::builder(sim.clone())
///     .name("render queue")
///     .sink(TracySink::for_backend(&sim).with_max_stream_lanes(8))
///     .build()?;
/// let copies = sim.stream();
/// ctx.name_stream(&copies, "copies"); // its Tracy lane: "render queue / copies"
/// # Ok::<(), gpu_event_pool::Error>(())
/// ```
pub struct TracySink<A: TracyApi = TracyClient> {
    api: A,
    host_clock: Box<dyn Fn() -> i64 + Send>,
    opened: Option<Opened>,
    max_stream_lanes: usize,
    tracks: Vec<Track>,
    /// The track of every lane seen.
    lanes: HashMap<Lane, usize>,
    /// Users' names for lanes (`name_lane`), kept for lanes not seen yet.
    names: HashMap<Lane, String>,
    graphs: Option<usize>,
    other_streams: Option<usize>,
    late: Option<usize>,
    /// Streams with a track of their own.
    stream_tracks: usize,
    /// The next query id (wrapping): every id is resolved before the next is taken.
    next_query: u16,
    /// Tracy locations of the static locations seen so far, by `SourceLocation` address.
    locations: HashMap<usize, A::Location>,
    open: Vec<usize>,
    /// Whether it plots the context's counters (`with_plots`).
    plots: bool,
}

/// The plots' names after the context's, in `CounterSample` order.
const PLOTS: [&str; 5] =
    ["slots in use", "zones dropped", "lists pending", "collection lag (us)", "clock bound (us)"];

impl<A: TracyApi> std::fmt::Debug for TracySink<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracySink")
            .field("contexts", &self.context_ids())
            .field("lanes", &self.lanes.len())
            .field("next_query", &self.next_query)
            .field("locations", &self.locations.len())
            .finish()
    }
}

impl TracySink<TracyClient> {
    /// A sink on the real Tracy client. `host_clock` must read the backend's host clock
    /// ([`Backend::host_now_ns`]): zones' host times are on that clock, and each lane's Tracy
    /// context is made at its reading.
    pub fn new(host_clock: impl Fn() -> i64 + Send + 'static) -> Self {
        Self::with_api(TracyClient::start(), host_clock)
    }

    /// A sink on the real Tracy client, reading `backend`'s host clock.
    pub fn for_backend<B: Backend + Clone>(backend: &B) -> Self {
        let backend = backend.clone();
        Self::new(move || backend.host_now_ns())
    }
}

fn not_opened() -> io::Error {
    io::Error::other("Tracy sink used before open: it has no Tracy GPU context")
}

impl<A: TracyApi> TracySink<A> {
    /// A sink writing to `api` (a recorder in tests); `host_clock` as in [`TracySink::new`].
    pub fn with_api(api: A, host_clock: impl Fn() -> i64 + Send + 'static) -> Self {
        Self {
            api,
            host_clock: Box::new(host_clock),
            opened: None,
            max_stream_lanes: DEFAULT_MAX_STREAM_LANES,
            tracks: Vec::new(),
            lanes: HashMap::new(),
            names: HashMap::new(),
            graphs: None,
            other_streams: None,
            late: None,
            stream_tracks: 0,
            next_query: 0,
            locations: HashMap::new(),
            open: Vec::new(),
            plots: false,
        }
    }

    /// Also plots the context's counters ([`CounterSample`]), one Tracy plot per counter named
    /// `"<context> / slots in use"`, `"... / zones dropped"`, `"... / lists pending"`,
    /// `"... / collection lag (us)"`, `"... / clock bound (us)"` (the largest host-time bound
    /// of the zones emitted since the sample before): a point per sample (once per emit phase), at Tracy's
    /// clock when it is sent, which is when it was sampled. Off unless asked: the collector
    /// samples nothing for a context none of whose sinks asked.
    pub fn with_plots(mut self) -> Self {
        self.plots = true;
        self
    }

    /// How many streams get a Tracy context of their own (default
    /// [`DEFAULT_MAX_STREAM_LANES`]); later ones share `"<context> / other streams"`. With 0,
    /// every stream shares that lane. A sink holds at most this many contexts plus three.
    pub fn with_max_stream_lanes(mut self, lanes: usize) -> Self {
        self.max_stream_lanes = lanes;
        self
    }

    /// The Tracy context ids this sink holds, in the order it took them: the one reserved at
    /// open (until its lane emits), then one per lane made.
    pub fn context_ids(&self) -> Vec<u8> {
        let reserved = self.opened.as_ref().and_then(|o| o.reserved);
        reserved.into_iter().chain(self.tracks.iter().map(|t| t.id)).collect()
    }

    fn take_query(&mut self) -> u16 {
        let id = self.next_query;
        self.next_query = self.next_query.wrapping_add(1);
        id
    }

    /// Makes a Tracy context whose "GPU" times are host times (module doc, "Clocks"), or
    /// `None` when no id is left.
    fn new_track(&mut self, name: &str, lane: Option<Lane>) -> Option<usize> {
        let opened = self.opened.as_mut()?;
        let id = opened.reserved.take().or_else(|| self.api.reserve_context())?;
        let now = (self.host_clock)();
        self.api.new_context(id, opened.kind, now);
        self.api.name_context(id, name);
        self.tracks.push(Track { id, lane, last_time: now, latest: None });
        Some(self.tracks.len() - 1)
    }

    /// The shared track, made on first use; with no id left, the sink's first track.
    fn shared(&mut self, which: Shared) -> io::Result<usize> {
        let (slot, suffix) = match which {
            Shared::Graphs => (self.graphs, "graphs"),
            Shared::OtherStreams => (self.other_streams, "other streams"),
            Shared::Late => (self.late, "late lists"),
        };
        if let Some(track) = slot {
            return Ok(track);
        }
        let name = format!("{} / {suffix}", self.opened.as_ref().ok_or_else(not_opened)?.name);
        let Some(track) = self.new_track(&name, None) else {
            // Tracy's ids are all taken: join a lane that exists (open reserved the first).
            return if self.tracks.is_empty() { Err(not_opened()) } else { Ok(0) };
        };
        match which {
            Shared::Graphs => self.graphs = Some(track),
            Shared::OtherStreams => self.other_streams = Some(track),
            Shared::Late => self.late = Some(track),
        }
        Ok(track)
    }

    /// The track `lane` is shown on, made when the lane first emits.
    fn track_for(&mut self, lane: Lane) -> io::Result<usize> {
        if let Some(&track) = self.lanes.get(&lane) {
            return Ok(track);
        }
        let track = match lane {
            Lane::Graph(_) => self.shared(Shared::Graphs)?,
            Lane::Stream(_) => {
                let own = if self.stream_tracks < self.max_stream_lanes {
                    let context = &self.opened.as_ref().ok_or_else(not_opened)?.name;
                    let name = match self.names.get(&lane) {
                        Some(name) => format!("{context} / {name}"),
                        None => format!("{context} / stream {}", self.stream_tracks + 1),
                    };
                    self.new_track(&name, Some(lane))
                } else {
                    None
                };
                match own {
                    Some(track) => {
                        self.stream_tracks += 1;
                        track
                    }
                    None => self.shared(Shared::OtherStreams)?,
                }
            }
        };
        self.lanes.insert(lane, track);
        Ok(track)
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
                    &name_with_args(&location.name, &location.args),
                    &location.function,
                    &location.file,
                    location.line,
                    query,
                ),
            },
            Step::End(_) => self.api.end_span(context, query),
        }
        self.api.upload_gpu_timestamp(context, query, step.time(zones));
    }
}

/// A zone's name with its arguments, `name (key=value, ...)`: Tracy's GPU zones carry no
/// text of their own (zone text attaches to CPU zones), so the arguments go into the name
/// of the location Tracy allocates for the zone. Zones of one name with different arguments
/// are then told apart in Tracy's statistics.
fn name_with_args<'a>(name: &'a str, args: &[(Cow<'static, str>, ArgValue)]) -> Cow<'a, str> {
    if args.is_empty() {
        return Cow::Borrowed(name);
    }
    let args: Vec<String> = args.iter().map(|(key, value)| format!("{key}={value}")).collect();
    Cow::Owned(format!("{name} ({})", args.join(", ")))
}

impl<A: TracyApi> Sink for TracySink<A> {
    fn open(&mut self, info: &ContextInfo) -> io::Result<()> {
        if self.opened.is_some() {
            return Err(io::Error::other(format!(
                "Tracy sink opened twice (for context {:?}): give each tracing context its own sink",
                info.name
            )));
        }
        let reserved = self.api.reserve_context().ok_or_else(|| {
            io::Error::other(format!(
                "cannot create a Tracy GPU context for {:?}: Tracy allows {MAX_CONTEXTS} GPU \
                 contexts per process and all are taken",
                info.name
            ))
        })?;
        self.opened = Some(Opened {
            frames: format!("{} / frames", info.name),
            plots: PLOTS.map(|plot| format!("{} / {plot}", info.name)),
            name: info.name.clone(),
            kind: TracyGpuKind::for_backend(info.backend),
            reserved: Some(reserved),
        });
        Ok(())
    }

    fn name_lane(&mut self, _info: &ContextInfo, lane: Lane, name: &str) -> io::Result<()> {
        let opened = self.opened.as_ref().ok_or_else(not_opened)?;
        if let Some(&track) = self.lanes.get(&lane) {
            let track = &self.tracks[track];
            if track.lane == Some(lane) {
                self.api.name_context(track.id, &format!("{} / {name}", opened.name));
            }
        }
        self.names.insert(lane, name.to_owned());
        Ok(())
    }

    /// A frame mark of the frame set `"<context> / frames"`. Tracy stamps a mark when it is
    /// sent: at the end of the emit phase after `TracingContext::frame`, late by at most
    /// one collection interval.
    fn frame(&mut self, _info: &ContextInfo, _mark: FrameMark) -> io::Result<()> {
        let opened = self.opened.as_ref().ok_or_else(not_opened)?;
        self.api.frame_mark(&opened.frames);
        Ok(())
    }

    fn clock_discontinuity(
        &mut self,
        info: &ContextInfo,
        discontinuity: ClockDiscontinuity,
    ) -> io::Result<()> {
        let text = format!(
            "{}: clock discontinuity at GPU time {} ns: the offset jumped {} ns",
            info.name, discontinuity.gpu_ns, discontinuity.jump_ns
        );
        self.api.message(&text);
        Ok(())
    }

    fn wants_counters(&self) -> bool {
        self.plots
    }

    fn counters(&mut self, _info: &ContextInfo, sample: &CounterSample) -> io::Result<()> {
        if !self.plots {
            return Ok(());
        }
        let opened = self.opened.as_ref().ok_or_else(not_opened)?;
        let values = [
            Some(sample.slots_in_use as f64),
            Some(sample.zones_dropped as f64),
            Some(sample.lists_pending as f64),
            sample.lag_ns.map(|ns| ns as f64 / 1e3),
            sample.clock_bound_ns.map(|ns| ns as f64 / 1e3),
        ];
        for (name, value) in opened.plots.iter().zip(values) {
            if let Some(value) = value {
                self.api.plot(name, value);
            }
        }
        Ok(())
    }

    fn zones(&mut self, _info: &ContextInfo, batch: ZoneBatch<'_>) -> io::Result<()> {
        let zones = batch.zones;
        let Some(first) = zones.first() else { return Ok(()) };
        if self.opened.is_none() {
            return Err(not_opened());
        }
        let mut track = self.track_for(first.lane)?;
        let on_own_lane = self.tracks[track].lane.is_some();
        let behind = |(latest, bound): (i64, u64)| {
            let apart = bound.saturating_add(first.host_begin_bound_ns);
            latest.checked_sub(first.host_begin_ns).is_some_and(|b| b > 0 && b as u64 > apart)
        };
        if on_own_lane && self.tracks[track].latest.is_some_and(behind) {
            // A list emitted after its lane moved on without it (the collector's hold limit):
            // shown on the late lane, so that the stream's own lane never goes back in time
            // by more than the times' bounds.
            track = self.shared(Shared::Late)?;
        }

        let mut open = std::mem::take(&mut self.open);
        // First pass: would any time look like a timer wrap to Tracy?
        let (mut last, mut back) = (self.tracks[track].last_time, 0);
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
                    "Tracy sink: list {} not sent: its GPU times go back {back} ns on its Tracy lane, \
                     which Tracy would read as a timer wrap (more than 2^31 ns); did lanes that share \
                     a Tracy context run more than 2.1 s apart?",
                    batch.list_id
                ),
            ));
        }
        let context = self.tracks[track].id;
        walk(zones, &mut open, |step| self.emit(context, zones, step));
        self.open = open;
        let track = &mut self.tracks[track];
        track.last_time = last;
        let end = zones.iter().map(|z| (z.host_end_ns, z.host_end_bound_ns)).max_by_key(|&(end, _)| end);
        let end = end.unwrap_or((last, 0));
        track.latest = Some(track.latest.map_or(end, |l| if end.0 > l.0 { end } else { l }));

        Ok(())
    }
}
