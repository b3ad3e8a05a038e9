//! Chrome trace event JSON (the "JSON Array Format"), loadable in Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing`.
//!
//! Each zone is one complete event (`"ph":"X"`) with `ts` and `dur` in microseconds written
//! with exactly three decimals, so nanoseconds survive and adjacent zones (`zone_next`) touch
//! without overlapping through floating-point rounding. Each context is a process (`pid` =
//! context id, named after the context); each stream or graph is a thread (`tid` numbered
//! from 1 in order of first use, named `stream <key>` / `graph <key>`). `args` carry the
//! file, line, function, list id and nesting depth. Times are GPU time since the context's
//! base event.
//!
//! The closing `]` is written when the sink is dropped (with its context); until then the
//! file is a valid trace in the array format, whose closing bracket is optional.

use super::{ContextInfo, Sink, ZoneBatch};
use crate::backend::Lane;
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Writes zones as Chrome trace events.
pub struct ChromeTraceSink {
    out: Box<dyn Write + Send>,
    lanes: HashMap<Lane, u32>,
    events: usize,
    closed: bool,
}

impl std::fmt::Debug for ChromeTraceSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromeTraceSink").field("events", &self.events).finish()
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
}

fn micros_raw(ns: i64) -> std::io::Result<Box<RawValue>> {
    Ok(RawValue::from_string(micros(ns))?)
}

/// Nanoseconds as microseconds with exactly three decimals.
fn micros(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
}

impl ChromeTraceSink {
    /// A sink writing to `out`.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self { out: Box::new(out), lanes: HashMap::new(), events: 0, closed: false }
    }

    /// A sink writing to a new file at `path` (replacing any file there).
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self::new(BufWriter::new(std::fs::File::create(path)?)))
    }

    /// Events written so far (zones and metadata).
    pub fn events(&self) -> usize {
        self.events
    }

    fn write_event(&mut self, event: &str) -> std::io::Result<()> {
        let separator = if self.events == 0 { "[\n" } else { ",\n" };
        self.out.write_all(separator.as_bytes())?;
        self.out.write_all(event.as_bytes())?;
        self.events += 1;
        Ok(())
    }

    fn tid(&mut self, context: &ContextInfo, lane: Lane) -> std::io::Result<u32> {
        if let Some(&tid) = self.lanes.get(&lane) {
            return Ok(tid);
        }
        let tid = self.lanes.len() as u32 + 1;
        self.lanes.insert(lane, tid);
        let name = match lane {
            Lane::Stream(key) => format!("stream {key:#x}"),
            Lane::Graph(key) => format!("graph {key:#x}"),
        };
        let meta =
            json!({"name": "thread_name", "ph": "M", "pid": context.id, "tid": tid, "args": {"name": name}});
        self.write_event(&meta.to_string())?;
        let order = json!({"name": "thread_sort_index", "ph": "M", "pid": context.id, "tid": tid, "args": {"sort_index": tid}});
        self.write_event(&order.to_string())?;
        Ok(tid)
    }
}

impl Sink for ChromeTraceSink {
    fn open(&mut self, context: &ContextInfo) -> std::io::Result<()> {
        let name = format!("{} ({})", context.name, context.backend);
        let meta = json!({"name": "process_name", "ph": "M", "pid": context.id, "args": {"name": name}});
        self.write_event(&meta.to_string())
    }

    fn zones(&mut self, context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        for zone in batch.zones {
            let tid = self.tid(context, zone.lane)?;
            let location = &zone.location;
            let event = CompleteEvent {
                name: location.name(),
                cat: "gpu",
                ph: "X",
                pid: context.id,
                tid,
                ts: micros_raw(zone.gpu_begin_ns)?,
                dur: micros_raw(zone.gpu_end_ns - zone.gpu_begin_ns)?,
                args: Args {
                    file: location.file(),
                    line: location.line(),
                    function: location.function(),
                    list: batch.list_id,
                    depth: zone.depth,
                },
            };
            let event = serde_json::to_string(&event)?;
            self.write_event(&event)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Drop for ChromeTraceSink {
    fn drop(&mut self) {
        if !self.closed {
            self.closed = true;
            let end = if self.events == 0 { "[]\n" } else { "\n]\n" };
            // A failure here cannot be reported; the trace stays valid without the bracket.
            let _ = self.out.write_all(end.as_bytes()).and_then(|()| self.out.flush());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::micros;

    #[test]
    fn micros_keep_every_nanosecond() {
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(1), "0.001");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(-1_500), "-1.500");
    }
}
