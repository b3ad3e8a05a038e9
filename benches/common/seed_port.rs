//! `seed_port`: a faithful Rust port of the seed's CUDA tracing context, the baseline the
//! benchmarks compare the crate against.
//!
//! Ported from `shared/seed/tracing.c` (IREE, `iree/hal/drivers/cuda/tracing.c`, Apache-2.0
//! WITH LLVM-exception), over any [`gpu_event_pool::Backend`] instead of the CUDA driver:
//!
//! | seed (C)                                        | port                          |
//! | ----------------------------------------------- | ----------------------------- |
//! | `iree_hal_cuda_tracing_context_allocate`        | [`SeedContext::new`]          |
//! | `..._stream_tracing_zone_begin_impl`            | [`SeedContext::zone_begin`]   |
//! | `..._stream_tracing_zone_end_impl`              | [`SeedContext::zone_end`]     |
//! | `iree_hal_cuda_tracing_notify_submitted`        | [`SeedContext::submit`]       |
//! | `iree_hal_cuda_tracing_context_collect`         | [`SeedContext::collect`]      |
//! | `iree_hal_cuda_tracing_free`                    | [`SeedContext::free`]         |
//! | `iree_hal_cuda_tracing_context_free`            | `Drop`                        |
//!
//! Kept on purpose (they are what the benchmarks measure):
//! - ONE `std::sync::Mutex` (the seed's `iree_slim_mutex`) guards the freelist, the
//!   submission list, collection and free; a recording call holds it across the freelist
//!   pop AND the backend's record (`cuEventRecord`).
//! - Two events per zone (begin and end), never shared between adjacent zones.
//! - Every event is created up front (the seed's 16128), plus the base event, which is
//!   recorded on a stream the context creates and waited for.
//! - `collect` holds the lock while, for every submitted event, it waits for it
//!   (`cuEventSynchronize`), checks it (`cuEventQuery`) and reads its time as `f32`
//!   milliseconds since the base event (`cuEventElapsedTime`), converted to nanoseconds.
//!   A wait or query failure stops the walk of that list (the seed's inner `break`).
//! - `free` reports each event of a never-submitted list with timestamp 0.
//! - Record and elapsed-time errors are ignored (`IREE_CUDA_IGNORE_ERROR`).
//!
//! The changes, all on the exhaustion path: the seed dereferences NULL when the freelist is
//! empty ("TODO: recover"); the port returns [`SeedError::Exhausted`] instead. (The seed's
//! release builds let the last free event go, despite its `IREE_ASSERT(next != NULL)`,
//! which compiles out: so does the port.) Since the port survives an empty freelist, its
//! `free` into an empty freelist also resets the list head's submission link, which the
//! seed forgets on that path (the stale link can close the submission list into a cycle,
//! and `collect` then never returns: the benchmarks hung on it before this reset). Tracy calls
//! become a `notify(query_id, gpu_ns)` callback in `collect`; `free` returns the count of
//! events the seed would report to Tracy with timestamp 0.
//!
//! Self-contained (the crate's public API and `std` only) so that other benchmarks can
//! include it with `#[path = "common/seed_port.rs"] mod seed_port;`.
#![allow(dead_code)]

use gpu_event_pool::{Backend, BackendError};
use std::sync::{Mutex, MutexGuard};

/// The seed's event count: `IREE_HAL_CUDA_TRACING_DEFAULT_QUERY_CAPACITY` (16 * 1024 - 256).
pub const SEED_QUERY_CAPACITY: u32 = 16 * 1024 - 256;

/// The seed's NULL event pointer, as an index.
const NIL: u32 = u32::MAX;

/// Why a seed call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedError {
    /// The freelist is empty (where the seed dereferences NULL).
    Exhausted {
        /// The pool's fixed capacity.
        capacity: u32,
    },
    /// Creating the events or the calibration failed.
    Backend(BackendError),
}

