//! The pool's events: cells that a query's ticks are stamped into once the readback that
//! carries them is mapped. Leaf of `wgpu/`.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Proof that the caller holds the backend's stamp lock (the readback pump's): every stamp of
/// every event is made under it, which is what makes a stale stamp harmless ([`TimestampEvent`]).
pub(super) struct StampLock(());

impl StampLock {
    /// Made only by the pump's lock (`readback.rs`), which keeps one alive while it is held.
    pub(super) fn held() -> Self {
        Self(())
    }
}

/// A timing event of the wgpu backend: one slot of the pool.
///
/// A wgpu timestamp is written into a query of a query set and reaches the host only after it
/// is resolved into a buffer, copied into a mappable one and mapped. So an event is not a
/// query: each record takes a query of its list's current query chunk, and the chunk's
/// readback stamps the event's ticks into the event's cell once it is mapped.
///
/// Cells. An event's cell lives in its backend's arena (`EventCells`), never freed while the
/// arena lives: a chunk keeps a plain pointer to it (`CellRef`), so that recording a mark
/// takes no reference count (an atomic read-modify-write per mark, on the line the collector
/// stamps). A dropped event's cell is used again by a later event; its generations go on.
///
/// Generations. Each record *arms* the event with the next generation and tells its chunk
/// that generation; a stamp names the generation it is for and is kept only if the event is
/// still armed with it. A chunk can come back after its event was recorded again (a list
/// resolved and submitted although it was dropped from the context), and its stamp must not
/// pass for the new record's. Stamps are made under one lock (the readback pump's), so a stale
/// stamp that passed the generation check just before the event was armed again is written
/// before the new record's stamp, and the reader, which compares the stamped generation with
/// the armed one, never takes it for the new record's.
#[derive(Debug)]
pub struct TimestampEvent {
    cell: CellRef,
    cells: Arc<EventCells>,
}

#[derive(Debug)]
struct EventCell {
    /// The generation of the latest record (0: never recorded). Written by the event's owner
    /// only (a list recording it, or the collector for an anchor).
    armed: AtomicU64,
    /// bits 1..64: the generation whose outcome `ticks` holds; bit 0: set when that record's
    /// time was lost (its readback never came). `u64::MAX` before the first stamp.
    stamped: AtomicU64,
    /// The device ticks of the stamped generation.
    ticks: AtomicU64,
}

impl EventCell {
    fn new() -> Self {
        Self { armed: AtomicU64::new(0), stamped: AtomicU64::new(u64::MAX), ticks: AtomicU64::new(0) }
    }

    fn stamp(&self, _lock: &StampLock, generation: u64, ticks: Option<u64>) {
        if self.armed.load(Ordering::Relaxed) != generation {
            return;
        }
        self.ticks.store(ticks.unwrap_or(0), Ordering::Relaxed);
        // Release: the ticks before the generation that vouches for them.
        self.stamped.store(generation << 1 | u64::from(ticks.is_none()), Ordering::Release);
    }
}

/// What a record of an event has come to, read by its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    /// Not stamped yet.
    Pending,
    /// Stamped with these device ticks.
    Ticks(u64),
    /// Its readback never came (its list dropped unresolved, its command buffer dropped
    /// unsubmitted, mapping failed, or it was held past the backend's readback limit).
    Lost,
}

/// Cells per page of an arena: a query chunk's worth (`CHUNK_QUERIES`), so that the events of
/// a short list share a page or two.
const CELLS_PER_PAGE: usize = 128;

/// The cells of a backend's events, in pages that never move and are never freed while the
/// arena lives (the `Box`es' contents stay put when the page table grows).
#[derive(Debug, Default)]
pub(super) struct EventCells {
    store: Mutex<CellStore>,
}

#[derive(Debug, Default)]
struct CellStore {
    pages: Vec<Box<[EventCell]>>,
    /// Cells of dropped events, and of the newest page not handed out yet.
    free: Vec<CellRef>,
}

/// A cell of an arena, as a query chunk keeps it: valid while its arena lives.
#[derive(Debug, Clone, Copy)]
pub(super) struct CellRef(NonNull<EventCell>);

// Safety: a `CellRef` points at a cell of atomics (`Sync`), which stays allocated while its
// arena lives; whoever dereferences it holds that arena (`CellRef::stamp`).
unsafe impl Send for CellRef {}
// Safety: as for `Send`: the cell is only read and written through atomics.
unsafe impl Sync for CellRef {}

impl CellRef {
    /// Stamps the record of `generation` with `ticks` (`None`: its time is lost), unless the
    /// event was armed again since.
    ///
    /// # Safety
    /// The cell's arena is alive: the caller holds it (a chunk's cells are of its `Queries`'
    /// arena, which `WgpuStream::record` checks).
    pub(super) unsafe fn stamp(self, lock: &StampLock, generation: u64, ticks: Option<u64>) {
        // Safety: the arena is alive (the caller's contract), and its pages are never freed
        // while it lives.
        unsafe { self.0.as_ref() }.stamp(lock, generation, ticks);
    }
}

