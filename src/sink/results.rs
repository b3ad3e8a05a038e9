//! Timings back to the application: a sink that hands each collected list's zones to a
//! closure or a channel, for per-kernel statistics, auto-tuning, a frame-time HUD or a
//! regression test.
//!
//! Each delivery is one [`ListResults`]: the zones of one submitted list, tied to it by
//! [`EventList::id`](crate::EventList::id) (take the id before submitting the list), in the
//! order they began (parents before children), each with its depth. Lists arrive as the
//! collector emits them: those of one stream in that stream's GPU order, whenever
//! `collect` (or the context's collector thread) finds them complete; `flush` waits for
//! every list submitted before it.
//!
//! # Compared with `wgpu-profiler`
//!
//! `wgpu-profiler` returns one frame's results as a tree of scopes from
//! `process_finished_frame`, polled by the application once per frame. Here the unit is the
//! list (a command buffer), delivered when collected, flat in begin order with each zone's
//! depth: [`ListResults::tree`] rebuilds the same tree when a caller wants it. A frame made
//! of several lists is the set of their ids; zones carry GPU times (nanoseconds since the
//! context's base event) and host times, so lists of one frame line up with each other.
//!
//! ```
//! use gpu_event_pool::sink::results::ResultsSink;
//! use gpu_event_pool::{location, sim::SimBackend, TracingContext};
//!
//! let sim = SimBackend::manual();
//! let stream = sim.stream();
//! let (sink, results) = ResultsSink::channel();
//! let ctx = TracingContext::builder(sim.clone()).sink(sink).build()?;
//! let mut list = ctx.list();
//! {
//!     let mut frame = list.zone(&stream, location!("frame"));
//!     let _pass = frame.zone(&stream, location!("matmul"));
//!     sim.launch(&stream, 20_000);
//! }
//! let id = list.id(); // ties the results to this list
//! ctx.submit(list)?;
//! ctx.flush()?;
//! let list = results.try_recv()?;
//! assert_eq!(list.list_id, id);
//! let tree = list.tree();
//! assert_eq!((tree[0].zone.location.name(), tree[0].children[0].zone.location.name()), ("frame", "matmul"));
//! assert_eq!(tree[0].children[0].zone.gpu_end_ns - tree[0].children[0].zone.gpu_begin_ns, 20_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use super::ZoneNode;
use super::{zone_tree, ContextInfo, Sink, Zone, ZoneBatch};
use std::sync::mpsc::{channel, Receiver, Sender};

/// The zones of one collected list.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ListResults {
    /// The id of the context that collected it ([`ContextInfo::id`]): one closure or channel
    /// may serve several contexts.
    pub context: u32,
    /// The list's id ([`EventList::id`](crate::EventList::id)), unique within its context.
    pub list_id: u64,
    /// The frame the list belongs to ([`EventList::frame`](crate::EventList::frame)), as each
    /// of its zones says (`None` for a list none of whose zones was recorded).
    pub frame: Option<u64>,
    /// The list's zones in the order they began (parents before children).
    pub zones: Vec<Zone>,
}

impl ListResults {
    /// The zones as a tree: the outermost zones, each with the zones nested in it (the shape
    /// `wgpu-profiler` returns a frame in).
    pub fn tree(&self) -> Vec<ZoneNode<'_>> {
        zone_tree(&self.zones)
    }
}

/// Hands each collected list's zones to a closure ([`new`](Self::new)) or a channel
/// ([`channel`](Self::channel)); module docs.
///
/// The closure runs on the collecting thread, inside `collect`: keep it short (a channel
/// send, a few sums), or the next collect waits. A panic in it is caught and reported by
/// `collect` and the sink keeps getting later lists.
pub struct ResultsSink {
    deliver: Box<dyn FnMut(ListResults) + Send>,
}

impl std::fmt::Debug for ResultsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultsSink").finish_non_exhaustive()
    }
}

impl ResultsSink {
    /// Calls `deliver` with each collected list.
    pub fn new(deliver: impl FnMut(ListResults) + Send + 'static) -> Self {
        Self { deliver: Box::new(deliver) }
    }

    /// Sends each collected list on an unbounded channel: receive on any thread. Once the
    /// receiver is dropped, lists are no longer kept.
    pub fn channel() -> (Self, Receiver<ListResults>) {
        let (send, receive): (Sender<ListResults>, _) = channel();
        // A send fails only once the receiver is gone: nobody wants the lists any more.
        (Self::new(move |list| drop(send.send(list))), receive)
    }
}

impl Sink for ResultsSink {
    fn zones(&mut self, context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        (self.deliver)(ListResults {
            context: context.id,
            list_id: batch.list_id,
            frame: batch.zones.first().and_then(|z| z.frame),
            zones: batch.zones.to_vec(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ListResults;
    use crate::sink::Zone;
    use crate::{DynamicLocation, Lane};

    #[test]
    fn tree_nests_zones_by_depth_in_begin_order() {
        let zone = |name: &str, depth| Zone::new(DynamicLocation::new(name), Lane::Stream(0), depth, 0, 1);
        let list = ListResults {
            context: 1,
            list_id: 1,
            frame: None,
            zones: vec![zone("a", 0), zone("b", 1), zone("c", 2), zone("d", 1), zone("e", 0)],
        };
        let tree = list.tree();
        let names = |nodes: &[super::ZoneNode<'_>]| {
            nodes.iter().map(|n| n.zone.location.name().to_owned()).collect::<Vec<_>>()
        };
        assert_eq!(names(&tree), ["a", "e"]);
        assert_eq!(names(&tree[0].children), ["b", "d"]);
        assert_eq!(names(&tree[0].children[0].children), ["c"]);
        assert!(tree[1].children.is_empty());
    }
}
