//! One packet sequence: a writer's stream of packets, with its own incremental state (the
//! names, categories, source locations and argument names interned so far, and the
//! timestamp the next packet's delta counts from). Of `perfetto/` it imports `wire.rs` and
//! `clock.rs`.
//!
//! Every sequence starts with a packet that clears its incremental state, sets its defaults
//! (timestamps on the sequence's incremental clock, events on the sequence's track) and
//! snapshots that clock against `CLOCK_MONOTONIC`. An event packet then holds the delta from
//! the sequence's previous timestamp and ids of interned strings, each defined, in the
//! packet that first uses it, before its event. A writer that owns a sequence writes its
//! events in time order; an event earlier than the one before (which the sinks avoid: each
//! sequence is one track's or one thread's) is written with its absolute time instead, and
//! counted. Past [`MAX_INTERNED`] entries the state is cleared and the sequence starts over,
//! so a sequence's memory is bounded whatever names it meets.

use super::clock::MONOTONIC;
use super::wire::{self, close, open};
use crate::location::{ArgValue, Location, SourceLocation};
use rustc_hash::FxHashMap;

/// Interned entries a sequence keeps, all kinds together, before it clears its state.
pub(super) const MAX_INTERNED: usize = 4096;

/// The sequence-scoped clock every sequence's timestamps are deltas on.
const INCREMENTAL_CLOCK: u32 = 64;

/// Field numbers of Perfetto's protos (protos/perfetto/trace/...), the few written here.
pub(super) mod field {
    /// `Trace.packet`.
    pub(crate) const PACKET: u32 = 1;
    /// `TracePacket`.
    pub(crate) const TIMESTAMP: u32 = 8;
    pub(crate) const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub(crate) const SEQUENCE_ID: u32 = 10;
    pub(crate) const INTERNED_DATA: u32 = 12;
    pub(crate) const SEQUENCE_FLAGS: u32 = 13;
    pub(crate) const DEFAULTS: u32 = 59;
    pub(crate) const FIRST_PACKET_ON_SEQUENCE: u32 = 87;
    pub(crate) const CLOCK_SNAPSHOT: u32 = 6;
    pub(crate) const TRACK_EVENT: u32 = 11;
    pub(crate) const TRACK_DESCRIPTOR: u32 = 60;
    /// `TracePacket.sequence_flags`: `SEQ_INCREMENTAL_STATE_CLEARED`.
    pub(crate) const INCREMENTAL_STATE_CLEARED: u64 = 1;
    /// `TracePacketDefaults`.
    pub(crate) const DEFAULT_CLOCK_ID: u32 = 58;
    pub(crate) const TRACK_EVENT_DEFAULTS: u32 = 11;
    pub(crate) const DEFAULT_TRACK_UUID: u32 = 11;
    /// `ClockSnapshot` and `ClockSnapshot.Clock`.
    pub(crate) const CLOCKS: u32 = 1;
    pub(crate) const PRIMARY_TRACE_CLOCK: u32 = 2;
    pub(crate) const CLOCK_ID: u32 = 1;
    pub(crate) const CLOCK_TIMESTAMP: u32 = 2;
    pub(crate) const CLOCK_IS_INCREMENTAL: u32 = 3;
    /// `TrackEvent`.
    pub(crate) const CATEGORY_IIDS: u32 = 3;
    pub(crate) const DEBUG_ANNOTATIONS: u32 = 4;
    pub(crate) const TYPE: u32 = 9;
    pub(crate) const NAME_IID: u32 = 10;
    pub(crate) const TRACK_UUID: u32 = 11;
    pub(crate) const NAME: u32 = 23;
    pub(crate) const COUNTER_VALUE: u32 = 30;
    pub(crate) const SOURCE_LOCATION_IID: u32 = 34;
    pub(crate) const DOUBLE_COUNTER_VALUE: u32 = 44;
    pub(crate) const FLOW_IDS: u32 = 47;
    pub(crate) const TERMINATING_FLOW_IDS: u32 = 48;
    /// `DebugAnnotation`.
    pub(crate) const ARG_NAME_IID: u32 = 1;
    pub(crate) const ARG_BOOL: u32 = 2;
    pub(crate) const ARG_UINT: u32 = 3;
    pub(crate) const ARG_INT: u32 = 4;
    pub(crate) const ARG_DOUBLE: u32 = 5;
    pub(crate) const ARG_STRING: u32 = 6;
    /// `InternedData`, and the iid and name of its entries.
    pub(crate) const INTERNED_CATEGORIES: u32 = 1;
    pub(crate) const INTERNED_NAMES: u32 = 2;
    pub(crate) const INTERNED_ARG_NAMES: u32 = 3;
    pub(crate) const INTERNED_SOURCE_LOCATIONS: u32 = 4;
    pub(crate) const IID: u32 = 1;
    pub(crate) const ENTRY_NAME: u32 = 2;
    /// `SourceLocation` (after its iid).
    pub(crate) const FILE_NAME: u32 = 2;
    pub(crate) const FUNCTION_NAME: u32 = 3;
    pub(crate) const LINE_NUMBER: u32 = 4;
}

