//! A flight recorder (feature `perfetto`): zones kept in a bounded ring, in memory, always
//! on; written out as a normal Perfetto or Chrome trace on request, or when something goes
//! wrong (docs/perfetto.md, "The flight recorder").
//!
//! A [`FlightRecorder`] is a handle any thread may hold; each context gets a sink of it
//! ([`FlightRecorder::sink`]), which keeps that context's newest collected lists (with their
//! zones), frame marks, counter samples and lane names. The ring is bounded two ways: by time
//! (lists whose last zone ended longer ago than the window, counted back from the newest
//! zone, leave it) and by bytes (the oldest lists leave it while it is over its size). Its
//! memory is therefore constant whatever the run's length.
//!
//! - [`FlightRecorder::dump`] writes what the rings hold to a file, on the calling thread.
//! - [`Trigger`]s (a zone or a frame over a threshold, given or taken from
//!   [`FrameStats`](crate::sink::frames::FrameStats)) and [`FlightRecorder::trigger`] (the
//!   application's own reason: an error from
//!   [`Builder::on_error`](crate::Builder::on_error), say) ask for a dump, which a thread of
//!   the recorder writes into the directory given to [`FlightRecorderBuilder::dump_to`]
//!   (`flight-<n>.pftrace` or `.json`), at most one per cooldown.
//!
//! A recorder sink's cost per collected list is one uncontended lock and a copy of its
//! zones into buffers it reuses; with zone triggers, one map lookup per zone. The
//! collector calls it; recording threads never do.
//!
//! ```
//! use gpu_event_pool::sim::SimBackend;
//! use gpu_event_pool::sink::flight::{DumpFormat, FlightRecorder, Trigger};
//! use gpu_event_pool::{location, TracingContext};
//! use std::time::Duration;
//!
//! let dir = std::env::temp_dir().join(format!("flight-doc-{}", std::process::id()));
//! let recorder = FlightRecorder::builder(Duration::from_secs(10)) // the last 10 s ...
//!     .max_bytes(64 << 20) // ... in at most 64 MiB
//!     .trigger_on(Trigger::ZoneLongerThan { name: "dispatch".into(), threshold: Duration::from_millis(5) })
//!     .dump_to(&dir, DumpFormat::Perfetto)
//!     .build()?;
//! let gpu = SimBackend::realtime();
//! let stream = gpu.stream();
//! let ctx = TracingContext::builder(gpu.clone()).sink(recorder.sink()).build()?;
//! let mut list = ctx.list();
//! {
//!     let _dispatch = list.zone(&stream, location!("dispatch"));
//!     gpu.launch(&stream, 10_000);
//! }
//! ctx.submit(list)?;
//! ctx.flush()?;
//! let report = recorder.dump(dir.join("now.pftrace"), DumpFormat::Perfetto)?; // on request
//! assert_eq!(report.zones, 1);
//! # std::fs::remove_dir_all(dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod dump;
mod ring;
mod trigger;

pub use dump::DumpFormat;
pub use trigger::Trigger;

use crate::backend::Lane;
use crate::sink::chrome::ChromeTrace;
use crate::sink::counters::Every;
use crate::sink::{ContextInfo, CounterSample, FrameMark, Sink, ZoneBatch};
use ring::{Bounds, Ring};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};
use trigger::Watch;

/// Dump reports a recorder keeps (the newest).
const MAX_REPORTS: usize = 64;

/// What went wrong in the flight recorder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlightError {
    /// A dump could not be written.
    #[error("cannot write the flight recorder's dump {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The directory for automatic dumps could not be made.
    #[error("cannot make the flight recorder's dump directory {}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The thread that writes automatic dumps could not be started.
    #[error("cannot start the flight recorder's dump thread: {0}")]
    Thread(std::io::Error),
}

/// One dump written (or not).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DumpReport {
    /// The file.
    pub path: PathBuf,
    /// Why: the trigger's words, or `"on request"` for [`FlightRecorder::dump`].
    pub reason: String,
    /// Zones written, every context together.
    pub zones: usize,
    /// The file's size in bytes.
    pub bytes: u64,
    /// Why it failed, if it did (automatic dumps only: [`FlightRecorder::dump`] returns the
    /// error).
    pub error: Option<String>,
}

