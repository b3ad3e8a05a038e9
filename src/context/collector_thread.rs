//! `CollectorThread`: one thread that collects several contexts, of any backends.
//!
//! A runtime driving several GPUs has a context per device; `Builder::collect_every` would
//! give each its own thread. A `CollectorThread` serves them all from one: every `period` it
//! calls `collect` on each context added to it, in the order they were added. `collect`
//! never waits for the GPU, and for another collector of the same context at most for the
//! rest of one emit round (when that one is in its last round and this call read lists it
//! must see emitted), so one slow device never holds up the others.
//!
//! The thread holds each context weakly, and strongly only for the collect it is in: when
//! the last handle of a context is dropped, the context flushes itself and finishes its
//! sinks as always, before that drop returns, even while this thread is collecting it (the
//! collect then finds no sink); the thread forgets it.

use super::handle::{ErrorHandler, Handles, TracingContext};
use crate::backend::Backend;
use crate::collect::CollectError;
use crate::error::Error;
use crate::sink::ContextInfo;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// A context as the collector thread holds it.
trait Served: Send + Sync {
    /// Collects once, if the context is still open; a failure goes to `handler`, or to the
    /// context's own.
    fn collect(&self, handler: Option<&ErrorHandler>);
    /// Whether the context is still open: it exists and some `TracingContext` handle of it
    /// is left (once the last handle is gone, it has flushed itself).
    fn open(&self) -> bool;
}

struct WeakContext<B: Backend>(Weak<Handles<B>>);

impl<B: Backend> Served for WeakContext<B> {
    fn collect(&self, handler: Option<&ErrorHandler>) {
        if let Some(inner) = self.0.upgrade().filter(|inner| inner.has_handles()) {
            inner.collect_reporting(handler);
        }
    }

    fn open(&self) -> bool {
        self.0.upgrade().is_some_and(|inner| inner.has_handles())
    }
}

#[derive(Default)]
struct State {
    stop: bool,
    contexts: Vec<Arc<dyn Served>>,
    /// Where failures go instead of each context's own handler.
    on_error: Option<ErrorHandler>,
}

struct ThreadControl {
    state: Mutex<State>,
    wake: Condvar,
}

impl ThreadControl {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One thread that collects several contexts (of one backend or of several) every
/// `period`, for a runtime with a context per GPU.
///
/// ```
/// use gpu_event_pool::{location, sim::SimBackend, CollectorThread, TracingContext};
/// use std::time::Duration;
///
/// let collector = CollectorThread::spawn(Duration::from_millis(1))?;
/// let gpus: Vec<SimBackend> = (0..2).map(|_| SimBackend::realtime()).collect();
/// let contexts = gpus
///     .iter()
///     .map(|gpu| TracingContext::new(gpu.clone()))
///     .collect::<Result<Vec<_>, _>>()?;
/// for ctx in &contexts {
///     collector.add(ctx);
/// }
/// assert_eq!(collector.contexts(), 2);
/// // ... threads record on every device and submit; the collector thread collects ...
/// drop(contexts); // each context flushes itself when its last handle goes
/// assert_eq!(collector.contexts(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Dropping it stops the thread (after the pass it is in, if any) and joins it; the contexts
/// go on, and are collected by whoever calls `collect` or flushed by their last handle.
pub struct CollectorThread {
    shared: Arc<ThreadControl>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for CollectorThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectorThread").field("contexts", &self.contexts()).finish()
    }
}

impl CollectorThread {
    /// Starts the thread. It collects every context added to it, then waits `period`, until
    /// it is dropped.
    pub fn spawn(period: Duration) -> Result<Self, Error> {
        let shared = Arc::new(ThreadControl { state: Mutex::new(State::default()), wake: Condvar::new() });
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gpu-event-pool collector".to_owned())
            .spawn(move || serve(&serving, period))
            .map_err(|e| Error::Sink(std::io::Error::new(e.kind(), format!("collector thread: {e}"))))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Adds a context: the thread collects it from its next pass on, until the context's
    /// last handle is dropped. The thread holds it weakly and never keeps it alive (lists
    /// alive do, as always).
    pub fn add<B: Backend>(&self, ctx: &TracingContext<B>) {
        let served = WeakContext(ctx.downgrade());
        self.shared.lock().contexts.push(Arc::new(served));
    }

    /// Sends the failures of this thread's collects to `handler` (with the context they
    /// happened in) instead of each context's own handler ([`Builder::on_error`], by default a
    /// warning through the `log` facade). A handler that panics is caught: the thread goes on
    /// collecting, and the panic is counted in the context's `Stats::error_handler_panics` (its
    /// first one logged as an error).
    ///
    /// [`Builder::on_error`]: crate::Builder::on_error
    pub fn on_error(&self, handler: impl Fn(&ContextInfo, &CollectError) + Send + Sync + 'static) {
        self.shared.lock().on_error = Some(Arc::new(handler));
    }

    /// How many of the contexts added are still open: some `TracingContext` handle of each
    /// is left.
    pub fn contexts(&self) -> usize {
        self.shared.lock().contexts.iter().filter(|c| c.open()).count()
    }
}

impl Drop for CollectorThread {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: a pass over the contexts, then a wait, until stopped.
fn serve(shared: &ThreadControl, period: Duration) {
    let mut state = shared.lock();
    while !state.stop {
        // The pass runs on a copy of the list, unlocked, so that `add` and `contexts` never
        // wait for a collect.
        let pass = state.contexts.clone();
        let handler = state.on_error.clone();
        drop(state);
        for ctx in &pass {
            ctx.collect(handler.as_ref());
        }
        drop(pass);
        state = shared.lock();
        state.contexts.retain(|c| c.open());
        if state.stop {
            break;
        }
        state = match shared.wake.wait_timeout(state, period) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}
