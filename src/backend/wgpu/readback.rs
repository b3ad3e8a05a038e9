//! Where query chunks come from and how their results come back: the pool of chunks, a
//! ticket per resolved chunk, and the pump that polls the device and stamps the events.
//!
//! ```text
//!  recording thread (its encoder)            any collector (the pump, one at a time)
//!  take_chunk: pop the free chunks (no lock;  drain `outstanding` into its tickets
//!    empty: a new chunk, grown on demand)     device.poll(Poll): never waits
//!  ...timestamps into the chunk's queries...  per ticket: MAPPED -> read the ticks, stamp
//!  finish: resolve + copy + map on submit       the events, unmap, chunk back to the pool;
//!    (the map callback sets the ticket)         LOST -> stamp the events lost; PENDING past
//!    push its ticket on `outstanding` (no lock)  the readback limit -> stamp lost, count it
//! ```
//!
//! Nothing here waits for the device: mapping is asynchronous and the pump polls without
//! blocking. A recording thread takes no lock (the free chunks and the outstanding tickets
//! are lock-free queues); the pump's lock is taken with `try_lock` by collectors, so a second
//! collector skips it.

use super::errors::ZERO_READBACK_LIMIT;
use super::event::{EventCells, StampLock, TimestampEvent};
use super::queries::{QueryChunk, Timestamps};
use crate::backend::BackendError;
use crossbeam_queue::SegQueue;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// Ticket states: the chunk's command buffer not submitted or not done yet; its readback
/// mapped; its readback never coming.
const PENDING: u8 = 0;
const MAPPED: u8 = 1;
const LOST: u8 = 2;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whose readback a ticket is: the application's (its lists' zones) or the crate's own (the
/// collector's anchors, submitted by the backend itself at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    /// Let go at the readback limit: the application may never submit its command buffer.
    Application,
    /// Never let go: the backend submitted it, so it comes. One past the limit is counted
    /// ([`Queries::anchors_late`]), never reported as a loss of the application's.
    Crate,
}

/// A resolved chunk on its way back.
#[derive(Debug)]
pub(super) struct Ticket {
    status: AtomicU8,
    owner: Owner,
    /// Set once a crate-owned readback is counted late.
    late: AtomicBool,
    /// When its chunk was resolved: the readback limit counts from here.
    finished: Instant,
    /// Taken by the pump (a mutex only it and the ticket's maker touch, never contended on
    /// the recording path).
    chunk: Mutex<Option<QueryChunk>>,
}

/// The map callback's hold on its ticket: a callback dropped uncalled (the command buffer
/// dropped unsubmitted) marks the ticket lost.
struct Notify(Arc<Ticket>);

impl Notify {
    fn done(self, result: Result<(), wgpu::BufferAsyncError>) {
        let status = if result.is_ok() { MAPPED } else { LOST };
        // Release: the pump that sees MAPPED (Acquire) may read the mapped range.
        let _ = self.0.status.compare_exchange(PENDING, status, Ordering::Release, Ordering::Relaxed);
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        let _ = self.0.status.compare_exchange(PENDING, LOST, Ordering::Release, Ordering::Relaxed);
    }
}

/// The device's timestamp queries: the features, the pool of chunks, the tickets on their
/// way back and the pump. Shared (an `Arc`) by the backend and every encoder.
#[derive(Debug)]
pub(super) struct Queries {
    pub(super) device: wgpu::Device,
    pub(super) timestamps: Timestamps,
    /// The cells of the backend's events: every chunk's entries point into it.
    pub(super) cells: Arc<EventCells>,
    free: SegQueue<QueryChunk>,
    outstanding: SegQueue<Arc<Ticket>>,
    /// The pump's tickets; its lock is the stamp lock.
    pump: Mutex<Vec<Arc<Ticket>>>,
    readback_limit_ns: AtomicU64,
    chunks_made: AtomicU64,
    untimed: AtomicU64,
    readbacks_dropped: AtomicU64,
    anchors_late: AtomicU64,
}

/// The readback limit unless [`Queries::set_readback_limit`] says otherwise: 2 s, about 100
/// frames at 60 Hz and far beyond any device's submission latency (milliseconds), so that a
/// readback let go is one that is not coming (a command buffer never submitted), not a slow
/// one.
const DEFAULT_READBACK_LIMIT_NS: u64 = 2_000_000_000;

impl Queries {
    pub(super) fn new(device: &wgpu::Device, timestamps: Timestamps) -> Self {
        Self {
            device: device.clone(),
            timestamps,
            cells: Arc::default(),
            free: SegQueue::new(),
            outstanding: SegQueue::new(),
            pump: Mutex::new(Vec::new()),
            readback_limit_ns: AtomicU64::new(DEFAULT_READBACK_LIMIT_NS),
            chunks_made: AtomicU64::new(0),
            untimed: AtomicU64::new(0),
            readbacks_dropped: AtomicU64::new(0),
            anchors_late: AtomicU64::new(0),
        }
    }

    /// A chunk with every query free: from the pool, or a new one (the pool grows on demand).
    pub(super) fn take_chunk(&self) -> QueryChunk {
        self.free.pop().unwrap_or_else(|| {
            self.chunks_made.fetch_add(1, Ordering::Relaxed);
            QueryChunk::new(&self.device)
        })
    }

    /// Records `chunk`'s resolve and readback into `encoder` and sends its ticket on its way
    /// (returned, for whoever follows the readback); an unused chunk goes straight back to
    /// the pool.
    pub(super) fn resolve(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        chunk: QueryChunk,
        owner: Owner,
    ) -> Option<Arc<Ticket>> {
        if chunk.used() == 0 {
            self.free.push(chunk);
            return None;
        }
        let ticket = Arc::new(Ticket {
            status: AtomicU8::new(PENDING),
            owner,
            late: AtomicBool::new(false),
            finished: Instant::now(),
            chunk: Mutex::new(None),
        });
        let notify = Notify(Arc::clone(&ticket));
        chunk.resolve_into(encoder, move |result| notify.done(result));
        *lock(&ticket.chunk) = Some(chunk);
        self.outstanding.push(Arc::clone(&ticket));
        Some(ticket)
    }