/// Where and how automatic dumps go.
#[derive(Debug)]
struct AutoDump {
    dir: PathBuf,
    format: DumpFormat,
    cooldown: Duration,
    requests: Mutex<Sender<String>>,
}

/// Counts of triggers and dumps.
#[derive(Debug, Default)]
struct Fired {
    triggers: u64,
    /// Triggers within a cooldown (or without a dump directory): no dump.
    suppressed: u64,
    last_dump: Option<Instant>,
    /// Automatic dumps asked for and not yet written.
    pending: usize,
    written: u64,
    reports: VecDeque<DumpReport>,
}

/// What a recorder's handles, sinks and dump thread share.
#[derive(Debug)]
struct RecorderState {
    bounds: Bounds,
    /// Which counter samples the rings keep, when they keep any.
    counters: Option<Duration>,
    /// Where a Chrome dump's `ts` 0 is: an origin, and nanoseconds added to every `ts`.
    chrome_timeline: Option<(Instant, i64)>,
    triggers: Vec<Trigger>,
    rings: Mutex<Vec<Arc<Mutex<Ring>>>>,
    auto: Option<AutoDump>,
    fired: Mutex<Fired>,
    /// Signalled when an automatic dump is written.
    dumped: Condvar,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sets up a [`FlightRecorder`] ([`FlightRecorder::builder`]).
#[derive(Debug, Clone)]
pub struct FlightRecorderBuilder {
    window: Duration,
    max_bytes: usize,
    counters: Option<Duration>,
    chrome_timeline: Option<(Instant, i64)>,
    triggers: Vec<Trigger>,
    dump_to: Option<(PathBuf, DumpFormat)>,
    cooldown: Duration,
}

impl FlightRecorderBuilder {
    /// The ring's size at most, every context's ring counted apart (default 256 MiB): the
    /// oldest lists leave it first.
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Also keeps the contexts' counter samples, at most one per `every` of host time
    /// (`Duration::ZERO`: every sample), and writes them into dumps. Give it the `every` of
    /// the streamed trace's sink (`with_counters(every)`): both keep the same samples, and a
    /// dump shows the trace's samples of its window. Off by default: while no sink of a
    /// context wants counters, none are sampled.
    pub fn with_counters(mut self, every: Duration) -> Self {
        self.counters = Some(every);
        self
    }

    /// Chrome dumps count `ts` as `trace` does (from its origin, on the wall clock if it is
    /// on it): a dump then overlays `trace`, each zone at the same `ts`. Without it, a Chrome
    /// dump's `ts` 0 is the earliest thing it holds. (Perfetto dumps need nothing: every
    /// Perfetto trace of a process is on the same clocks.)
    pub fn chrome_timeline_of(mut self, trace: &ChromeTrace) -> Self {
        self.chrome_timeline = Some((trace.origin, trace.origin_ns));
        self
    }

    /// Dumps when `trigger` fires (any number of triggers).
    pub fn trigger_on(mut self, trigger: Trigger) -> Self {
        self.triggers.push(trigger);
        self
    }

    /// Where automatic dumps go: files `flight-<n>.<pftrace or json>` in `dir` (made if
    /// missing), written by a thread of the recorder. Without it, triggers are counted only.
    pub fn dump_to(mut self, dir: impl AsRef<Path>, format: DumpFormat) -> Self {
        self.dump_to = Some((dir.as_ref().to_owned(), format));
        self
    }

