//! A backend that counts the calls it forwards to another: how many driver calls a zone
//! costs, and how many of the collector's reads found their events not finished yet.

use gpu_event_pool::backend::{BackendError, Elapsed, Mark, Placement};
use gpu_event_pool::Backend;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The calls a [`Counting`] backend forwarded, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Calls {
    pub records: u64,
    /// `elapsed`/`elapsed_ms` that returned a time.
    pub reads: u64,
    /// `elapsed`/`elapsed_ms` that answered "not ready".
    pub reads_not_ready: u64,
    /// `is_complete` that answered false.
    pub queries_not_ready: u64,
    /// `is_complete` that answered true.
    pub queries_ready: u64,
    pub waits: u64,
}

impl Calls {
    /// The calls made since `earlier` was read.
    pub fn since(self, earlier: Calls) -> Calls {
        Calls {
            records: self.records - earlier.records,
            reads: self.reads - earlier.reads,
            reads_not_ready: self.reads_not_ready - earlier.reads_not_ready,
            queries_not_ready: self.queries_not_ready - earlier.queries_not_ready,
            queries_ready: self.queries_ready - earlier.queries_ready,
            waits: self.waits - earlier.waits,
        }
    }

    /// Every call that takes the driver's lock.
    pub fn total(&self) -> u64 {
        self.records
            + self.reads
            + self.reads_not_ready
            + self.queries_not_ready
            + self.queries_ready
            + self.waits
    }
}

#[derive(Default)]
struct Counters {
    records: AtomicU64,
    reads: AtomicU64,
    reads_not_ready: AtomicU64,
    queries_not_ready: AtomicU64,
    queries_ready: AtomicU64,
    waits: AtomicU64,
}

/// Forwards every call to `B`, counting them.
#[derive(Clone)]
pub struct Counting<B> {
    pub inner: B,
    counters: Arc<Counters>,
}

impl<B> Counting<B> {
    pub fn new(inner: B) -> Self {
        Self { inner, counters: Arc::default() }
    }

    pub fn calls(&self) -> Calls {
        let c = &self.counters;
        Calls {
            records: c.records.load(Relaxed),
            reads: c.reads.load(Relaxed),
            reads_not_ready: c.reads_not_ready.load(Relaxed),
            queries_not_ready: c.queries_not_ready.load(Relaxed),
            queries_ready: c.queries_ready.load(Relaxed),
            waits: c.waits.load(Relaxed),
        }
    }

    fn count_read<T>(&self, read: &Result<Option<T>, BackendError>) {
        match read {
            Ok(Some(_)) => self.counters.reads.fetch_add(1, Relaxed),
            _ => self.counters.reads_not_ready.fetch_add(1, Relaxed),
        };
    }
}

impl<B: Backend> Backend for Counting<B> {
    type Event = B::Event;
    type Stream = B::Stream;
    type Graph = B::Graph;
    type GraphNode = B::GraphNode;
    const PLACEMENT: Placement = B::PLACEMENT;

    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn create_event(&self) -> Result<Self::Event, BackendError> {
        self.inner.create_event()
    }
    fn create_stream(&self) -> Result<Self::Stream, BackendError> {
        self.inner.create_stream()
    }
    fn stream_key(&self, stream: &Self::Stream) -> u64 {
        self.inner.stream_key(stream)
    }
    fn graph_key(&self, graph: &Self::Graph) -> u64 {
        self.inner.graph_key(graph)
    }
    fn record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<(), BackendError> {
        self.counters.records.fetch_add(1, Relaxed);
        self.inner.record(event, stream)
    }
    fn record_mark(
        &self,
        event: &Self::Event,
        stream: &Self::Stream,
        mark: Mark,
    ) -> Result<(), BackendError> {
        self.counters.records.fetch_add(1, Relaxed);
        self.inner.record_mark(event, stream, mark)
    }
    fn record_anchor(&self, event: &Self::Event, stream: &Self::Stream) -> Result<Option<i64>, BackendError> {
        self.counters.records.fetch_add(1, Relaxed);
        self.inner.record_anchor(event, stream)
    }
    fn add_graph_record_node(
        &self,
        event: &Self::Event,
        graph: &Self::Graph,
        dependencies: &[Self::GraphNode],
    ) -> Result<Self::GraphNode, BackendError> {
        self.inner.add_graph_record_node(event, graph, dependencies)
    }
    fn is_complete(&self, event: &Self::Event) -> Result<bool, BackendError> {
        let done = self.inner.is_complete(event);
        let counter = if matches!(done, Ok(true)) {
            &self.counters.queries_ready
        } else {
            &self.counters.queries_not_ready
        };
        counter.fetch_add(1, Relaxed);
        done
    }
    fn wait(&self, event: &Self::Event) -> Result<(), BackendError> {
        self.counters.waits.fetch_add(1, Relaxed);
        self.inner.wait(event)
    }
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<Option<f32>, BackendError> {
        let read = self.inner.elapsed_ms(start, end);
        self.count_read(&read);
        read
    }
    fn elapsed(&self, start: &Self::Event, end: &Self::Event) -> Result<Option<Elapsed>, BackendError> {
        let read = self.inner.elapsed(start, end);
        self.count_read(&read);
        read
    }
    fn host_now_ns(&self) -> i64 {
        self.inner.host_now_ns()
    }
    fn host_clock_origin(&self) -> Option<std::time::Instant> {
        self.inner.host_clock_origin()
    }
}
