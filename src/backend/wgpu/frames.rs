//! Every finished frame as a tree of its scopes, in frame order, untimed scopes kept: what
//! `wgpu-profiler`'s `process_finished_frame` returns, for a ported UI.
//!
//! ```text
//!  recording threads                        the collector (the sink)      the application
//!  wgpu_list(): its frame's lists alive +1   zones(list): its scopes' times  next_finished():
//!  scope: (location, depth, timed, thread)   frame(mark): the frames before  the oldest frame
//!  queue_submit: the list's scopes and         it are closed                  closed, with no
//!    readbacks, in submission order                                           list alive and
//!  drop unsubmitted: counted in its frame                                     every list settled
//! ```
//!
//! A list is *settled* once its zones came, or its readback never will (a chunk lost or let
//! go at the readback limit), or a later list of its lane came (the emitter hands a lane's
//! lists over in order: one skipped has failed). The scopes of a list whose times never came
//! are kept, untimed, and counted ([`FrameResult::lost_lists`]).

use super::readback::Ticket;
use super::stream::WgpuStream;
use crate::location::Location;
use crate::sink::{ContextInfo, FrameMark, Sink, Zone, ZoneBatch};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;

/// One scope of a list as it was recorded.
#[derive(Debug, Clone)]
pub(crate) struct ScopeShape {
    pub(crate) location: Location,
    /// Its depth among the list's scopes, timed or not.
    pub(crate) depth: u32,
    /// Whether its begin was recorded (its zone may come).
    pub(crate) timed: bool,
    pub(crate) thread: ThreadId,
}

/// A submitted list, until its frame is handed out.
#[derive(Debug)]
struct Submitted {
    list_id: u64,
    lane: u64,
    shape: Vec<ScopeShape>,
    tickets: Vec<Arc<Ticket>>,
    /// Its zones, once they came; `Some(empty)` for a list that recorded no event.
    zones: Option<Vec<Zone>>,
    /// Settled without its zones: they never come.
    lost: bool,
}

impl Submitted {
    fn settled(&self) -> bool {
        self.zones.is_some() || self.lost || self.tickets.iter().any(|t| t.lost())
    }
}

#[derive(Debug)]
struct PendingFrame {
    id: u64,
    /// A later frame has begun: no list is made for this one any more.
    closed: bool,
    /// Lists made in this frame, not yet submitted or dropped.
    alive: usize,
    lists: Vec<Submitted>,
    dropped_lists: usize,
}

#[derive(Debug, Default)]
struct LogState {
    frames: VecDeque<PendingFrame>,
    finished: VecDeque<FrameResult>,
    /// Submitted lists not yet in a finished frame: list id to frame id.
    frame_of: HashMap<u64, u64>,
}

/// What the frames know of the lists of one backend: shared by the backend (its lists report
/// here) and every [`WgpuFrames`] handle.
#[derive(Debug, Default)]
pub(crate) struct FrameLog {
    state: Mutex<LogState>,
}

impl LogState {
    fn frame(&mut self, id: u64) -> &mut PendingFrame {
        let at = match self.frames.iter().position(|f| f.id == id) {
            Some(at) => at,
            None => {
                let frame = PendingFrame { id, closed: false, alive: 0, lists: Vec::new(), dropped_lists: 0 };
                self.frames.push_back(frame);
                self.frames.len() - 1
            }
        };
        &mut self.frames[at]
    }

    /// Moves every frame at the front that is finished to `finished`, in order.
    fn finish(&mut self) {
        while let Some(front) = self.frames.front() {
            if !front.closed || front.alive > 0 || !front.lists.iter().all(Submitted::settled) {
                return;
            }
            let frame = self.frames.pop_front().expect("checked above");
            for list in &frame.lists {
                self.frame_of.remove(&list.list_id);
            }
            self.finished.push_back(build(frame));
        }
    }
}

impl FrameLog {
    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A list made in `frame`.
    pub(crate) fn made(&self, frame: Option<u64>) {
        if let Some(frame) = frame {
            self.lock().frame(frame).alive += 1;
        }
    }

    /// A list of `frame` submitted with its `stream` (in its lane's order: called under the
    /// lane's lock).
    pub(crate) fn submitted(
        &self,
        frame: Option<u64>,
        list_id: u64,
        recorded: bool,
        shape: Vec<ScopeShape>,
        stream: &WgpuStream,
    ) {
        let Some(frame) = frame else { return };
        let (lane, tickets) = (stream.lane_key(), stream.take_tickets());
        let mut state = self.lock();
        let zones = (!recorded).then(Vec::new);
        let pending = state.frame(frame);
        pending.alive = pending.alive.saturating_sub(1);
        pending.lists.push(Submitted { list_id, lane, shape, tickets, zones, lost: false });
        state.frame_of.insert(list_id, frame);
        state.finish();
    }

    /// A list of `frame` dropped unsubmitted; `scopes`: whether it had any.
    pub(crate) fn dropped(&self, frame: Option<u64>, scopes: bool) {
        let Some(frame) = frame else { return };
        let mut state = self.lock();
        let pending = state.frame(frame);
        pending.alive = pending.alive.saturating_sub(1);
        pending.dropped_lists += usize::from(scopes);
        state.finish();
    }

