//! Perfetto's own trace format (`.pftrace`: protobuf `TracePacket`s of `TrackEvent`s),
//! written as zones are collected: about a tenth of the Chrome JSON's bytes per zone, with
//! interned names and source locations, timestamps as deltas, and a clock snapshot that
//! places the trace on a Linux system trace's clocks (feature `perfetto`; docs/perfetto.md).
//!
//! A [`PerfettoTrace`] is one file that any number of [`PerfettoSink`]s (one per context)
//! write into. What each context becomes:
//!
//! - a track named `<context name> (<backend>)`, and under it one track per lane (stream,
//!   graph or queue), named by
//!   [`TracingContext::name_stream`](crate::TracingContext::name_stream) or `stream <key>` /
//!   `graph <key>`, in order of first use; zones of a lane that overlap without nesting go to
//!   `<lane> (overlapping N)`, as in the Chrome trace;
//! - each zone a slice on its lane's track, named after its location, with its source
//!   location (file, function, line) and its own arguments; a list's outermost zones carry
//!   the list's id (`list`) and frame (`frame`);
//! - a `frames` track with an instant `frame <id>` at each frame's start; with
//!   [`PerfettoSink::with_counters`], a counter track per counter (`slots in use`, `zones
//!   dropped`, `lists pending`, `collection lag (us)`);
//! - with feature `tracing`, the application's spans ([`PerfettoTrace::layer`]) on one track
//!   per thread, under a process track named `<executable> (cpu)` with this process's pid;
//! - with launches recorded ([`Builder::record_launches`](crate::Builder::record_launches)),
//!   a `launch` slice on the recording thread's track (the one its spans are on) and a flow
//!   from it to the zone.
//!
//! Times are the zones' host times ([`Zone::host_begin_ns`](super::Zone::host_begin_ns)) on
//! `CLOCK_MONOTONIC` (what `Instant` reads on Linux), and the trace's clock snapshot relates
//! that clock to `CLOCK_BOOTTIME` and `CLOCK_REALTIME`: a Linux system trace of the same run
//! lines up with it.
//!
//! # When the file is whole
//!
//! A trace is a run of packets, so a file cut between two packets is a whole trace. Sinks
//! write whole packets into the trace's stage, which reaches the file at every flush (the
//! context's, and the last handle's) and whenever 64 KiB are staged. So the file is a whole
//! trace after every flush, and if the process dies it holds at least everything up to the
//! last flush: what is lost is what was collected since (at most 64 KiB of packets, plus the
//! zones not yet collected).

// The folder: `wire.rs` writes protobuf's wire format, `clock.rs` relates the clocks and
// `event.rs` says what a packet holds (leaves); `sequence.rs` is one packet sequence (incremental state, interning, deltas);
// `output.rs` the file the sinks of one trace share (`PerfettoTrace`) and the tracks
// described; `rows.rs` a context's lane tracks; `sink.rs` the `PerfettoSink`; `layer.rs`
// (feature `tracing`) the `tracing` layer writing CPU spans into the same output. It never
// touches slots, lists, lanes' order or the collector: it sees only what a sink is handed.
mod clock;
mod event;
#[cfg(feature = "tracing")]
mod layer;
mod output;
mod rows;
mod sequence;
mod sink;
mod wire;

#[cfg(feature = "tracing")]
#[cfg_attr(docsrs, doc(cfg(feature = "tracing")))]
pub use layer::PerfettoLayer;
pub use output::PerfettoTrace;
pub use sink::PerfettoSink;
