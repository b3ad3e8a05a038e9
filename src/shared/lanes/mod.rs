//! Per-lane sequence numbers, taken when a list first records: the GPU order of the lists of
//! one stream, known without asking the GPU; and who holds each place still being recorded.
//!
//! Events recorded on one stream run in the order they were recorded, so the order in which
//! lists begin recording on a lane is the order the GPU runs them. Each list takes a
//! sequence number from its *home lane* (the lane of its first event) in the same step as
//! that first record: the lane's place lock is taken, the event recorded, the number taken,
//! the lock released. Two threads starting lists on one lane at once therefore take their
//! numbers in the order their first events reach the GPU (a two-step version let a thread
//! record after another and take its number first). The collector emits the lists of a lane
//! strictly in sequence order, whatever order they were submitted in and from whichever
//! threads.
//!
//! The table is open addressing in levels that double (the pool's pages, `slots/pool.rs`,
//! grow the same way), made as lanes need them and freed with the table. Each entry serves
//! one lane at a time, and has two spin locks, so that nothing but another first record of
//! the same lane waits for a backend call:
//!
//! ```text
//!  level 0: entries 0 .. F       level 1: F .. 3F        level 2: 3F .. 7F  ...  (F = 1024)
//!
//!  entry i:  key: AtomicU64   0 = never used, else the 64-bit hash of the lane it serves now
//!            next: AtomicU64  bit 0: the place lock, held around a first record (one backend
//!                             call) or a claim; bits 1..64: the sequence number the next
//!                             list takes
//!            done: AtomicU64  places the collector is done with (emitted, given up, or
//!                             emitted late); the entry is idle when done == next >> 1
//!            holders_locked: AtomicBool   the holders' lock, held only to read or change
//!                             `holders` (never across a backend call)
//!            claiming: AtomicBool   (level 0) held while an entry is claimed for a lane
//!                             whose level-0 home this is
//!            holders: UnsafeCell<Vec<(seq, Holder)>>   the places taken and not yet handed
//!                             to the collector (list submitted or dropped)
//! ```
//!
//! | who | place lock | holders' lock |
//! | --- | --- | --- |
//! | a list's first record ([`LaneTable::record_first`]) | spins for it while the entry serves its lane, holds it around the record | spins for it after the record, to register its holder |
//! | a claim of an entry for a new lane | tries it once per entry looked at | never |
//! | submit or drop of a list ([`LaneTable::release`]) | never | spins for it, to remove its holder |
//! | the collector ([`LaneTable::try_holder`], [`LaneTable::settle`]) | never | tries once; busy means "ask later" |
//!
//! **Lanes come and go.** A lane looks for its key in a window of [`PROBES`] entries from its
//! hash in each level. In the first level, a lane not found takes the window's first unused
//! entry with one CAS, as an insert-only table does (a first-level key never goes back to 0,
//! which is what makes that safe: `first_level`). A lane whose first-level window is full
//! is *claimed* an entry under the claiming lock of its level-0 home (so that two threads
//! never add one lane twice): an idle entry of that window, taken over with the place lock
//! held (a busy place lock means a first record under way: not idle), else, level by level,
//! an unused entry of a later window, else an idle one; a level is made when every entry of
//! the windows before is in use. An entry goes
//! on counting places from one lane to the next, so the collector's order of the entry needs
//! no reset: the new lane's lists come after every list of the old one, all of which it has
//! finished with. So two lanes never share an entry at once: a first record waits only for
//! another first record of its own lane (which the one-list-per-stream rule excludes) or a
//! claim, never for another lane's backend call, and the collector never holds a lane's
//! lists back for another lane's. The table grows only when a lane finds every entry of its
//! windows in use, so its size follows the lanes in use at once, not the lanes it ever saw
//! (with random keys: 1,024 entries up to some 600 lanes in use at once, 3,072 for 2,000,
//! 261,120 for 100,000).
//!
//! A thread that found its lane's entry while the entry was being taken over by another
//! lane sees the new key at the place lock (stops spinning, or finds it once the lock is
//! its own), and looks its lane up again.
//!
//! Only when every level is made and every entry of the lane's windows is in use (more
//! than 4 billion lanes at once, far past what memory holds) does a lane *share* its last
//! window's home entry with the lane there: its lists are then ordered with that lane's, as
//! if they were one stream, which can only make one wait for the other.

