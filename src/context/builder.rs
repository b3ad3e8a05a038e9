//! [`Builder`]: a context's configuration and sinks, then [`Builder::build`].

use super::handle::{log_error, ErrorHandler, TracingContext};
use crate::backend::{create_event, Backend};
use crate::collect::{CollectError, Collector};
use crate::error::Error;
use crate::location::Verbosity;
use crate::shared::config::Config;
use crate::sink::{ContextInfo, Sink};
use crate::slots::pool::Pool;
use std::time::Duration;

static NEXT_CONTEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A context id unique in this process (sinks key their tracks by it).
pub(crate) fn next_context_id() -> u32 {
    NEXT_CONTEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Builds a [`TracingContext`] with a configuration and sinks.
pub struct Builder<B: Backend> {
    backend: B,
    config: Config,
    /// What the setters set: applied over `config` when building, so a setter wins over a
    /// whole `config(..)` whichever comes first.
    set: Vec<Setter>,
    sinks: Vec<Box<dyn Sink>>,
    on_error: Option<ErrorHandler>,
}

/// One setter call of a [`Builder`], kept until `build`.
type Setter = Box<dyn FnOnce(&mut Config) + Send>;

impl<B: Backend> std::fmt::Debug for Builder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("setters", &self.set.len())
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl<B: Backend> Builder<B> {
    /// Replaces the whole configuration. Setters ([`name`](Self::name), [`capacity`](Self::capacity),
    /// ...) still apply over it, whether called before or after.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }
    /// Sets the context's name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set.push(Box::new(move |c| c.name = name));
        self
    }
    /// Sets the verbosity.
    pub fn verbosity(mut self, verbosity: Verbosity) -> Self {
        self.set.push(Box::new(move |c| c.verbosity = verbosity));
        self
    }
    /// Sets the initial and maximum capacities. [`build`](Self::build) refuses a maximum below
    /// 2 ([`ConfigError::TooSmall`](crate::ConfigError::TooSmall)): a zone takes its begin event and a slot kept for its end.
    pub fn capacity(mut self, initial: u32, max: u32) -> Self {
        self.set.push(Box::new(move |c| (c.initial_capacity, c.max_capacity) = (initial, max)));
        self
    }
    /// Sets how many slots a list reserves at a time (default 16). [`build`](Self::build) cuts
    /// a batch above a sixteenth of the maximum capacity (at least 2) to that, so that one
    /// list's reservation cannot starve the others ([`Config::batch`]).
    pub fn batch(mut self, batch: u32) -> Self {
        self.set.push(Box::new(move |c| c.batch = batch));
        self
    }
    /// Sets how often the collector takes a new time anchor (default 5 ms; when times are
    /// exact: [`Config::anchor_interval`]).
    pub fn anchor_interval(mut self, interval: Duration) -> Self {
        self.set.push(Box::new(move |c| c.anchor_interval = interval));
        self
    }
    /// Sets how long a list still being recorded may hold back the later lists of its lane
    /// before the collector reports it and moves on ([`Config::hold_limit`], default 500 ms).
    pub fn hold_limit(mut self, limit: Duration) -> Self {
        self.set.push(Box::new(move |c| c.hold_limit = limit));
        self
    }
    /// Runs a collector thread owned by the context, calling `collect` every `period` until
    /// the last handle is dropped (which then stops it and flushes). Keeps anchors fresh
    /// and the pool drained without a loop in the application.
    pub fn collect_every(mut self, period: Duration) -> Self {
        self.set.push(Box::new(move |c| c.collect_every = Some(period)));
        self
    }
    /// Sets whether each zone also pushes an NVTX range on the recording thread (feature
    /// `nvtx`, default on; [`nvtx`](crate::nvtx) says what it costs).
    #[cfg(feature = "nvtx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
    pub fn nvtx_ranges(mut self, on: bool) -> Self {
        self.set.push(Box::new(move |c| c.nvtx_ranges = on));
        self
    }
    /// Where failures of background collection go: each failed `collect` of the context's
    /// own collector thread ([`collect_every`](Self::collect_every)) or of a
    /// [`CollectorThread`](crate::CollectorThread) without a handler of its own, with the
    /// context it happened in. By default they are logged as warnings through the `log`
    /// facade (target `gpu_event_pool`). Calls from `collect` and `flush` return their errors
    /// to the caller instead.
    ///
    /// ```
    /// use gpu_event_pool::{sim::SimBackend, TracingContext};
    /// use std::sync::{Arc, Mutex};
    /// let failures = Arc::new(Mutex::new(Vec::new()));
    /// let seen = Arc::clone(&failures);
    /// let ctx = TracingContext::builder(SimBackend::realtime())
    ///     .collect_every(std::time::Duration::from_millis(1))
    ///     .on_error(move |context, error| seen.lock().unwrap().push(format!("{}: {error}", context.name)))
    ///     .build()?;
    /// # drop(ctx);
    /// # Ok::<(), gpu_event_pool::Error>(())
    /// ```
    pub fn on_error(mut self, handler: impl Fn(&ContextInfo, &CollectError) + Send + Sync + 'static) -> Self {
        self.on_error = Some(std::sync::Arc::new(handler));
        self
    }
    /// Sets whether each zone keeps where and when the host recorded it (default off):
    /// [`Zone::launch`](crate::sink::Zone::launch), which the Chrome sink draws as a flow
    /// arrow from the recording thread to the GPU zone. Costs two host clock reads and a
    /// thread-local read per zone begun while on (measured: about 48 ns more per zone on a
    /// 2-core AMD EPYC VM whose `Instant::now` takes about 25 ns); nothing while off.
    pub fn record_launches(mut self, on: bool) -> Self {
        self.set.push(Box::new(move |c| c.record_launches = on));
        self
    }
    /// Adds a sink.
    pub fn sink(mut self, sink: impl Sink + 'static) -> Self {
        self.sinks.push(Box::new(sink));
        self
    }
    /// Builds the context: creates the first page of events, opens the sinks, and, for a
    /// backend timed by events, creates, records and waits for the base event (a backend
    /// timed by activities attaches its activity source instead, which may refuse a second
    /// context).
    pub fn build(self) -> Result<TracingContext<B>, Error> {
        let Builder { backend, mut config, set, sinks, on_error } = self;
        for setter in set {
            setter(&mut config);
        }
        config.validate()?;
        config.cut_batch();
        let pool =
            Pool::new(config.initial_capacity, config.max_capacity, config.batch, || create_event(&backend))?;
        let id = next_context_id();
        let collect_every = config.collect_every;
        let collector = Collector::new(backend, config, pool, id, sinks)?;
        let on_error = on_error.unwrap_or_else(|| std::sync::Arc::new(log_error));
        TracingContext::start(collector, collect_every, on_error)
    }
}

impl<B: Backend> TracingContext<B> {
    /// A context with the default configuration and no sinks.
    pub fn new(backend: B) -> Result<Self, Error> {
        Self::builder(backend).build()
    }

    /// Starts building a context.
    pub fn builder(backend: B) -> Builder<B> {
        Builder { backend, config: Config::default(), set: Vec::new(), sinks: Vec::new(), on_error: None }
    }
}
