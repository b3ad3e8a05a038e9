//! The backend's stream: the timestamp queries of one list's zones. A mark takes the next
//! query of the stream's current chunk; the stream's owner (a `WgpuList`, in
//! `faces/wgpu/`) says before each mark where its timestamp goes and writes it there after,
//! on whatever encoder or pass it holds, so that any encoder or pass can be timed.

use super::errors::{NO_PASS_TIMESTAMPS, NO_SITE, NO_TIMESTAMPS};
use super::event::TimestampEvent;
use super::queries::{QueryChunk, Timestamps};
use super::queue::CLOCK_LANE;
use super::readback::{Owner, Queries, Ticket};
use crate::backend::BackendError;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// The call named in the stream's errors.
const CALL: &str = "wgpu timestamp";

/// Where the next mark's timestamp is written, as the stream's owner says before the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Site {
    /// No mark is expected: one is refused, since nothing would write its timestamp.
    Nowhere,
    /// On a command encoder: `write_timestamp` (`TIMESTAMP_QUERY_INSIDE_ENCODERS`), or an
    /// empty compute pass's `timestamp_writes` (`TIMESTAMP_QUERY` alone).
    Encoder,
    /// Inside a pass: the pass's `write_timestamp` (`TIMESTAMP_QUERY_INSIDE_PASSES`).
    Pass,
    /// A pass zone's begin: a pair of queries, the pass's `timestamp_writes`.
    PassBegin,
    /// A pass zone's end: the second query of the pair its begin took.
    PassEnd(Query),
}

/// A query a mark took: the chunk's position in the stream and the query in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Query {
    at: usize,
    index: u32,
}

impl Query {
    /// The pair a pass's begin took: this query and the next.
    pub(crate) fn pair(self) -> (u32, u32) {
        (self.index, self.index + 1)
    }
}

#[derive(Debug, Default)]
struct StreamState {
    /// The chunks taken since the last resolve, the last one current.
    chunks: Vec<QueryChunk>,
    /// The readbacks of the chunks resolved so far.
    tickets: Vec<Arc<Ticket>>,
}

/// The timestamp queries of one list: the wgpu backend's stream ([`Backend::Stream`]).
///
/// Made with each `WgpuList` (`TracingContext::wgpu_list`), which records its zones here and
/// writes their timestamps on the encoders and passes it is given; one thread at a time
/// (`Send`, not `Sync`).
///
/// [`Backend::Stream`]: crate::Backend::Stream
#[derive(Debug)]
pub struct WgpuStream {
    /// Where the next mark's timestamp goes (`Cell`s: a mark sets and reads them without a
    /// borrow flag).
    site: Cell<Site>,
    /// The query the last mark took, until its owner writes it.
    taken: Cell<Option<Query>>,
    state: RefCell<StreamState>,
    lane: u64,
    owner: Owner,
    queries: Arc<Queries>,
}

impl WgpuStream {
    pub(super) fn new(queries: Arc<Queries>, lane: u64, owner: Owner) -> Self {
        let (site, taken, state) = (Cell::new(Site::Nowhere), Cell::new(None), RefCell::default());
        Self { site, taken, state, lane, owner, queries }
    }

    /// The lane's key.
    pub fn lane_key(&self) -> u64 {
        self.lane
    }

    pub(super) fn is_clock(&self) -> bool {
        self.lane == CLOCK_LANE
    }

    /// Says where the next mark's timestamp goes.
    #[inline]
    pub(crate) fn expect(&self, site: Site) {
        self.site.set(site);
    }

    /// Writes the timestamp of the query the last mark took, if it took one, with `write`
    /// (the set and the query's index), and expects nothing more. Returns the query.
    #[inline]
    pub(crate) fn write_taken(&self, write: impl FnOnce(&wgpu::QuerySet, u32)) -> Option<Query> {
        self.site.set(Site::Nowhere);
        let query = self.taken.take()?;
        write(&self.state.borrow().chunks[query.at].set, query.index);
        Some(query)
    }

    /// The query the last mark took (a pass's begin: the first of its pair), and expects
    /// nothing more.
    #[inline]
    pub(crate) fn take(&self) -> Option<Query> {
        self.site.set(Site::Nowhere);
        self.taken.take()
    }

