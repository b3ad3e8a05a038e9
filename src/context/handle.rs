//! [`TracingContext`]: the cheap, cloneable handle of one context, and what its handles share.

use super::stats::Stats;
use crate::backend::Backend;
use crate::collect::{CollectError, CollectReport, Collected, Collector};
use crate::error::Error;
use crate::location::Verbosity;
use crate::record::{EventList, SubmitError, ENABLED};
use crate::shared::config::Config;
use crate::shared::Inner;
use crate::sink::ContextInfo;
use crate::sync::{lock, Arc, AtomicUsize, Ordering};
use std::time::Duration;

/// What is told of a failure in background collection: the context, and what its `collect`
/// returned.
pub(crate) type ErrorHandler = std::sync::Arc<dyn Fn(&ContextInfo, &CollectError) + Send + Sync>;

/// The default [`ErrorHandler`]: a warning through the `log` facade (target
/// `gpu_event_pool`), which the application routes wherever it routes its logs.
pub(crate) fn log_error(info: &ContextInfo, error: &CollectError) {
    log::warn!(target: "gpu_event_pool", "collecting GPU context {:?} (id {}): {error}", info.name, info.id);
}

/// What every handle of one context shares: its collection, the count of live handles (lists
/// do not count: the last handle flushes), the context's own collector thread, and where
/// background collection reports its failures.
pub(crate) struct Handles<B: Backend> {
    collector: Collector<B>,
    count: AtomicUsize,
    /// The context's own collector thread (`Config::collect_every`).
    background: std::sync::Mutex<Option<Background>>,
    on_error: ErrorHandler,
    /// Failures of background collection since the last `flush`, which returns them.
    missed: std::sync::Mutex<Missed>,
}

/// The first failure of background collection since the last `flush`, and how many came
/// after it.
#[derive(Default)]
struct Missed {
    first: Option<Error>,
    more: usize,
}

impl<B: Backend> Handles<B> {
    /// Whether some `TracingContext` handle is left (`CollectorThread`).
    #[cfg(not(gpu_event_pool_loom))]
    pub(crate) fn has_handles(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// A collect for a background thread: a failure goes to `handler`, or to the context's
    /// own (`Builder::on_error`).
    pub(crate) fn collect_reporting(&self, handler: Option<&ErrorHandler>) {
        if let Err(error) = self.collector.collect() {
            self.report(handler, &error);
            self.keep_for_flush(error.error);
        }
    }

    /// Keeps a failure of background collection for the next `flush` to return.
    fn keep_for_flush(&self, error: Error) {
        let mut missed = crate::sync::lock_std(&self.missed);
        if missed.first.is_none() {
            missed.first = Some(error);
        } else {
            missed.more += 1;
        }
    }

    /// What background collection missed since the last call, as one error.
    fn take_missed(&self) -> Option<Error> {
        let missed = std::mem::take(&mut *crate::sync::lock_std(&self.missed));
        missed.first.map(|first| Error::Background { first: Box::new(first), more: missed.more })
    }

    /// Hands a failure no caller can be told of to `handler`, or to the context's own. The
    /// handler is the application's code: a panic in it is caught (background collection
    /// goes on, and a last handle's drop does not unwind), counted in
    /// `Stats::error_handler_panics`, and the context's first one is logged as an error.
    fn report(&self, handler: Option<&ErrorHandler>, error: &CollectError) {
        let inner = &self.collector.inner;
        let handler = handler.unwrap_or(&self.on_error);
        let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(inner.info(), error)));
        if let Err(panic) = call {
            if inner.counters().error_handler_panics.fetch_add(1, Ordering::Relaxed) == 0 {
                log::error!(
                    target: "gpu_event_pool",
                    "the error handler of GPU context {:?} (id {}) panicked: {} (reporting: {error}); \
                     collection goes on, and later panics of it are only counted (Stats::error_handler_panics)",
                    inner.info().name,
                    inner.info().id,
                    crate::backend::panic_message(panic.as_ref()),
                );
            }
        }
    }
}

