//! The CPU side of a Chrome trace: the process of CPU tracks, one track per host thread
//! (numbered by [`thread_number`]), the launch slices and flow arrows the Chrome sink draws
//! from a recording thread to a GPU zone, and the trace's origin on the wall clock.
//!
//! Launches ([`Zone::launch`](crate::sink::Zone::launch), opt in with
//! [`Builder::record_launches`](crate::Builder::record_launches)) are written, on the host
//! clock only, as:
//!
//! - a complete event (`"ph":"X"`, `cat` `launch`) named after the zone, on the CPU process
//!   ([`ChromeTrace::cpu_pid`]) and the recording thread's track (`tid` its
//!   [`thread_number`], the track the `tracing` layer writes that thread's spans on), from
//!   just before the backend's record call to just after it;
//! - a flow start (`"ph":"s"`) one nanosecond into that slice, so it binds to it;
//! - a flow finish (`"ph":"f"`, `"bp":"e"`: bound to the enclosing slice) on the GPU zone's
//!   track at the zone's begin, written right after the zone, so that it binds to the zone
//!   even when a nested zone begins at the same time (viewers keep file order among equal
//!   times).
//!
//! Start and finish share `cat` and `name` (`launch`) and an `id` unique in the trace and,
//! through the CPU process id in its upper bits, across the traces of several processes.

use super::format::{micros_raw, signed_ns};
use super::output::{lock, ChromeTrace, SinkWriter};
use crate::launch::{thread_number, Launch};
use serde::Serialize;
use serde_json::value::RawValue;
use std::time::{Instant, SystemTime};

/// Where a flow ends: the GPU zone's process, track and begin (`ts` in nanoseconds).
#[derive(Debug, Clone, Copy)]
pub(super) struct FlowEnd {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) ts_ns: i64,
}

#[derive(Serialize)]
struct LaunchSlice<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    pid: u32,
    tid: u64,
    ts: Box<RawValue>,
    dur: Box<RawValue>,
}

#[derive(Serialize)]
struct Flow {
    name: &'static str,
    cat: &'static str,
    ph: &'static str,
    id: u64,
    pid: u32,
    tid: u64,
    ts: Box<RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
}

/// Writes a zone's launch slice on its recording thread's track and the flow from it to the
/// zone (module docs). `offset_ns` takes the backend's host clock to the trace's `ts`.
pub(super) fn write_launch(
    out: &mut SinkWriter<'_>,
    cpu_pid: u32,
    launch: &Launch,
    offset_ns: i64,
    name: &str,
    gpu: FlowEnd,
) -> std::io::Result<()> {
    for meta in out.cpu().name_track(cpu_pid, launch.thread) {
        out.write_event(&meta)?;
    }
    let begin = launch.host_begin_ns.saturating_add(offset_ns);
    let dur = (launch.host_end_ns - launch.host_begin_ns).max(0);
    let (pid, tid) = (cpu_pid, launch.thread);
    let slice =
        LaunchSlice { name, cat: "launch", ph: "X", pid, tid, ts: micros_raw(begin)?, dur: micros_raw(dur)? };
    out.write_event(&serde_json::to_string(&slice)?)?;
    let id = out.cpu().flow_id(cpu_pid);
    let flow = |ph, pid, tid, ts_ns, bp| -> std::io::Result<String> {
        let flow = Flow { name: "launch", cat: "launch", ph, id, pid, tid, ts: micros_raw(ts_ns)?, bp };
        Ok(serde_json::to_string(&flow)?)
    };
    // One nanosecond into the slice: inside it (so the start binds to it) whenever it lasts
    // two or more, and not later than the GPU zone unless the GPU began within that first
    // nanosecond.
    out.write_event(&flow("s", pid, tid, begin + (dur / 2).min(1), None)?)?;
    out.write_event(&flow("f", gpu.pid, u64::from(gpu.tid), gpu.ts_ns, Some("e"))?)
}

impl ChromeTrace {
    /// On the host clock, `ts` is microseconds since `epoch` on the wall clock
    /// ([`SystemTime`]), for the sinks and layers made from now on: pass
    /// [`UNIX_EPOCH`](std::time::UNIX_EPOCH) for Unix time, or a moment every process agrees on
    /// (the job's start) to keep `ts` small. Traces of several processes and hosts then line
    /// up when opened together, as closely as their wall clocks agree (NTP: about a
    /// millisecond; PTP: microseconds). To open them as one, concatenate their JSON arrays,
    /// copying events as written (`serde_json::value::RawValue`), after giving every GPU
    /// sink a process id unique across the job
    /// ([`ChromeTraceSink::with_pid`](super::ChromeTraceSink::with_pid), say
    /// `1000 * rank + device`) and every trace's CPU process one too
    /// ([`with_cpu_pid`](Self::with_cpu_pid)). Times still advance on the monotonic clock:
    /// the wall clock is read once, here.
    ///
    /// ```
    /// use gpu_event_pool::sink::chrome::ChromeTrace;
    /// use std::time::{Instant, SystemTime, UNIX_EPOCH};
    /// let trace = ChromeTrace::new(std::io::sink()).with_wall_clock_origin(UNIX_EPOCH);
    /// let now_us = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64;
    /// assert!((trace.ts_ns(Instant::now()) / 1000 - now_us).abs() < 1_000_000);
    /// ```
    pub fn with_wall_clock_origin(mut self, epoch: SystemTime) -> Self {
        let wall_ns = |t: SystemTime| match t.duration_since(epoch) {
            Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_nanos()).unwrap_or(i64::MAX),
        };
        // The monotonic reading between two wall readings, paired with their midpoint.
        let before = wall_ns(SystemTime::now());
        let origin = Instant::now();
        let after = wall_ns(SystemTime::now());
        self.origin = origin;
        self.origin_ns = before + (after - before) / 2;
        self
    }

    /// The `ts` (in nanoseconds) this trace writes for `instant` on the host clock.
    pub fn ts_ns(&self, instant: Instant) -> i64 {
        signed_ns(instant, self.origin).saturating_add(self.origin_ns)
    }

    /// Writes CPU tracks (launches, the `tracing` layer's spans) under process id `pid`, for
    /// the sinks and layers made from now on (default: this process's id, `std::process::id`).
    pub fn with_cpu_pid(mut self, pid: u32) -> Self {
        self.cpu_pid = pid;
        self
    }

    /// The process id of CPU tracks ([`with_cpu_pid`](Self::with_cpu_pid)).
    pub fn cpu_pid(&self) -> u32 {
        self.cpu_pid
    }

    /// Writes out what every sink and layer of the trace wrote so far; on a file, also the
    /// closing `]`, which the next event writes over (as a sink's flush does). A global
    /// `tracing` subscriber holding this trace's layer never drops it: flush the trace at the
    /// end so that the spans written after the GPU sinks' last flush reach the file.
    pub fn flush(&self) -> std::io::Result<()> {
        lock(&self.out).flush()
    }

    /// The calling thread's CPU track in this trace: (`pid`, `tid`).
    pub fn cpu_track(&self) -> (u32, u64) {
        (self.cpu_pid, thread_number())
    }
}
