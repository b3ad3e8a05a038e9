//! Which magazine is the calling thread's: each thread keeps one entry per pool it has used
//! (claiming a magazine on first use and handing it back at exit), and remembers the entry
//! it used last, so that the common call finds its magazine with one thread-local load and
//! one compare.

use super::free_slots::{FreeSlots, Magazine};
use crate::sync::{const_thread_local, Arc};
use crossbeam_utils::CachePadded;
use std::cell::{Cell, RefCell};
use std::ptr::NonNull;

/// One pool's magazine held by this thread.
struct Entry {
    shared: Arc<FreeSlots>,
    magazine: NonNull<CachePadded<Magazine>>,
}

/// The magazines this thread holds, one per pool it has used.
struct Held {
    entries: RefCell<Vec<Entry>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // First, so that a later call on this thread (another thread-local's destructor)
        // cannot reach a magazine handed back below.
        set_last(NONE);
        for entry in self.entries.get_mut().drain(..) {
            // Safety: the entry's `Arc` keeps its `FreeSlots`, and so the magazine, alive.
            entry.shared.retire(unsafe { entry.magazine.as_ref() });
        }
    }
}

/// The entry used last, as (the address of its pool's `FreeSlots`, its magazine).
type Last = (usize, NonNull<CachePadded<Magazine>>);

/// No entry: no `FreeSlots` is at address 0.
const NONE: Last = (0, NonNull::dangling());

const_thread_local! {
    static HELD: Held = Held { entries: RefCell::new(Vec::new()) };
}
const_thread_local! {
    /// Invariant: names an entry of `HELD` (or is `NONE`). Kept apart from `HELD` because it
    /// needs no destructor: `std` then reaches it with no check of its state.
    static LAST: Cell<Last> = Cell::new(NONE);
}

fn set_last(last: Last) {
    // Under loom, `LAST` may already be gone while `HELD` is dropped: then nothing can read it.
    let _ = LAST.try_with(|cell| cell.set(last));
}

/// The calling thread's magazine of `shared`, claimed on first use; `None` once this thread's
/// thread-locals are being destroyed. Claimed by this thread: its owner's accessors are ours.
#[inline]
pub(super) fn own(shared: &Arc<FreeSlots>) -> Option<&Magazine> {
    let key = Arc::as_ptr(shared) as usize;
    let (last_key, last) = LAST.try_with(Cell::get).unwrap_or(NONE);
    let magazine = if last_key == key { last } else { find_or_claim(shared, key)? };
    // Safety: `magazine` is `shared`'s: the entry it comes from (`LAST`'s invariant) has key
    // `key`, and that entry's `Arc` keeps `shared` at this address, so it is no other pool's.
    // A magazine lives as long as its `FreeSlots` (freed in `FreeSlots::drop`), which the borrow of
    // `shared` keeps alive.
    Some(unsafe { magazine.as_ref() })
}

/// This thread's magazine of the pool whose shared part is `shared` (at address `key`),
/// claiming one on first use. Forgets the entries of pools that are gone.
#[cold]
fn find_or_claim(shared: &Arc<FreeSlots>, key: usize) -> Option<NonNull<CachePadded<Magazine>>> {
    HELD.try_with(|held| {
        let mut entries = held.entries.borrow_mut();
        entries.retain(|entry| !entry.shared.is_closed());
        let magazine = match entries.iter().find(|entry| Arc::as_ptr(&entry.shared) as usize == key) {
            Some(entry) => entry.magazine,
            None => {
                let magazine = shared.claim();
                entries.push(Entry { shared: Arc::clone(shared), magazine });
                magazine
            }
        };
        set_last((key, magazine));
        magazine
    })
    .ok()
}