/// The context's own collector thread, and how to stop it.
struct Background {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

/// A GPU tracing context: hands out [`EventList`]s to recording threads, takes them back
/// with [`submit`](Self::submit), and turns them into zones with [`collect`](Self::collect).
///
/// Cheap to clone (`Send + Sync`); dropping the last handle flushes everything submitted,
/// finishes the sinks (drops them: a trace file is complete when `drop` returns, whatever a
/// collector thread is doing; a failure goes to the error handler, [`Builder::on_error`](crate::Builder::on_error))
/// and, once every list is gone too, destroys the events.
///
/// ```
/// use gpu_event_pool::{location, sim::SimBackend, sink::memory::MemorySink, TracingContext};
/// let sim = SimBackend::manual();
/// let stream = sim.stream();
/// let zones = MemorySink::new();
/// let ctx = TracingContext::builder(sim.clone()).sink(zones.clone()).build().unwrap();
///
/// let mut list = ctx.list();
/// list.zone_begin(&stream, location!("dispatch")).unwrap();
/// sim.launch(&stream, 5_000); // a 5 µs kernel
/// list.zone_end(&stream).unwrap();
/// ctx.submit(list).unwrap();
///
/// ctx.collect().unwrap(); // not run yet on the manual clock: nothing collected
/// assert!(zones.zones().is_empty());
/// sim.advance(10_000);
/// ctx.collect().unwrap();
/// assert_eq!(zones.zones()[0].gpu_end_ns - zones.zones()[0].gpu_begin_ns, 5_000);
/// ```
pub struct TracingContext<B: Backend> {
    shared: Arc<Handles<B>>,
}

impl<B: Backend> std::fmt::Debug for TracingContext<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingContext")
            .field("id", &self.inner().info().id)
            .field("name", &self.inner().config().name)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Clone for TracingContext<B> {
    fn clone(&self) -> Self {
        self.shared.count.fetch_add(1, Ordering::Relaxed);
        Self { shared: Arc::clone(&self.shared) }
    }
}

impl<B: Backend> Drop for TracingContext<B> {
    fn drop(&mut self) {
        // AcqRel: the last handle sees every other handle's submissions before flushing.
        if self.shared.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Lists that outlive the context can never be submitted: what they record from
            // now on is dropped and counted (`RecordError::ContextClosed`).
            self.inner().close();
            let background = crate::sync::lock_std(&self.shared.background).take();
            if let Some(background) = &background {
                *crate::sync::lock_std(&background.stop.0) = true;
                background.stop.1.notify_all();
            }
            // No list can be submitted any more: lists held back for an earlier list of their
            // lane that is still being recorded are emitted now (`force`), and the sinks are
            // finished (dropped) here, whatever a collector thread is doing: one may still
            // hold the context for the collect it is in, which then finds no sink. No caller
            // is left to return a failure to: it goes to the context's error handler (and is
            // counted in the stats, like any).
            if let Err(error) = self.shared.collector.finish() {
                self.shared.report(None, &error);
            }
            // After the sinks are finished: a thread stuck in an error handler cannot keep
            // the trace open. Not from the thread itself (the last handle dropped by the
            // handler it is calling): it stops on its own.
            if let Some(Background { thread, .. }) = background {
                if thread.thread().id() != std::thread::current().id() {
                    let _ = thread.join();
                }
            }
        }
    }
}

impl<B: Backend> TracingContext<B> {
    /// The first handle of a new context, with its collector thread if `collect_every`.
    pub(super) fn start(
        collector: Collector<B>,
        collect_every: Option<Duration>,
        on_error: ErrorHandler,
    ) -> Result<Self, Error> {
        let shared = Handles {
            collector,
            count: AtomicUsize::new(1),
            background: std::sync::Mutex::new(None),
            on_error,
            missed: std::sync::Mutex::new(Missed::default()),
        };
        let ctx = TracingContext { shared: Arc::new(shared) };
        ctx.install_relief();
        if let Some(period) = collect_every {
            ctx.start_background(period)?;
        }
        Ok(ctx)
    }

    /// The state lists and collectors share.
    /// The emitter's lanes remembered ([`Collector::lanes_remembered`]).
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn lanes_remembered(&self) -> Option<(usize, usize)> {
        self.shared.collector.lanes_remembered()
    }

    fn inner(&self) -> &Inner<B> {
        &self.shared.collector.inner
    }

    /// What sinks are told about this context.
    pub fn info(&self) -> &ContextInfo {
        self.inner().info()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        self.inner().config()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        self.inner().backend()
    }

