//! The state that lists and collectors share: one context's backend, configuration, slot
//! pool, queues, lane order, counters and run-time switches ([`Inner`]).
//!
//! This layer sits between the slots and both users of it: `record` (lists write here) and
//! `collect` (collectors read and emit from here). It never calls a sink and never runs the
//! collection protocol; the public handle and the builder live above, in `context`.

pub(crate) mod config;
pub(crate) mod lanes;
pub(crate) mod record;
pub(crate) mod voids;

use crate::backend::{Backend, Lane};
use crate::location::Verbosity;
use crate::sink::{ContextInfo, FrameMark};
use crate::slots::freelist::Chain;
use crate::slots::head::ListHead;
use crate::slots::pool::Pool;
use crate::slots::submit::SubmissionQueue;
use crate::slots::tally::Tally;
use crate::sync::{lock, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering};
use config::Config;
use crossbeam_utils::CachePadded;
use lanes::{LaneSeq, LaneTable};
use record::{EventRecord, ListKind, ListRecord, RecordBuffers, ZoneBuffers};
use voids::VoidPlaces;

/// Counters of the context (the pool keeps the slot counts). Those bumped on the recording
/// path are sharded per thread (`recorded`); the rest change on failures or in the collector.
#[derive(Debug)]
pub(crate) struct Counters {
    /// LISTS_SUBMITTED, EVENTS_SUBMITTED, LISTS_DISCARDED.
    pub(crate) recorded: Tally<3>,
    pub(crate) dropped_zones: AtomicUsize,
    pub(crate) lists_collected: AtomicUsize,
    pub(crate) lists_failed: AtomicUsize,
    pub(crate) zones_emitted: AtomicUsize,
    pub(crate) lists_shifted: AtomicUsize,
    pub(crate) clock_discontinuities: AtomicUsize,
    pub(crate) lists_placed_alone: AtomicUsize,
    pub(crate) sink_failures: AtomicUsize,
    pub(crate) sinks_stopped: AtomicUsize,
    pub(crate) lanes_released: AtomicUsize,
    pub(crate) lists_late: AtomicUsize,
    pub(crate) concurrent_lists: AtomicUsize,
    pub(crate) emitter_ns: AtomicU64,
    /// Calls of the error handler that panicked (`context/handle.rs`).
    pub(crate) error_handler_panics: AtomicUsize,
    /// An activity source's work emitted as zones, user zones with no work, work emitted
    /// after later work of its lane, and lists emitted without every launch's record.
    pub(crate) activities: AtomicUsize,
    pub(crate) empty_zones: AtomicUsize,
    pub(crate) activities_late: AtomicUsize,
    pub(crate) lists_partial: AtomicUsize,
}

pub(crate) const LISTS_SUBMITTED: usize = 0;
pub(crate) const EVENTS_SUBMITTED: usize = 1;
pub(crate) const LISTS_DISCARDED: usize = 2;

