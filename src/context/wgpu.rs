//! wgpu (feature `wgpu`): zones scoped on encoders and passes, as wgpu users write them, and
//! submitting command buffers with their lists in one order.

use super::handle::TracingContext;
use super::queue_submit::QueueSubmitError;
use crate::backend::wgpu::{OpenPass, WgpuBackend, WgpuEncoder, WgpuQueue, NO_PASS};
use crate::backend::BackendError;
use crate::location::Location;
use crate::record::{EventList, RecordError};
use std::cell::RefMut;

#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
impl TracingContext<WgpuBackend> {
    /// Names `queue`'s lane for the sinks (a Chrome track, a Tracy lane): the zones of every
    /// command buffer submitted through it are there.
    pub fn name_queue(&self, queue: &WgpuQueue, name: impl Into<String>) {
        self.name_lane(crate::backend::Lane::Stream(queue.lane_key()), name);
    }

    /// Submits `command_buffers` to `queue` and then `lists` to this context, in that order,
    /// under the lane's lock: the lists take their places in the lane exactly as their
    /// command buffers are ordered on the queue (a wgpu list is placed at submission:
    /// [`Placement::Submit`](crate::Placement)). Checks every list first, so that either
    /// everything is submitted or nothing is. The command buffers come from
    /// [`WgpuEncoder::finish`]: their timestamps are read back once they are submitted.
    pub fn queue_submit(
        &self,
        queue: &WgpuQueue,
        command_buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
        lists: Vec<EventList<WgpuBackend>>,
    ) -> Result<wgpu::SubmissionIndex, QueueSubmitError<WgpuBackend>> {
        let lists = self.submittable(lists)?;
        Ok(queue.submit_then(command_buffers, || {
            for list in lists {
                // Checked above: owned by this context, no open zone.
                let _ = self.submit(list);
            }
        }))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
impl EventList<WgpuBackend> {
    /// A zone on `encoder` (or inside its open pass) until the scope is dropped, as
    /// `wgpu-profiler`'s `scope`: a debug group named after it too, when the backend has
    /// them on ([`WgpuBackend::with_debug_groups`]).
    pub fn scope<'a>(&'a mut self, encoder: &'a WgpuEncoder, location: impl Into<Location>) -> WgpuScope<'a> {
        WgpuScope::begin(self, encoder, location.into())
    }

    /// A compute pass of `encoder` and a zone around it, timed by the pass's
    /// `timestamp_writes` (every device with `TIMESTAMP_QUERY`), until the scope is dropped.
    pub fn compute_pass<'a>(
        &'a mut self,
        encoder: &'a WgpuEncoder,
        location: impl Into<Location>,
    ) -> PassScope<'a> {
        PassScope::begin(self, encoder, location.into(), |encoder, label, writes| {
            let timestamp_writes = writes.map(|(query_set, begin, end)| wgpu::ComputePassTimestampWrites {
                query_set,
                beginning_of_pass_write_index: Some(begin),
                end_of_pass_write_index: Some(end),
            });
            let pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label, timestamp_writes });
            OpenPass::Compute(pass.forget_lifetime())
        })
    }

    /// A render pass of `encoder` made from `descriptor` and a zone around it, timed by the
    /// pass's `timestamp_writes` (the descriptor's own are used only when the zone is not
    /// recorded), until the scope is dropped.
    pub fn render_pass<'a>(
        &'a mut self,
        encoder: &'a WgpuEncoder,
        location: impl Into<Location>,
        descriptor: &wgpu::RenderPassDescriptor<'_>,
    ) -> PassScope<'a> {
        PassScope::begin(self, encoder, location.into(), |encoder, label, writes| {
            let timestamp_writes = match writes {
                Some((query_set, begin, end)) => Some(wgpu::RenderPassTimestampWrites {
                    query_set,
                    beginning_of_pass_write_index: Some(begin),
                    end_of_pass_write_index: Some(end),
                }),
                None => descriptor.timestamp_writes.clone(),
            };
            let pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: label.or(descriptor.label),
                color_attachments: descriptor.color_attachments,
                depth_stencil_attachment: descriptor.depth_stencil_attachment.clone(),
                timestamp_writes,
                occlusion_query_set: descriptor.occlusion_query_set,
                multiview_mask: descriptor.multiview_mask,
            });
            OpenPass::Render(pass.forget_lifetime())
        })
    }
}

/// A zone on a wgpu encoder or inside its open pass, ended when dropped
/// ([`EventList::scope`]). Nested scopes and passes are made from it.
#[derive(Debug)]
pub struct WgpuScope<'a> {
    list: &'a mut EventList<WgpuBackend>,
    encoder: &'a WgpuEncoder,
    debug_group: bool,
    error: Option<RecordError>,
    open: bool,
}

impl<'a> WgpuScope<'a> {
    fn begin(list: &'a mut EventList<WgpuBackend>, encoder: &'a WgpuEncoder, location: Location) -> Self {
        let debug_group = encoder.debug_groups();
        if debug_group {
            encoder.push_debug_group(location.name());
        }
        // The zone opens even when its begin fails (dropped and counted), so that its end
        // balances it.
        let error = list.zone_begin(encoder, location).err();
        Self { list, encoder, debug_group, error, open: true }
    }