    /// Names `stream` for the sinks (a Tracy GPU lane, a Chrome track). The name reaches the
    /// sinks with the next collect, before any zone collected after it.
    pub fn name_stream(&self, stream: &B::Stream, name: impl Into<String>) {
        self.name_lane(crate::backend::Lane::Stream(self.inner().backend().stream_key(stream)), name);
    }

    /// Names a lane for the sinks, as [`name_stream`](Self::name_stream) does (for a lane
    /// known by its key: a Vulkan queue's, `VulkanQueue::lane_key`).
    pub fn name_lane(&self, lane: crate::backend::Lane, name: impl Into<String>) {
        lock(self.inner().lane_names()).push((lane, name.into()));
    }

    /// Sets the verbosity from now on (zones begun after the call; a zone already open is still
    /// ended). Recording reads it with a relaxed load: no lock, no read-modify-write; and it
    /// never uses up a Tracy context the way rebuilding a context would.
    pub fn set_verbosity(&self, verbosity: Verbosity) {
        self.inner().set_verbosity(verbosity);
    }

    /// The verbosity set now (by [`set_verbosity`](Self::set_verbosity) or the builder); it
    /// is kept while the context is disabled.
    pub fn verbosity(&self) -> Verbosity {
        self.inner().verbosity()
    }

    /// Turns recording off or back on. While off, a new zone records nothing and takes no
    /// slot (as a zone above the verbosity does); a zone begun before is still ended, so
    /// nesting stays balanced. Lists already submitted are still collected.
    pub fn set_enabled(&self, enabled: bool) {
        self.inner().set_enabled(enabled);
    }

    /// Whether recording is on ([`set_enabled`](Self::set_enabled)).
    pub fn is_enabled(&self) -> bool {
        self.inner().is_enabled()
    }

    /// Turns the NVTX ranges around zones on or off (feature `nvtx`). A zone begun while on
    /// pops its range when it ends, even if the switch is off by then. Like the other
    /// switches, it costs recording nothing beyond the switches' relaxed load that recording
    /// makes anyway.
    #[cfg(feature = "nvtx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
    pub fn set_nvtx_ranges(&self, on: bool) {
        self.inner().set_nvtx_ranges(on);
    }

    /// Whether zones push NVTX ranges ([`set_nvtx_ranges`](Self::set_nvtx_ranges)).
    #[cfg(feature = "nvtx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
    pub fn nvtx_ranges(&self) -> bool {
        self.inner().switches().nvtx()
    }

    /// Turns launch recording on or off ([`Builder::record_launches`](crate::Builder::record_launches))
    /// for zones begun from now on. Like the other switches, it costs recording nothing beyond
    /// the switches' relaxed load that recording makes anyway, while off.
    pub fn set_record_launches(&self, on: bool) {
        self.inner().set_record_launches(on);
    }

    /// Whether zones keep their launch ([`set_record_launches`](Self::set_record_launches)).
    pub fn records_launches(&self) -> bool {
        self.inner().switches().launches()
    }

    /// A new, empty list for one command buffer. While the context records (enabled, open,
    /// verbosity not `Off`), it takes a record buffer and reserves its first zone's slots
    /// now, from the thread's cache of free slots (waiting, like a zone, while another
    /// thread grows the pool), so that the first zone begins without it; a reservation that
    /// fails here is tried again, and reported, by the first zone.
    #[must_use = "a list records nothing until zones are begun on it, and must be submitted"]
    pub fn list(&self) -> EventList<B> {
        let inner = &self.shared.collector.inner;
        EventList::new(Arc::clone(inner), inner.next_list_id())
    }