/// A track event's type (`TrackEvent.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Begin = 1,
    End = 2,
    Instant = 3,
    Counter = 4,
}

/// An event's name.
#[derive(Debug, Clone, Copy)]
pub(super) enum Name<'a> {
    /// None (a slice's end, a counter's value).
    None,
    /// A zone's location's name, interned by location.
    Location(&'a Location),
    /// Text interned by its contents (a span's name).
    #[cfg(feature = "tracing")]
    Interned(&'a str),
    /// Text written in the event (a name used once: a frame's).
    Inline(&'a str),
}

/// An argument's value (`DebugAnnotation`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Value<'a> {
    Uint(u64),
    Int(i64),
    Double(f64),
    Bool(bool),
    Str(&'a str),
}

impl<'a> From<&'a ArgValue> for Value<'a> {
    fn from(value: &'a ArgValue) -> Self {
        match value {
            ArgValue::Int(v) => Self::Int(*v),
            ArgValue::Uint(v) => Self::Uint(*v),
            ArgValue::Float(v) => Self::Double(*v),
            ArgValue::Bool(v) => Self::Bool(*v),
            ArgValue::Str(v) => Self::Str(v),
        }
    }
}

/// A counter's value.
#[derive(Debug, Clone, Copy)]
pub(super) enum Counter {
    Int(i64),
    Double(f64),
}

/// One track event to write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Event<'a> {
    pub(super) kind: Kind,
    /// When, on `CLOCK_MONOTONIC`.
    pub(super) ns: i64,
    pub(super) name: Name<'a>,
    pub(super) category: Option<&'a str>,
    /// Its source location (interned), and, for a dynamic one, its arguments.
    pub(super) source: Option<&'a Location>,
    /// Its track, when not the sequence's.
    pub(super) track: Option<u64>,
    /// A flow that starts (or goes on) at this slice.
    pub(super) flow_out: Option<u64>,
    /// A flow that ends at this slice.
    pub(super) flow_in: Option<u64>,
    pub(super) args: &'a [(&'a str, Value<'a>)],
    pub(super) counter: Option<Counter>,
}

impl<'a> Event<'a> {
    /// An event of `kind` at `ns`, with nothing else.
    pub(super) fn new(kind: Kind, ns: i64) -> Self {
        Self {
            kind,
            ns,
            name: Name::None,
            category: None,
            source: None,
            track: None,
            flow_out: None,
            flow_in: None,
            args: &[],
            counter: None,
        }
    }
}

/// Ids of one kind of interned entry: static locations by address (a `&'static` is never
/// freed, so no other location has it), everything else by its text.
#[derive(Debug, Default)]
struct Interner {
    by_address: FxHashMap<usize, u64>,
    by_text: FxHashMap<Box<str>, u64>,
}