    /// A chunk whose queries will never be resolved (its encoder dropped unfinished): its
    /// events are stamped lost by the next pump.
    pub(super) fn abandon(&self, chunk: QueryChunk) {
        if chunk.used() == 0 {
            self.free.push(chunk);
            return;
        }
        let ticket = Ticket {
            status: AtomicU8::new(LOST),
            owner: Owner::Application,
            late: AtomicBool::new(false),
            finished: Instant::now(),
            chunk: Mutex::new(Some(chunk)),
        };
        self.outstanding.push(Arc::new(ticket));
    }

    /// Stamps `event` from the host (an anchor on a device without timestamps).
    pub(super) fn stamp_now(&self, event: &TimestampEvent, ticks: u64) {
        let _held = lock(&self.pump);
        let (_, generation) = event.arm();
        event.stamp(&StampLock::held(), generation, Some(ticks));
    }

    /// Polls the device without waiting and stamps every event whose readback came, unless
    /// another thread is pumping. Returns whether it pumped.
    pub(super) fn pump(&self) -> bool {
        let mut tickets = match self.pump.try_lock() {
            Ok(tickets) => tickets,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        while let Some(ticket) = self.outstanding.pop() {
            tickets.push(ticket);
        }
        if tickets.iter().any(|t| t.status.load(Ordering::Relaxed) == PENDING) {
            // Without waiting: a map callback runs here for each readback that is done.
            let _ = self.device.poll(wgpu::PollType::Poll);
        }
        let held = StampLock::held();
        let limit = Duration::from_nanos(self.readback_limit_ns.load(Ordering::Relaxed));
        tickets.retain(|ticket| match ticket.status.load(Ordering::Acquire) {
            MAPPED => {
                if let Some(chunk) = lock(&ticket.chunk).take() {
                    self.read(&held, chunk);
                }
                false
            }
            PENDING if ticket.finished.elapsed() < limit => true,
            PENDING if ticket.owner == Owner::Crate => {
                if !ticket.late.swap(true, Ordering::Relaxed) {
                    self.anchors_late.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            status => {
                if status == PENDING {
                    // Let go: a map callback that comes later finds the ticket lost.
                    let _ =
                        ticket.status.compare_exchange(PENDING, LOST, Ordering::Relaxed, Ordering::Relaxed);
                    self.readbacks_dropped.fetch_add(1, Ordering::Relaxed);
                }
                // The chunk stays with its ticket (a late callback may still map it): only its
                // events are let go.
                if let Some(chunk) = lock(&ticket.chunk).as_mut() {
                    // Safety: the chunk's cells are of `self.cells`, alive with `self`.
                    unsafe { lose(&held, chunk) };
                }
                false
            }
        });
        true
    }

    /// Stamps the events of a mapped chunk and puts the chunk back in the pool.
    fn read(&self, held: &StampLock, mut chunk: QueryChunk) {
        let bytes = chunk.mapped_bytes();
        match chunk.readback.get_mapped_range(0..bytes) {
            Ok(view) => {
                for (entry, value) in chunk.entries.iter().zip(view.chunks_exact(8)) {
                    if let Some((cell, generation)) = *entry {
                        let ticks = u64::from_le_bytes(value.try_into().unwrap_or_default());
                        // Safety: the chunk's cells are of `self.cells`, alive with `self`.
                        unsafe { cell.stamp(held, generation, Some(ticks)) };
                    }
                }
            }
            // Safety: the chunk's cells are of `self.cells`, alive with `self`.
            Err(_) => unsafe { lose(held, &mut chunk) },
        }
        chunk.readback.unmap();
        chunk.entries.clear();
        self.free.push(chunk);
    }

    /// Refuses a zero limit: it would let every readback go before it could come.
    pub(super) fn set_readback_limit(&self, limit: Duration) -> Result<(), BackendError> {
        if limit.is_zero() {
            return Err(BackendError::new("WgpuBackend::set_readback_limit", ZERO_READBACK_LIMIT));
        }
        let ns = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        self.readback_limit_ns.store(ns, Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn readback_limit(&self) -> Duration {
        Duration::from_nanos(self.readback_limit_ns.load(Ordering::Relaxed))
    }

    pub(super) fn count_untimed(&self) {
        self.untimed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn untimed(&self) -> u64 {
        self.untimed.load(Ordering::Relaxed)
    }

    pub(super) fn readbacks_dropped(&self) -> u64 {
        self.readbacks_dropped.load(Ordering::Relaxed)
    }

    pub(super) fn anchors_late(&self) -> u64 {
        self.anchors_late.load(Ordering::Relaxed)
    }

    pub(super) fn chunks_made(&self) -> u64 {
        self.chunks_made.load(Ordering::Relaxed)
    }
}

/// Stamps every event of `chunk` lost and forgets them.
///
/// # Safety
/// The chunk's cells' arena is alive (the caller is its `Queries`).
unsafe fn lose(held: &StampLock, chunk: &mut QueryChunk) {
    for (cell, generation) in chunk.entries.drain(..).flatten() {
        // Safety: the arena is alive (this function's contract).
        unsafe { cell.stamp(held, generation, None) };
    }
}

impl Ticket {
    /// Whether its readback will never come (lost or let go).
    pub(super) fn lost(&self) -> bool {
        self.status.load(Ordering::Relaxed) == LOST
    }
}