/// Everything a context's lists and collectors share. Lists hold it through an `Arc`; the
/// handles reach it through the collector (`collect/mod.rs`).
///
/// Layout: what every recording step reads (`backend`, `config`, the pool's pages,
/// `switches`) must not share a cache line with what some thread writes per list or per
/// collect (the list-id counter, the buffer spares, the collector's counters, the queues'
/// heads), or every such write makes every recording thread's next step miss. Those fields
/// are `CachePadded` (the queues and the buffer spares pad their written parts themselves);
/// the alignment this gives `Inner` also keeps the `Arc`'s reference counts, written twice
/// per list, on lines of their own.
pub(crate) struct Inner<B: Backend> {
    backend: B,
    config: Config,
    pool: Pool<B::Event, ListRecord>,
    /// Where lists get the buffers their events' records are kept in.
    record_buffers: RecordBuffers,
    /// Where readers get the buffers they build zones in; the emitter gives them back.
    zone_buffers: ZoneBuffers,
    queue: SubmissionQueue,
    /// Lists a collector found incomplete, and lists whose times were read (collect/events/read.rs).
    retry: SubmissionQueue,
    read: SubmissionQueue,
    /// Each list's place in its home lane's order (lanes/), and the places given up by
    /// lists dropped unsubmitted, for the emitter to skip.
    lanes: LaneTable,
    void_places: VoidPlaces,
    counters: CachePadded<Counters>,
    info: ContextInfo,
    /// The run-time switches: bits 0-1 the verbosity, bit 2 set while disabled, bit 3 set
    /// while NVTX ranges are off, bit 4 set while launches are recorded, bit 5 set once the
    /// last handle is gone. Read with one relaxed load per recording call (see `switches`).
    switches: AtomicU8,
    /// Lane names given by the user, not yet delivered to the sinks (the collector does).
    lane_names: CachePadded<Mutex<Vec<(Lane, String)>>>,
    /// What a recording thread does when the pool is exhausted, before it drops a zone: a
    /// collect (set by the context once it is made; `None` in loom models). Whether it may
    /// have freed slots: it collected lists, or another thread is collecting.
    relief: std::sync::OnceLock<Relief>,
    next_list_id: CachePadded<AtomicU64>,
    /// The current frame (`NO_FRAME`: none), read once per list when it is made. On a line
    /// of its own: written once per frame, it must not make recorders miss the line of the
    /// backend and the configuration.
    frame: CachePadded<AtomicU64>,
    /// Frame starts not yet delivered to the sinks (the emitter does), at most
    /// `MAX_FRAME_MARKS`.
    frame_marks: CachePadded<Mutex<Vec<FrameMark>>>,
}

