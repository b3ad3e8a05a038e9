//! `WgpuList`: the zones of one command buffer and their timestamp queries, timed on any
//! encoder or pass the application holds.

use super::scope::{compute_pass, render_pass, PassScope, PassZone, Scope, Target, Timestamped};
use crate::backend::wgpu::{FrameLog, ScopeShape, Site, WgpuBackend, WgpuStream, PASS_OPEN};
use crate::backend::BackendError;
use crate::location::Location;
use crate::record::{EventList, RecordError};
use std::sync::Arc;

/// The zones of one command buffer (or several, submitted together in order) on one lane,
/// and their timestamp queries: what `wgpu-profiler`'s `GpuProfiler` is to one encoder.
///
/// Made by `TracingContext::wgpu_list(&lane)`; its scopes time any `wgpu::CommandEncoder`,
/// `wgpu::ComputePass` or `wgpu::RenderPass` you hold ([`scope`](Self::scope)), nested as you
/// write them, and deref to it. [`resolve`](Self::resolve) writes the resolve of its queries
/// into an encoder (any number of times); `TracingContext::queue_submit` submits it with its
/// command buffers. One list per encoder recorded at once: two scopes open at once on two
/// encoders are two lists.
///
/// A list has one owner (`Send`, not `Sync`); recording takes no lock another thread takes.
#[must_use = "a list's zones are lost unless it is submitted"]
#[derive(Debug)]
pub struct WgpuList {
    list: EventList<WgpuBackend>,
    stream: WgpuStream,
    debug_groups: bool,
    /// Pass zones begun and not ended: their end queries are written when the pass ends.
    open_passes: u32,
    /// The list's scopes for the frames, when the backend keeps frames.
    frames: Option<FrameRecord>,
}

/// A list's scopes for its frame ([`FrameLog`]): handed over at submission; a list dropped
/// unsubmitted is counted in its frame (its zones are never emitted; the context counts it
/// discarded if it recorded).
#[derive(Debug)]
pub(super) struct FrameRecord {
    log: Arc<FrameLog>,
    frame: Option<u64>,
    shapes: Vec<ScopeShape>,
    submitted: bool,
}

impl FrameRecord {
    /// Tells the frames that the list was submitted (under its lane's lock: lane order).
    pub(super) fn submitted(mut self, list: &EventList<WgpuBackend>, stream: &WgpuStream) {
        self.submitted = true;
        let shapes = std::mem::take(&mut self.shapes);
        let recorded = list.event_count() > 0;
        self.log.submitted(self.frame, list.id(), recorded, shapes, stream);
    }
}

impl Drop for FrameRecord {
    fn drop(&mut self) {
        if !self.submitted {
            self.log.dropped(self.frame, !self.shapes.is_empty());
        }
    }
}

impl WgpuList {
    pub(super) fn new(list: EventList<WgpuBackend>, stream: WgpuStream, backend: &WgpuBackend) -> Self {
        let frames = backend.frame_log().map(|log| {
            log.made(list.frame());
            FrameRecord { log: Arc::clone(log), frame: list.frame(), shapes: Vec::new(), submitted: false }
        });
        Self { list, stream, debug_groups: backend.debug_groups(), open_passes: 0, frames }
    }

