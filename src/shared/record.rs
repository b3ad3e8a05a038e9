//! What a list writes at each recorded event and the collector reads back.
//!
//! A list keeps its events' records in one buffer of its own, in recording order, each with
//! its event's slot index ([`EventRecord`]). At submit the buffer moves, with the list's
//! fields, into the record of the list's first slot ([`ListRecord`]: the pool stores it,
//! never reads it). The collector reads the buffer front to back and never follows the
//! slots' links, nor touches a slot other than the head and the events it reads:
//!
//! ```text
//!  head slot's ListRecord { events: [ {slot 7, begins A}, {slot 3, ends, begins B}, ... ],
//!                           lane, list_last, list_len, list_id, list_seq, list_kind, zones }
//!  every other slot's ListRecord: empty (no buffer)
//! ```

use super::lanes::LaneSeq;
use crate::backend::Lane;
use crate::location::Location;
use crate::sink::Zone;
use crate::slots::freelist::NIL;
use crate::sync::{const_thread_local, try_lock, AtomicU32, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::cell::RefCell;

/// What happened at one recorded event, written by the owning list, read by the collector.
#[derive(Debug)]
pub(crate) struct EventRecord {
    /// The slot whose event was recorded.
    pub(crate) slot: u32,
    /// Where the event was recorded.
    pub(crate) lane: Lane,
    /// This event ends the innermost open zone of its list.
    pub(crate) ends: bool,
    /// The zone begun here was never ended (its end could not be recorded): skip it.
    pub(crate) begin_dropped: bool,
    /// The slot's `launch` holds where and when the host recorded this begin (only while the
    /// context records launches).
    pub(crate) launched: bool,
    /// This event begins a zone at this location.
    pub(crate) begins: Option<Location>,
}

/// Appends the record of a plain step's event (in `slot`, on `lane`, ending a zone or not,
/// beginning one at `begins` or not), written field by field in place. `Vec::push` built the
/// 40-byte record on the stack with 4- and 1-byte stores and copied it with 8- and 16-byte
/// loads, which the CPU cannot forward from the smaller stores: a stall of some 12 cycles per
/// event, the hottest instruction of `zone_next` on lavapipe (a perf profile), and LLVM keeps the
/// stack copy for a whole record written through `MaybeUninit::write` too.
#[inline(always)]
pub(crate) fn push_record(
    records: &mut Vec<EventRecord>,
    slot: u32,
    lane: Lane,
    ends: bool,
    begins: Option<Location>,
) {
    if records.len() == records.capacity() {
        records.reserve(1);
    }
    let len = records.len();
    let record = records.spare_capacity_mut()[0].as_mut_ptr();
    // Safety: `record` points at the buffer's first element past the initialized ones (there
    // is room: reserved above); each field is written once through a raw pointer (no
    // reference to the uninitialized element is made), and the element is counted as
    // initialized only once every field is.
    unsafe {
        std::ptr::addr_of_mut!((*record).slot).write(slot);
        std::ptr::addr_of_mut!((*record).ends).write(ends);
        std::ptr::addr_of_mut!((*record).begin_dropped).write(false);
        std::ptr::addr_of_mut!((*record).launched).write(false);
        std::ptr::addr_of_mut!((*record).lane).write(lane);
        std::ptr::addr_of_mut!((*record).begins).write(begins);
        records.set_len(len + 1);
    }
}

/// What a slot's record holds: on a submitted list's first slot, the list (its events'
/// records and fields, and what the collector found); on every other slot, nothing.
#[derive(Debug)]
pub(crate) struct ListRecord {
    /// The records of the list's events, in recording order (cleared by the reader once its
    /// zones are built).
    pub(crate) events: Vec<EventRecord>,
    /// The list's home lane (its first event's).
    pub(crate) lane: Lane,
    /// The list's last slot and length (its slots stay linked, first to last, for release).
    pub(crate) list_last: u32,
    pub(crate) list_len: u32,
    /// The list's id, its place in its home lane's order, and what the collector found.
    pub(crate) list_id: u64,
    /// (An activity source's list takes no place: the default, unused.)
    pub(crate) list_seq: LaneSeq,
    pub(crate) list_kind: ListKind,
    /// A collector found this list incomplete before.
    pub(crate) list_probed: bool,
    /// A read list's zones, built by the reader that read it.
    pub(crate) zones: Vec<Zone>,
    /// Where the reader placed a read list's first event on the context's timeline (GPU ns
    /// since the base event, the anchor's drift bound, the read's rounding bound); `None`
    /// when it could not, and the emitter places it.
    pub(crate) list_placed: Option<(i64, i64, i64)>,
    /// The host time read just before the list's first event was recorded, when the list
    /// took its place there: a lower bound of the clocks' offset at that event.
    pub(crate) first_host_ns: Option<i64>,
    /// The host time the reader read once it found the list complete: an upper bound of the
    /// clocks' offset at its latest event.
    pub(crate) read_host_ns: i64,
    /// How far a read list's times since its first event may be off by rounding.
    pub(crate) list_rounding_ns: i64,
    /// The frame the list belongs to (current when it was made), copied onto its zones.
    pub(crate) list_frame: Option<u64>,
}

/// What a list on the collector's queues is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Submitted; its times are not read yet.
    Submitted,
    /// Its times are read and its zones built (`zones`, times since its first event; its
    /// `events` are cleared).
    Read,
    /// Its times could not be read: its zones are dropped.
    Failed,
    /// Dropped unsubmitted, handed to the collector all the same (an activity source's list:
    /// its launches' work is reported and goes out, its zones do not).
    Discarded,
}

