//! The JSON array every sink of one trace writes into ([`TraceOutput`]), the shared handle to
//! it ([`ChromeTrace`], with its constructors), and one sink's locked view of it
//! ([`SinkWriter`]). Knows no sink: `ChromeTrace::sink` lives in `sink.rs`, the CPU-side
//! methods in `cpu.rs`.

use super::tracks::CpuTracks;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
// The sinks' shared output is outside the pool's modelled concurrency (only collectors call
// sinks): plain std.
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Both closing texts are this long, so one always covers the other.
const TRAILER_LEN: i64 = 3;

/// Staged text past this many bytes is written out before the next event, so a list of
/// many zones does not keep a buffer of its whole size.
const STAGED_LIMIT: usize = 64 * 1024;

/// The text that closes the array after `events` events.
fn trailer(events: usize) -> &'static [u8] {
    if events == 0 {
        b"[]\n"
    } else {
        b"\n]\n"
    }
}

enum Output {
    Stream(Box<dyn Write + Send>),
    /// A file written by a thread of its own ([`FileWriter`]).
    File(FileWriter),
}

impl Output {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Self::Stream(out) => out,
            Self::File(writer) => writer,
        }
    }
}

/// Staged text a file's writer thread is handed at a time (smaller stages wait for more, or
/// for a flush).
const HAND_OFF: usize = 32 * 1024;

/// Stages handed to a file's writer thread and not yet written, at most: past them the
/// collector waits for the disk.
const IN_FLIGHT: usize = 8;

/// What the writer thread of a file is asked to do.
enum Command {
    Write(Vec<u8>),
    /// Write the trailer, flush, and move back over the trailer; answer with the outcome
    /// (and any earlier write's failure).
    Flush(&'static [u8], std::sync::mpsc::SyncSender<std::io::Result<()>>),
}

/// A trace file ([`ChromeTrace::create`]) that could not be created or written. It comes
/// inside the [`std::io::Error`] that `create` and the sink's calls return (of the same
/// [`kind`](std::io::Error::kind)), so that the message names the file:
///
/// ```
/// use gpu_event_pool::sink::chrome::{ChromeTrace, TraceFileError};
///
/// let path = std::env::temp_dir().join("no such directory").join("trace.json");
/// let error = ChromeTrace::create(&path).unwrap_err();
/// assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
/// assert!(error.to_string().contains(&*path.to_string_lossy()), "{error}");
/// let file = error.get_ref().and_then(|e| e.downcast_ref::<TraceFileError>()).unwrap();
/// assert_eq!(file.path, path);
/// ```
#[derive(Debug, thiserror::Error)]
#[error("trace file {}: {error}", path.display())]
pub struct TraceFileError {
    /// The trace file's path, as given to `create`.
    pub path: PathBuf,
    /// What the system said.
    pub error: std::io::Error,
}

impl TraceFileError {
    /// `error`, as an `std::io::Error` of its kind whose message names `path`.
    fn wrap(path: &Path, error: std::io::Error) -> std::io::Error {
        std::io::Error::new(error.kind(), Self { path: path.to_owned(), error })
    }
}

/// A trace file written by a thread of its own, so that the kernel's work of each write
/// (measured: about 575 ns per zone on the 2-core machine, half of the emitter's serial
/// time) is not done by the collector, whose emitting is serial. Stages of [`HAND_OFF`]
/// bytes go to the thread over a bounded channel; a write that fails there is reported by a
/// later write (the first after the thread has recorded the failure) or, at the latest, by
/// the next flush, which waits for the thread. Every error it returns names the file
/// ([`TraceFileError`]). Dropping it ends the thread once everything is written.
struct FileWriter {
    path: PathBuf,
    to: Option<std::sync::mpsc::SyncSender<Command>>,
    /// Emptied stages back from the thread, for reuse.
    spent: std::sync::mpsc::Receiver<Vec<u8>>,
    /// The first write that failed on the thread, not reported yet.
    failed: Arc<Mutex<Option<std::io::Error>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Text not handed to the thread yet.
    pending: Vec<u8>,
}

impl FileWriter {
    /// Creates the file at `path` (replacing any file there) and its writer thread.
    fn create(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::File::create(path).map_err(|e| TraceFileError::wrap(path, e))?;
        let (to, commands) = std::sync::mpsc::sync_channel::<Command>(IN_FLIGHT);
        let (give_back, spent) = std::sync::mpsc::channel();
        let failed = Arc::new(Mutex::new(None));
        let record_failure = Arc::clone(&failed);
        let thread = std::thread::Builder::new()
            .name("chrome trace writer".into())
            .spawn(move || {
                let mut out = BufWriter::with_capacity(HAND_OFF, file);
                let fail = |e: std::io::Error| {
                    record_failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(e);
                };
                for command in commands {
                    match command {
                        Command::Write(mut text) => {
                            if let Err(e) = out.write_all(&text) {
                                fail(e);
                            }
                            text.clear();
                            let _ = give_back.send(text);
                        }
                        Command::Flush(trailer, answer) => {
                            let flushed = out
                                .write_all(trailer)
                                .and_then(|()| out.flush())
                                .and_then(|()| out.seek(SeekFrom::Current(-TRAILER_LEN)).map(drop));
                            let earlier =
                                record_failure.lock().unwrap_or_else(PoisonError::into_inner).take();
                            let _ = answer.send(earlier.map_or(flushed, Err));
                        }
                    }
                }
                // The trace is done: the last trailer written stays (the caller wrote it).
                let _ = out.flush();
            })
            .map_err(|e| TraceFileError::wrap(path, e))?;
        Ok(Self {
            path: path.to_owned(),
            to: Some(to),
            spent,
            failed,
            thread: Some(thread),
            pending: Vec::new(),
        })
    }

