//! The backend's stream: a `wgpu::CommandEncoder` that zones write timestamps into, with the
//! query chunks it took and the pass it has open.

use super::errors::{BUSY, FINISHED, NO_PASS_TIMESTAMPS, NO_TIMESTAMPS, PASS_OPEN};
use super::event::TimestampEvent;
use super::queries::QueryChunk;
use super::queue::CLOCK_LANE;
use super::readback::Queries;
use crate::backend::BackendError;
use std::cell::{RefCell, RefMut};
use std::sync::Arc;

/// The call named in the encoder's errors.
const CALL: &str = "wgpu timestamp";

/// A pass opened through the encoder (by `EventList::compute_pass` or `render_pass`): zones
/// recorded while it is open write their timestamps inside it.
#[derive(Debug)]
// Both are large; at most one is open per encoder, so neither is boxed.
#[allow(clippy::large_enum_variant)]
pub(crate) enum OpenPass {
    Compute(wgpu::ComputePass<'static>),
    Render(wgpu::RenderPass<'static>),
}

/// What the next zone mark on the encoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A zone mark where the encoder or its open pass is.
    Plain,
    /// A pass zone's begin: it takes a pair of queries, the pass's `timestamp_writes`.
    PassBegin,
    /// A pass zone's end: it takes the pair's second query.
    PassEnd,
}

#[derive(Debug)]
struct EncoderState {
    /// `None` once finished, and for the clock stream.
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<OpenPass>,
    phase: Phase,
    /// A pass zone's queries (chunk position in `chunks`, query): its begin, taken by a
    /// `PassBegin` mark, and, while the pass is open, its end.
    pass_begin: Option<(usize, u32)>,
    pass_end: Option<(usize, u32)>,
    /// The chunks taken, the last one current.
    chunks: Vec<QueryChunk>,
}

/// A command encoder whose zones are timed: the wgpu backend's stream.
///
/// Made by [`WgpuBackend::encoder`](super::WgpuBackend::encoder) for one lane (a
/// [`WgpuQueue`](super::WgpuQueue)); recorded by one thread at a time (it is `Send`, not
/// `Sync`); finished with [`finish`](Self::finish), which resolves its timestamps into the
/// command buffer it returns. Record into the wgpu encoder itself through
/// [`encoder`](Self::encoder), and into passes through `EventList::compute_pass` and
/// `EventList::render_pass`.
///
/// How a zone mark is written (docs/wgpu.md): inside a pass, with the pass's `write_timestamp`
/// (`TIMESTAMP_QUERY_INSIDE_PASSES`); otherwise with the encoder's `write_timestamp`
/// (`TIMESTAMP_QUERY_INSIDE_ENCODERS`), or, with `TIMESTAMP_QUERY` alone, by an empty compute
/// pass whose `timestamp_writes` write one timestamp at its beginning. A pass's own zone
/// always uses the pass's `timestamp_writes`. A mark that the device cannot time is refused
/// ([`NO_TIMESTAMPS`], [`NO_PASS_TIMESTAMPS`]): its zone is dropped and counted.
#[derive(Debug)]
pub struct WgpuEncoder {
    state: RefCell<EncoderState>,
    lane: u64,
    queries: Arc<Queries>,
    debug_groups: bool,
}

impl WgpuEncoder {
    pub(super) fn new(
        queries: Arc<Queries>,
        lane: u64,
        encoder: Option<wgpu::CommandEncoder>,
        debug_groups: bool,
    ) -> Self {
        let state = EncoderState {
            encoder,
            pass: None,
            phase: Phase::Plain,
            pass_begin: None,
            pass_end: None,
            chunks: Vec::new(),
        };
        Self { state: RefCell::new(state), lane, queries, debug_groups }
    }

    /// The lane's key.
    pub fn lane_key(&self) -> u64 {
        self.lane
    }

    pub(super) fn is_clock(&self) -> bool {
        self.lane == CLOCK_LANE
    }

    /// Whether zones begun through `EventList::scope`, `compute_pass` and `render_pass` push
    /// a debug group named after the zone ([`WgpuBackend::with_debug_groups`](super::WgpuBackend::with_debug_groups)).
    pub fn debug_groups(&self) -> bool {
        self.debug_groups
    }

    /// The wgpu encoder, for the application's own commands. Fails while a pass of it is open
    /// (record into the pass's scope instead), once finished, and while already borrowed.
    pub fn encoder(&self) -> Result<RefMut<'_, wgpu::CommandEncoder>, BackendError> {
        let state = self.state.try_borrow_mut().map_err(|_| BackendError::new(CALL, BUSY))?;
        if state.pass.is_some() {
            return Err(BackendError::new(CALL, PASS_OPEN));
        }
        RefMut::filter_map(state, |s| s.encoder.as_mut()).map_err(|_| BackendError::new(CALL, FINISHED))
    }

    /// Ends recording: resolves every timestamp of the encoder into its readback (mapped once
    /// the command buffer is submitted) and returns the command buffer. Submit it with its
    /// lists through `TracingContext::queue_submit`. Fails for the backend's clock stream.
    pub fn finish(self) -> Result<wgpu::CommandBuffer, BackendError> {
        let mut state = self.state.borrow_mut();
        state.pass = None;
        let Some(mut encoder) = state.encoder.take() else { return Err(BackendError::new(CALL, FINISHED)) };
        for chunk in state.chunks.drain(..) {
            self.queries.resolve(&mut encoder, chunk);
        }
        Ok(encoder.finish())
    }