impl Default for ListRecord {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            lane: Lane::Stream(0),
            list_last: NIL,
            list_len: 0,
            list_id: 0,
            list_seq: LaneSeq { entry: 0, seq: 0 },
            list_kind: ListKind::Submitted,
            list_probed: false,
            zones: Vec::new(),
            list_placed: None,
            first_host_ns: None,
            read_host_ns: 0,
            list_rounding_ns: 0,
            list_frame: None,
        }
    }
}

/// The most records (or zones) a new buffer is made for, however long the lists seen (a
/// larger list grows its own buffer), and the largest buffer kept for reuse.
const MAX_BUFFER: u32 = 1024;

/// The most emptied buffers kept for reuse: as many lists as one collect usually takes.
const SPARE_BUFFERS: usize = 256;

/// Where lists get their record buffers ([`RecordBuffers`]), and readers the buffers they
/// build a list's zones in ([`ZoneBuffers`]): emptied ones given back (by the collector, and
/// by lists dropped unsubmitted), else new ones made for the longest list seen so far (up to
/// [`MAX_BUFFER`]), so that a list neither allocates per list nor grows its buffer item by
/// item. The last given back is taken first, while it is still in cache. Both sides only
/// `try_lock` the spares: nobody waits, a taker that finds them busy makes a new buffer, a
/// giver that finds them busy (or full) frees its buffer.
#[derive(Debug)]
pub(crate) struct Buffers<T> {
    /// Emptied buffers, each of at most `MAX_BUFFER` items. On a line of its own: every
    /// give-back writes it, and `capacity` is read on the recording path.
    spare: CachePadded<Mutex<Vec<Vec<T>>>>,
    /// Items a new buffer is made for.
    capacity: AtomicU32,
}

/// Buffers of a list's event records.
pub(crate) type RecordBuffers = Buffers<EventRecord>;

/// Buffers a read list's zones are built in (given back once the sinks have had them).
pub(crate) type ZoneBuffers = Buffers<Zone>;

impl<T> Buffers<T> {
    pub(crate) fn new() -> Self {
        Self { spare: CachePadded::new(Mutex::new(Vec::new())), capacity: AtomicU32::new(16) }
    }

    /// An empty buffer.
    pub(crate) fn take(&self) -> Vec<T> {
        try_lock(&self.spare).and_then(|mut spare| spare.pop()).unwrap_or_else(|| self.fresh())
    }

    /// A new buffer, made for the longest list seen so far.
    fn fresh(&self) -> Vec<T> {
        // Relaxed: a size hint; any value is correct.
        Vec::with_capacity(self.capacity.load(Ordering::Relaxed) as usize)
    }

    /// `buffer` emptied, if it is worth keeping (it has room, and not more than `MAX_BUFFER`).
    fn emptied(mut buffer: Vec<T>) -> Option<Vec<T>> {
        buffer.clear();
        (buffer.capacity() != 0 && buffer.capacity() <= MAX_BUFFER as usize).then_some(buffer)
    }

    /// A list of `len` events was submitted: later new buffers are made for it. Written only
    /// when larger, so that recording threads share the line read-only once lists settle.
    pub(crate) fn note_len(&self, len: u32) {
        let len = len.min(MAX_BUFFER);
        // Relaxed: a size hint.
        if len > self.capacity.load(Ordering::Relaxed) {
            self.capacity.fetch_max(len, Ordering::Relaxed);
        }
    }

    /// Keeps a buffer, emptied, for a later list.
    pub(crate) fn give_back(&self, buffer: Vec<T>) {
        let Some(buffer) = Self::emptied(buffer) else { return };
        if let Some(mut spare) = try_lock(&self.spare) {
            if spare.len() < SPARE_BUFFERS {
                spare.push(buffer);
            }
        }
    }
}

/// The most emptied record buffers a thread keeps for its next lists ([`STASHED`]).
const STASH: usize = 4;