    /// A failure of an earlier write on the thread.
    fn take_failure(&self) -> std::io::Result<()> {
        match self.failed.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(e) => Err(TraceFileError::wrap(&self.path, e)),
            None => Ok(()),
        }
    }

    /// The error of a writer thread that is gone (it panicked).
    fn gone(&self) -> std::io::Error {
        TraceFileError::wrap(&self.path, std::io::Error::other("the chrome trace writer thread is gone"))
    }

    /// Hands the pending text to the thread.
    fn hand_off(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let fresh = self.spent.try_recv().unwrap_or_else(|_| Vec::with_capacity(HAND_OFF));
        let text = std::mem::replace(&mut self.pending, fresh);
        let to = self.to.as_ref().ok_or_else(|| self.gone())?;
        to.send(Command::Write(text)).map_err(|_| self.gone())
    }

    /// Writes everything, then `trailer`, flushes the file and moves back over the trailer.
    fn flush_with(&mut self, trailer: &'static [u8]) -> std::io::Result<()> {
        self.hand_off()?;
        let (answer, outcome) = std::sync::mpsc::sync_channel(1);
        let to = self.to.as_ref().ok_or_else(|| self.gone())?;
        to.send(Command::Flush(trailer, answer)).map_err(|_| self.gone())?;
        outcome.recv().map_err(|_| self.gone())?.map_err(|e| TraceFileError::wrap(&self.path, e))
    }
}