impl std::fmt::Display for SeedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exhausted { capacity } => write!(f, "seed event pool of {capacity} exhausted"),
            Self::Backend(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SeedError {}

impl From<BackendError> for SeedError {
    fn from(e: BackendError) -> Self {
        Self::Backend(e)
    }
}

/// The mutable part of the seed's `iree_hal_cuda_tracing_context_event_t` (everything but
/// the event), guarded by the context's mutex.
#[derive(Debug, Clone, Copy)]
struct SeedLinks {
    next_in_command_buffer: u32,
    next_submission: u32,
    was_submitted: bool,
}

/// Everything the seed's `event_mutex` guards.
#[derive(Debug)]
struct SeedState {
    event_freelist_head: u32,
    submitted_head: u32,
    submitted_tail: u32,
    links: Vec<SeedLinks>,
}

/// The events of one command buffer (the seed's `iree_hal_cuda_tracing_context_event_list_t`).
/// Dropping one without [`SeedContext::free`] leaks its events, as in the seed.
#[derive(Debug)]
pub struct SeedList {
    head: u32,
    tail: u32,
    events: u32,
}

impl SeedList {
    /// Events recorded in this list.
    pub fn event_count(&self) -> usize {
        self.events as usize
    }
}

/// The seed's tracing context: a fixed pool of events behind one mutex.
pub struct SeedContext<B: Backend> {
    backend: B,
    stream: B::Stream,
    base_event: B::Event,
    /// Host time at calibration (the seed's `cpu_timestamp`).
    cpu_timestamp: i64,
    /// The seed's `event_pool[i].event`: created once, read without the lock.
    events: Vec<B::Event>,
    state: Mutex<SeedState>,
}

impl<B: Backend> std::fmt::Debug for SeedContext<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeedContext").field("capacity", &self.events.len()).finish()
    }
}