/// Which interned entry.
#[derive(Debug, Clone, Copy)]
enum Key<'a> {
    Address(usize),
    Text(&'a str),
}

impl Interner {
    fn len(&self) -> usize {
        self.by_address.len() + self.by_text.len()
    }

    /// The entry's id, and whether it is new.
    fn id(&mut self, key: Key<'_>) -> (u64, bool) {
        let next = self.len() as u64 + 1;
        match key {
            Key::Address(address) => match self.by_address.get(&address) {
                Some(&iid) => (iid, false),
                None => {
                    self.by_address.insert(address, next);
                    (next, true)
                }
            },
            Key::Text(text) => match self.by_text.get(text) {
                Some(&iid) => (iid, false),
                None => {
                    self.by_text.insert(text.into(), next);
                    (next, true)
                }
            },
        }
    }
}

/// What a sequence has told the reader so far: cleared when it starts over.
#[derive(Debug)]
struct Incremental {
    /// The incremental clock's reading: the latest timestamp written, on `CLOCK_MONOTONIC`.
    last_ns: i64,
    names: Interner,
    categories: Interner,
    locations: Interner,
    arg_names: Interner,
    /// The ids of static locations written lately, by address (direct-mapped: a zone's
    /// begin skips both lookups on a hit). Address 0: empty.
    recent: [(usize, u64, u64); RECENT],
}

/// Entries of `Incremental::recent`.
const RECENT: usize = 16;

impl Incremental {
    fn new(last_ns: i64) -> Self {
        Self {
            last_ns,
            names: Interner::default(),
            categories: Interner::default(),
            locations: Interner::default(),
            arg_names: Interner::default(),
            recent: [(0, 0, 0); RECENT],
        }
    }

    fn slot(address: usize) -> usize {
        // Static locations are a few words apart: skip the bits they share.
        (address >> 4) % RECENT
    }

    fn interned(&self) -> usize {
        self.names.len() + self.categories.len() + self.locations.len() + self.arg_names.len()
    }
}

/// One packet sequence (module docs).
#[derive(Debug)]
pub(super) struct Sequence {
    id: u32,
    /// The track its events are on unless they say otherwise.
    track: u64,
    /// `None` until its first packet.
    state: Option<Incremental>,
    /// Events written with an absolute time, earlier than the event before them.
    out_of_order: u64,
    /// Reused for a dynamic location's key.
    scratch: String,
}

/// Key bytes of the fields the short ways write (all under 128: one byte each).
const PACKET_KEY: u8 = (field::PACKET << 3 | 2) as u8;
const TIMESTAMP_KEY: u8 = (field::TIMESTAMP << 3) as u8;
const SEQUENCE_ID_KEY: u8 = (field::SEQUENCE_ID << 3) as u8;
const TRACK_EVENT_KEY: u8 = (field::TRACK_EVENT << 3 | 2) as u8;
const TYPE_KEY: u8 = (field::TYPE << 3) as u8;
const NAME_IID_KEY: u8 = (field::NAME_IID << 3) as u8;
/// `source_location_iid` (field 34): its key takes two bytes.
const SOURCE_LOCATION_IID_KEY: [u8; 2] = [0x90, 0x02];

/// Starts a packet the short way: its key, a length byte to fill in, its timestamp and
/// sequence id. Returns where the length byte is.
#[inline]
fn short_packet(out: &mut Vec<u8>, delta: u64, id: u32) -> usize {
    // A short packet is at most 2 + 11 + 6 + 2 + 2 + 11 + 12 bytes.
    out.reserve(64);
    out.push(PACKET_KEY);
    let length = out.len();
    out.push(0);
    out.push(TIMESTAMP_KEY);
    wire::varint(out, delta);
    out.push(SEQUENCE_ID_KEY);
    wire::varint(out, u64::from(id));
    length
}

/// Fills in the length byte at `at` (a short packet or its event: always under 128 bytes).
#[inline]
fn short_close(out: &mut [u8], at: usize) {
    let len = out.len() - at - 1;
    debug_assert!(len < 0x80);
    out[at] = len as u8;
}

