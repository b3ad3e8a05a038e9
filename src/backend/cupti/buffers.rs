//! The bounded pool of activity buffers CUPTI fills, and the queue of filled ones.
//!
//! Every buffer is allocated when the pool is made, and freed when it is dropped: CUPTI's
//! request callback takes a free one (or, when none is free, hands CUPTI none and counts the
//! refusal), the completed callback queues it with its valid size, and `drain` reads it and
//! puts it back. Both queues are crossbeam's `ArrayQueue` (Vyukov's bounded MPMC queue), sized
//! to hold every buffer, so a push never fails and neither callback locks or allocates.

use crossbeam_queue::ArrayQueue;
use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// CUPTI's records hold 8-byte fields; its samples align buffers to 8.
const ALIGN: usize = 8;

/// One buffer of the pool: its start. Its size is the pool's `buffer_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Buffer(NonNull<u8>);

// Safety: a `Buffer` is an address inside the pool's allocations; whoever holds it (the free
// queue, CUPTI, the completed queue, a drain) is its only user until they hand it on, so moving
// it between threads shares nothing.
unsafe impl Send for Buffer {}

impl Buffer {
    pub(crate) fn as_ptr(self) -> *mut u8 {
        self.0.as_ptr()
    }
}

/// A filled buffer: the buffer, and how many of its bytes hold records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Filled {
    pub(crate) buffer: Buffer,
    pub(crate) valid_bytes: usize,
}

/// The pool. Each buffer is in exactly one place: the free queue, CUPTI's hands, the
/// completed queue, or a drain in progress.
#[derive(Debug)]
pub(crate) struct BufferPool {
    buffer_size: usize,
    /// Every buffer's start, for `Drop` and for telling ours from a stranger's.
    all: Box<[Buffer]>,
    free: ArrayQueue<Buffer>,
    completed: ArrayQueue<Filled>,
    /// Requests answered with no buffer (none was free).
    refused: AtomicU64,
}

impl BufferPool {
    /// `count` buffers of `buffer_size` bytes. `None` when either is 0 or the size overflows
    /// a layout, or the allocator fails (the buffers allocated so far are freed).
    pub(crate) fn new(buffer_size: usize, count: usize) -> Option<Self> {
        if buffer_size == 0 || count == 0 {
            return None;
        }
        let layout = Layout::from_size_align(buffer_size, ALIGN).ok()?;
        let free = ArrayQueue::new(count);
        let mut all = Vec::with_capacity(count);
        for _ in 0..count {
            // Safety: `layout` has a non-zero size (checked above).
            let Some(start) = NonNull::new(unsafe { alloc(layout) }) else {
                for buffer in all {
                    // Safety: allocated just above with this layout, and handed to no one.
                    unsafe { dealloc(Buffer::as_ptr(buffer), layout) };
                }
                return None;
            };
            all.push(Buffer(start));
        }
        for &buffer in &all {
            // Cannot fail: the queue holds `count` and gets `count`.
            let _ = free.push(buffer);
        }
        Some(Self {
            buffer_size,
            all: all.into_boxed_slice(),
            free,
            completed: ArrayQueue::new(count),
            refused: AtomicU64::new(0),
        })
    }

    pub(crate) fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// A free buffer for CUPTI, or `None` (counted as refused) when all are in use.
    pub(crate) fn take(&self) -> Option<Buffer> {
        let buffer = self.free.pop();
        if buffer.is_none() {
            // Relaxed: a statistic, read after the fact.
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        buffer
    }

    /// Queues a buffer CUPTI filled. Returns `false` (and queues nothing) for an address that
    /// is not one of this pool's buffers.
    pub(crate) fn complete(&self, start: *mut u8, valid_bytes: usize) -> bool {
        let Some(&buffer) = self.all.iter().find(|b| b.as_ptr() == start) else {
            return false;
        };
        // Cannot fail: every buffer is in one place at a time, and the queue holds them all.
        let _ = self.completed.push(Filled { buffer, valid_bytes: valid_bytes.min(self.buffer_size) });
        true
    }

    /// The oldest filled buffer, to read and then [`give_back`](Self::give_back).
    pub(crate) fn next_filled(&self) -> Option<Filled> {
        self.completed.pop()
    }

    /// Puts a read buffer back on the free queue.
    pub(crate) fn give_back(&self, buffer: Buffer) {
        // Cannot fail, as in `complete`.
        let _ = self.free.push(buffer);
    }

    /// Requests answered with no buffer so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether every buffer is back from CUPTI (free, or filled and queued).
    pub(crate) fn all_returned(&self) -> bool {
        self.free.len() + self.completed.len() == self.all.len()
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        if !self.all_returned() {
            // CUPTI may still write into the ones it holds: leak them all rather than free
            // memory it owns.
            log::warn!(
                "CUPTI kept activity buffers past its flush: leaking {} bytes",
                self.buffer_size * self.all.len()
            );
            return;
        }
        let layout = Layout::from_size_align(self.buffer_size, ALIGN).ok();
        for &buffer in self.all.iter() {
            if let Some(layout) = layout {
                // Safety: allocated in `new` with this layout; every buffer is back (checked
                // above), so no one uses it.
                unsafe { dealloc(buffer.as_ptr(), layout) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_pool_is_refused() {
        assert!(BufferPool::new(0, 4).is_none());
        assert!(BufferPool::new(1024, 0).is_none());
    }

    #[test]
    fn requests_beyond_the_pool_are_refused_and_counted() {
        let pool = BufferPool::new(64, 2).unwrap();
        let (a, b) = (pool.take().unwrap(), pool.take().unwrap());
        assert_ne!(a, b);
        assert!(pool.take().is_none());
        assert!(pool.take().is_none());
        assert_eq!(pool.refused(), 2);
        assert!(!pool.all_returned());
        assert!(pool.complete(a.as_ptr(), 40));
        assert!(pool.complete(b.as_ptr(), 64));
        assert!(pool.all_returned());
    }

    #[test]
    fn filled_buffers_come_back_in_completion_order_and_can_be_taken_again() {
        let pool = BufferPool::new(64, 2).unwrap();
        let (a, b) = (pool.take().unwrap(), pool.take().unwrap());
        pool.complete(b.as_ptr(), 8);
        pool.complete(a.as_ptr(), 16);
        let first = pool.next_filled().unwrap();
        assert_eq!((first.buffer, first.valid_bytes), (b, 8));
        pool.give_back(first.buffer);
        assert_eq!(pool.take(), Some(b));
        assert_eq!(pool.next_filled().unwrap().buffer, a);
        assert!(pool.next_filled().is_none());
        assert_eq!(pool.refused(), 0);
        // Every buffer back: the pool frees them all when dropped.
        pool.give_back(a);
        pool.give_back(b);
        assert!(pool.all_returned());
    }

    #[test]
    fn a_strangers_buffer_is_not_queued_and_a_valid_size_never_exceeds_the_buffer() {
        let pool = BufferPool::new(64, 1).unwrap();
        let mut other = [0u8; 8];
        assert!(!pool.complete(other.as_mut_ptr(), 8));
        let a = pool.take().unwrap();
        pool.complete(a.as_ptr(), 1 << 20);
        let filled = pool.next_filled().unwrap();
        assert_eq!(filled.valid_bytes, 64);
        pool.give_back(filled.buffer);
        assert!(pool.all_returned());
    }
}