mod entry;
#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests;

use crate::backend::Lane;
use crate::location::Location;
use crate::sync::{AtomicPtr, Ordering};
use entry::{Entry, HoldersLocked, PlaceLocked};

/// Entries of the first level. A power of two. One level serves a context whose lanes in use
/// at once stay below about 600 (the first window found full, over 1,000 tables filled with
/// random keys: at the 357th lane at the earliest, the 606th in the median); past that the
/// next level is made. 64 KB.
const FIRST_LEVEL: usize = if cfg!(gpu_event_pool_loom) { 4 } else { 1024 };
/// Entries a lane looks at in each level before it looks at the next: 16 cache lines, what a
/// lookup that misses reads per level.
const PROBES: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 16 };
/// Levels at most: enough that every entry index fits a `u32` (`FIRST_LEVEL << LEVELS`
/// entries); the loom models make 2 at most.
const LEVELS: usize = if cfg!(gpu_event_pool_loom) { 2 } else { 22 };

/// Where a list sits in its home lane's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneSeq {
    /// The table entry of the home lane.
    pub(crate) entry: u32,
    /// The list's place on that entry: 0, 1, 2, ... with no gap.
    pub(crate) seq: u64,
}

/// The list holding a place on a lane while it is being recorded: what a collector stalled
/// on that place can tell the application.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    /// The list's id.
    pub(crate) list_id: u64,
    /// The lane it holds a place on.
    pub(crate) lane: Lane,
    /// Where its first zone begins.
    pub(crate) location: Location,
    /// The backend's host clock when it took the place.
    pub(crate) started_ns: i64,
}

/// The table of lanes of one context.
#[derive(Debug)]
pub(crate) struct LaneTable {
    /// Level 0: `FIRST_LEVEL` entries, made with the table.
    first: Box<[Entry]>,
    /// Level `k >= 1` (at `k - 1`) holds `FIRST_LEVEL << k` entries, from index
    /// `FIRST_LEVEL * (2^k - 1)`; null until made. A level is made only after the one before
    /// it.
    more: [AtomicPtr<Entry>; LEVELS - 1],
}

// Safety: the levels are reached only as shared `Entry`s (which are `Sync`), and the table
// owns them: made once, published with a Release store, freed only by `Drop` (`&mut self`).
unsafe impl Sync for LaneTable {}
// Safety: as above; the table owns its levels.
unsafe impl Send for LaneTable {}

/// A lane's key: a 64-bit mix of its kind and backend key, never 0 (0 marks an unused entry).
fn key(lane: Lane) -> u64 {
    let (kind, raw) = match lane {
        Lane::Stream(k) => (0x9e37_79b9_7f4a_7c15u64, k),
        Lane::Graph(k) => (0xc2b2_ae3d_27d4_eb4fu64, k),
    };
    // splitmix64's finalizer: consecutive keys and pointer-aligned keys spread evenly.
    let mut z = raw ^ kind;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.max(1)
}

/// The number of entries in level `k`, and the index of its first.
fn level_span(k: usize) -> (usize, usize) {
    (FIRST_LEVEL << k, FIRST_LEVEL * ((1 << k) - 1))
}

/// The indices of `key`'s window in level `k`.
fn window(key: u64, k: usize) -> impl Iterator<Item = usize> {
    let (len, start) = level_span(k);
    let home = key as usize & (len - 1);
    (0..PROBES.min(len)).map(move |probe| start + ((home + probe) & (len - 1)))
}

