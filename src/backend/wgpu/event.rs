//! The pool's events: cells that a query's ticks are stamped into once the readback that
//! carries them is mapped. Leaf of `wgpu/`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
/// query: each record takes a query of its encoder's current query chunk, and the chunk's
/// readback stamps the event's ticks here once it is mapped.
///
/// Generations. Each record *arms* the event with the next generation and tells its chunk
/// that generation; a stamp names the generation it is for and is kept only if the event is
/// still armed with it. A chunk can come back after its event was recorded again (an encoder
/// finished and submitted although its list was dropped), and its stamp must not pass for the
/// new record's. Stamps are made under one lock (the readback pump's), so a stale stamp that passed
/// the generation check just before the event was armed again is written before the new
/// record's stamp, and the reader, which compares the stamped generation with the armed one,
/// never takes it for the new record's.
#[derive(Debug, Clone)]
pub struct TimestampEvent {
    cell: Arc<EventCell>,
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

/// What a record of an event has come to, read by its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    /// Not stamped yet.
    Pending,
    /// Stamped with these device ticks.
    Ticks(u64),
    /// Its readback never came (its encoder dropped unfinished, its command buffer dropped
    /// unsubmitted, mapping failed, or it was held past the backend's readback limit).
    Lost,
}

impl TimestampEvent {
    pub(super) fn new() -> Self {
        Self {
            cell: Arc::new(EventCell {
                armed: AtomicU64::new(0),
                stamped: AtomicU64::new(u64::MAX),
                ticks: AtomicU64::new(0),
            }),
        }
    }

    /// Starts a new record by the event's owner: the generation its stamp must carry.
    #[inline]
    pub(super) fn arm(&self) -> u64 {
        let generation = self.cell.armed.load(Ordering::Relaxed) + 1;
        // Relaxed: the stamper learns the generation from the chunk, handed to it through
        // the readback queue (Release/Acquire), after this store.
        self.cell.armed.store(generation, Ordering::Relaxed);
        generation
    }

    /// Stamps the record of `generation` with `ticks` (`None`: its time is lost), unless the
    /// event was armed again since.
    pub(super) fn stamp(&self, _lock: &StampLock, generation: u64, ticks: Option<u64>) {
        if self.cell.armed.load(Ordering::Relaxed) != generation {
            return;
        }
        self.cell.ticks.store(ticks.unwrap_or(0), Ordering::Relaxed);
        // Release: the ticks before the generation that vouches for them.
        self.cell.stamped.store(generation << 1 | u64::from(ticks.is_none()), Ordering::Release);
    }

    /// The outcome of the latest record. Called by the event's owner.
    #[inline]
    pub(super) fn reading(&self) -> Reading {
        // Acquire: pairs with `stamp`'s Release, so the ticks read are the stamped ones.
        let stamped = self.cell.stamped.load(Ordering::Acquire);
        if stamped == u64::MAX || stamped >> 1 != self.cell.armed.load(Ordering::Relaxed) {
            Reading::Pending
        } else if stamped & 1 == 1 {
            Reading::Lost
        } else {
            Reading::Ticks(self.cell.ticks.load(Ordering::Relaxed))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Reading, StampLock, TimestampEvent};

    #[test]
    fn a_stamp_for_an_earlier_record_is_ignored() {
        let event = TimestampEvent::new();
        let lock = StampLock::held();
        let first = event.arm();
        let second = event.arm();
        event.stamp(&lock, first, Some(10));
        assert_eq!(event.reading(), Reading::Pending, "the first record's stamp is stale");
        event.stamp(&lock, second, Some(20));
        assert_eq!(event.reading(), Reading::Ticks(20));
    }

    #[test]
    fn a_stale_stamp_written_before_rearming_is_not_read_as_the_new_record() {
        let event = TimestampEvent::new();
        let lock = StampLock::held();
        let first = event.arm();
        event.stamp(&lock, first, Some(10));
        let second = event.arm();
        assert_eq!(event.reading(), Reading::Pending, "armed again: the old ticks are not its");
        event.stamp(&lock, second, None);
        assert_eq!(event.reading(), Reading::Lost);
    }

    #[test]
    fn a_never_recorded_event_reads_pending() {
        assert_eq!(TimestampEvent::new().reading(), Reading::Pending);
    }
}