impl<B: Backend> SeedContext<B> {
    /// `iree_hal_cuda_tracing_context_allocate`: creates all `capacity` events up front,
    /// threads the freelist through them, then creates the base event, records it on a new
    /// stream and waits for it.
    pub fn new(backend: B, capacity: u32) -> Result<Self, BackendError> {
        let mut events = Vec::with_capacity(capacity as usize);
        let mut links = Vec::with_capacity(capacity as usize);
        for i in 0..capacity {
            events.push(backend.create_event()?);
            links.push(SeedLinks {
                next_in_command_buffer: if i + 1 == capacity { NIL } else { i + 1 },
                next_submission: NIL,
                was_submitted: false,
            });
        }
        let stream = backend.create_stream()?;
        let base_event = backend.create_event()?;
        backend.record(&base_event, &stream)?;
        backend.wait(&base_event)?;
        let cpu_timestamp = backend.host_now_ns();
        let state = SeedState {
            event_freelist_head: if capacity == 0 { NIL } else { 0 },
            submitted_head: NIL,
            submitted_tail: NIL,
            links,
        };
        Ok(Self { backend, stream, base_event, cpu_timestamp, events, state: Mutex::new(state) })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Events in the pool (fixed).
    pub fn capacity(&self) -> usize {
        self.events.len()
    }

    /// Host time at calibration.
    pub fn cpu_timestamp(&self) -> i64 {
        self.cpu_timestamp
    }

    /// A new, empty list (a command buffer's `{head, tail}`).
    pub fn list(&self) -> SeedList {
        SeedList { head: NIL, tail: NIL, events: 0 }
    }

    fn lock(&self) -> MutexGuard<'_, SeedState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `iree_hal_cuda_stream_tracing_context_insert_query`: under the lock, pops an event,
    /// records it on `stream`, appends it to `list`. Returns the query id.
    fn insert_query(&self, list: &mut SeedList, stream: &B::Stream) -> Result<u32, SeedError> {
        let mut state = self.lock();
        let event = state.event_freelist_head;
        if event == NIL {
            return Err(SeedError::Exhausted { capacity: self.events.len() as u32 });
        }
        state.event_freelist_head = state.links[event as usize].next_in_command_buffer;
        state.links[event as usize].next_in_command_buffer = NIL;

        // IREE_CUDA_IGNORE_ERROR(cuEventRecord(event->event, stream)), still under the lock.
        let _ = self.backend.record(&self.events[event as usize], stream);

        if list.head == NIL {
            list.head = event;
        } else {
            state.links[list.tail as usize].next_in_command_buffer = event;
        }
        list.tail = event;
        list.events += 1;
        Ok(event)
    }

    /// `iree_hal_cuda_stream_tracing_zone_begin_impl`: one event for the zone's begin.
    pub fn zone_begin(&self, list: &mut SeedList, stream: &B::Stream) -> Result<u32, SeedError> {
        self.insert_query(list, stream)
    }

    /// `iree_hal_cuda_stream_tracing_zone_end_impl`: one more event for the zone's end.
    pub fn zone_end(&self, list: &mut SeedList, stream: &B::Stream) -> Result<u32, SeedError> {
        self.insert_query(list, stream)
    }

    /// `iree_hal_cuda_tracing_notify_submitted`: appends the list's head to the submission
    /// list, under the lock. The list stays with the caller until [`free`](Self::free).
    pub fn submit(&self, list: &SeedList) {
        let mut state = self.lock();
        if list.head == NIL {
            return;
        }
        if state.submitted_head == NIL {
            state.submitted_head = list.head;
        } else {
            let tail = state.submitted_tail as usize;
            state.links[tail].next_submission = list.head;
        }
        state.submitted_tail = list.head;
    }

    /// `iree_hal_cuda_tracing_context_collect`: holds the lock while, for every submitted
    /// event, it waits for it, checks it, and reads its time since the base event; calls
    /// `notify(query_id, gpu_ns)` for each (the seed's `iree_tracing_gpu_zone_notify`).
    /// Returns how many events were read.
    pub fn collect(&self, mut notify: impl FnMut(u32, i64)) -> usize {
        let mut state = self.lock();
        let mut read_query_count = 0;
        let mut events = state.submitted_head;
        while events != NIL {
            let mut event = events;
            while event != NIL {
                let ev = &self.events[event as usize];
                if self.backend.wait(ev).is_err() {
                    break;
                }
                if !matches!(self.backend.is_complete(ev), Ok(true)) {
                    break;
                }
                let relative_millis =
                    self.backend.elapsed_ms(&self.base_event, ev).ok().flatten().unwrap_or(0.0);
                let gpu_timestamp = (f64::from(relative_millis) * 1_000_000.0) as i64;
                notify(event, gpu_timestamp);
                read_query_count += 1;
                event = state.links[event as usize].next_in_command_buffer;
            }
            let next = state.links[events as usize].next_submission;
            state.links[events as usize].was_submitted = true;
            events = next;
            state.submitted_head = events;
        }
        read_query_count
    }

    /// `iree_hal_cuda_tracing_free`: under the lock, reports every event of a list that was
    /// never collected with timestamp 0 (returns how many), then puts the list's events at
    /// the front of the freelist.
    pub fn free(&self, list: SeedList) -> usize {
        let mut state = self.lock();
        if list.head == NIL {
            return 0;
        }
        let mut zeroed = 0;
        if !state.links[list.head as usize].was_submitted {
            let mut event = list.head;
            while event != NIL {
                zeroed += 1;
                event = state.links[event as usize].next_in_command_buffer;
            }
        }
        let head = list.head as usize;
        if state.event_freelist_head == NIL {
            // The seed returns here without resetting the head's `next_submission`: the
            // stale link later turns the submission list into a cycle and `collect` spins
            // forever. The seed never gets here (it has dereferenced NULL on the pop that
            // emptied the freelist); the port, which returns an error instead, must reset.
            state.links[head].next_submission = NIL;
            state.links[head].was_submitted = false;
            state.event_freelist_head = list.head;
            return zeroed;
        }
        state.links[head].next_submission = NIL;
        state.links[head].was_submitted = false;
        let freelist_head = state.event_freelist_head;
        state.links[list.tail as usize].next_in_command_buffer = freelist_head;
        state.event_freelist_head = list.head;
        zeroed
    }
}

impl<B: Backend> Drop for SeedContext<B> {
    /// `iree_hal_cuda_tracing_context_free`: always collects on shutdown; the events are
    /// destroyed with the vector.
    fn drop(&mut self) {
        self.collect(|_, _| {});
    }
}