/// Writes a `Trace.packet` holding what `contents` writes.
pub(super) fn packet(out: &mut Vec<u8>, contents: impl FnOnce(&mut Vec<u8>)) {
    let nested = open(out, field::PACKET);
    contents(out);
    close(out, nested);
}

impl Sequence {
    /// Sequence `id`, its events on `track` by default.
    pub(super) fn new(id: u32, track: u64) -> Self {
        Self { id, track, state: None, out_of_order: 0, scratch: String::new() }
    }

    /// Events it wrote with an absolute time (earlier than the event before them).
    pub(super) fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// The packet that (re)starts the sequence: its state cleared, its defaults, and its
    /// incremental clock at `ns`.
    fn start(&mut self, out: &mut Vec<u8>, ns: i64) {
        let first = self.state.is_none();
        let (id, track) = (self.id, self.track);
        packet(out, |out| {
            wire::uint(out, field::SEQUENCE_ID, u64::from(id));
            if first {
                wire::uint(out, field::FIRST_PACKET_ON_SEQUENCE, 1);
            }
            wire::uint(out, field::SEQUENCE_FLAGS, field::INCREMENTAL_STATE_CLEARED);
            let defaults = open(out, field::DEFAULTS);
            wire::uint(out, field::DEFAULT_CLOCK_ID, u64::from(INCREMENTAL_CLOCK));
            let event_defaults = open(out, field::TRACK_EVENT_DEFAULTS);
            wire::uint(out, field::DEFAULT_TRACK_UUID, track);
            close(out, event_defaults);
            close(out, defaults);
            let snapshot = open(out, field::CLOCK_SNAPSHOT);
            for (clock, incremental) in [(INCREMENTAL_CLOCK, true), (MONOTONIC, false)] {
                let entry = open(out, field::CLOCKS);
                wire::uint(out, field::CLOCK_ID, u64::from(clock));
                wire::uint(out, field::CLOCK_TIMESTAMP, ns.max(0) as u64);
                if incremental {
                    wire::uint(out, field::CLOCK_IS_INCREMENTAL, 1);
                }
                close(out, entry);
            }
            close(out, snapshot);
        });
        self.state = Some(Incremental::new(ns.max(0)));
    }

    /// The state, when an event at `ns` can take the short way: started, room left for
    /// interned entries, and not earlier than the event before.
    fn ready(&mut self, ns: i64) -> Option<&mut Incremental> {
        self.state.as_mut().filter(|state| ns >= state.last_ns && state.interned() < MAX_INTERNED)
    }

    /// A slice's end at `ns` (most packets of a trace): the packet's bytes written at once.
    pub(super) fn end(&mut self, out: &mut Vec<u8>, ns: i64) {
        let id = self.id;
        let Some(state) = self.ready(ns) else { return self.write(out, &Event::new(Kind::End, ns)) };
        let delta = (ns - state.last_ns) as u64;
        state.last_ns = ns;
        let length = short_packet(out, delta, id);
        // track_event { type: TYPE_SLICE_END }: key, length 2, key, value.
        out.extend_from_slice(&[TRACK_EVENT_KEY, 2, TYPE_KEY, Kind::End as u8]);
        short_close(out, length);
    }