impl LaneTable {
    pub(crate) fn new() -> Self {
        Self {
            first: (0..FIRST_LEVEL).map(|_| Entry::new()).collect(),
            more: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// Level `k`, if made.
    fn level(&self, k: usize) -> Option<&[Entry]> {
        let Some(more) = k.checked_sub(1) else { return Some(&self.first) };
        // Acquire: pairs with the Release in `make_level`: the entries are initialized.
        let level = self.more.get(more)?.load(Ordering::Acquire);
        if level.is_null() {
            return None;
        }
        // Safety: a non-null level pointer came from `Box::into_raw` of `FIRST_LEVEL << k`
        // entries in `make_level`, is never changed after, and is freed only when the table
        // drops (`&mut self`), after every borrow of `self`.
        Some(unsafe { std::slice::from_raw_parts(level, level_span(k).0) })
    }

    /// Level `k`, made if it is not yet (by this thread, or by another one first).
    fn make_level(&self, k: usize) -> &[Entry] {
        if let Some(level) = self.level(k) {
            return level;
        }
        let entries: Box<[Entry]> = (0..level_span(k).0).map(|_| Entry::new()).collect();
        let fresh = Box::into_raw(entries) as *mut Entry;
        // AcqRel: publishes the entries (Release), or sees the winner's (Acquire).
        if let Err(_other) = self.more[k - 1].compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // Safety: `fresh` is this thread's own, never published.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, level_span(k).0)) });
        }
        self.level(k).expect("made by this thread or another")
    }

    /// The entry at `index`, if its level is made.
    fn get(&self, index: u32) -> Option<&Entry> {
        let k = (index as usize / FIRST_LEVEL + 1).ilog2() as usize;
        let (_, start) = level_span(k);
        self.level(k)?.get(index as usize - start)
    }

    /// The lane of `key` in the first level: its entry there, found or, if its window has an
    /// unused entry, claimed with one CAS (as an insert-only table does); `None` when the
    /// window is full of other lanes (the lane may be in a later level, or in none).
    ///
    /// A first-level key never goes back to 0, so an entry unused now was unused at every
    /// earlier claim: each claim of this lane took the first unused entry of the window then
    /// (a takeover happens only in a full window), which comes before this one. So the lane
    /// is found before the first unused entry or is in no entry, and threads of one lane that
    /// claim at once race for one entry: the CAS gives it to one, the other finds its key.
    fn first_level(&self, key: u64) -> Option<(u32, &Entry)> {
        for i in window(key, 0) {
            let entry = &self.first[i];
            // Relaxed: the key only names the entry; the place lock checks it
            // (`lock_place_of`), and nothing else is published through it.
            let found = entry.key.load(Ordering::Relaxed);
            let ours = found == key
                || found == 0
                    && match entry.key.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed) {
                        Ok(_) => true,
                        Err(other) => other == key,
                    };
            if ours {
                return Some((i as u32, entry));
            }
        }
        None
    }

    /// The lane of `key` in the levels after the first, if any. Levels are made in order, so
    /// the first one not made ends the search.
    fn later_levels(&self, key: u64) -> Option<(u32, &Entry)> {
        for k in 1..LEVELS {
            let level = self.level(k)?;
            let (_, start) = level_span(k);
            for i in window(key, k) {
                // Relaxed: as in `first_level`.
                if level[i - start].key.load(Ordering::Relaxed) == key {
                    return Some((i as u32, &level[i - start]));
                }
            }
        }
        None
    }

    /// The entry of `lane`, with its place lock held by this thread: found, claimed in the
    /// first level with one CAS, or claimed under the claiming lock of the lane's home (a
    /// takeover, or a later level).
    fn lock_lane(&self, lane: Lane) -> (u32, PlaceLocked<'_>) {
        let key = key(lane);
        loop {
            let found = self.first_level(key).or_else(|| self.later_levels(key));
            let (index, entry) = match found {
                Some(found) => found,
                None => {
                    let _claiming = self.first[key as usize & (FIRST_LEVEL - 1)].lock_claiming();
                    // Claimed by another thread of the lane while this one waited: take it.
                    match self.first_level(key).or_else(|| self.later_levels(key)) {
                        Some(found) => found,
                        None => return self.claim(key),
                    }
                }
            };
            if let Some(locked) = entry.lock_place_of(key) {
                return (index, locked);
            }
            // Taken over by another lane meanwhile: look again.
        }
    }