impl EventCells {
    /// A new event: a dropped event's cell, or a new one.
    pub(super) fn event(self: &Arc<Self>) -> TimestampEvent {
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        if store.free.is_empty() {
            let page: Box<[EventCell]> = (0..CELLS_PER_PAGE).map(|_| EventCell::new()).collect();
            store.free.extend(page.iter().rev().map(|cell| CellRef(NonNull::from(cell))));
            store.pages.push(page);
        }
        let cell = store.free.pop().expect("a page was just added");
        TimestampEvent { cell, cells: Arc::clone(self) }
    }

    /// Whether `event`'s cell is in this arena.
    #[inline]
    pub(super) fn owns(self: &Arc<Self>, event: &TimestampEvent) -> bool {
        Arc::ptr_eq(self, &event.cells)
    }
}

impl TimestampEvent {
    #[inline]
    fn cell(&self) -> &EventCell {
        // Safety: the event holds its arena (`cells`), whose pages are never freed while it
        // lives, and its cell is handed to no other event until this one is dropped.
        unsafe { self.cell.0.as_ref() }
    }

    /// Starts a new record by the event's owner: its cell and the generation its stamp must
    /// carry.
    #[inline]
    pub(super) fn arm(&self) -> (CellRef, u64) {
        let cell = self.cell();
        let generation = cell.armed.load(Ordering::Relaxed) + 1;
        // Relaxed: the stamper learns the generation from the chunk, handed to it through
        // the readback queue (Release/Acquire), after this store.
        cell.armed.store(generation, Ordering::Relaxed);
        (self.cell, generation)
    }

    /// Stamps the event's own record of `generation` (an anchor stamped from the host).
    pub(super) fn stamp(&self, lock: &StampLock, generation: u64, ticks: Option<u64>) {
        self.cell().stamp(lock, generation, ticks);
    }

    /// The outcome of the latest record. Called by the event's owner.
    #[inline]
    pub(super) fn reading(&self) -> Reading {
        let cell = self.cell();
        // Acquire: pairs with `stamp`'s Release, so the ticks read are the stamped ones.
        let stamped = cell.stamped.load(Ordering::Acquire);
        if stamped == u64::MAX || stamped >> 1 != cell.armed.load(Ordering::Relaxed) {
            Reading::Pending
        } else if stamped & 1 == 1 {
            Reading::Lost
        } else {
            Reading::Ticks(cell.ticks.load(Ordering::Relaxed))
        }
    }
}

impl Drop for TimestampEvent {
    /// Its cell goes back to the arena, for a later event (its generations go on, so a stamp
    /// still on its way for this event's records is not taken for the next one's).
    fn drop(&mut self) {
        self.cells.store.lock().unwrap_or_else(PoisonError::into_inner).free.push(self.cell);
    }
}

#[cfg(test)]
mod tests {
    use super::{EventCells, Reading, StampLock};
    use std::sync::Arc;

    #[test]
    fn a_stamp_for_an_earlier_record_is_ignored() {
        let cells = Arc::new(EventCells::default());
        let event = cells.event();
        let lock = StampLock::held();
        let (_, first) = event.arm();
        let (_, second) = event.arm();
        event.stamp(&lock, first, Some(10));
        assert_eq!(event.reading(), Reading::Pending, "the first record's stamp is stale");
        event.stamp(&lock, second, Some(20));
        assert_eq!(event.reading(), Reading::Ticks(20));
    }

    #[test]
    fn a_stale_stamp_written_before_rearming_is_not_read_as_the_new_record() {
        let cells = Arc::new(EventCells::default());
        let event = cells.event();
        let lock = StampLock::held();
        let (_, first) = event.arm();
        event.stamp(&lock, first, Some(10));
        let _ = event.arm();
        assert_eq!(event.reading(), Reading::Pending, "armed again: the old ticks are not its");
        let (cell, second) = event.arm();
        // Safety: `cells` is alive.
        unsafe { cell.stamp(&lock, second, None) };
        assert_eq!(event.reading(), Reading::Lost);
    }

    #[test]
    fn a_never_recorded_event_reads_pending() {
        assert_eq!(Arc::new(EventCells::default()).event().reading(), Reading::Pending);
    }

    #[test]
    fn a_dropped_events_cell_serves_a_later_event_whose_stamps_its_old_records_cannot_pass_for() {
        let cells = Arc::new(EventCells::default());
        let lock = StampLock::held();
        let old = cells.event();
        let (cell, stale) = old.arm();
        drop(old);
        let new = cells.event();
        let (reused, generation) = new.arm();
        assert_eq!(reused.0, cell.0, "the dropped event's cell");
        // Safety: `cells` is alive.
        unsafe { cell.stamp(&lock, stale, Some(10)) };
        assert_eq!(new.reading(), Reading::Pending, "the old record's stamp is not the new one's");
        // Safety: `cells` is alive.
        unsafe { reused.stamp(&lock, generation, Some(20)) };
        assert_eq!(new.reading(), Reading::Ticks(20));
    }
}
