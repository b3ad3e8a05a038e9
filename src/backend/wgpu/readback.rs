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

use super::event::{StampLock, TimestampEvent};
use super::queries::{QueryChunk, Timestamps};
use crossbeam_queue::SegQueue;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
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

/// A resolved chunk on its way back.
#[derive(Debug)]
struct Ticket {
    status: AtomicU8,
    /// When its encoder finished: the readback limit counts from here.
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
    free: SegQueue<QueryChunk>,
    outstanding: SegQueue<Arc<Ticket>>,
    /// The pump's tickets; its lock is the stamp lock.
    pump: Mutex<Vec<Arc<Ticket>>>,
    readback_limit_ns: AtomicU64,
    chunks_made: AtomicU64,
    untimed: AtomicU64,
    readbacks_dropped: AtomicU64,
}

impl Queries {
    pub(super) fn new(device: &wgpu::Device, timestamps: Timestamps) -> Self {
        Self {
            device: device.clone(),
            timestamps,
            free: SegQueue::new(),
            outstanding: SegQueue::new(),
            pump: Mutex::new(Vec::new()),
            readback_limit_ns: AtomicU64::new(2_000_000_000),
            chunks_made: AtomicU64::new(0),
            untimed: AtomicU64::new(0),
            readbacks_dropped: AtomicU64::new(0),
        }
    }

    /// A chunk with every query free: from the pool, or a new one (the pool grows on demand).
    pub(super) fn take_chunk(&self) -> QueryChunk {
        self.free.pop().unwrap_or_else(|| {
            self.chunks_made.fetch_add(1, Ordering::Relaxed);
            QueryChunk::new(&self.device)
        })
    }

    /// Records `chunk`'s resolve and readback into `encoder` and sends its ticket on its way;
    /// an unused chunk goes straight back to the pool.
    pub(super) fn resolve(&self, encoder: &mut wgpu::CommandEncoder, chunk: QueryChunk) {
        if chunk.used() == 0 {
            self.free.push(chunk);
            return;
        }
        let ticket = Arc::new(Ticket {
            status: AtomicU8::new(PENDING),
            finished: Instant::now(),
            chunk: Mutex::new(None),
        });
        let notify = Notify(Arc::clone(&ticket));
        chunk.resolve_into(encoder, move |result| notify.done(result));
        *lock(&ticket.chunk) = Some(chunk);
        self.outstanding.push(ticket);
    }

    /// A chunk whose queries will never be resolved (its encoder dropped unfinished): its
    /// events are stamped lost by the next pump.
    pub(super) fn abandon(&self, chunk: QueryChunk) {
        if chunk.used() == 0 {
            self.free.push(chunk);
            return;
        }
        let ticket =
            Ticket { status: AtomicU8::new(LOST), finished: Instant::now(), chunk: Mutex::new(Some(chunk)) };
        self.outstanding.push(Arc::new(ticket));
    }

    /// Stamps `event` from the host (an anchor on a device without timestamps).
    pub(super) fn stamp_now(&self, event: &TimestampEvent, ticks: u64) {
        let _held = lock(&self.pump);
        event.stamp(&StampLock::held(), event.arm(), Some(ticks));
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
            status => {
                if status == PENDING {
                    self.readbacks_dropped.fetch_add(1, Ordering::Relaxed);
                }
                // The chunk stays with its ticket (a late callback may still map it): only its
                // events are let go.
                if let Some(chunk) = lock(&ticket.chunk).as_mut() {
                    lose(&held, chunk);
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
                    if let Some((event, generation)) = entry {
                        let ticks = u64::from_le_bytes(value.try_into().unwrap_or_default());
                        event.stamp(held, *generation, Some(ticks));
                    }
                }
            }
            Err(_) => lose(held, &mut chunk),
        }
        chunk.readback.unmap();
        chunk.entries.clear();
        self.free.push(chunk);
    }

    pub(super) fn set_readback_limit(&self, limit: Duration) {
        let ns = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        self.readback_limit_ns.store(ns, Ordering::Relaxed);
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

    pub(super) fn chunks_made(&self) -> u64 {
        self.chunks_made.load(Ordering::Relaxed)
    }
}

/// Stamps every event of `chunk` lost and forgets them.
fn lose(held: &StampLock, chunk: &mut QueryChunk) {
    for (event, generation) in chunk.entries.drain(..).flatten() {
        event.stamp(held, generation, None);
    }
}
