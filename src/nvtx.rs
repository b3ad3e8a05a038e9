//! NVTX ranges around zones (feature `nvtx`), on the `nvtx` crate.
//!
//! Each zone begun on a thread pushes a range named after the zone in the NVTX domain
//! `gpu-event-pool`, and its end pops it, so Nsight Systems shows the zone on the thread's
//! NVTX row and, by projection, over the CUDA work launched inside it. NVTX ranges of this
//! kind (push/pop) are per thread and strictly nested; zones are not always: a list may move
//! to another thread with zones open, and one thread may record several lists interleaved.
//! So each thread keeps the ranges this crate pushed on it, and a zone's end pops its own
//! range only if it is on the calling thread's stack, together with any range pushed above
//! it and left open (an interleaved list's). A range begun on another thread stays open
//! there until a range below it is popped or that thread exits.
//!
//! Names are registered with NVTX once per thread and name (a 64-entry cache keyed by the
//! name's address, checked against its text), so a push allocates nothing once warm.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use ::nvtx::domain::{LocalRange, RegisteredString};
use ::nvtx::Domain;

/// Identifies one range pushed by this crate: the pushing thread's tag in the high half, a
/// per-thread count in the low half. Never 0 (0 means "no range" in the lists).
pub(crate) type Token = u64;

/// The NVTX domain of every range this crate pushes.
pub const DOMAIN_NAME: &str = "gpu-event-pool";

fn domain() -> &'static Domain {
    static DOMAIN: OnceLock<Domain> = OnceLock::new();
    DOMAIN.get_or_init(|| Domain::new(c"gpu-event-pool"))
}

const CACHE: usize = 64;

/// The ranges this crate has open on one thread, and its registered names.
struct ThreadRanges {
    /// Open ranges, outermost first.
    open: Vec<(Token, LocalRange<'static>)>,
    tag: u64,
    count: u32,
    names: [Option<(Box<str>, RegisteredString<'static>)>; CACHE],
}

impl ThreadRanges {
    fn new() -> Self {
        static NEXT_TAG: AtomicU32 = AtomicU32::new(1);
        // Relaxed: the tag only has to be unique.
        let tag = u64::from(NEXT_TAG.fetch_add(1, Ordering::Relaxed));
        Self { open: Vec::new(), tag: tag << 32, count: 0, names: [const { None }; CACHE] }
    }

    fn name(&mut self, name: &str) -> RegisteredString<'static> {
        let entry = &mut self.names[(name.as_ptr() as usize >> 3) % CACHE];
        match entry {
            Some((text, registered)) if **text == *name => *registered,
            _ => {
                // As a C string (NVTX's "ASCII" strings carry UTF-8 bytes), without any NUL.
                let text: Vec<u8> = name.bytes().filter(|&b| b != 0).collect();
                let c_name = std::ffi::CString::new(text).unwrap_or_default();
                let registered = domain().register_string(c_name);
                *entry = Some((name.into(), registered));
                registered
            }
        }
    }

    fn push(&mut self, name: &str) -> Token {
        let registered = self.name(name);
        self.count = self.count.wrapping_add(1).max(1);
        let token = self.tag | u64::from(self.count);
        self.open.push((token, domain().local_range(registered)));
        token
    }

    fn pop(&mut self, token: Token) {
        if let Some(at) = self.open.iter().rposition(|(t, _)| *t == token) {
            // Innermost first: each drop pops the thread's innermost range.
            while self.open.len() > at {
                drop(self.open.pop());
            }
        }
    }
}

impl Drop for ThreadRanges {
    fn drop(&mut self) {
        while let Some(range) = self.open.pop() {
            drop(range);
        }
    }
}

thread_local! {
    static RANGES: RefCell<ThreadRanges> = RefCell::new(ThreadRanges::new());
}

/// Pushes a range named `name` on the calling thread; 0 if the thread is exiting.
pub(crate) fn push(name: &str) -> Token {
    RANGES.try_with(|r| r.borrow_mut().push(name)).unwrap_or(0)
}

/// Pops the range `token` (and any left open above it) if it is on the calling thread.
pub(crate) fn pop(token: Token) {
    if token != 0 {
        let _ = RANGES.try_with(|r| r.borrow_mut().pop(token));
    }
}

/// How many NVTX ranges this crate has open on the calling thread: those of the zones begun
/// on it and not yet ended (or left open by a list that moved to another thread).
pub fn open_ranges() -> usize {
    RANGES.try_with(|r| r.borrow().open.len()).unwrap_or(0)
}
