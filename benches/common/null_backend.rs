//! `NullBackend`: a backend whose calls cost nothing, so that a benchmark measures the
//! crate (or the seed's port), not a GPU. Every event is complete as soon as it is
//! recorded, waits return at once, and every elapsed time is 0.
#![allow(dead_code)]

use gpu_event_pool::{Backend, BackendError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A backend that does nothing, successfully. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NullBackend {
    start: Instant,
    next_id: Arc<AtomicU64>,
}

/// An event of the null backend.
#[derive(Debug)]
pub struct NullEvent;

/// A stream of the null backend: only a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NullStream(pub u64);

/// A graph of the null backend: only a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NullGraph(pub u64);

impl Default for NullBackend {
    fn default() -> Self {
        Self { start: Instant::now(), next_id: Arc::new(AtomicU64::new(1)) }
    }
}

impl NullBackend {
    /// A new stream (distinct key).
    pub fn stream(&self) -> NullStream {
        NullStream(self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

impl Backend for NullBackend {
    type Event = NullEvent;
    type Stream = NullStream;
    type Graph = NullGraph;
    type GraphNode = ();

    fn name(&self) -> &'static str {
        "null"
    }
    fn create_event(&self) -> Result<NullEvent, BackendError> {
        Ok(NullEvent)
    }
    fn create_stream(&self) -> Result<NullStream, BackendError> {
        Ok(self.stream())
    }
    fn stream_key(&self, stream: &NullStream) -> u64 {
        stream.0
    }
    fn graph_key(&self, graph: &NullGraph) -> u64 {
        graph.0
    }
    fn record(&self, _event: &NullEvent, _stream: &NullStream) -> Result<(), BackendError> {
        Ok(())
    }
    fn add_graph_record_node(
        &self,
        _event: &NullEvent,
        _graph: &NullGraph,
        _dependencies: &[()],
    ) -> Result<(), BackendError> {
        Ok(())
    }
    fn is_complete(&self, _event: &NullEvent) -> Result<bool, BackendError> {
        Ok(true)
    }
    fn wait(&self, _event: &NullEvent) -> Result<(), BackendError> {
        Ok(())
    }
    fn elapsed_ms(&self, _start: &NullEvent, _end: &NullEvent) -> Result<Option<f32>, BackendError> {
        Ok(Some(0.0))
    }
    fn host_now_ns(&self) -> i64 {
        self.start.elapsed().as_nanos() as i64
    }
}
