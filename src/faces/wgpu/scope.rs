//! Scopes of a `WgpuList` on the encoders and passes the application holds: a zone until the
//! guard is dropped, derefing to what it times, as `wgpu-profiler`'s scopes do.

use super::list::WgpuList;
use crate::backend::wgpu::{write_on_encoder, Query, Timestamps};
use crate::location::Location;
use crate::record::RecordError;
use std::ops::{Deref, DerefMut};

/// What a timestamp is written on: `wgpu::CommandEncoder`, `wgpu::ComputePass` or
/// `wgpu::RenderPass` (sealed: the crate writes each the way the device allows, docs/wgpu.md).
pub trait Timestamped: Target {}

/// The writes a [`Timestamped`] target takes (private to the crate).
pub trait Target {
    /// Whether the target is a pass (a timestamp inside it needs
    /// `TIMESTAMP_QUERY_INSIDE_PASSES`).
    #[doc(hidden)]
    const IN_PASS: bool;
    /// Writes a timestamp into `query` of `set`.
    #[doc(hidden)]
    fn write(&mut self, timestamps: Timestamps, set: &wgpu::QuerySet, query: u32);
    /// Pushes a debug group.
    #[doc(hidden)]
    fn push_group(&mut self, label: &str);
    /// Pops a debug group.
    #[doc(hidden)]
    fn pop_group(&mut self);
}

impl Target for wgpu::CommandEncoder {
    const IN_PASS: bool = false;
    #[inline]
    fn write(&mut self, timestamps: Timestamps, set: &wgpu::QuerySet, query: u32) {
        write_on_encoder(self, timestamps, set, query);
    }
    fn push_group(&mut self, label: &str) {
        self.push_debug_group(label);
    }
    fn pop_group(&mut self) {
        self.pop_debug_group();
    }
}

/// A pass's timestamps and debug groups, as wgpu names them on both pass types.
macro_rules! pass_target {
    ($pass:ident) => {
        impl Target for wgpu::$pass<'_> {
            const IN_PASS: bool = true;
            #[inline]
            fn write(&mut self, _: Timestamps, set: &wgpu::QuerySet, query: u32) {
                self.write_timestamp(set, query);
            }
            fn push_group(&mut self, label: &str) {
                self.push_debug_group(label);
            }
            fn pop_group(&mut self) {
                self.pop_debug_group();
            }
        }
        impl Timestamped for wgpu::$pass<'_> {}
    };
}

impl Timestamped for wgpu::CommandEncoder {}
pass_target!(ComputePass);
pass_target!(RenderPass);

/// A zone on an encoder or inside a pass, ended when dropped ([`WgpuList::scope`]); derefs to
/// what it times.
#[derive(Debug)]
pub struct Scope<'a, T: Timestamped> {
    list: &'a mut WgpuList,
    target: &'a mut T,
    debug_group: bool,
}

impl<'a, T: Timestamped> Scope<'a, T> {
    pub(super) fn begin(list: &'a mut WgpuList, target: &'a mut T, location: Location) -> Self {
        let debug_group = list.debug_groups();
        if debug_group {
            target.push_group(location.name());
        }
        // The zone opens even when its begin fails (dropped and counted), so that its end
        // balances it.
        let _ = list.mark(target, false, Some(location));
        Self { list, target, debug_group }
    }

    /// A zone nested in this one, on the same encoder or pass.
    pub fn scope(&mut self, location: impl Into<Location>) -> Scope<'_, T> {
        Scope::begin(self.list, self.target, location.into())
    }

    /// Ends the zone now, with the end's error (dropping the scope ends it too).
    pub fn end(self) -> Result<(), RecordError> {
        let mut this = std::mem::ManuallyDrop::new(self);
        this.close()
    }

    fn close(&mut self) -> Result<(), RecordError> {
        let ended = self.list.mark(self.target, true, None);
        if self.debug_group {
            self.target.pop_group();
        }
        ended
    }
}

impl<'a> Scope<'a, wgpu::CommandEncoder> {
    /// A compute pass of the encoder, named after the zone around it and timed by its
    /// `timestamp_writes` (every device with `TIMESTAMP_QUERY`), ended with the scope.
    pub fn scoped_compute_pass(
        &mut self,
        location: impl Into<Location>,
    ) -> PassScope<'_, wgpu::ComputePass<'static>> {
        compute_pass(self.list, self.target, location.into())
    }

    /// A render pass of the encoder made from `descriptor`, timed by its `timestamp_writes`
    /// (the descriptor's own are kept when the zone is not timed), ended with the scope.
    pub fn scoped_render_pass(
        &mut self,
        location: impl Into<Location>,
        descriptor: &wgpu::RenderPassDescriptor<'_>,
    ) -> PassScope<'_, wgpu::RenderPass<'static>> {
        render_pass(self.list, self.target, location.into(), descriptor)
    }
}

impl<T: Timestamped> Deref for Scope<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.target
    }
}

impl<T: Timestamped> DerefMut for Scope<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.target
    }
}

