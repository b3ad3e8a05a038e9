//! The file every sink (and the `tracing` layer) of one trace writes into: [`TraceOutput`],
//! the shared handle to it ([`PerfettoTrace`]), the ids handed out across the trace
//! (sequences, track uuids, flows), the tracks described so far and the trace's clock
//! snapshot. Knows no sink: `PerfettoTrace::sink` lives in `sink.rs`.
//!
//! A trace is a run of `Trace.packet` fields, so any prefix that ends between two packets is
//! a whole trace. Sinks write whole packets into the output's stage; the stage goes to the
//! writer only between calls (past [`STAGED_LIMIT`] bytes) and on every flush, so the file
//! always ends between packets, whatever happens to the process after a write returns.

use super::clock::Clocks;
use super::event::field;
use super::sequence::packet;
use super::wire::{self, close, open};
use rustc_hash::FxHashSet;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Staged bytes past which a call's packets are written out at its end: a list of many zones
/// does not keep a buffer of its whole size, and at most this much waits for a flush.
const STAGED_LIMIT: usize = 64 * 1024;

/// Tracks described that the output remembers (to describe each once); past it, it forgets
/// them all and describes each again when next used (a reader takes the latest).
const MAX_DESCRIBED: usize = 1 << 16;

/// The high bit of the uuids of CPU tracks, which are made from a process id and a thread
/// number (so that every sink and layer of the trace names a thread's track alike).
const CPU_TRACK: u64 = 1 << 63;

/// The bit set in the uuids of lanes' tracks (bit 63 clear), which are made from their
/// context's track, the lane and the row (`rows.rs`), so that a lane met again after it was
/// forgotten writes onto the same tracks. The uuids handed out for the other GPU tracks
/// count from 1 below it.
pub(super) const LANE_TRACK: u64 = 1 << 62;

/// A track to describe (`TrackDescriptor`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Track<'a> {
    pub(super) uuid: u64,
    pub(super) parent: Option<u64>,
    pub(super) name: &'a str,
    /// A process's track: its pid.
    pub(super) process: Option<u32>,
    /// A counter's track.
    pub(super) counter: bool,
    /// Its children are shown in the order of their ranks.
    pub(super) ordered_children: bool,
    /// Its place among its siblings.
    pub(super) rank: Option<i32>,
}

impl<'a> Track<'a> {
    pub(super) fn named(uuid: u64, name: &'a str) -> Self {
        Self { uuid, parent: None, name, process: None, counter: false, ordered_children: false, rank: None }
    }
}

/// The writer, and everything the sinks of one trace share.
pub(crate) struct TraceOutput {
    out: Box<dyn Write + Send>,
    /// Whole packets not yet handed to `out`.
    staged: Vec<u8>,
    /// Bytes handed to `out` so far.
    written: u64,
    next_sequence: u32,
    next_uuid: u64,
    flows: u64,
    /// The trace's own sequence: its clock snapshot and the track descriptors.
    sequence: u32,
    pub(super) clocks: Clocks,
    /// Tracks described (remembered up to `MAX_DESCRIBED`).
    described: FxHashSet<u64>,
    /// The per-thread sequences of the `tracing` layer.
    #[cfg(feature = "tracing")]
    pub(super) threads: rustc_hash::FxHashMap<u64, super::sequence::Sequence>,
}

impl TraceOutput {
    fn new(out: Box<dyn Write + Send>) -> Self {
        let clocks = Clocks::measure();
        let mut output = Self {
            out,
            staged: Vec::with_capacity(STAGED_LIMIT),
            written: 0,
            next_sequence: 1,
            next_uuid: 1,
            flows: 0,
            sequence: 0,
            clocks,
            described: FxHashSet::default(),
            #[cfg(feature = "tracing")]
            threads: rustc_hash::FxHashMap::default(),
        };
        output.sequence = output.sequence_id();
        let (sequence, primary) = (output.sequence, clocks.primary());
        let snapshot = clocks.snapshot(clocks.mono_ns(std::time::Instant::now()));
        packet(&mut output.staged, |out| {
            wire::uint(out, field::SEQUENCE_ID, u64::from(sequence));
            wire::uint(out, field::FIRST_PACKET_ON_SEQUENCE, 1);
            let nested = open(out, field::CLOCK_SNAPSHOT);
            for (clock, timestamp) in snapshot {
                let entry = open(out, field::CLOCKS);
                wire::uint(out, field::CLOCK_ID, u64::from(clock));
                wire::uint(out, field::CLOCK_TIMESTAMP, timestamp);
                close(out, entry);
            }
            wire::uint(out, field::PRIMARY_TRACE_CLOCK, u64::from(primary));
            close(out, nested);
        });
        output
    }