const_thread_local! {
    /// Emptied record buffers this thread keeps for its next lists, whatever their context
    /// (an emptied buffer holds nothing of its context): taken from a context's spares
    /// [`STASH`] at a time, and given back to them by lists dropped unsubmitted on this
    /// thread. A recording thread then takes the spares' lock once per `STASH` lists rather
    /// than once per list (on a line the collector writes at every give-back).
    static STASHED: RefCell<Vec<Vec<EventRecord>>> = RefCell::new(Vec::new());
}

impl RecordBuffers {
    /// An empty buffer for a list starting on this thread: from the thread's stash, which is
    /// refilled from the spares when empty.
    pub(crate) fn take_for_list(&self) -> Vec<EventRecord> {
        let stashed = STASHED.try_with(|stash| {
            let mut stash = stash.try_borrow_mut().ok()?;
            if stash.is_empty() {
                let mut spare = try_lock(&self.spare)?;
                let keep = spare.len().saturating_sub(STASH);
                stash.extend(spare.drain(keep..));
            }
            stash.pop()
        });
        // Nothing stashed nor spare (or the spares busy, or the thread exiting): a new one.
        stashed.ok().flatten().unwrap_or_else(|| self.fresh())
    }

    /// Keeps the buffer of a list dropped on this thread for the thread's next list (or
    /// gives it back to the spares when the stash is full).
    pub(crate) fn give_back_on_thread(&self, buffer: Vec<EventRecord>) {
        let Some(buffer) = Self::emptied(buffer) else { return };
        let rest = STASHED.try_with(|stash| match stash.try_borrow_mut() {
            Ok(mut stash) if stash.len() < STASH => {
                stash.push(buffer);
                None
            }
            _ => Some(buffer),
        });
        match rest {
            Ok(None) => {}
            Ok(Some(buffer)) => self.give_back(buffer),
            // The thread is exiting: the buffer is freed.
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(slot: u32) -> EventRecord {
        EventRecord {
            slot,
            lane: Lane::Stream(0),
            ends: false,
            begin_dropped: false,
            launched: false,
            begins: None,
        }
    }

    #[test]
    fn a_buffer_given_back_is_taken_again_empty_with_its_capacity() {
        let buffers = RecordBuffers::new();
        let mut buffer = buffers.take();
        buffer.extend((0..40).map(record));
        let capacity = buffer.capacity();
        buffers.give_back(buffer);
        let again = buffers.take();
        assert_eq!((again.len(), again.capacity()), (0, capacity));
    }

    #[test]
    fn new_buffers_are_made_for_the_longest_list_seen_up_to_the_cap() {
        let buffers = RecordBuffers::new();
        buffers.note_len(66);
        buffers.note_len(20);
        assert!(buffers.take().capacity() >= 66);
        buffers.note_len(u32::MAX);
        assert_eq!(buffers.take().capacity(), MAX_BUFFER as usize);
    }

    #[test]
    fn buffers_over_the_cap_and_beyond_the_spares_are_freed() {
        let buffers = RecordBuffers::new();
        buffers.give_back(Vec::with_capacity(MAX_BUFFER as usize + 1));
        for _ in 0..SPARE_BUFFERS + 1 {
            buffers.give_back(Vec::with_capacity(8));
        }
        let spare = try_lock(&buffers.spare).expect("not held");
        assert_eq!(spare.len(), SPARE_BUFFERS);
        assert!(spare.iter().all(|b| b.capacity() <= MAX_BUFFER as usize));
    }

    #[test]
    fn a_list_dropped_on_a_thread_leaves_its_buffer_to_the_threads_next_list() {
        // A thread of its own: its stash starts empty.
        std::thread::spawn(|| {
            let buffers = RecordBuffers::new();
            let mut first = buffers.take_for_list();
            first.push(record(1));
            let at = first.as_ptr();
            buffers.give_back_on_thread(first);
            let again = buffers.take_for_list();
            assert_eq!((again.as_ptr(), again.len()), (at, 0), "the stashed buffer, emptied");
            assert!(try_lock(&buffers.spare).expect("not held").is_empty(), "the spares untouched");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_stashes_a_few_buffers_and_takes_spares_several_at_a_time() {
        std::thread::spawn(|| {
            let buffers = RecordBuffers::new();
            for _ in 0..STASH + 2 {
                buffers.give_back_on_thread(Vec::with_capacity(8));
            }
            assert_eq!(try_lock(&buffers.spare).expect("not held").len(), 2, "beyond the stash");
            for _ in 0..STASH {
                buffers.take_for_list();
            }
            // The stash is empty now: the next take moves both spares, and uses one.
            let taken = buffers.take_for_list();
            assert_eq!(taken.capacity(), 8);
            assert!(try_lock(&buffers.spare).expect("not held").is_empty());
            assert_eq!(STASHED.with(|s| s.borrow().len()), 1);
        })
        .join()
        .unwrap();
    }
}
