//! The `tracing-subscriber` layer of a [`ChromeTrace`]: [`ChromeLayer`] (its docs say what it writes).

use super::chrome::format::{micros_raw, signed_ns};
use super::chrome::output::{lock, ChromeTrace, TraceOutput};
use super::span_edges::{Edge, EdgeClock};
use crate::launch::thread_number;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// CPU and GPU on one trace (feature `tracing`): a `tracing-subscriber` layer that writes the
/// application's `tracing` spans and events into a [`ChromeTrace`], beside the GPU zones its
/// sinks write, so one file shows both with no merging.
///
/// - **One clock, one origin.** The layer reads [`Instant::now`] and writes `ts` as the trace's
///   sinks do ([`ChromeTrace::ts_ns`]): microseconds since the trace's origin (or on the wall
///   clock after [`ChromeTrace::with_wall_clock_origin`]); each GPU sink places its zones on
///   that clock through its context's backend clock. The clock is read once per span entry,
///   exit and event, for every layer of the crate on the subscriber: beside a Perfetto layer
///   (`PerfettoTrace::layer`), both traces place each span at the same nanoseconds.
/// - **Its own process.** CPU tracks are written under the trace's CPU process id
///   ([`ChromeTrace::cpu_pid`], by default this process's id), apart from the GPU contexts'
///   processes (their ids, which move out of its way; see
///   [`ChromeTraceSink::with_pid`](super::chrome::ChromeTraceSink::with_pid)).
/// - **One track per thread**, `tid` its [`thread_number`], named after the thread: the same
///   track the Chrome sink draws a zone's launch on
///   ([`Builder::record_launches`](crate::Builder::record_launches)), so a launch nests in the
///   span that recorded it and its flow arrow starts there.
///
/// Each time a span is entered and exited is one complete event (`"ph":"X"`, `cat` the span's
/// target, `args` its fields); each `tracing` event is a thread-scoped instant event
/// (`"ph":"i"`, named by its message). The layer takes the trace's lock once per exit or
/// event (a mutex around a buffered writer: about as costly as formatting the event).
///
/// ```
/// use gpu_event_pool::sink::chrome::ChromeTrace;
/// use gpu_event_pool::{location, sim::SimBackend, TracingContext};
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let path = std::env::temp_dir().join("tracing-layer-doc.json");
/// let trace = ChromeTrace::create(&path)?;
/// let subscriber = tracing_subscriber::registry().with(trace.layer());
/// let _default = tracing::subscriber::set_default(subscriber); // or set_global_default
///
/// let gpu = SimBackend::realtime();
/// let stream = gpu.stream();
/// let ctx = TracingContext::builder(gpu.clone())
///     .sink(trace.sink())
///     .record_launches(true) // flow arrows from the recording thread to each zone
///     .build()?;
/// {
///     let _frame = tracing::info_span!("frame", number = 1).entered();
///     let mut list = ctx.list();
///     {
///         let _dispatch = list.zone(&stream, location!("dispatch"));
///         gpu.launch(&stream, 10_000);
///     }
///     ctx.submit(list)?;
/// }
/// ctx.flush()?;
/// trace.flush()?; // a global subscriber keeps the trace open: flush it at the end
/// # let events: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
/// # assert!(events.iter().any(|e| e["name"] == "frame" && e["ph"] == "X"));
/// # assert!(events.iter().any(|e| e["ph"] == "f"));
/// # drop(_default);
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Made by [`ChromeTrace::layer`].
pub struct ChromeLayer {
    out: Arc<Mutex<TraceOutput>>,
    clock: EdgeClock,
    origin: Instant,
    origin_ns: i64,
    pid: u32,
}

impl std::fmt::Debug for ChromeLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromeLayer").field("pid", &self.pid).finish_non_exhaustive()
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tracing")))]
impl ChromeTrace {
    /// A `tracing-subscriber` layer writing the application's spans and events into this
    /// trace, on its origin and CPU process ([`ChromeLayer`]).
    pub fn layer(&self) -> ChromeLayer {
        ChromeLayer {
            out: Arc::clone(&self.out),
            clock: EdgeClock::new(),
            origin: self.origin,
            origin_ns: self.origin_ns,
            pid: self.cpu_pid,
        }
    }
}

/// What the layer keeps with each span: its fields, and when each thread that is in it
/// entered it.
struct SpanState {
    args: Map<String, Value>,
    entered: Vec<(u64, Instant)>,
}

/// Collects fields as JSON values.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}

#[derive(Serialize)]
struct CpuEvent<'a> {
    name: &'a str,
    cat: &'a str,
    ph: &'static str,
    pid: u32,
    tid: u64,
    ts: Box<RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<Box<RawValue>>,
    /// Scope of an instant event: the thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    args: &'a Map<String, Value>,
}

impl ChromeLayer {
    fn ts_ns(&self, instant: Instant) -> i64 {
        signed_ns(instant, self.origin).saturating_add(self.origin_ns)
    }

    /// Writes one event on the calling thread's track, naming the track first if new. A
    /// failure to write cannot be reported from a layer: the event is lost.
    fn write(&self, event: &CpuEvent<'_>) {
        let Ok(text) = serde_json::to_string(event) else { return };
        let mut out = lock(&self.out);
        for meta in out.cpu.name_track(self.pid, event.tid) {
            if out.write_event_bytes(meta.as_bytes()).is_err() {
                return;
            }
        }
        let _ = out.write_event_bytes(text.as_bytes());
    }
}

impl<S> Layer<S> for ChromeLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut args = Map::new();
        attrs.record(&mut Fields(&mut args));
        span.extensions_mut().insert(SpanState { args, entered: Vec::new() });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(state) = extensions.get_mut::<SpanState>() {
            values.record(&mut Fields(&mut state.args));
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let thread = thread_number();
        let mut extensions = span.extensions_mut();
        if let Some(state) = extensions.get_mut::<SpanState>() {
            state.entered.push((thread, self.clock.at(Edge::Enter(id.into_u64()))));
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let now = self.clock.at(Edge::Exit(id.into_u64()));
        let Some(span) = ctx.span(id) else { return };
        let thread = thread_number();
        let mut extensions = span.extensions_mut();
        let Some(state) = extensions.get_mut::<SpanState>() else { return };
        let Some(at) = state.entered.iter().rposition(|&(t, _)| t == thread) else { return };
        let (_, entered) = state.entered.remove(at);
        let (begin, end) = (self.ts_ns(entered), self.ts_ns(now));
        let (Ok(ts), Ok(dur)) = (micros_raw(begin), micros_raw(end - begin)) else { return };
        let metadata = span.metadata();
        self.write(&CpuEvent {
            name: metadata.name(),
            cat: metadata.target(),
            ph: "X",
            pid: self.pid,
            tid: thread,
            ts,
            dur: Some(dur),
            s: None,
            args: &state.args,
        });
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let now = self.clock.at(Edge::Event(event as *const Event<'_> as usize));
        let mut args = Map::new();
        event.record(&mut Fields(&mut args));
        let name = match args.remove("message") {
            Some(Value::String(message)) => message,
            _ => event.metadata().name().to_owned(),
        };
        let Ok(ts) = micros_raw(self.ts_ns(now)) else { return };
        self.write(&CpuEvent {
            name: &name,
            cat: event.metadata().target(),
            ph: "i",
            pid: self.pid,
            tid: thread_number(),
            ts,
            dur: None,
            s: Some("t"),
            args: &args,
        });
    }
}