// The thread's own lane is a hint for readers, outside the modelled concurrency: plain std.
std::thread_local! {
    /// The lane-table entry of the last list the thread submitted (`u32::MAX`: none).
    static OWN_LANE: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

/// The lane-table entry of the last list the calling thread submitted: a reader on this
/// thread re-probes that lane first (collect/events/read.rs).
pub(crate) fn own_lane() -> u32 {
    OWN_LANE.with(std::cell::Cell::get)
}

/// [`Inner::relief`]: a collect run by a recording thread that found the pool exhausted.
pub(crate) type Relief = Box<dyn Fn() -> bool + Send + Sync>;

/// The frame id that means "no frame" (`TracingContext::frame(u64::MAX)`).
pub(crate) const NO_FRAME: u64 = u64::MAX;

/// Frame marks kept for the emitter: a context never collected drops the oldest beyond.
const MAX_FRAME_MARKS: usize = 4096;

/// Bits of `Inner::switches` holding the verbosity.
const VERBOSITY_BITS: u8 = 3;
/// Bit of `Inner::switches` set while the context is disabled.
const DISABLED: u8 = 1 << 2;
/// Bit of `Inner::switches` set while NVTX ranges are off (feature `nvtx`).
#[cfg(feature = "nvtx")]
const NVTX_OFF: u8 = 1 << 3;
/// Bit of `Inner::switches` set while zones keep their launch (`Config::record_launches`).
const LAUNCHES: u8 = 1 << 4;
/// Bit of `Inner::switches` set by the last handle's drop: the sinks are finished, nothing
/// recorded later can be submitted.
const CLOSED: u8 = 1 << 5;

/// What the recording path reads of the switches, from one load.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Switches(u8);

impl Switches {
    /// The level zones are recorded at: `Off` while disabled.
    #[inline]
    pub(crate) fn level(self) -> Verbosity {
        if self.0 & DISABLED != 0 {
            return Verbosity::Off;
        }
        verbosity_of(self.0)
    }

    /// Whether the context's last handle is gone: a zone that would be recorded is dropped.
    #[inline]
    pub(crate) fn closed(self) -> bool {
        self.0 & CLOSED != 0
    }

    /// Whether a recorded zone also pushes an NVTX range.
    #[cfg(feature = "nvtx")]
    #[inline]
    pub(crate) fn nvtx(self) -> bool {
        self.0 & NVTX_OFF == 0
    }

    /// Whether a recorded zone keeps its launch (host times and thread).
    #[inline]
    pub(crate) fn launches(self) -> bool {
        self.0 & LAUNCHES != 0
    }
}

/// The verbosity in the low bits of `Inner::switches`.
fn verbosity_of(switches: u8) -> Verbosity {
    match switches & VERBOSITY_BITS {
        0 => Verbosity::Off,
        1 => Verbosity::Coarse,
        _ => Verbosity::Fine,
    }
}

/// Read access to the parts of [`Inner`], for the layers above: the fields stay private to
/// this module, so that only its methods change the context's shared state as a whole.
impl<B: Backend> Inner<B> {
    #[inline]
    pub(crate) fn backend(&self) -> &B {
        &self.backend
    }
    #[inline]
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }
    #[inline]
    pub(crate) fn pool(&self) -> &Pool<B::Event, ListRecord> {
        &self.pool
    }
    #[inline]
    pub(crate) fn record_buffers(&self) -> &RecordBuffers {
        &self.record_buffers
    }
    #[inline]
    pub(crate) fn zone_buffers(&self) -> &ZoneBuffers {
        &self.zone_buffers
    }
    #[inline]
    pub(crate) fn queue(&self) -> &SubmissionQueue {
        &self.queue
    }
    #[inline]
    pub(crate) fn retry(&self) -> &SubmissionQueue {
        &self.retry
    }
    #[inline]
    pub(crate) fn read(&self) -> &SubmissionQueue {
        &self.read
    }
    #[inline]
    pub(crate) fn lanes(&self) -> &LaneTable {
        &self.lanes
    }
    #[inline]
    pub(crate) fn void_places(&self) -> &VoidPlaces {
        &self.void_places
    }
    #[inline]
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }
    #[inline]
    pub(crate) fn info(&self) -> &ContextInfo {
        &self.info
    }
    #[inline]
    pub(crate) fn lane_names(&self) -> &Mutex<Vec<(Lane, String)>> {
        &self.lane_names
    }
    #[inline]
    #[cfg_attr(gpu_event_pool_loom, allow(dead_code))] // set and run by the context only
    pub(crate) fn relief(&self) -> &std::sync::OnceLock<Relief> {
        &self.relief
    }
}

impl<B: Backend> Inner<B> {
    /// The shared state of a new context: `pool` made from `config`, nothing recorded yet.
    pub(crate) fn new(
        backend: B,
        config: Config,
        pool: Pool<B::Event, ListRecord>,
        info: ContextInfo,
    ) -> Self {
        let mut switches = config.verbosity as u8;
        #[cfg(feature = "nvtx")]
        if !config.nvtx_ranges {
            switches |= NVTX_OFF;
        }
        if config.record_launches {
            switches |= LAUNCHES;
        }
        Self {
            backend,
            config,
            pool,
            record_buffers: RecordBuffers::new(),
            zone_buffers: ZoneBuffers::new(),
            queue: SubmissionQueue::new(),
            retry: SubmissionQueue::new(),
            read: SubmissionQueue::new(),
            lanes: LaneTable::new(),
            void_places: VoidPlaces::new(),
            counters: CachePadded::new(Counters {
                recorded: Tally::new(),
                dropped_zones: AtomicUsize::new(0),
                lists_collected: AtomicUsize::new(0),
                lists_failed: AtomicUsize::new(0),
                zones_emitted: AtomicUsize::new(0),
                lists_shifted: AtomicUsize::new(0),
                clock_discontinuities: AtomicUsize::new(0),
                lists_placed_alone: AtomicUsize::new(0),
                sink_failures: AtomicUsize::new(0),
                sinks_stopped: AtomicUsize::new(0),
                lanes_released: AtomicUsize::new(0),
                lists_late: AtomicUsize::new(0),
                concurrent_lists: AtomicUsize::new(0),
                emitter_ns: AtomicU64::new(0),
                error_handler_panics: AtomicUsize::new(0),
                activities: AtomicUsize::new(0),
                empty_zones: AtomicUsize::new(0),
                activities_late: AtomicUsize::new(0),
                lists_partial: AtomicUsize::new(0),
            }),
            info,
            switches: AtomicU8::new(switches),
            lane_names: CachePadded::new(Mutex::new(Vec::new())),
            relief: std::sync::OnceLock::new(),
            next_list_id: CachePadded::new(AtomicU64::new(1)),
            frame: CachePadded::new(AtomicU64::new(NO_FRAME)),
            frame_marks: CachePadded::new(Mutex::new(Vec::new())),
        }
    }