    /// `event`, a zone's begin: at once when its static location's ids are known on this
    /// sequence and it has neither arguments nor flow, else the general way.
    pub(super) fn begin(&mut self, out: &mut Vec<u8>, event: &Event<'_>) {
        if let (Name::Location(Location::Static(source)), None, true) =
            (event.name, event.flow_in, event.args.is_empty())
        {
            let address = *source as *const SourceLocation as usize;
            let id = self.id;
            if let Some(state) = self.ready(event.ns) {
                let (known, name, location) = state.recent[Incremental::slot(address)];
                if known == address {
                    let delta = (event.ns - state.last_ns) as u64;
                    state.last_ns = event.ns;
                    let length = short_packet(out, delta, id);
                    out.extend_from_slice(&[TRACK_EVENT_KEY, 0, TYPE_KEY, Kind::Begin as u8, NAME_IID_KEY]);
                    let event_length = out.len() - 4;
                    wire::varint(out, name);
                    out.extend_from_slice(&SOURCE_LOCATION_IID_KEY);
                    wire::varint(out, location);
                    short_close(out, event_length);
                    short_close(out, length);
                    return;
                }
            }
            self.write(out, event);
            if let Some(state) = self.state.as_mut() {
                let (Some(&name), Some(&location)) =
                    (state.names.by_address.get(&address), state.locations.by_address.get(&address))
                else {
                    return;
                };
                state.recent[Incremental::slot(address)] = (address, name, location);
            }
            return;
        }
        self.write(out, event);
    }

    /// Writes `event` as one packet (after the packet that starts the sequence, if it has
    /// not started or its interned entries are full).
    pub(super) fn write(&mut self, out: &mut Vec<u8>, event: &Event<'_>) {
        match &self.state {
            None => self.start(out, event.ns),
            Some(state) if state.interned() >= MAX_INTERNED => {
                let at = state.last_ns;
                self.start(out, at);
            }
            Some(_) => {}
        }
        let Some(state) = self.state.as_mut() else { unreachable!("started above") };
        let nested = open(out, field::PACKET);
        let ns = event.ns.max(0);
        if ns >= state.last_ns {
            wire::uint(out, field::TIMESTAMP, (ns - state.last_ns) as u64);
            state.last_ns = ns;
        } else {
            wire::uint(out, field::TIMESTAMP, ns as u64);
            wire::uint(out, field::TIMESTAMP_CLOCK_ID, u64::from(MONOTONIC));
            self.out_of_order += 1;
        }
        wire::uint(out, field::SEQUENCE_ID, u64::from(self.id));
        let ids = intern(out, state, &mut self.scratch, event);
        track_event(out, event, ids, &mut state.arg_names);
        close(out, nested);
    }
}

/// The interned ids an event uses.
#[derive(Debug, Default, Clone, Copy)]
struct Ids {
    name: Option<u64>,
    category: Option<u64>,
    source: Option<u64>,
}

/// Looks up (or adds) the ids of `event`'s interned entries, writing the packet's
/// `interned_data` with those that are new; argument names' ids are looked up again when
/// the arguments are written (they are all there by then).
fn intern(out: &mut Vec<u8>, state: &mut Incremental, scratch: &mut String, event: &Event<'_>) -> Ids {
    let before = out.len();
    let interned = open(out, field::INTERNED_DATA);
    let contents = out.len();
    let mut ids = Ids::default();
    let entry = |out: &mut Vec<u8>, kind: u32, iid: u64, name: &str| {
        let nested = open(out, kind);
        wire::uint(out, field::IID, iid);
        wire::bytes(out, field::ENTRY_NAME, name.as_bytes());
        close(out, nested);
    };
    let name = match event.name {
        Name::Location(location) => Some((name_key(location), location.name())),
        #[cfg(feature = "tracing")]
        Name::Interned(text) => Some((Key::Text(text), text)),
        Name::None | Name::Inline(_) => None,
    };
    if let Some((key, text)) = name {
        let (iid, new) = state.names.id(key);
        if new {
            entry(out, field::INTERNED_NAMES, iid, text);
        }
        ids.name = Some(iid);
    }
    if let Some(category) = event.category {
        let (iid, new) = state.categories.id(Key::Text(category));
        if new {
            entry(out, field::INTERNED_CATEGORIES, iid, category);
        }
        ids.category = Some(iid);
    }
    if let Some(location) = event.source {
        let (iid, new) = state.locations.id(source_key(location, scratch));
        if new {
            let nested = open(out, field::INTERNED_SOURCE_LOCATIONS);
            wire::uint(out, field::IID, iid);
            wire::bytes(out, field::FILE_NAME, location.file().as_bytes());
            wire::bytes(out, field::FUNCTION_NAME, location.function().as_bytes());
            wire::uint(out, field::LINE_NUMBER, u64::from(location.line()));
            close(out, nested);
        }
        ids.source = Some(iid);
    }
    let location_args = event.source.map_or(&[][..], Location::args);
    let arg_names =
        event.args.iter().map(|(name, _)| *name).chain(location_args.iter().map(|(n, _)| n.as_ref()));
    for name in arg_names {
        let (iid, new) = state.arg_names.id(Key::Text(name));
        if new {
            entry(out, field::INTERNED_ARG_NAMES, iid, name);
        }
    }
    if out.len() == contents {
        out.truncate(before);
    } else {
        close(out, interned);
    }
    ids
}