    /// A zone nested in this one.
    pub fn scope(&mut self, location: impl Into<Location>) -> WgpuScope<'_> {
        WgpuScope::begin(self.list, self.encoder, location.into())
    }

    /// A compute pass nested in this zone ([`EventList::compute_pass`]).
    pub fn compute_pass(&mut self, location: impl Into<Location>) -> PassScope<'_> {
        self.list.compute_pass(self.encoder, location)
    }

    /// A render pass nested in this zone ([`EventList::render_pass`]).
    pub fn render_pass(
        &mut self,
        location: impl Into<Location>,
        descriptor: &wgpu::RenderPassDescriptor<'_>,
    ) -> PassScope<'_> {
        self.list.render_pass(self.encoder, location, descriptor)
    }

    /// The wgpu encoder, for the application's own commands ([`WgpuEncoder::encoder`]; fails
    /// inside a pass).
    pub fn encoder(&mut self) -> Result<RefMut<'_, wgpu::CommandEncoder>, BackendError> {
        self.encoder.encoder()
    }

    /// The compute pass the zone is in (fails outside one).
    pub fn compute(&mut self) -> Result<RefMut<'_, wgpu::ComputePass<'static>>, BackendError> {
        compute_pass_of(self.encoder)
    }

    /// The render pass the zone is in (fails outside one).
    pub fn render(&mut self) -> Result<RefMut<'_, wgpu::RenderPass<'static>>, BackendError> {
        render_pass_of(self.encoder)
    }

    /// Why the zone's begin was not recorded (dropped and counted), if it was not.
    pub fn error(&self) -> Option<&RecordError> {
        self.error.as_ref()
    }

    /// Ends the zone now, with the end's error (dropping the scope ends it too).
    pub fn end(mut self) -> Result<(), RecordError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), RecordError> {
        if !std::mem::take(&mut self.open) {
            return Ok(());
        }
        let ended = self.list.zone_end(self.encoder);
        if self.debug_group {
            self.encoder.pop_debug_group();
        }
        ended
    }
}

impl Drop for WgpuScope<'_> {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A compute or render pass and the zone around it, both ended when dropped
/// ([`EventList::compute_pass`], [`EventList::render_pass`]). Record the pass's commands
/// through [`compute`](Self::compute) or [`render`](Self::render); zones inside it through
/// [`scope`](Self::scope) (timed where the device has `TIMESTAMP_QUERY_INSIDE_PASSES`).
#[derive(Debug)]
pub struct PassScope<'a> {
    list: &'a mut EventList<WgpuBackend>,
    encoder: &'a WgpuEncoder,
    debug_group: bool,
    error: Option<RecordError>,
    /// Whether the pass was opened (and the zone begun).
    open: bool,
}

impl<'a> PassScope<'a> {
    fn begin(
        list: &'a mut EventList<WgpuBackend>,
        encoder: &'a WgpuEncoder,
        location: Location,
        open: impl FnOnce(
            &mut wgpu::CommandEncoder,
            Option<&str>,
            Option<(&wgpu::QuerySet, u32, u32)>,
        ) -> OpenPass,
    ) -> Self {
        let debug_group = encoder.debug_groups();
        if let Err(e) = encoder.expect_pass_begin() {
            // No pass can be opened (one is open, or the encoder is finished or borrowed):
            // no zone either.
            return Self {
                list,
                encoder,
                debug_group: false,
                error: Some(RecordError::Backend(e)),
                open: false,
            };
        }
        let name = location.name().to_owned();
        let error = list.zone_begin(encoder, location).err();
        let label = debug_group.then_some(name.as_str());
        encoder.open_pass(|raw, writes| open(raw, label, writes));
        if debug_group {
            encoder.push_debug_group(&name);
        }
        Self { list, encoder, debug_group, error, open: true }
    }

    /// Why the pass's zone was not recorded (dropped and counted), if it was not.
    pub fn error(&self) -> Option<&RecordError> {
        self.error.as_ref()
    }

    /// The compute pass (fails for a render pass's scope, or when no pass could be opened).
    pub fn compute(&mut self) -> Result<RefMut<'_, wgpu::ComputePass<'static>>, BackendError> {
        compute_pass_of(self.encoder)
    }

    /// The render pass (fails for a compute pass's scope, or when no pass could be opened).
    pub fn render(&mut self) -> Result<RefMut<'_, wgpu::RenderPass<'static>>, BackendError> {
        render_pass_of(self.encoder)
    }

    /// A zone inside the pass.
    pub fn scope(&mut self, location: impl Into<Location>) -> WgpuScope<'_> {
        WgpuScope::begin(self.list, self.encoder, location.into())
    }

    /// Ends the pass and its zone now, with the end's error.
    pub fn end(mut self) -> Result<(), RecordError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), RecordError> {
        // Once: the pass is closed, and its zone ended, the first time.
        let open = std::mem::replace(&mut self.open, false);
        if !open {
            return Ok(());
        }
        if self.debug_group {
            self.encoder.pop_debug_group();
        }
        self.encoder.expect_pass_end();
        let ended = self.list.zone_end(self.encoder);
        self.encoder.close_pass();
        ended
    }
}

impl Drop for PassScope<'_> {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// `encoder`'s open compute pass.
fn compute_pass_of(encoder: &WgpuEncoder) -> Result<RefMut<'_, wgpu::ComputePass<'static>>, BackendError> {
    let pass = encoder.pass().ok_or_else(no_pass)?;
    RefMut::filter_map(pass, |p| match p {
        OpenPass::Compute(p) => Some(p),
        OpenPass::Render(_) => None,
    })
    .map_err(|_| no_pass())
}

/// `encoder`'s open render pass.
fn render_pass_of(encoder: &WgpuEncoder) -> Result<RefMut<'_, wgpu::RenderPass<'static>>, BackendError> {
    let pass = encoder.pass().ok_or_else(no_pass)?;
    RefMut::filter_map(pass, |p| match p {
        OpenPass::Render(p) => Some(p),
        OpenPass::Compute(_) => None,
    })
    .map_err(|_| no_pass())
}

fn no_pass() -> BackendError {
    BackendError::new("wgpu pass", NO_PASS)
}
