//! What a runtime watches, as Chrome trace events: counter samples as counter events
//! (`"ph":"C"`, one event name per counter, so one track per counter in the context's
//! process) and frame starts as process-scoped instant events (`"ph":"i","s":"p"`). Of
//! `chrome/` it imports only `format.rs` and `output.rs`.

use super::format::{write_int, write_micros, write_str};
use super::output::SinkWriter;
use crate::sink::counters::{CounterFilter, COUNTER_NAMES, LAG};
use crate::sink::{ClockDiscontinuity, CounterSample, FrameMark};

/// Which counter samples a sink writes (`ChromeTraceSink::with_counters`): the shared filter
/// (`sink/counters.rs`).
#[derive(Debug)]
pub(super) struct CounterTracks {
    filter: CounterFilter,
}

impl CounterTracks {
    pub(super) fn new(every: std::time::Duration) -> Self {
        Self { filter: CounterFilter::new(every) }
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
        for (index, value) in self.filter.changed(sample).into_iter().enumerate() {
            let Some(value) = value else { continue };
            let event = out.next_event()?;
            event.extend_from_slice(b"{\"name\":");
            write_str(event, COUNTER_NAMES[index]);
            event.extend_from_slice(b",\"cat\":\"gpu-event-pool\",\"ph\":\"C\",\"pid\":");
            write_int(event, pid);
            event.extend_from_slice(b",\"ts\":");
            write_micros(event, ts_ns);
            event.extend_from_slice(b",\"args\":{\"value\":");
            if index == LAG {
                write_micros(event, value);
            } else {
                write_int(event, value);
            }
            event.extend_from_slice(b"}}");
        }
        Ok(())
    }
}

/// Writes a discontinuity of the clocks: an instant event named `clock discontinuity` over
/// the context's process, at the host time the new segment gives it.
pub(super) fn write_discontinuity(
    out: &mut SinkWriter<'_>,
    pid: u32,
    ts_ns: i64,
    discontinuity: ClockDiscontinuity,
) -> std::io::Result<()> {
    let event = out.next_event()?;
    event.extend_from_slice(
        b"{\"name\":\"clock discontinuity\",\"cat\":\"clock\",\"ph\":\"i\",\"s\":\"p\",\"pid\":",
    );
    write_int(event, pid);
    event.extend_from_slice(b",\"ts\":");
    write_micros(event, ts_ns);
    event.extend_from_slice(b",\"args\":{\"gpu_ns\":");
    write_int(event, discontinuity.gpu_ns);
    event.extend_from_slice(b",\"jump_ns\":");
    write_int(event, discontinuity.jump_ns);
    event.extend_from_slice(b"}}");
    Ok(())
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