/// The key of a location's name: a static location by address, a dynamic one by its name.
fn name_key(location: &Location) -> Key<'_> {
    match location {
        Location::Static(source) => Key::Address(*source as *const SourceLocation as usize),
        Location::Dynamic(_) => Key::Text(location.name()),
    }
}

/// The key of a location's source location: a static location by address, a dynamic one by
/// its file, line and function (written into `scratch`).
fn source_key<'a>(location: &'a Location, scratch: &'a mut String) -> Key<'a> {
    match location {
        Location::Static(source) => Key::Address(*source as *const SourceLocation as usize),
        Location::Dynamic(_) => {
            scratch.clear();
            scratch.push_str(location.file());
            scratch.push('\0');
            scratch.push_str(itoa::Buffer::new().format(location.line()));
            scratch.push('\0');
            scratch.push_str(location.function());
            Key::Text(scratch)
        }
    }
}

/// Writes the packet's `track_event`.
fn track_event(out: &mut Vec<u8>, event: &Event<'_>, ids: Ids, arg_names: &mut Interner) {
    let nested = open(out, field::TRACK_EVENT);
    wire::uint(out, field::TYPE, event.kind as u64);
    if let Some(track) = event.track {
        wire::uint(out, field::TRACK_UUID, track);
    }
    match (event.name, ids.name) {
        (_, Some(iid)) => wire::uint(out, field::NAME_IID, iid),
        (Name::Inline(text), None) => wire::bytes(out, field::NAME, text.as_bytes()),
        _ => {}
    }
    if let Some(iid) = ids.category {
        wire::uint(out, field::CATEGORY_IIDS, iid);
    }
    if let Some(iid) = ids.source {
        wire::uint(out, field::SOURCE_LOCATION_IID, iid);
    }
    if let Some(flow) = event.flow_out {
        wire::fixed64(out, field::FLOW_IDS, flow);
    }
    if let Some(flow) = event.flow_in {
        wire::fixed64(out, field::TERMINATING_FLOW_IDS, flow);
    }
    match event.counter {
        Some(Counter::Int(value)) => wire::int(out, field::COUNTER_VALUE, value),
        Some(Counter::Double(value)) => wire::double(out, field::DOUBLE_COUNTER_VALUE, value),
        None => {}
    }
    let location_args = event.source.map_or(&[][..], Location::args);
    let args =
        event.args.iter().copied().chain(location_args.iter().map(|(n, v)| (n.as_ref(), Value::from(v))));
    for (name, value) in args {
        let annotation = open(out, field::DEBUG_ANNOTATIONS);
        wire::uint(out, field::ARG_NAME_IID, arg_names.id(Key::Text(name)).0);
        match value {
            Value::Uint(v) => wire::uint(out, field::ARG_UINT, v),
            Value::Int(v) => wire::int(out, field::ARG_INT, v),
            Value::Double(v) => wire::double(out, field::ARG_DOUBLE, v),
            Value::Bool(v) => wire::uint(out, field::ARG_BOOL, u64::from(v)),
            Value::Str(v) => wire::bytes(out, field::ARG_STRING, v.as_bytes()),
        }
        close(out, annotation);
    }
    close(out, nested);
}