    /// Claims an entry for the lane of `key`, which is in no entry and whose first-level
    /// window is full (the caller holds the claiming lock of its home): the first idle entry
    /// of that window, else, level by level, the first unused entry of the lane's window,
    /// else the first idle one, making the next level when every entry looked at is in use.
    fn claim(&self, key: u64) -> (u32, PlaceLocked<'_>) {
        for k in 0..LEVELS {
            let level = self.make_level(k);
            let (_, start) = level_span(k);
            // Relaxed: a guess; the place lock and the key's CAS decide.
            let mut seen = [0; PROBES];
            for (probe, i) in window(key, k).enumerate() {
                seen[probe] = level[i - start].key.load(Ordering::Relaxed);
            }
            let unused = window(key, k).enumerate().filter(|&(p, _)| seen[p] == 0);
            for (p, i) in unused.chain(window(key, k).enumerate().filter(|&(p, _)| seen[p] != 0)) {
                // A busy place lock: a first record under way, so not idle.
                let Some(locked) = level[i - start].try_lock_place() else { continue };
                if locked.idle() && locked.serve(seen[p], key) {
                    return (i as u32, locked);
                }
            }
        }
        // Every entry of every window in use (more than 4 billion lanes at once): share.
        let k = LEVELS - 1;
        let home = window(key, k).next().expect("a window has an entry");
        let entry = self.get(home as u32).expect("every level made above");
        (home as u32, entry.lock_place())
    }

    /// Records a list's first event on `lane` and takes the lane's next place, as one step:
    /// no other list of the lane can record its first event between the two, so places
    /// follow the GPU order of first events. The place is registered as held by `holder()`
    /// until [`release`](Self::release). If `record` fails (or unwinds), no place is taken.
    ///
    /// Waits while another first record of the lane is under way (the place lock), or an
    /// entry is being claimed for a lane of the same home (a few instructions), then, after
    /// `record`, while a holder of the entry is being added or removed. Never for another
    /// lane's backend call.
    pub(crate) fn record_first<R, E>(
        &self,
        lane: Lane,
        record: impl FnOnce() -> Result<R, E>,
        holder: impl FnOnce() -> Holder,
    ) -> Result<(LaneSeq, R), E> {
        let (index, place) = self.lock_lane(lane);
        let out = record()?;
        let holder = holder();
        place.entry.lock_holders().with(|holders| holders.push((place.seq, holder)));
        let seq = place.take_place();
        Ok((LaneSeq { entry: index, seq }, out))
    }

    /// The list at `place` was submitted or dropped: it no longer holds its place. Waits only
    /// while another holder of the entry is being added, removed or read, never for a first
    /// record's backend call.
    pub(crate) fn release(&self, place: LaneSeq) {
        let Some(entry) = self.get(place.entry) else { return };
        entry.lock_holders().with(|holders| {
            if let Some(i) = holders.iter().position(|(seq, _)| *seq == place.seq) {
                holders.remove(i);
            }
        });
    }

    /// The collector is done with `n` more places of `entry` (emitted, given up, or emitted
    /// late): once it is done with every place taken there, the entry may serve another
    /// lane. Called by the emitter only.
    pub(crate) fn settle(&self, entry: u32, n: u64) {
        if let Some(entry) = self.get(entry) {
            entry.settle(n);
        }
    }

    /// The list holding `place`, if it is still being recorded (not yet submitted or
    /// dropped); `None` once it was handed to the collector, or for a place not taken yet.
    #[cfg(all(test, not(gpu_event_pool_loom)))]
    pub(crate) fn holder(&self, place: LaneSeq) -> Option<Holder> {
        let locked = self.get(place.entry)?.lock_holders();
        Self::holder_of(&locked, place)
    }

    /// [`holder`](Self::holder) without waiting, for the collector: `None` when a recorder
    /// holds the entry's holders' lock now (it is registering or giving up a place: ask
    /// again later), else the answer. A collector never spins on a lock recorders take.
    pub(crate) fn try_holder(&self, place: LaneSeq) -> Option<Option<Holder>> {
        let Some(entry) = self.get(place.entry) else { return Some(None) };
        let locked = entry.try_lock_holders()?;
        Some(Self::holder_of(&locked, place))
    }

    fn holder_of(locked: &HoldersLocked<'_>, place: LaneSeq) -> Option<Holder> {
        locked.with(|holders| {
            holders.iter().find(|(seq, _)| *seq == place.seq).map(|(_, holder)| holder.clone())
        })
    }
}

impl Drop for LaneTable {
    fn drop(&mut self) {
        for (more, level) in self.more.iter().enumerate() {
            // Relaxed: `&mut self`, no other thread reaches the table.
            let level = level.load(Ordering::Relaxed);
            if !level.is_null() {
                // Safety: made by `Box::into_raw` of a boxed slice of exactly
                // `level_span(more + 1).0` entries in `make_level`; nothing can reach it once
                // the table is dropped.
                let len = level_span(more + 1).0;
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(level, len)) });
            }
        }
    }
}