    /// At most one automatic dump per `cooldown` (default 10 s): the triggers in between are
    /// counted, not dumped.
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The recorder (and its dump thread, with [`dump_to`](Self::dump_to)).
    pub fn build(self) -> Result<FlightRecorder, FlightError> {
        let window_ns = i64::try_from(self.window.as_nanos()).unwrap_or(i64::MAX);
        let bounds = Bounds { window_ns, max_bytes: self.max_bytes };
        let mut receiver = None;
        let auto = match self.dump_to {
            Some((dir, format)) => {
                std::fs::create_dir_all(&dir)
                    .map_err(|source| FlightError::Directory { path: dir.clone(), source })?;
                let (requests, requested) = std::sync::mpsc::channel();
                receiver = Some(requested);
                Some(AutoDump { dir, format, cooldown: self.cooldown, requests: Mutex::new(requests) })
            }
            None => None,
        };
        let shared = Arc::new(RecorderState {
            bounds,
            counters: self.counters,
            chrome_timeline: self.chrome_timeline,
            triggers: self.triggers,
            rings: Mutex::new(Vec::new()),
            auto,
            fired: Mutex::new(Fired::default()),
            dumped: Condvar::new(),
        });
        if let Some(requested) = receiver {
            let weak = Arc::downgrade(&shared);
            std::thread::Builder::new()
                .name("flight recorder dumps".into())
                .spawn(move || dump_thread(&weak, &requested))
                .map_err(FlightError::Thread)?;
        }
        Ok(FlightRecorder { shared })
    }
}

/// Writes the automatic dumps asked for, until the recorder is gone.
fn dump_thread(shared: &Weak<RecorderState>, requested: &Receiver<String>) {
    for reason in requested {
        let Some(shared) = shared.upgrade() else { return };
        let Some(auto) = &shared.auto else { return };
        let number = lock(&shared.fired).written + 1;
        let path = auto.dir.join(format!("flight-{number}.{}", auto.format.extension()));
        let report = match FlightRecorder::write(&shared, &path, auto.format, reason.clone()) {
            Ok(report) => report,
            Err(e) => {
                log::warn!("{e}");
                DumpReport { path, reason, zones: 0, bytes: 0, error: Some(e.to_string()) }
            }
        };
        let mut fired = lock(&shared.fired);
        fired.written += 1;
        fired.pending -= 1;
        if fired.reports.len() >= MAX_REPORTS {
            fired.reports.pop_front();
        }
        fired.reports.push_back(report);
        shared.dumped.notify_all();
    }
}

/// A flight recorder (module docs). Cheap to clone: clones share the rings.
#[derive(Debug, Clone)]
pub struct FlightRecorder {
    shared: Arc<RecorderState>,
}

impl FlightRecorder {
    /// A recorder keeping the last `window` of each context's zones (by their host end
    /// times, from the newest back), in at most 256 MiB each unless
    /// [`max_bytes`](FlightRecorderBuilder::max_bytes) says otherwise.
    pub fn builder(window: Duration) -> FlightRecorderBuilder {
        FlightRecorderBuilder {
            window,
            max_bytes: 256 << 20,
            counters: None,
            chrome_timeline: None,
            triggers: Vec::new(),
            dump_to: None,
            cooldown: Duration::from_secs(10),
        }
    }

    /// A new sink keeping one context's zones in this recorder. Give each context its own.
    pub fn sink(&self) -> FlightRecorderSink {
        let ring = Arc::new(Mutex::new(Ring::default()));
        lock(&self.shared.rings).push(Arc::clone(&ring));
        FlightRecorderSink {
            ring,
            counters: self.shared.counters.map(Every::new),
            shared: Arc::clone(&self.shared),
            watch: Watch::new(&self.shared.triggers),
        }
    }

    /// Asks for a dump now, for `reason` (the application's: an error, a user's report): the
    /// dump thread writes it into the [`dump_to`](FlightRecorderBuilder::dump_to) directory,
    /// unless one was written within the cooldown. Returns at once; whether a dump was asked
    /// for.
    pub fn trigger(&self, reason: impl Into<String>) -> bool {
        fire(&self.shared, reason.into())
    }

    /// Writes what the rings hold now to `path` as `format`, on the calling thread (the
    /// rings are copied under their locks, then written without them).
    pub fn dump(&self, path: impl AsRef<Path>, format: DumpFormat) -> Result<DumpReport, FlightError> {
        Self::write(&self.shared, path.as_ref(), format, "on request".to_owned())
    }

    fn write(
        shared: &RecorderState,
        path: &Path,
        format: DumpFormat,
        reason: String,
    ) -> Result<DumpReport, FlightError> {
        let rings: Vec<_> = lock(&shared.rings).clone();
        let snapshots: Vec<_> = rings.iter().map(|ring| lock(ring).snapshot()).collect();
        let (zones, bytes) = dump::write(&snapshots, path, format, shared.chrome_timeline)
            .map_err(|source| FlightError::Write { path: path.to_owned(), source })?;
        Ok(DumpReport { path: path.to_owned(), reason, zones, bytes, error: None })
    }