    /// Starts frame `id` (`NO_FRAME`: none) at `host_ns`: lists made from now on belong to
    /// it, and its mark waits for the emitter.
    pub(crate) fn start_frame(&self, id: u64, host_ns: i64) {
        let mut marks = lock(&self.frame_marks);
        if id != NO_FRAME {
            if marks.len() == MAX_FRAME_MARKS {
                marks.remove(0);
            }
            marks.push(FrameMark { id, host_ns });
        }
        // Release, after the push: a list that sees this frame (its Acquire load) was made
        // after the mark was pushed, and the list reaches the emitter through queues that
        // publish with Release/Acquire; so the emit phase that emits a zone of this frame
        // takes the mark at its end, if an earlier one did not.
        self.frame.store(id, Ordering::Release);
    }

    /// The current frame, for a list being made: one load per list.
    #[inline]
    pub(crate) fn current_frame(&self) -> Option<u64> {
        Some(self.frame.load(Ordering::Acquire)).filter(|&id| id != NO_FRAME)
    }

    /// The frame marks not yet delivered, in call order.
    pub(crate) fn take_frame_marks(&self) -> Vec<FrameMark> {
        std::mem::take(&mut *lock(&self.frame_marks))
    }

    /// The switches now. Relaxed: a switch takes effect for calls that start after it is
    /// seen; nothing else is published through it.
    #[inline]
    pub(crate) fn switches(&self) -> Switches {
        Switches(self.switches.load(Ordering::Relaxed))
    }

    pub(crate) fn count_dropped(&self, zones: usize) {
        self.counters.dropped_zones.fetch_add(zones, Ordering::Relaxed);
    }

    pub(crate) fn count_discarded(&self) {
        self.counters.recorded.add(LISTS_DISCARDED, 1);
    }

    /// A list dropped unsubmitted gives up its place in its lane's order (the collector skips
    /// it), and no longer holds it: two short locks per such list, its thread's shard of the
    /// void places and its lane's entry.
    pub(crate) fn void_place(&self, place: LaneSeq) {
        self.void_places.push(place);
        self.lanes.release(place);
    }

