//! [`ZoneGuard`]: a zone that ends when dropped, begun with [`EventList::zone`].

use super::error::RecordError;
use super::list::EventList;
use crate::backend::Backend;
use crate::location::Location;

impl<B: Backend> EventList<B> {
    /// Begins a zone on `stream` and returns a guard that ends it when dropped, so an early
    /// return or `?` cannot leave it open. Nest zones through the guard
    /// ([`ZoneGuard::zone`]): the borrow checker then keeps the nesting right.
    ///
    /// A zone that could not be recorded (pool exhausted, backend error) is still opened as
    /// dropped, counted in the stats, and closed by the guard; [`ZoneGuard::error`] tells.
    ///
    /// ```
    /// use gpu_event_pool::{location, sim::SimBackend, TracingContext};
    /// let sim = SimBackend::manual();
    /// let stream = sim.stream();
    /// let ctx = TracingContext::new(sim.clone()).unwrap();
    /// let mut list = ctx.list();
    /// {
    ///     let mut frame = list.zone(&stream, location!("frame"));
    ///     let _dispatch = frame.zone(&stream, location!("dispatch"));
    ///     sim.launch(&stream, 1_000);
    /// } // both zones end here, innermost first
    /// assert_eq!(list.open_zones(), 0);
    /// ctx.submit(list).unwrap();
    /// ```
    pub fn zone<'l>(&'l mut self, stream: &'l B::Stream, location: impl Into<Location>) -> ZoneGuard<'l, B> {
        let error = self.zone_begin(stream, location).err();
        ZoneGuard { list: self, stream, error }
    }
}

/// A zone that ends when dropped ([`EventList::zone`]).
#[must_use = "the zone ends as soon as the guard is dropped"]
pub struct ZoneGuard<'l, B: Backend> {
    list: &'l mut EventList<B>,
    stream: &'l B::Stream,
    error: Option<RecordError>,
}

impl<B: Backend> std::fmt::Debug for ZoneGuard<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneGuard").field("list", &self.list.id()).field("error", &self.error).finish()
    }
}

impl<'l, B: Backend> ZoneGuard<'l, B> {
    /// Begins a zone nested in this one; it must end (be dropped) before this one can.
    pub fn zone<'g>(&'g mut self, stream: &'g B::Stream, location: impl Into<Location>) -> ZoneGuard<'g, B> {
        self.list.zone(stream, location)
    }

    /// Ends this zone and begins the next one in its place with ONE event (as
    /// [`EventList::zone_next`]); the guard then ends that one. A failure is kept in
    /// [`error`](Self::error) (and counted in the stats), like the guard's first zone's.
    pub fn next(&mut self, location: impl Into<Location>) {
        self.error = self.list.zone_next(self.stream, location).err();
    }

    /// Why this zone was not recorded, if it was not (it is still balanced and counted).
    pub fn error(&self) -> Option<&RecordError> {
        self.error.as_ref()
    }

    /// Ends the zone now, reporting a failure to record its end (dropping does the same and
    /// ignores it: it is counted in the stats either way).
    pub fn end(self) -> Result<(), RecordError> {
        let mut guard = std::mem::ManuallyDrop::new(self);
        drop(guard.error.take());
        let stream = guard.stream;
        guard.list.zone_end(stream)
    }
}

impl<B: Backend> Drop for ZoneGuard<'_, B> {
    fn drop(&mut self) {
        // A failure is counted in the stats (and the zone dropped); nothing to report here.
        let _ = self.list.zone_end(self.stream);
    }
}