impl Write for FileWriter {
    fn write(&mut self, text: &[u8]) -> std::io::Result<usize> {
        self.take_failure()?;
        self.pending.extend_from_slice(text);
        if self.pending.len() >= HAND_OFF {
            self.hand_off()?;
        }
        Ok(text.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.hand_off()
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // Everything reaches the file before the drop returns.
        let _ = self.hand_off();
        drop(self.to.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The JSON array every sink of one [`ChromeTrace`] writes into. Closed (the trailer written)
/// when the last of the trace and its sinks drops it.
pub(crate) struct TraceOutput {
    out: Output,
    /// Events in the array so far, from every sink, staged ones included.
    events: usize,
    /// Events counted but not yet handed to `out`, separators included: a sink writes its
    /// events here directly and hands a call's worth to `out` in one write, rather than
    /// copying each through a buffer of its own (a profile showed the copies). Written out before anything
    /// else reaches `out`, so a call that returned early leaves nothing out of order.
    staged: Vec<u8>,
    /// The CPU process's tracks written so far, and the flow ids handed out.
    pub(crate) cpu: CpuTracks,
}

impl TraceOutput {
    /// One event, already JSON text, written out at once (the `tracing` layer's).
    #[cfg(feature = "tracing")]
    pub(crate) fn write_event_bytes(&mut self, event: &[u8]) -> std::io::Result<()> {
        self.next_event()?.extend_from_slice(event);
        self.write_staged()
    }

    /// Counts one more event and stages its separator: the event's JSON text goes into the
    /// buffer returned, right after.
    fn next_event(&mut self) -> std::io::Result<&mut Vec<u8>> {
        if self.staged.len() >= STAGED_LIMIT {
            self.write_staged()?;
        }
        let separator: &[u8] = if self.events == 0 { b"[\n" } else { b",\n" };
        self.staged.extend_from_slice(separator);
        self.events += 1;
        Ok(&mut self.staged)
    }

    /// Hands the staged events to the writer. They leave the stage even when the write
    /// fails: writing them again could repeat a part already written.
    fn write_staged(&mut self) -> std::io::Result<()> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let written = self.out.writer().write_all(&self.staged);
        self.staged.clear();
        written
    }

    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        self.write_staged()?;
        let end = trailer(self.events);
        match &mut self.out {
            Output::Stream(out) => out.flush(),
            Output::File(writer) => writer.flush_with(end),
        }
    }
}

impl Drop for TraceOutput {
    fn drop(&mut self) {
        let end = trailer(self.events);
        // A failure here cannot be reported; the trace stays valid without the bracket.
        let _ = self.write_staged().and_then(|()| {
            let out = self.out.writer();
            out.write_all(end).and_then(|()| out.flush())
        });
    }
}

/// One Chrome trace (a JSON array of events) that any number of
/// [`ChromeTraceSink`](super::ChromeTraceSink)s write into: several tracing contexts, one per
/// GPU say, in one file, each its own process (module docs, "Several contexts in one trace").
///
/// Cheap to clone: clones and the sinks made from it share one output. A mutex serializes
/// the sinks' writes, taken once per call (a whole batch of zones at a time); only
/// collectors call sinks, so recording never waits for it.
///
/// ```
/// use gpu_event_pool::sim::SimBackend;
/// use gpu_event_pool::sink::chrome::ChromeTrace;
/// use gpu_event_pool::TracingContext;
///
/// let path = std::env::temp_dir().join("chrome-trace-doc.json");
/// let trace = ChromeTrace::create(&path)?;
/// let mut contexts = Vec::new();
/// for device in 0..2 {
///     let gpu = SimBackend::realtime();
///     let sink = trace.sink(); // pid: the context's id
///     let ctx = TracingContext::builder(gpu).name(format!("gpu {device}")).sink(sink).build()?;
///     contexts.push(ctx);
/// }
/// // ... record on both, collect both from one thread ...
/// for ctx in &contexts {
///     ctx.flush()?; // after each flush the file is a complete JSON array
/// }
/// drop(contexts);
/// drop(trace); // the last one closes the array
/// # let events: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
/// # assert_eq!(events.iter().filter(|e| e["name"] == "process_name").count(), 2);
/// # std::fs::remove_file(path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ChromeTrace {
    pub(crate) out: Arc<Mutex<TraceOutput>>,
    pub(crate) origin: Instant,
    /// Added to every `ts` (nanoseconds): where `origin` is on the wall clock's origin
    /// ([`ChromeTrace::with_wall_clock_origin`]); 0 otherwise.
    pub(crate) origin_ns: i64,
    /// The process of CPU tracks (launches, the `tracing` layer's spans).
    pub(crate) cpu_pid: u32,
}

impl std::fmt::Debug for ChromeTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromeTrace").field("events", &self.events()).finish_non_exhaustive()
    }
}