    /// Owned -> Submitted: puts a list's events on the submission queue, their records
    /// (`events`, in recording order) moved into its first slot's record.
    pub(crate) fn enqueue(
        &self,
        used: Option<(ListHead, Chain)>,
        events: Vec<EventRecord>,
        list_id: u64,
        home: Option<LaneSeq>,
        first_host_ns: Option<i64>,
        frame: Option<u64>,
    ) {
        self.counters.recorded.add(LISTS_SUBMITTED, 1);
        let list = ListRecord { list_id, first_host_ns, list_frame: frame, ..ListRecord::default() };
        if !self.push_list(used, events, home, list) {
            self.counters.lists_collected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Owned -> Submitted for a list dropped unsubmitted on a backend timed by activities:
    /// counted as discarded, and handed to the collector (`ListKind::Discarded`) so that the
    /// work its zones launched is not kept waiting for it.
    pub(crate) fn enqueue_discarded(
        &self,
        used: Option<(ListHead, Chain)>,
        events: Vec<EventRecord>,
        list_id: u64,
        home: Option<LaneSeq>,
    ) {
        self.count_discarded();
        let list = ListRecord { list_id, list_kind: ListKind::Discarded, ..ListRecord::default() };
        let _ = self.push_list(used, events, home, list);
    }

    /// Pushes a list with recorded events on the submission queue: its head record is `list`
    /// with its events, lane, slots and place (an event source's list has one once it
    /// recorded; an activity source's takes none). Whether it had any to push.
    fn push_list(
        &self,
        used: Option<(ListHead, Chain)>,
        events: Vec<EventRecord>,
        home: Option<LaneSeq>,
        list: ListRecord,
    ) -> bool {
        let (Some((mut head, used)), Some(first)) = (used, events.first()) else {
            return false;
        };
        debug_assert_eq!((first.slot, events.len()), (used.first, used.len as usize));
        let lane = first.lane;
        self.record_buffers.note_len(used.len);
        let submitted = list.list_kind == ListKind::Submitted;
        // The list's slots are still Owned by the submitting thread (it holds their head)
        // until the push below publishes them to the collector.
        head.write(&self.pool, |r| {
            let list_seq = home.unwrap_or(list.list_seq);
            *r = ListRecord { events, lane, list_last: used.last, list_len: used.len, list_seq, ..list };
        });
        self.pool.mark_submitted(used.len);
        if submitted {
            self.counters.recorded.add(EVENTS_SUBMITTED, i64::from(used.len));
        }
        if let Some(home) = home {
            OWN_LANE.with(|c| c.set(home.entry));
        }
        self.queue.push(&self.pool, head);
        // Handed to the collector: the place is no longer held by a list being recorded.
        if let Some(home) = home {
            self.lanes.release(home);
        }
        true
    }

    /// Runs the relief for a recording thread that found the pool exhausted (docs/design.md
    /// section 5, "The relief"): whether a list's slots came back meanwhile.
    pub(crate) fn relieve(&self) -> bool {
        self.relief.get().is_some_and(|relief| relief())
    }

    /// A new list id, unique within the context.
    pub(crate) fn next_list_id(&self) -> u64 {
        self.next_list_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sets the verbosity bits, keeping the other switches.
    pub(crate) fn set_verbosity(&self, verbosity: Verbosity) {
        // Relaxed: see `switches`.
        let _ = self.switches.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
            Some((s & !VERBOSITY_BITS) | verbosity as u8)
        });
    }

    /// The verbosity set now (kept while the context is disabled).
    pub(crate) fn verbosity(&self) -> Verbosity {
        verbosity_of(self.switches.load(Ordering::Relaxed))
    }

    /// Turns recording off or back on.
    pub(crate) fn set_enabled(&self, enabled: bool) {
        self.set_switch(DISABLED, !enabled);
    }

    /// Whether recording is on.
    pub(crate) fn is_enabled(&self) -> bool {
        self.switches.load(Ordering::Relaxed) & DISABLED == 0
    }

    /// The last handle is going: later recording is dropped and counted.
    pub(crate) fn close(&self) {
        self.set_switch(CLOSED, true);
    }

    /// Turns the NVTX ranges around zones on or off.
    #[cfg(feature = "nvtx")]
    pub(crate) fn set_nvtx_ranges(&self, on: bool) {
        self.set_switch(NVTX_OFF, !on);
    }

    /// Turns launch recording on or off.
    pub(crate) fn set_record_launches(&self, on: bool) {
        self.set_switch(LAUNCHES, on);
    }

    /// Sets or clears one switch bit. Relaxed: see `switches`.
    fn set_switch(&self, bit: u8, set: bool) {
        if set {
            self.switches.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.switches.fetch_and(!bit, Ordering::Relaxed);
        }
    }
}