    /// Bytes the rings hold now, every context together.
    pub fn bytes(&self) -> usize {
        lock(&self.shared.rings).iter().map(|ring| lock(ring).bytes()).sum()
    }

    /// Zones the rings hold now, every context together.
    pub fn zones(&self) -> usize {
        lock(&self.shared.rings).iter().map(|ring| lock(ring).zones()).sum()
    }

    /// Times a trigger fired (on zones, frames, or [`trigger`](Self::trigger)), dumped or not.
    pub fn triggers(&self) -> u64 {
        lock(&self.shared.fired).triggers
    }

    /// Triggers that asked for no dump: within a cooldown, or with no dump directory.
    pub fn suppressed(&self) -> u64 {
        lock(&self.shared.fired).suppressed
    }

    /// The newest automatic dumps written (up to 64), oldest first.
    pub fn dumps(&self) -> Vec<DumpReport> {
        lock(&self.shared.fired).reports.iter().cloned().collect()
    }

    /// Waits until every automatic dump asked for is written, or `timeout` passes; whether
    /// none is left.
    pub fn wait_for_dumps(&self, timeout: Duration) -> bool {
        let fired = lock(&self.shared.fired);
        let (fired, _) = self
            .shared
            .dumped
            .wait_timeout_while(fired, timeout, |fired| fired.pending > 0)
            .unwrap_or_else(PoisonError::into_inner);
        fired.pending == 0
    }
}

/// Counts a trigger and asks the dump thread for a dump, unless within the cooldown.
fn fire(shared: &RecorderState, reason: String) -> bool {
    let mut fired = lock(&shared.fired);
    fired.triggers += 1;
    let Some(auto) = &shared.auto else {
        fired.suppressed += 1;
        return false;
    };
    if fired.last_dump.is_some_and(|at| at.elapsed() < auto.cooldown) {
        fired.suppressed += 1;
        return false;
    }
    fired.last_dump = Some(Instant::now());
    if lock(&auto.requests).send(reason).is_err() {
        fired.suppressed += 1;
        return false;
    }
    fired.pending += 1;
    true
}

/// Keeps one context's zones in its [`FlightRecorder`] (made by [`FlightRecorder::sink`]).
pub struct FlightRecorderSink {
    ring: Arc<Mutex<Ring>>,
    /// Which counter samples it keeps, when it keeps any.
    counters: Option<Every>,
    shared: Arc<RecorderState>,
    watch: Option<Watch>,
}

impl std::fmt::Debug for FlightRecorderSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlightRecorderSink").finish_non_exhaustive()
    }
}

impl Sink for FlightRecorderSink {
    fn open(&mut self, context: &ContextInfo) -> std::io::Result<()> {
        lock(&self.ring).open(context, Instant::now());
        Ok(())
    }

    fn name_lane(&mut self, _context: &ContextInfo, lane: Lane, name: &str) -> std::io::Result<()> {
        lock(&self.ring).name_lane(lane, name);
        Ok(())
    }

    fn zones(&mut self, _context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        lock(&self.ring).push(batch.list_id, batch.zones, self.shared.bounds);
        if let Some(reason) = self.watch.as_mut().and_then(|watch| watch.zones(batch.zones)) {
            fire(&self.shared, reason);
        }
        Ok(())
    }

    fn frame(&mut self, _context: &ContextInfo, mark: FrameMark) -> std::io::Result<()> {
        lock(&self.ring).frame(mark, self.shared.bounds);
        if let Some(reason) = self.watch.as_mut().and_then(|watch| watch.frame(mark)) {
            fire(&self.shared, reason);
        }
        Ok(())
    }

    fn wants_counters(&self) -> bool {
        self.counters.is_some()
    }

    fn counters(&mut self, _context: &ContextInfo, sample: &CounterSample) -> std::io::Result<()> {
        if let Some(sample) = self.counters.as_mut().and_then(|every| every.due(sample)) {
            lock(&self.ring).counters(sample, self.shared.bounds);
        }
        Ok(())
    }
}