    /// The zones of a list, from the collector. The lane's lists submitted before it that
    /// have not come have failed (a lane's lists come in order).
    fn zones(&self, batch: ZoneBatch<'_>) {
        let mut state = self.lock();
        let Some(&frame) = state.frame_of.get(&batch.list_id) else { return };
        let mut lane = None;
        for pending in state.frames.iter_mut() {
            if let Some(list) = pending.lists.iter_mut().find(|l| l.list_id == batch.list_id) {
                list.zones = Some(batch.zones.to_vec());
                lane = Some(list.lane);
            }
            if pending.id == frame {
                break;
            }
        }
        'earlier: for pending in state.frames.iter_mut() {
            for list in pending.lists.iter_mut() {
                if list.list_id == batch.list_id {
                    break 'earlier;
                }
                if Some(list.lane) == lane && list.zones.is_none() {
                    list.lost = true;
                }
            }
        }
        state.finish();
    }

    /// A frame began: every frame before it is closed.
    fn mark(&self, id: u64) {
        let mut state = self.lock();
        for pending in state.frames.iter_mut().filter(|f| f.id != id) {
            pending.closed = true;
        }
        if id != u64::MAX {
            state.frame(id);
        }
        state.finish();
    }
}

/// Every finished frame's scopes as a tree, in frame order, nothing cut: the scopes that were
/// not timed (a device feature missing, recording disabled, a readback that never came) are
/// kept with no zone. Made from the backend before the context
/// ([`WgpuBackend::keep_frames`](super::WgpuBackend::keep_frames)), handed to the builder as a
/// sink ([`sink`](Self::sink)), read with [`next_finished`](Self::next_finished). Cheap to
/// clone.
///
/// A frame is the lists made while it was current (`TracingContext::frame`); it is finished
/// once a later frame has begun and been seen by the collector, every list made in it was
/// submitted or dropped, and each submitted list's zones came or never will. Finished frames
/// are kept until taken.
#[derive(Debug, Clone)]
pub struct WgpuFrames {
    log: Arc<FrameLog>,
}

impl WgpuFrames {
    pub(super) fn new(log: Arc<FrameLog>) -> Self {
        Self { log }
    }

    /// The sink that feeds these frames: give it to the context's builder.
    pub fn sink(&self) -> WgpuFramesSink {
        WgpuFramesSink { log: Arc::clone(&self.log) }
    }

    /// The oldest finished frame not taken yet.
    pub fn next_finished(&self) -> Option<FrameResult> {
        let mut state = self.log.lock();
        state.finish();
        state.finished.pop_front()
    }

    /// Frames begun and not finished yet.
    pub fn pending(&self) -> usize {
        self.log.lock().frames.len()
    }
}

/// The sink of a [`WgpuFrames`].
#[derive(Debug)]
pub struct WgpuFramesSink {
    log: Arc<FrameLog>,
}

impl Sink for WgpuFramesSink {
    fn zones(&mut self, _context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        self.log.zones(batch);
        Ok(())
    }

    fn frame(&mut self, _context: &ContextInfo, mark: FrameMark) -> std::io::Result<()> {
        self.log.mark(mark.id);
        Ok(())
    }
}

/// One finished frame ([`WgpuFrames::next_finished`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FrameResult {
    /// The frame's id (`TracingContext::frame`).
    pub id: u64,
    /// Its outermost scopes, list after list in submission order, each list's in the order
    /// they began.
    pub scopes: Vec<ScopeResult>,
    /// Its lists whose times never came (their scopes are kept, untimed).
    pub lost_lists: usize,
    /// Its lists dropped unsubmitted with scopes recorded (their scopes are not here).
    pub dropped_lists: usize,
}

/// A scope of a finished frame and the scopes nested in it, as `wgpu-profiler`'s
/// `GpuTimerQueryResult`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScopeResult {
    /// Where it was recorded (its name: [`name`](Self::name)).
    pub location: Location,
    /// The process that recorded it.
    pub pid: u32,
    /// The thread that began it.
    pub tid: ThreadId,
    /// Its zone (GPU and host times), `None` when it was not timed.
    pub zone: Option<Zone>,
    /// The scopes begun while it was open, in the order they began.
    pub children: Vec<ScopeResult>,
}

impl ScopeResult {
    /// The scope's name.
    pub fn name(&self) -> &str {
        self.location.name()
    }

    /// Its GPU time range in nanoseconds since the context's base event, `None` when it was
    /// not timed.
    pub fn time_ns(&self) -> Option<std::ops::Range<i64>> {
        self.zone.as_ref().map(|z| z.gpu_begin_ns..z.gpu_end_ns)
    }
}

/// A frame's tree: each list's scopes, matched in order with its zones (a timed scope takes
/// the next zone of its name).
fn build(frame: PendingFrame) -> FrameResult {
    let pid = std::process::id();
    let mut roots = Vec::new();
    let mut lost_lists = 0;
    for list in frame.lists {
        lost_lists += usize::from(list.zones.is_none() && !list.shape.is_empty());
        let mut zones = list.zones.unwrap_or_default().into_iter().peekable();
        // The open scopes, outermost first: each is moved to its parent when it closes.
        let mut open: Vec<ScopeResult> = Vec::new();
        for shape in list.shape {
            while open.len() > shape.depth as usize {
                close(&mut open, &mut roots);
            }
            let zone = if shape.timed {
                zones.next_if(|z| z.location.name() == shape.location.name())
            } else {
                None
            };
            open.push(ScopeResult {
                location: shape.location,
                pid,
                tid: shape.thread,
                zone,
                children: Vec::new(),
            });
        }
        while !open.is_empty() {
            close(&mut open, &mut roots);
        }
    }
    FrameResult { id: frame.id, scopes: roots, lost_lists, dropped_lists: frame.dropped_lists }
}

/// Closes the innermost open scope: a child of the one below it, or a root.
fn close(open: &mut Vec<ScopeResult>, roots: &mut Vec<ScopeResult>) {
    let scope = open.pop().expect("an open scope");
    match open.last_mut() {
        Some(parent) => parent.children.push(scope),
        None => roots.push(scope),
    }
}
