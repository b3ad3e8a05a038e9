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
//! depth, the zone's GPU times (`gpu_begin_ns`, `gpu_end_ns`: nanoseconds since the
//! context's base event) whichever clock `ts` is on, its frame (`frame`, when it has one:
//! [`TracingContext::frame`](crate::TracingContext::frame)), and the zone's own arguments
//! ([`DynamicLocation::arg`](crate::DynamicLocation::arg)). A zone with a launch
//! ([`Builder::record_launches`](crate::Builder::record_launches)) also gets, on the host
//! clock, a slice on its recording thread's track in the trace's CPU process
//! ([`ChromeTrace::cpu_pid`]) and a flow arrow (`"ph":"s"` / `"f"`) from it to the zone.
//!
//! # Counters and frames
//!
//! With [`ChromeTraceSink::with_counters`], the context's counters
//! ([`CounterSample`](super::CounterSample)) are counter events (`"ph":"C"`), one track per
//! counter in the context's process; each frame's start is an instant event over the
//! process (`"ph":"i","s":"p"`, named `frame <id>`). Both are host times: on
//! [`ChromeClock::Gpu`] they are placed through the context's base calibration pair.
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
//! ([`Zone::host_begin_ns`](super::Zone::host_begin_ns), `host_end_ns`), the context's one
//! GPU-to-host mapping, on the backend's host clock: `dur` is the GPU's duration, exact, and
//! `args.bound_begin_ns` / `bound_end_ns` say how far the true host begin and end can be from
//! `ts` and `ts + dur` (`null`: not bounded). The sink maps the host clock onto `Instant`:

//!
//! - exactly, when the backend knows where its host clock starts
//!   ([`Backend::host_clock_origin`]: the real-time simulation, CUDA and Vulkan), which the
//!   context tells the sink when it opens it ([`ContextInfo::host_clock_origin`]);
//! - otherwise (`SimBackend::manual`, whose host clock is simulated) by reading `Instant::now()` when the context opens the sink, just after the
//!   context read its host clock for the base calibration pair
//!   ([`ContextInfo::base`]): late by the time between the two reads (microseconds, more if
//!   sinks added before this one are slow to open).
//!
//! [`ChromeClock::Gpu`]: `ts` is GPU time since the context's base event, the same numbers as
//! `args.gpu_begin_ns`; it lines up with nothing outside the context.
//!
//! # When the file is valid JSON
//!
//! A trace made by [`ChromeTrace::create`] writes the closing `]` on every flush (the
//! context's `flush`, and the last handle's) and moves back over it, so the next event
//! replaces it: the file on disk is a complete JSON array after every flush, even while lists
//! of a dropped context keep the sink alive. A trace on any other writer
//! ([`ChromeTrace::new`]) cannot move back, so it writes the `]` only when it is dropped
//! (with its sinks); until then its output is a valid trace in the array format, whose
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
//! A sink is always made by [`ChromeTrace::sink`]: one context's is
//! `ChromeTrace::create(path)?.sink()`.
//!
//! [`Instant`]: std::time::Instant
//! [`Backend::host_clock_origin`]: crate::Backend::host_clock_origin
//! [`ContextInfo::base`]: super::ContextInfo::base
//! [`ContextInfo::host_clock_origin`]: super::ContextInfo::host_clock_origin

// The folder: the Chrome trace sink, one file per idea. `format.rs` writes times, integers
// and strings, and `tracks.rs` keeps the CPU tracks already named (leaves); `event.rs` writes
// a zone's event with `format.rs`, keeping its static locations' text; `output.rs` is the
// JSON array the sinks of one trace share (`ChromeTrace`, `SinkWriter`); `cpu.rs` the CPU
// side (launch slices, flow arrows, the wall-clock origin); `sink.rs` the `ChromeTraceSink`
// and `ChromeTrace::sink`; `watch.rs` the counter and frame events. `tracing_layer.rs` writes into the same output. It never touches
// slots, lists, lanes' order or the collector: it sees only the zones a sink is handed.
mod cpu;
mod event;
pub(super) mod format;
pub(super) mod output;
mod sink;
mod tracks;
mod watch;

#[cfg(feature = "tracing")]
#[cfg_attr(docsrs, doc(cfg(feature = "tracing")))]
pub use super::tracing_layer::ChromeLayer;
pub use output::{ChromeTrace, TraceFileError};
pub use sink::{ChromeClock, ChromeTraceSink};
