//! What a runtime watches, as Chrome trace events: counter samples as counter events
//! (`"ph":"C"`, one event name per counter, so one track per counter in the context's
//! process) and frame starts as process-scoped instant events (`"ph":"i","s":"p"`). Of
//! `chrome/` it imports only `format.rs` and `output.rs`.

use super::format::{write_int, write_micros, write_str};
use super::output::SinkWriter;
use crate::sink::{CounterSample, FrameMark};

/// The counters' track names, in `CounterSample` order.
pub(super) const COUNTERS: [&str; 4] =
    ["slots in use", "zones dropped", "lists pending", "collection lag (us)"];

/// Which counter samples a sink writes (`ChromeTraceSink::with_counters`): at most one per
/// `every_ns` of host time, and of it only the counters changed since the last one written
/// (a counter track holds its value until the next event).
#[derive(Debug)]
pub(super) struct CounterTracks {
    every_ns: i64,
    /// When the last sample was written, on the backend's host clock.
    written_ns: Option<i64>,
    /// The values last written (the lag in nanoseconds).
    last: [Option<i64>; 4],
}

impl CounterTracks {
    pub(super) fn new(every: std::time::Duration) -> Self {
        let every_ns = i64::try_from(every.as_nanos()).unwrap_or(i64::MAX);
        Self { every_ns, written_ns: None, last: [None; 4] }
    }

    /// Writes `sample` at `ts_ns` (the trace's clock) if its time has come: the counters that
    /// changed.
    pub(super) fn write(
        &mut self,
        out: &mut SinkWriter<'_>,
        pid: u32,
        ts_ns: i64,
        sample: &CounterSample,
    ) -> std::io::Result<()> {
        if self.written_ns.is_some_and(|at| sample.host_ns.saturating_sub(at) < self.every_ns) {
            return Ok(());
        }
        self.written_ns = Some(sample.host_ns);
        let count = |n: usize| Some(i64::try_from(n).unwrap_or(i64::MAX));
        let values = [
            count(sample.slots_in_use),
            count(sample.zones_dropped),
            count(sample.lists_pending),
            sample.lag_ns,
        ];
        for (index, value) in values.into_iter().enumerate() {
            let Some(value) = value.filter(|&v| self.last[index] != Some(v)) else { continue };
            self.last[index] = Some(value);
            let event = out.next_event()?;
            event.extend_from_slice(b"{\"name\":");
            write_str(event, COUNTERS[index]);
            event.extend_from_slice(b",\"cat\":\"gpu-event-pool\",\"ph\":\"C\",\"pid\":");
            write_int(event, pid);
            event.extend_from_slice(b",\"ts\":");
            write_micros(event, ts_ns);
            event.extend_from_slice(b",\"args\":{\"value\":");
            if index == 3 {
                write_micros(event, value);
            } else {
                write_int(event, value);
            }
            event.extend_from_slice(b"}}");
        }
        Ok(())
    }
}

/// Writes a frame's start: an instant event named `frame <id>` over the context's process.
pub(super) fn write_frame(
    out: &mut SinkWriter<'_>,
    pid: u32,
    ts_ns: i64,
    mark: FrameMark,
) -> std::io::Result<()> {
    let event = out.next_event()?;
    event.extend_from_slice(b"{\"name\":\"frame ");
    write_int(event, mark.id);
    event.extend_from_slice(b"\",\"cat\":\"frame\",\"ph\":\"i\",\"s\":\"p\",\"pid\":");
    write_int(event, pid);
    event.extend_from_slice(b",\"ts\":");
    write_micros(event, ts_ns);
    event.extend_from_slice(b",\"args\":{\"frame\":");
    write_int(event, mark.id);
    event.extend_from_slice(b"}}");
    Ok(())
}