    /// Starts frame `id` (a frame, a training step, a request: whatever unit the application
    /// repeats): every list made by [`list`](Self::list) from now on, on any thread, belongs
    /// to it until the next call, and its zones carry it ([`Zone::frame`](crate::sink::Zone::frame)).
    /// A list belongs to the frame current when it was *made*, whenever it is recorded or
    /// submitted. The sinks get the frame's start ([`FrameMark`](crate::sink::FrameMark): the
    /// id and the host time of this call) at the end of the next emit phase: a Chrome trace
    /// shows it as an instant event, Tracy as a frame mark, and
    /// [`FrameStats`](crate::sink::frames::FrameStats) keeps statistics over the last frames.
    ///
    /// `u64::MAX` means no frame: lists made after `frame(u64::MAX)` belong to none. Costs a
    /// list one atomic load when it is made, never a zone; does nothing when recording is
    /// compiled out ([`ENABLED`](crate::ENABLED)).
    ///
    /// ```
    /// use gpu_event_pool::{location, sim::SimBackend, sink::memory::MemorySink, TracingContext};
    /// let sim = SimBackend::manual();
    /// let stream = sim.stream();
    /// let memory = MemorySink::new();
    /// let ctx = TracingContext::builder(sim.clone()).sink(memory.clone()).build()?;
    /// for step in 0..3 {
    ///     ctx.frame(step);
    ///     let mut list = ctx.list();
    ///     list.zone_begin(&stream, location!("step"))?;
    ///     sim.launch(&stream, 1_000);
    ///     list.zone_end(&stream)?;
    ///     ctx.submit(list)?;
    /// }
    /// ctx.flush()?;
    /// let frames: Vec<_> = memory.zones().iter().map(|z| z.frame).collect();
    /// assert_eq!(frames, [Some(0), Some(1), Some(2)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn frame(&self, id: u64) {
        if !ENABLED {
            return;
        }
        let inner = self.inner();
        inner.start_frame(id, inner.backend().host_now_ns());
    }

    /// The current frame ([`frame`](Self::frame)), if any.
    pub fn current_frame(&self) -> Option<u64> {
        self.inner().current_frame()
    }

    /// Submits a list: its zones will be collected once the GPU has run them. Pushes the list
    /// on the submission queue with a compare-and-swap, returns its unused reservation to the
    /// thread's cache of free slots, and (on a backend timed by events) takes its stream's
    /// holders' lock for a few instructions (never held across a backend call; [`EventList`]
    /// lists every wait of recording). Never waits for the GPU or a sink.
    ///
    /// Refuses, handing the list back, if it has open zones or belongs to another context.
    ///
    /// With a backend whose lists take their place at submission ([`Placement::Submit`](crate::Placement):
    /// Vulkan), this call is where the list's place in its lane's order is taken: make it
    /// right after the API's own queue submission of the list's command buffer, under the
    /// same queue lock, so that both orders agree (`queue_submit` does, feature `vulkan`).
    pub fn submit(&self, list: EventList<B>) -> Result<(), SubmitError<B>> {
        if !self.owns(&list) {
            return Err(SubmitError::WrongContext { list: Box::new(list) });
        }
        let open = list.open_zones();
        if open > 0 {
            return Err(SubmitError::OpenZones { open, list: Box::new(list) });
        }
        list.submit();
        Ok(())
    }

    /// Whether `list` was made by this context.
    pub(crate) fn owns(&self, list: &EventList<B>) -> bool {
        Arc::ptr_eq(list.context(), &self.shared.collector.inner)
    }

    /// Collects every submitted list whose events have all completed. Never waits for the
    /// GPU, and does a bounded amount of work: it reads what was submitted when it looked, and
    /// emits at most a few rounds (lists read meanwhile by callers that found it emitting),
    /// however fast other threads submit and collect.
    ///
    /// Zones of one lane (stream) reach the sinks in that lane's GPU order (the order its
    /// lists began recording on it), whatever order the lists were submitted in; a lane whose
    /// work is done is collected even while another lane waits for the GPU.
    ///
    /// Any number of threads may call it at once: each reads the times of different lists
    /// (the driver calls overlap), and one of them hands the zones to the sinks; the others
    /// return [`Collected::Busy`] once their reading is done, and the lists they read are
    /// emitted by the call emitting then, before it returns. Only when that call is in its
    /// last round (it will not look for more) does a caller with lists to hand over wait, for
    /// the rest of that one round, and then emit them itself.
    ///
    /// On a failure the failing list's zones are dropped and counted, its slots released (on
    /// a backend that retires events, [`Backend::RETIRES`](crate::Backend::RETIRES), once
    /// the GPU has passed each of its events: a later collect releases them), the other
    /// lists still collected, and the error carries what the call did.
    pub fn collect(&self) -> Result<Collected, CollectError> {
        self.shared.collector.collect()
    }

    /// Waits for every list submitted before this call to complete, collects them all, and
    /// flushes the sinks. It first collects what is already complete as any `collect` does,
    /// beside the other collectors; then it waits for a concurrent collector to finish its
    /// round (it stops there, and other callers leave what they read to this flush) and keeps
    /// new collectors out while it waits for what is left. Lists submitted
    /// while it runs are not waited for: a producer that keeps submitting and collecting
    /// cannot keep it running. A list whose lane has an earlier list still being recorded
    /// (not submitted) stays pending, in order, and is counted in `pending_lists`, until
    /// that list is submitted or dropped or the hold limit passes
    /// ([`Builder::hold_limit`](crate::Builder::hold_limit)).
    ///
    /// It also returns what went wrong in the background since the last flush (the context's
    /// collector thread, a [`CollectorThread`](crate::CollectorThread), a recording thread
    /// collecting for an exhausted pool) as [`Error::Background`](crate::Error::Background),
    /// when the flush itself did not fail: a failure there reaches the application even with
    /// no error handler and no `log` backend installed. A failure is kept when its collect
    /// returns: one whose collect is still returning as the flush ends comes back from the
    /// next flush. Called from a sink of this context
    /// (inside the collect that calls it), it returns
    /// [`Error::FlushFromSink`](crate::Error::FlushFromSink) at once instead of waiting for
    /// itself.
    pub fn flush(&self) -> Result<CollectReport, CollectError> {
        let report = self.shared.collector.flush(false)?;
        match self.shared.take_missed() {
            None => Ok(report),
            Some(error) => Err(CollectError { error, report }),
        }
    }

    /// The context, held weakly (`CollectorThread`).
    #[cfg(not(gpu_event_pool_loom))]
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Handles<B>> {
        Arc::downgrade(&self.shared)
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        Stats::of(self.inner())
    }

    /// Walks the freelist and every thread's magazine and counts the slots really free: an
    /// audit of [`Stats::free`], supported for tests and diagnostics. Exact only while no
    /// other thread records, submits or collects.
    pub fn free_slots_walked(&self) -> usize {
        self.inner().pool().free_slots_walked()
    }
}