    /// A new packet sequence's id, unique in the trace.
    pub(super) fn sequence_id(&mut self) -> u32 {
        let id = self.next_sequence;
        self.next_sequence = self.next_sequence.checked_add(1).unwrap_or(1);
        id
    }

    /// A new track's uuid, unique in the trace.
    pub(super) fn uuid(&mut self) -> u64 {
        let uuid = self.next_uuid;
        self.next_uuid = (self.next_uuid + 1) & (LANE_TRACK - 1);
        uuid
    }

    /// A flow id unique in the trace; the CPU process id in bits 31 to 52 keeps it apart from
    /// other processes' traces.
    pub(super) fn flow_id(&mut self, cpu_pid: u32) -> u64 {
        self.flows += 1;
        (u64::from(cpu_pid & 0x3f_ffff) << 31) | (self.flows & 0x7fff_ffff)
    }

    /// Where whole packets go.
    pub(super) fn staged(&mut self) -> &mut Vec<u8> {
        &mut self.staged
    }

    /// Describes `track` (again, when `again` or when it was not yet): a `TrackDescriptor`
    /// packet on the trace's sequence.
    pub(super) fn describe(&mut self, track: Track<'_>, again: bool) {
        if !again && self.described.contains(&track.uuid) {
            return;
        }
        if self.described.len() >= MAX_DESCRIBED {
            self.described.clear();
        }
        self.described.insert(track.uuid);
        let sequence = self.sequence;
        packet(&mut self.staged, |out| {
            wire::uint(out, field::SEQUENCE_ID, u64::from(sequence));
            let nested = open(out, field::TRACK_DESCRIPTOR);
            wire::uint(out, 1, track.uuid);
            if let Some(parent) = track.parent {
                wire::uint(out, 5, parent);
            }
            if let Some(pid) = track.process {
                let process = open(out, 3);
                wire::uint(out, 1, u64::from(pid));
                wire::bytes(out, 6, track.name.as_bytes());
                close(out, process);
            } else {
                wire::bytes(out, 2, track.name.as_bytes());
            }
            if track.counter {
                let counter = open(out, 8);
                close(out, counter);
            }
            if track.ordered_children {
                // ChildTracksOrdering.EXPLICIT
                wire::uint(out, 11, 3);
            }
            if let Some(rank) = track.rank {
                wire::int(out, 12, i64::from(rank));
            }
            close(out, nested);
        });
    }

    /// The track of CPU thread `thread` of process `pid` (the process's and the thread's
    /// tracks described when first used): named after the thread, under a process named
    /// after the executable, as in the Chrome trace.
    pub(super) fn cpu_thread_track(&mut self, pid: u32, thread: u64) -> u64 {
        let process = CPU_TRACK | u64::from(pid) << 32;
        let uuid = process | (thread & 0xffff_ffff);
        if !self.described.contains(&uuid) {
            if !self.described.contains(&process) {
                let exe = std::env::current_exe().ok();
                let exe = exe.as_ref().and_then(|p| p.file_stem()).map(|s| s.to_string_lossy().into_owned());
                let name = format!("{} (cpu)", exe.as_deref().unwrap_or("process"));
                let track =
                    Track { process: Some(pid), ordered_children: true, ..Track::named(process, &name) };
                self.describe(track, false);
            }
            let name = crate::launch::thread_name(thread).unwrap_or_else(|| format!("thread {thread}"));
            let rank = i32::try_from(thread).unwrap_or(i32::MAX);
            let track = Track { parent: Some(process), rank: Some(rank), ..Track::named(uuid, &name) };
            self.describe(track, false);
        }
        uuid
    }

