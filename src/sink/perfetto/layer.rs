//! The `tracing-subscriber` layer of a [`PerfettoTrace`]: [`PerfettoLayer`] (its docs say what it writes).

use super::clock::Clocks;
use super::event::{Event, Kind, Name, Value};
use super::output::{lock, PerfettoTrace, TraceOutput};
use super::sequence::Sequence;
use crate::launch::thread_number;
use crate::sink::span_edges::{Edge, EdgeClock};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TracingEvent, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Threads whose sequences the trace keeps; past it, it starts them all afresh.
const MAX_THREADS: usize = 4096;

/// CPU and GPU in one Perfetto trace (features `perfetto` and `tracing`): a
/// `tracing-subscriber` layer that writes the application's spans and events into a
/// [`PerfettoTrace`], beside the GPU zones its sinks write.
///
/// - **One track per thread**, under the trace's CPU process track (this process's pid and
///   executable's name), named after the thread: the track the Perfetto sink draws a zone's
///   launch on ([`Builder::record_launches`](crate::Builder::record_launches)), so a launch
///   nests in the span that recorded it and its flow starts there.
/// - **Streamed.** Entering a span writes its begin (name, `target` as its category, its
///   fields as arguments), exiting it its end, each on the thread's own packet sequence, so a
///   thread's events are in time order; each `tracing` event is an instant named by its
///   message. The layer takes the trace's lock once per enter, exit or event.
/// - **One clock**: `Instant::now()` on `CLOCK_MONOTONIC`, as the sinks place zones, read once
///   per span entry, exit and event for every layer of the crate on the subscriber: beside
///   the Chrome layer (`ChromeTrace::layer`), both traces place each span at the same
///   nanoseconds.
///
/// ```
/// use gpu_event_pool::sink::perfetto::PerfettoTrace;
/// use gpu_event_pool::{location, sim::SimBackend, TracingContext};
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let path = std::env::temp_dir().join("perfetto-layer-doc.pftrace");
/// let trace = PerfettoTrace::create(&path)?;
/// let subscriber = tracing_subscriber::registry().with(trace.layer());
/// let _default = tracing::subscriber::set_default(subscriber); // or set_global_default
///
/// let gpu = SimBackend::realtime();
/// let stream = gpu.stream();
/// let ctx = TracingContext::builder(gpu.clone()).sink(trace.sink()).record_launches(true).build()?;
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
/// # drop(_default);
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Made by [`PerfettoTrace::layer`].
pub struct PerfettoLayer {
    out: Arc<Mutex<TraceOutput>>,
    pid: u32,
    /// The trace's clocks (fixed when it was made).
    clocks: Clocks,
    clock: EdgeClock,
}

impl std::fmt::Debug for PerfettoLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfettoLayer").field("pid", &self.pid).finish_non_exhaustive()
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tracing")))]
impl PerfettoTrace {
    /// A `tracing-subscriber` layer writing the application's spans and events into this
    /// trace, on its CPU process ([`PerfettoLayer`]).
    pub fn layer(&self) -> PerfettoLayer {
        let clocks = lock(&self.out).clocks;
        PerfettoLayer { out: Arc::clone(&self.out), pid: self.cpu_pid, clocks, clock: EdgeClock::new() }
    }
}

/// A field's value, kept with its span.
#[derive(Debug, Clone)]
enum Owned {
    Str(String),
    Int(i64),
    Uint(u64),
    Double(f64),
    Bool(bool),
}

impl Owned {
    fn value(&self) -> Value<'_> {
        match self {
            Self::Str(v) => Value::Str(v),
            Self::Int(v) => Value::Int(*v),
            Self::Uint(v) => Value::Uint(*v),
            Self::Double(v) => Value::Double(*v),
            Self::Bool(v) => Value::Bool(*v),
        }
    }
}

/// A span's or an event's fields.
#[derive(Debug, Default)]
struct Fields(Vec<(&'static str, Owned)>);

impl Fields {
    fn set(&mut self, field: &Field, value: Owned) {
        match self.0.iter_mut().find(|(name, _)| *name == field.name()) {
            Some((_, old)) => *old = value,
            None => self.0.push((field.name(), value)),
        }
    }

    fn values(&self) -> Vec<(&str, Value<'_>)> {
        self.0.iter().map(|(name, owned)| (*name, owned.value())).collect()
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, Owned::Str(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, Owned::Str(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, Owned::Int(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field, Owned::Uint(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, Owned::Double(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, Owned::Bool(value));
    }
}

impl PerfettoLayer {
    /// Writes `event` on the calling thread's sequence (made, and its track described, on
    /// first use). A failure to write cannot be reported from a layer: it shows at the
    /// trace's next flush.
    fn write(&self, event: &Event<'_>) {
        let thread = thread_number();
        let mut out = lock(&self.out);
        let out = &mut *out;
        if !out.threads.contains_key(&thread) {
            if out.threads.len() >= MAX_THREADS {
                out.threads.clear();
            }
            let track = out.cpu_thread_track(self.pid, thread);
            let sequence = Sequence::new(out.sequence_id(), track, false);
            out.threads.insert(thread, sequence);
        }
        let Some(mut sequence) = out.threads.remove(&thread) else { return };
        sequence.write(out.staged(), event);
        out.threads.insert(thread, sequence);
        let _ = out.write_staged(false);
    }

    /// When `edge` happened, on `CLOCK_MONOTONIC`.
    fn ns(&self, edge: Edge) -> i64 {
        self.clocks.mono_ns(self.clock.at(edge))
    }
}

impl<S> Layer<S> for PerfettoLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(fields) = extensions.get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let ns = self.ns(Edge::Enter(id.into_u64()));
        let Some(span) = ctx.span(id) else { return };
        let metadata = span.metadata();
        let extensions = span.extensions();
        let args = extensions.get::<Fields>().map(Fields::values).unwrap_or_default();
        self.write(&Event {
            name: Name::Interned(metadata.name()),
            category: Some(metadata.target()),
            args: &args,
            ..Event::new(Kind::Begin, ns)
        });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        self.write(&Event::new(Kind::End, self.ns(Edge::Exit(id.into_u64()))));
    }

    fn on_event(&self, event: &TracingEvent<'_>, _ctx: Context<'_, S>) {
        let ns = self.ns(Edge::Event(event as *const TracingEvent<'_> as usize));
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message =
            fields.0.iter().position(|(name, _)| *name == "message").map(|at| fields.0.remove(at).1);
        let name = match &message {
            Some(Owned::Str(text)) => text.clone(),
            _ => event.metadata().name().to_owned(),
        };
        let args = fields.values();
        self.write(&Event {
            name: Name::Inline(&name),
            category: Some(event.metadata().target()),
            args: &args,
            ..Event::new(Kind::Instant, ns)
        });
    }
}