    /// Writes a timestamp for a new record of `event` where the encoder is.
    pub(super) fn record(&self, event: &TimestampEvent) -> Result<(), BackendError> {
        let mut state = self.state.try_borrow_mut().map_err(|_| BackendError::new(CALL, BUSY))?;
        let EncoderState { encoder, pass, phase, pass_begin, pass_end, chunks } = &mut *state;
        let Some(encoder) = encoder.as_mut() else { return Err(BackendError::new(CALL, FINISHED)) };
        let timestamps = self.queries.timestamps;
        match *phase {
            Phase::PassBegin if timestamps.query => {
                let at = self.with_room(chunks, 2);
                *pass_begin = Some((at, chunks[at].push(event)));
                chunks[at].reserve();
                return Ok(());
            }
            Phase::PassEnd => {
                return match pass_end.take() {
                    Some((at, query)) => {
                        chunks[at].assign(query, event);
                        Ok(())
                    }
                    None => self.untimed(NO_TIMESTAMPS),
                };
            }
            Phase::PassBegin | Phase::Plain => {}
        }
        if !timestamps.query {
            return self.untimed(NO_TIMESTAMPS);
        }
        match pass {
            Some(_) if !timestamps.inside_passes => self.untimed(NO_PASS_TIMESTAMPS),
            Some(pass) => {
                let at = self.with_room(chunks, 1);
                let query = chunks[at].push(event);
                match pass {
                    OpenPass::Compute(p) => p.write_timestamp(&chunks[at].set, query),
                    OpenPass::Render(p) => p.write_timestamp(&chunks[at].set, query),
                }
                Ok(())
            }
            None => {
                let at = self.with_room(chunks, 1);
                let query = chunks[at].push(event);
                let set = &chunks[at].set;
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
                Ok(())
            }
        }
    }

    /// The position of a chunk with `queries` free queries: the current one, or a new one.
    fn with_room(&self, chunks: &mut Vec<QueryChunk>, queries: u32) -> usize {
        if chunks.last().is_none_or(|c| c.room() < queries) {
            chunks.push(self.queries.take_chunk());
        }
        chunks.len() - 1
    }

    fn untimed(&self, code: &'static str) -> Result<(), BackendError> {
        self.queries.count_untimed();
        Err(BackendError::new(CALL, code))
    }

    /// Before a pass zone's begin is recorded: the mark takes the pass's pair of queries.
    /// Fails if a pass is open already, the encoder is finished or borrowed.
    pub(crate) fn expect_pass_begin(&self) -> Result<(), BackendError> {
        let mut state = self.state.try_borrow_mut().map_err(|_| BackendError::new(CALL, BUSY))?;
        if state.encoder.is_none() {
            return Err(BackendError::new(CALL, FINISHED));
        }
        if state.pass.is_some() {
            return Err(BackendError::new(CALL, PASS_OPEN));
        }
        state.phase = Phase::PassBegin;
        state.pass_begin = None;
        Ok(())
    }

    /// Opens the pass whose zone was just begun: `open` makes it from the encoder and the
    /// timestamp writes of the zone's queries (`None` when its begin was not recorded).
    pub(crate) fn open_pass(
        &self,
        open: impl FnOnce(&mut wgpu::CommandEncoder, Option<(&wgpu::QuerySet, u32, u32)>) -> OpenPass,
    ) {
        let mut state = self.state.borrow_mut();
        let EncoderState { encoder, pass, phase, pass_begin, pass_end, chunks } = &mut *state;
        *phase = Phase::Plain;
        let Some(encoder) = encoder.as_mut() else { return };
        let begin = pass_begin.take();
        let writes = begin.map(|(at, query)| (&chunks[at].set, query, query + 1));
        *pass = Some(open(encoder, writes));
        *pass_end = begin.map(|(at, query)| (at, query + 1));
    }

    /// Before a pass zone's end is recorded: the mark takes the pass's second query.
    pub(crate) fn expect_pass_end(&self) {
        self.state.borrow_mut().phase = Phase::PassEnd;
    }

    /// Ends the open pass (its end timestamp is written here).
    pub(crate) fn close_pass(&self) {
        let mut state = self.state.borrow_mut();
        state.phase = Phase::Plain;
        state.pass_end = None;
        state.pass = None;
    }

    /// The open pass, mutably.
    pub(crate) fn pass(&self) -> Option<RefMut<'_, OpenPass>> {
        RefMut::filter_map(self.state.try_borrow_mut().ok()?, |s| s.pass.as_mut()).ok()
    }

    /// Pushes a debug group on the open pass, or on the encoder.
    pub(crate) fn push_debug_group(&self, label: &str) {
        let Ok(mut state) = self.state.try_borrow_mut() else { return };
        let EncoderState { encoder, pass, .. } = &mut *state;
        match (pass, encoder) {
            (Some(OpenPass::Compute(p)), _) => p.push_debug_group(label),
            (Some(OpenPass::Render(p)), _) => p.push_debug_group(label),
            (None, Some(e)) => e.push_debug_group(label),
            (None, None) => {}
        }
    }

    /// Pops a debug group from the open pass, or from the encoder.
    pub(crate) fn pop_debug_group(&self) {
        let Ok(mut state) = self.state.try_borrow_mut() else { return };
        let EncoderState { encoder, pass, .. } = &mut *state;
        match (pass, encoder) {
            (Some(OpenPass::Compute(p)), _) => p.pop_debug_group(),
            (Some(OpenPass::Render(p)), _) => p.pop_debug_group(),
            (None, Some(e)) => e.pop_debug_group(),
            (None, None) => {}
        }
    }
}

impl Drop for WgpuEncoder {
    /// An encoder dropped unfinished: its timestamps never come back, so its events are
    /// stamped lost (their lists fail and are counted, instead of holding their lanes).
    fn drop(&mut self) {
        let state = self.state.get_mut();
        state.pass = None;
        for chunk in state.chunks.drain(..) {
            self.queries.abandon(chunk);
        }
    }
}
