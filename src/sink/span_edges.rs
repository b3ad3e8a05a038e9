//! One reading of the clock per edge of a `tracing` span (its entry, its exit) or event,
//! shared by every layer of the crate that sees it: the Chrome layer and the Perfetto layer
//! on one subscriber place a span at the same nanoseconds in both traces.
//!
//! `tracing` hands an edge to every layer of the subscriber in turn, on the thread where it
//! happens, before the next edge of that thread. So the thread keeps the latest edge's
//! reading and the layers that took it: a layer that meets the same edge (the same span's
//! entry, exit, or the same event) and has not taken that reading yet takes it; any other
//! edge, or a layer that already took it (the same span entered again), reads the clock
//! anew. A layer filtered off an edge never asks, and leaves the others' readings alone.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Which edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    /// A span's entry, by its id.
    Enter(u64),
    /// A span's exit, by its id.
    Exit(u64),
    /// An event, by the address of the `tracing::Event` the layers are handed.
    Event(usize),
}

/// The thread's latest edge, its reading, and the layers that took it.
struct Latest {
    edge: Option<Edge>,
    at: Instant,
    taken_by: Vec<u64>,
}

thread_local! {
    static LATEST: RefCell<Latest> =
        RefCell::new(Latest { edge: None, at: Instant::now(), taken_by: Vec::new() });
}

/// A layer's handle on the shared readings: its id among the crate's layers.
#[derive(Debug)]
pub(crate) struct EdgeClock {
    layer: u64,
}

impl EdgeClock {
    /// A handle for a new layer.
    pub(crate) fn new() -> Self {
        static LAYERS: AtomicU64 = AtomicU64::new(0);
        Self { layer: LAYERS.fetch_add(1, Ordering::Relaxed) }
    }

    /// When `edge` happened: the reading another layer took for it, or a new one.
    pub(crate) fn at(&self, edge: Edge) -> Instant {
        // A thread being torn down has no thread-locals left: its edges read the clock alone.
        LATEST
            .try_with(|latest| {
                let mut latest = latest.borrow_mut();
                if latest.edge == Some(edge) && !latest.taken_by.contains(&self.layer) {
                    latest.taken_by.push(self.layer);
                    return latest.at;
                }
                let at = Instant::now();
                latest.edge = Some(edge);
                latest.at = at;
                latest.taken_by.clear();
                latest.taken_by.push(self.layer);
                at
            })
            .unwrap_or_else(|_| Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::{Edge, EdgeClock};

    #[test]
    fn layers_share_an_edges_reading_and_an_edge_met_again_reads_anew() {
        let (chrome, perfetto) = (EdgeClock::new(), EdgeClock::new());
        let entered = chrome.at(Edge::Enter(1));
        assert_eq!(perfetto.at(Edge::Enter(1)), entered, "the same entry");
        std::thread::sleep(std::time::Duration::from_millis(1));
        // The same span entered again, inside itself: a new edge for both.
        let again = chrome.at(Edge::Enter(1));
        assert!(again > entered);
        assert_eq!(perfetto.at(Edge::Enter(1)), again);
        let exited = perfetto.at(Edge::Exit(1));
        assert_eq!(chrome.at(Edge::Exit(1)), exited, "whichever layer meets it first");
        let other = std::thread::spawn(move || chrome.at(Edge::Exit(1))).join().unwrap();
        assert_ne!(other, exited, "another thread's edge is its own");
    }
}