impl<T: Timestamped> Drop for Scope<'_, T> {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A compute pass of `encoder` and the zone around it.
pub(super) fn compute_pass<'a>(
    list: &'a mut WgpuList,
    encoder: &mut wgpu::CommandEncoder,
    location: Location,
) -> PassScope<'a, wgpu::ComputePass<'static>> {
    let label = location.clone();
    PassScope::begin(list, location, |list, begin| {
        list.stream().with_pass_pair(begin, |pair| {
            let timestamp_writes = pair.map(|(query_set, begin, end)| wgpu::ComputePassTimestampWrites {
                query_set,
                beginning_of_pass_write_index: Some(begin),
                end_of_pass_write_index: Some(end),
            });
            let descriptor = wgpu::ComputePassDescriptor { label: Some(label.name()), timestamp_writes };
            encoder.begin_compute_pass(&descriptor).forget_lifetime()
        })
    })
}

/// A render pass of `encoder` made from `descriptor` and the zone around it.
pub(super) fn render_pass<'a>(
    list: &'a mut WgpuList,
    encoder: &mut wgpu::CommandEncoder,
    location: Location,
    descriptor: &wgpu::RenderPassDescriptor<'_>,
) -> PassScope<'a, wgpu::RenderPass<'static>> {
    let label = location.clone();
    PassScope::begin(list, location, |list, begin| {
        list.stream().with_pass_pair(begin, |pair| {
            let timestamp_writes = match pair {
                Some((query_set, begin, end)) => Some(wgpu::RenderPassTimestampWrites {
                    query_set,
                    beginning_of_pass_write_index: Some(begin),
                    end_of_pass_write_index: Some(end),
                }),
                None => descriptor.timestamp_writes.clone(),
            };
            let pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: descriptor.label.or(Some(label.name())),
                color_attachments: descriptor.color_attachments,
                depth_stencil_attachment: descriptor.depth_stencil_attachment.clone(),
                timestamp_writes,
                occlusion_query_set: descriptor.occlusion_query_set,
                multiview_mask: descriptor.multiview_mask,
            });
            pass.forget_lifetime()
        })
    })
}

/// A compute or render pass and the zone around it, both ended when dropped; derefs to the
/// pass. Zones inside it: [`scope`](Self::scope) (timed where the device has
/// `TIMESTAMP_QUERY_INSIDE_PASSES`).
#[derive(Debug)]
pub struct PassScope<'a, P: Timestamped> {
    list: &'a mut WgpuList,
    /// `None` once ended.
    pass: Option<P>,
    begin: Option<Query>,
    debug_group: bool,
}

impl<'a, P: Timestamped> PassScope<'a, P> {
    fn begin(
        list: &'a mut WgpuList,
        location: Location,
        open: impl FnOnce(&WgpuList, Option<Query>) -> P,
    ) -> Self {
        let name = location.clone();
        let (begin, _) = list.begin_pass_zone(location);
        let mut pass = open(list, begin);
        let debug_group = list.debug_groups();
        if debug_group {
            pass.push_group(name.name());
        }
        Self { list, pass: Some(pass), begin, debug_group }
    }

    /// A zone inside the pass.
    pub fn scope(&mut self, location: impl Into<Location>) -> Scope<'_, P> {
        let pass = self.pass.as_mut().expect("open until dropped");
        Scope::begin(self.list, pass, location.into())
    }

    /// Ends the pass and its zone now, with the zone end's error.
    pub fn end(mut self) -> Result<(), RecordError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), RecordError> {
        let Some(mut pass) = self.pass.take() else { return Ok(()) };
        if self.debug_group {
            pass.pop_group();
        }
        // The pass writes the end query when it ends: its event is recorded first.
        let ended = self.list.end_pass_zone(self.begin);
        drop(pass);
        ended
    }
}

impl<P: Timestamped> Deref for PassScope<'_, P> {
    type Target = P;
    fn deref(&self) -> &P {
        self.pass.as_ref().expect("open until dropped")
    }
}

impl<P: Timestamped> DerefMut for PassScope<'_, P> {
    fn deref_mut(&mut self) -> &mut P {
        self.pass.as_mut().expect("open until dropped")
    }
}

impl<P: Timestamped> Drop for PassScope<'_, P> {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The zone of a pass you make yourself ([`WgpuList::begin_pass`]): its `timestamp_writes`,
/// and why it is not timed, if it is not.
#[derive(Debug)]
#[must_use = "end it with WgpuList::end_pass"]
pub struct PassZone {
    pub(super) begin: Option<Query>,
    pub(super) set: Option<wgpu::QuerySet>,
    pub(super) error: Option<RecordError>,
}

impl PassZone {
    /// The `timestamp_writes` for a compute pass (`None` when the zone is not timed).
    pub fn compute_pass_timestamp_writes(&self) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let (set, begin) = (self.set.as_ref()?, self.begin?);
        let (first, second) = begin.pair();
        Some(wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: Some(first),
            end_of_pass_write_index: Some(second),
        })
    }

    /// The `timestamp_writes` for a render pass (`None` when the zone is not timed).
    pub fn render_pass_timestamp_writes(&self) -> Option<wgpu::RenderPassTimestampWrites<'_>> {
        let (set, begin) = (self.set.as_ref()?, self.begin?);
        let (first, second) = begin.pair();
        Some(wgpu::RenderPassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: Some(first),
            end_of_pass_write_index: Some(second),
        })
    }

    /// Why the zone's begin was not recorded (dropped and counted), if it was not.
    pub fn error(&self) -> Option<&RecordError> {
        self.error.as_ref()
    }
}