/// Locks the shared output, ignoring poisoning: a sink that panicked mid-write can at worst
/// leave one event cut short, which the next separator does not make worse.
pub(crate) fn lock(out: &Mutex<TraceOutput>) -> MutexGuard<'_, TraceOutput> {
    out.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ChromeTrace {
    fn with_output(out: Output) -> Self {
        let out = TraceOutput { out, events: 0, staged: Vec::new(), cpu: CpuTracks::default() };
        Self {
            out: Arc::new(Mutex::new(out)),
            origin: Instant::now(),
            origin_ns: 0,
            cpu_pid: std::process::id(),
        }
    }

    /// A trace written to `out`, with its origin now. `out` cannot seek, so the closing `]`
    /// comes only when the trace and all its sinks are dropped (module docs).
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self::with_output(Output::Stream(Box::new(out)))
    }

    /// A trace written to a new file at `path` (replacing any file there), with its origin
    /// now. The file is a complete JSON array after every flush of any of its sinks.
    ///
    /// Its file is written by a thread of its own. A write that fails there (a full disk) is
    /// reported by a later call of a sink of the trace, and at the latest by the next flush
    /// (which waits for the thread). Every error of the file, this function's included, names
    /// its path: it is a [`TraceFileError`] inside the `std::io::Error`.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let writer = FileWriter::create(path.as_ref())?;
        Ok(Self::with_output(Output::File(writer)))
    }

    /// On the host clock, `ts` 0 is `origin` for every sink made from now on (default: when
    /// the trace was made).
    pub fn with_origin(mut self, origin: Instant) -> Self {
        self.origin = origin;
        self.origin_ns = 0;
        self
    }

    /// The same timeline as another trace's: `ts` 0 at `origin`, `origin_ns` added to every
    /// `ts` (a flight recorder's dump on its streamed trace's timeline).
    #[cfg(feature = "perfetto")]
    pub(crate) fn with_timeline(mut self, origin: Instant, origin_ns: i64) -> Self {
        self.origin = origin;
        self.origin_ns = origin_ns;
        self
    }

    /// `ts` 0 on the host clock, for the sinks made from now on.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Events written so far by all its sinks (zones and metadata).
    pub fn events(&self) -> usize {
        lock(&self.out).events
    }
}

/// The trace's output, locked by one sink for one call (so a batch is never split by
/// another sink's events), counting what that sink writes. Its events reach the writer by
/// [`finish`](Self::finish), or before whatever next reaches it.
pub(super) struct SinkWriter<'a> {
    out: MutexGuard<'a, TraceOutput>,
    events: &'a mut usize,
}

impl<'a> SinkWriter<'a> {
    pub(super) fn lock(out: &'a Mutex<TraceOutput>, events: &'a mut usize) -> Self {
        Self { out: lock(out), events }
    }

    /// The CPU tracks' state, in the same lock.
    pub(super) fn cpu(&mut self) -> &mut CpuTracks {
        &mut self.out.cpu
    }

    /// One event, already JSON text.
    pub(super) fn write_event(&mut self, event: &str) -> std::io::Result<()> {
        self.next_event()?.extend_from_slice(event.as_bytes());
        Ok(())
    }

    /// Counts one more event: append exactly its JSON text to the buffer returned.
    pub(super) fn next_event(&mut self) -> std::io::Result<&mut Vec<u8>> {
        let event = self.out.next_event()?;
        *self.events += 1;
        Ok(event)
    }

    /// Hands this call's events to the writer.
    pub(super) fn finish(mut self) -> std::io::Result<()> {
        self.out.write_staged()
    }
}

#[cfg(test)]
mod tests {
    use super::{trailer, TRAILER_LEN};

    #[test]
    fn both_trailers_have_the_length_the_flush_moves_back_over() {
        assert_eq!(trailer(0).len() as i64, TRAILER_LEN);
        assert_eq!(trailer(1).len() as i64, TRAILER_LEN);
    }
}