    /// A pass's `timestamp_writes` for the pair of queries its begin took (`query`, the next):
    /// handed to `open` with the set.
    pub(crate) fn with_pass_pair<R>(
        &self,
        query: Option<Query>,
        open: impl FnOnce(Option<(&wgpu::QuerySet, u32, u32)>) -> R,
    ) -> R {
        let state = self.state.borrow();
        open(query.map(|q| (&state.chunks[q.at].set, q.index, q.index + 1)))
    }

    /// The end query of the pass whose begin took `begin`.
    pub(crate) fn pass_end(begin: Query) -> Query {
        Query { at: begin.at, index: begin.index + 1 }
    }

    /// The device's timestamp features.
    #[inline]
    pub(crate) fn timestamps(&self) -> Timestamps {
        self.queries.timestamps
    }

    /// Queries taken and not resolved yet.
    pub(crate) fn unresolved(&self) -> u32 {
        self.state.borrow().chunks.iter().map(QueryChunk::used).sum()
    }

    /// Records the resolve of every query taken since the last resolve into `encoder`: they
    /// are read back once its command buffer is submitted.
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let mut state = self.state.borrow_mut();
        let StreamState { chunks, tickets, .. } = &mut *state;
        for chunk in chunks.drain(..) {
            tickets.extend(self.queries.resolve(encoder, chunk, self.owner));
        }
    }

    /// The readbacks of the chunks resolved so far, taken (a list's, at its submission).
    pub(super) fn take_tickets(&self) -> Vec<Arc<Ticket>> {
        std::mem::take(&mut self.state.borrow_mut().tickets)
    }

    /// Takes a query (or, for a pass's begin, a pair) for a new record of `event` where the
    /// owner said, or refuses the mark. `event` is of this backend's arena: a list's stream
    /// records only its context's events, made by the same backend; the clock stream, which
    /// `Backend::record` reaches with any event, checks (`WgpuBackend::record_anchor`).
    #[inline]
    pub(super) fn record(&self, event: &TimestampEvent) -> Result<(), BackendError> {
        let timestamps = self.queries.timestamps;
        let queries = match self.site.get() {
            Site::Nowhere => return Err(BackendError::new(CALL, NO_SITE)),
            Site::PassEnd(end) => {
                self.state.borrow_mut().chunks[end.at].assign(end.index, event);
                self.site.set(Site::Nowhere);
                return Ok(());
            }
            _ if !timestamps.query => return self.untimed(NO_TIMESTAMPS),
            Site::Pass if !timestamps.inside_passes => return self.untimed(NO_PASS_TIMESTAMPS),
            Site::PassBegin => 2,
            Site::Encoder | Site::Pass => 1,
        };
        let mut state = self.state.borrow_mut();
        if state.chunks.last().is_none_or(|c| c.room() < queries) {
            let chunk = self.queries.take_chunk();
            state.chunks.push(chunk);
        }
        let at = state.chunks.len() - 1;
        let chunk = &mut state.chunks[at];
        let index = chunk.push(event);
        if queries == 2 {
            chunk.reserve();
        }
        self.taken.set(Some(Query { at, index }));
        Ok(())
    }

    fn untimed(&self, code: &'static str) -> Result<(), BackendError> {
        self.queries.count_untimed();
        Err(BackendError::new(CALL, code))
    }
}

/// Writes a timestamp into `query` of `set` on `encoder`, as the device allows: with
/// `write_timestamp`, or (`TIMESTAMP_QUERY` alone) with an empty compute pass that writes it
/// at its beginning.
pub(crate) fn write_on_encoder(
    encoder: &mut wgpu::CommandEncoder,
    timestamps: Timestamps,
    set: &wgpu::QuerySet,
    query: u32,
) {
    if timestamps.inside_encoders {
        encoder.write_timestamp(set, query);
    } else {
        let writes = wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: Some(query),
            end_of_pass_write_index: None,
        };
        drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: Some(writes),
        }));
    }
}

impl Drop for WgpuStream {
    /// Queries never resolved (the list dropped before its encoder was resolved): their
    /// events are stamped lost, so that nothing waits for them.
    fn drop(&mut self) {
        for chunk in self.state.get_mut().chunks.drain(..) {
            self.queries.abandon(chunk);
        }
    }
}