impl<B: Backend> TracingContext<B> {
    /// A recording thread that finds the pool exhausted collects before it drops its zone
    /// (`Inner::relief`): the backpressure of a runtime whose collection falls behind, which
    /// then keeps every zone the GPU has run. It holds the context weakly: once the last
    /// handle is gone, nothing is collected for it.
    fn install_relief(&self) {
        #[cfg(not(gpu_event_pool_loom))]
        {
            let handles = Arc::downgrade(&self.shared);
            let relief = move || {
                let Some(handles) = handles.upgrade().filter(|h| h.count.load(Ordering::Acquire) > 0) else {
                    return false;
                };
                let (released, failed) = handles.collector.relieve();
                if let Some(e) = failed {
                    // Reported as background collection reports (`Builder::on_error`; a
                    // panicking handler caught, counted and logged once), and kept for the
                    // next flush.
                    handles.report(None, &e);
                    handles.keep_for_flush(e.error);
                }
                released
            };
            let _ = self.inner().relief().set(Box::new(relief));
        }
    }

    /// Starts the context's own collector thread.
    fn start_background(&self, period: Duration) -> Result<(), Error> {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let shared = Arc::clone(&self.shared);
        let signal = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("{} collector", self.inner().config().name))
            .spawn(move || {
                let (stopped, wake) = &*signal;
                // The stop flag's lock is not held while collecting: the last handle sets it
                // (and goes on to the final flush) without waiting for this collect.
                while !*crate::sync::lock_std(stopped) {
                    // Failures go to the error handler; the thread goes on.
                    shared.collect_reporting(None);
                    let stopped_now = crate::sync::lock_std(stopped);
                    drop(match wake.wait_timeout_while(stopped_now, period, |stopped| !*stopped) {
                        Ok((guard, _)) => guard,
                        Err(poisoned) => poisoned.into_inner().0,
                    });
                }
            })
            .map_err(|e| Error::Sink(std::io::Error::new(e.kind(), format!("collector thread: {e}"))))?;
        *crate::sync::lock_std(&self.shared.background) = Some(Background { stop, thread });
        Ok(())
    }
}