    /// Hands the staged packets to the writer once there are enough of them (`force`: any).
    /// They leave the stage even when the write fails: writing them again could repeat a
    /// part already written.
    pub(super) fn write_staged(&mut self, force: bool) -> std::io::Result<()> {
        if self.staged.is_empty() || (!force && self.staged.len() < STAGED_LIMIT) {
            return Ok(());
        }
        let written = self.out.write_all(&self.staged);
        self.written += self.staged.len() as u64;
        self.staged.clear();
        written
    }

    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        self.write_staged(true)?;
        self.out.flush()
    }

    /// Bytes in the trace so far, staged ones included.
    pub(super) fn bytes(&self) -> u64 {
        self.written + self.staged.len() as u64
    }
}

impl Drop for TraceOutput {
    fn drop(&mut self) {
        // A failure here cannot be reported; what was flushed before stays a whole trace.
        let _ = self.flush();
    }
}

/// Locks the shared output, ignoring poisoning: a sink that panicked mid-call leaves at worst
/// whole packets of its call staged (a packet is written into the stage whole or not at all
/// only up to a panic inside it, which the sinks' code does not have).
pub(crate) fn lock(out: &Mutex<TraceOutput>) -> MutexGuard<'_, TraceOutput> {
    out.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One Perfetto trace file (`.pftrace`) that any number of
/// [`PerfettoSink`](super::PerfettoSink)s (one per tracing context) and `tracing` layers
/// write into (module docs).
///
/// Cheap to clone: clones and the sinks made from it share one output, behind a mutex taken
/// once per sink call.
///
/// ```
/// use gpu_event_pool::sim::SimBackend;
/// use gpu_event_pool::sink::perfetto::PerfettoTrace;
/// use gpu_event_pool::TracingContext;
///
/// let path = std::env::temp_dir().join("perfetto-trace-doc.pftrace");
/// let trace = PerfettoTrace::create(&path)?;
/// let mut contexts = Vec::new();
/// for device in 0..2 {
///     let gpu = SimBackend::realtime();
///     let ctx = TracingContext::builder(gpu).name(format!("gpu {device}")).sink(trace.sink()).build()?;
///     contexts.push(ctx);
/// }
/// // ... record on both ...
/// for ctx in &contexts {
///     ctx.flush()?; // after each flush the file is a whole trace
/// }
/// # drop(contexts);
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct PerfettoTrace {
    pub(crate) out: Arc<Mutex<TraceOutput>>,
    /// The process of CPU tracks (launches, the `tracing` layer's spans).
    pub(crate) cpu_pid: u32,
}

impl std::fmt::Debug for PerfettoTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfettoTrace").field("cpu_pid", &self.cpu_pid).finish_non_exhaustive()
    }
}

impl PerfettoTrace {
    /// A trace written to `out`. Whole packets reach it at each flush (and whenever 64 KiB
    /// are staged).
    pub fn new(out: impl Write + Send + 'static) -> Self {
        let out = TraceOutput::new(Box::new(out));
        Self { out: Arc::new(Mutex::new(out)), cpu_pid: std::process::id() }
    }

    /// A trace written to a new file at `path` (replacing any file there). The file is a
    /// whole trace after every flush, and after the process dies at any moment it holds
    /// everything up to the last flush.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self::new(std::fs::File::create(path)?))
    }

    /// Writes out everything its sinks and layers wrote so far. A global `tracing`
    /// subscriber holding this trace's layer never drops it: flush the trace at the end.
    pub fn flush(&self) -> std::io::Result<()> {
        lock(&self.out).flush()
    }

    /// Writes CPU tracks (launches, the `tracing` layer's spans) under process id `pid`, for
    /// the sinks and layers made from now on (default: this process's id).
    pub fn with_cpu_pid(mut self, pid: u32) -> Self {
        self.cpu_pid = pid;
        self
    }

    /// The trace's size so far in bytes, what is not written out yet included.
    pub fn bytes(&self) -> u64 {
        lock(&self.out).bytes()
    }

    /// The process id of CPU tracks.
    pub fn cpu_pid(&self) -> u32 {
        self.cpu_pid
    }
}