    /// A zone around what is recorded on `target` (an encoder or a pass) until the scope is
    /// dropped, as `wgpu-profiler`'s `scope`: nest scopes with [`Scope::scope`], open timed
    /// passes with [`Scope::scoped_compute_pass`] and [`Scope::scoped_render_pass`]; the
    /// scope derefs to `target`.
    pub fn scope<'a, T: Timestamped>(
        &'a mut self,
        target: &'a mut T,
        location: impl Into<Location>,
    ) -> Scope<'a, T> {
        Scope::begin(self, target, location.into())
    }

    /// A compute pass of `encoder`, named after the zone around it and timed by its
    /// `timestamp_writes`, ended with the scope ([`Scope::scoped_compute_pass`] from a scope).
    pub fn scoped_compute_pass<'a>(
        &'a mut self,
        encoder: &'a mut wgpu::CommandEncoder,
        location: impl Into<Location>,
    ) -> PassScope<'a, wgpu::ComputePass<'static>> {
        compute_pass(self, encoder, location.into())
    }

    /// A render pass of `encoder` made from `descriptor`, timed by its `timestamp_writes`,
    /// ended with the scope ([`Scope::scoped_render_pass`] from a scope).
    pub fn scoped_render_pass<'a>(
        &'a mut self,
        encoder: &'a mut wgpu::CommandEncoder,
        location: impl Into<Location>,
        descriptor: &wgpu::RenderPassDescriptor<'_>,
    ) -> PassScope<'a, wgpu::RenderPass<'static>> {
        render_pass(self, encoder, location.into(), descriptor)
    }

    /// Begins a zone on `target` (the plain API: end it with [`zone_end`](Self::zone_end)).
    /// On an error the zone is still opened (as dropped), so that its end balances it.
    pub fn zone_begin<T: Timestamped>(
        &mut self,
        target: &mut T,
        location: impl Into<Location>,
    ) -> Result<(), RecordError> {
        self.mark(target, false, Some(location.into()))
    }

    /// Ends the innermost open zone with a timestamp on `target`.
    pub fn zone_end<T: Timestamped>(&mut self, target: &mut T) -> Result<(), RecordError> {
        self.mark(target, true, None)
    }

    /// Ends the innermost open zone and begins the next with ONE timestamp on `target`.
    pub fn zone_next<T: Timestamped>(
        &mut self,
        target: &mut T,
        location: impl Into<Location>,
    ) -> Result<(), RecordError> {
        self.mark(target, true, Some(location.into()))
    }

    /// Begins a zone timed by a pass you make yourself (a library's render graph, egui's
    /// renderer): give the pass [`PassZone::compute_pass_timestamp_writes`] or
    /// [`PassZone::render_pass_timestamp_writes`], and end the zone with
    /// [`end_pass`](Self::end_pass) (after the pass or before: the pass writes its end).
    pub fn begin_pass(&mut self, location: impl Into<Location>) -> PassZone {
        let (begin, error) = self.begin_pass_zone(location.into());
        let set = self.stream.with_pass_pair(begin, |pair| pair.map(|(set, _, _)| set.clone()));
        PassZone { begin, set, error }
    }

    /// Ends the zone of a pass begun with [`begin_pass`](Self::begin_pass).
    pub fn end_pass(&mut self, pass: PassZone) -> Result<(), RecordError> {
        self.end_pass_zone(pass.begin)
    }

    /// Writes the resolve of every query recorded since the last resolve into `encoder` (its
    /// command buffer submitted after the ones they were written in, or the same): they are
    /// read back once it is submitted. Call it as often as you like. Refused while a pass zone
    /// of the list is open ([`ErrorKind::PassOpen`](crate::ErrorKind::PassOpen)).
    pub fn resolve(&mut self, encoder: &mut wgpu::CommandEncoder) -> Result<(), BackendError> {
        if self.open_passes > 0 {
            return Err(BackendError::new("WgpuList::resolve", PASS_OPEN));
        }
        self.stream.resolve(encoder);
        Ok(())
    }

    /// Queries recorded and not yet resolved ([`resolve`](Self::resolve)).
    pub fn unresolved(&self) -> u32 {
        self.stream.unresolved()
    }

    /// Zones open (begun, not ended).
    pub fn open_zones(&self) -> usize {
        self.list.open_zones()
    }

    /// The list's id (its zones' batches carry it: [`ListResults`](crate::sink::results::ListResults)).
    pub fn id(&self) -> u64 {
        self.list.id()
    }

    /// The frame the list belongs to ([`EventList::frame`]).
    pub fn frame(&self) -> Option<u64> {
        self.list.frame()
    }

    /// The lane the list is recorded for.
    pub fn lane_key(&self) -> u64 {
        self.stream.lane_key()
    }

    /// One mark on `target`: the zone step, then the timestamp written where the stream took
    /// its query.
    // Always inlined into the scope's begin and end: out of line, its prologue and epilogue
    // were a tenth of the crate's instructions per timestamp (callgrind, the wgpu bench).
    #[inline(always)]
    pub(super) fn mark<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        end: bool,
        begin: Option<Location>,
    ) -> Result<(), RecordError> {
        self.stream.expect(if T::IN_PASS { Site::Pass } else { Site::Encoder });
        let result = match begin {
            Some(location) => self.begin(location, end),
            None => self.list.zone_end(&self.stream),
        };
        let timestamps = self.stream.timestamps();
        self.stream.write_taken(|set, query| target.write(timestamps, set, query));
        result
    }

    /// A zone's begin (`next`: a `zone_next`'s), its scope kept when the frames want it.
    #[inline]
    fn begin(&mut self, location: Location, next: bool) -> Result<(), RecordError> {
        if self.frames.is_some() {
            return self.begin_kept(location, next);
        }
        match next {
            false => self.list.zone_begin(&self.stream, location),
            true => self.list.zone_next(&self.stream, location),
        }
    }

    /// [`begin`](Self::begin), keeping the scope for the frames: its location, depth, thread
    /// and whether its begin was recorded.
    #[inline(never)]
    fn begin_kept(&mut self, location: Location, next: bool) -> Result<(), RecordError> {
        let (kept, events) = (location.clone(), self.list.event_count());
        let result = match next {
            false => self.list.zone_begin(&self.stream, location),
            true => self.list.zone_next(&self.stream, location),
        };
        let timed = result.is_ok() && self.list.event_count() > events;
        if let Some(record) = &mut self.frames {
            // After the step: a `zone_next` ended a zone first.
            let depth = self.list.open_zones().saturating_sub(1) as u32;
            let thread = std::thread::current().id();
            record.shapes.push(ScopeShape { location: kept, depth, timed, thread });
        }
        result
    }

    /// A pass zone's begin: a pair of queries for the pass's `timestamp_writes` (`None` when
    /// not timed), and the error that dropped it.
    pub(super) fn begin_pass_zone(
        &mut self,
        location: Location,
    ) -> (Option<crate::backend::wgpu::Query>, Option<RecordError>) {
        self.stream.expect(Site::PassBegin);
        let error = self.begin(location, false).err();
        self.open_passes += 1;
        (self.stream.take(), error)
    }

    /// A pass zone's end: its event takes the pair's second query (written by the pass).
    pub(super) fn end_pass_zone(
        &mut self,
        begin: Option<crate::backend::wgpu::Query>,
    ) -> Result<(), RecordError> {
        self.stream.expect(begin.map_or(Site::Nowhere, |q| Site::PassEnd(WgpuStream::pass_end(q))));
        let ended = self.list.zone_end(&self.stream);
        self.stream.expect(Site::Nowhere);
        self.open_passes = self.open_passes.saturating_sub(1);
        ended
    }

    pub(super) fn stream(&self) -> &WgpuStream {
        &self.stream
    }

    pub(super) fn debug_groups(&self) -> bool {
        self.debug_groups
    }

    /// The parts `queue_submit` hands on: the list, its stream and its frame record.
    pub(super) fn into_parts(self) -> (EventList<WgpuBackend>, WgpuStream, Option<FrameRecord>) {
        (self.list, self.stream, self.frames)
    }

    pub(super) fn event_list(&self) -> &EventList<WgpuBackend> {
        &self.list
    }
}
