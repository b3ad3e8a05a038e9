//! One packet sequence: a writer's stream of packets, with its own incremental state (the
//! names, categories, source locations and argument names interned so far, and the
//! timestamp the next packet's delta counts from). Of `perfetto/` it imports `wire.rs`,
//! `clock.rs` and `event.rs`.
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
use super::event::{field, Counter, Event, Kind, Name, Value};
use super::wire::{self, close, open};
use crate::location::{Location, SourceLocation};
use rustc_hash::FxHashMap;

/// Interned entries a sequence keeps, all kinds together, before it clears its state.
pub(super) const MAX_INTERNED: usize = 4096;

/// The sequence-scoped clock every sequence's timestamps are deltas on.
const INCREMENTAL_CLOCK: u32 = 64;

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
    /// Entries interned, all kinds together (their lengths' sum, kept: read per packet).
    interned: usize,
    /// The begin events of static locations written lately, by address (direct-mapped: a
    /// zone's begin skips both lookups on a hit).
    recent: [Recent; RECENT],
}

/// Entries of `Incremental::recent`: more than the kernels of a command buffer (the demo's
/// 6 locations, a training step's dozen), few enough that the array stays in a few cache
/// lines of the sequence.
const RECENT: usize = 16;

/// The longest `track_event` of a begin from `Incremental::recent`: its type (2 bytes), its
/// name's iid and its source location's (a key of 1 and of 2 bytes, and an iid of at most
/// 2 bytes each: an iid is at most a few past `MAX_INTERNED`, under 2¹⁴).
const RECENT_BODY: usize = 9;

/// A static location's begin event, its `track_event` contents ready to copy.
#[derive(Debug, Clone, Copy)]
struct Recent {
    /// The location's address; 0: empty.
    address: usize,
    len: u8,
    body: [u8; RECENT_BODY],
}

impl Incremental {
    fn new(last_ns: i64) -> Self {
        Self {
            last_ns,
            names: Interner::default(),
            categories: Interner::default(),
            locations: Interner::default(),
            arg_names: Interner::default(),
            interned: 0,
            recent: [Recent { address: 0, len: 0, body: [0; RECENT_BODY] }; RECENT],
        }
    }

    fn slot(address: usize) -> usize {
        // Static locations are a few words apart: skip the bits they share.
        (address >> 4) % RECENT
    }

    fn interned(&self) -> usize {
        self.interned
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
    /// `trusted_packet_sequence_id`, key and varint: the same in every packet.
    id_field: ([u8; 6], u8),
    /// Whether every begin of a static location names its source location (else the first
    /// on the sequence, which interns it).
    every_location: bool,
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

/// A slice's end: `track_event { type: TYPE_SLICE_END }`.
const END_BODY: ([u8; RECENT_BODY], u8) = ([TYPE_KEY, Kind::End as u8, 0, 0, 0, 0, 0, 0, 0], 2);

/// Writes `value` as a varint into `buf` at `at`; where it ends.
#[inline]
fn put_varint(buf: &mut [u8], mut at: usize, mut value: u64) -> usize {
    while value >= 0x80 {
        buf[at] = value as u8 | 0x80;
        value >>= 7;
        at += 1;
    }
    buf[at] = value as u8;
    at + 1
}

/// The longest short packet: its key and length (2), timestamp (1 + 10), sequence id (6),
/// `track_event` key and length (2) and contents.
const SHORT_PACKET: usize = 2 + 11 + 6 + 2 + RECENT_BODY;

/// Appends a short packet, `{ timestamp: delta, trusted_packet_sequence_id,
/// track_event { body } }`, put together on the stack and appended at once (a packet of
/// under 128 bytes: one-byte lengths). Every copy is of a fixed length, the unused tail
/// dropped after (a copy of a length known only at run time is a call to `memcpy`: a
/// profile found three a packet).
#[inline]
fn short_packet(out: &mut Vec<u8>, delta: u64, id_field: ([u8; 6], u8), body: ([u8; RECENT_BODY], u8)) {
    let mut packet = [0u8; SHORT_PACKET];
    packet[0] = PACKET_KEY;
    packet[2] = TIMESTAMP_KEY;
    let mut at = put_varint(&mut packet, 3, delta);
    packet[at..at + 6].copy_from_slice(&id_field.0);
    at += usize::from(id_field.1);
    packet[at] = TRACK_EVENT_KEY;
    packet[at + 1] = body.1;
    at += 2;
    packet[at..at + RECENT_BODY].copy_from_slice(&body.0);
    at += usize::from(body.1);
    packet[1] = (at - 2) as u8;
    let start = out.len();
    out.extend_from_slice(&packet);
    out.truncate(start + at);
}

/// Writes a `Trace.packet` holding what `contents` writes.
pub(super) fn packet(out: &mut Vec<u8>, contents: impl FnOnce(&mut Vec<u8>)) {
    let nested = open(out, field::PACKET);
    contents(out);
    close(out, nested);
}

impl Sequence {
    /// Sequence `id`, its events on `track` by default; `every_location`: every begin of a
    /// static location names its source location, not only the first (which interns it).
    pub(super) fn new(id: u32, track: u64, every_location: bool) -> Self {
        let mut id_field = [SEQUENCE_ID_KEY, 0, 0, 0, 0, 0];
        let len = put_varint(&mut id_field, 1, u64::from(id)) as u8;
        Self {
            id,
            track,
            state: None,
            out_of_order: 0,
            scratch: String::new(),
            id_field: (id_field, len),
            every_location,
        }
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
    fn ready(state: &mut Option<Incremental>, ns: i64) -> Option<&mut Incremental> {
        state.as_mut().filter(|state| ns >= state.last_ns && state.interned() < MAX_INTERNED)
    }

    /// A slice's end at `ns` (most packets of a trace): the packet's bytes written at once.
    pub(super) fn end(&mut self, out: &mut Vec<u8>, ns: i64) {
        let Some(state) = Self::ready(&mut self.state, ns) else {
            return self.write(out, &Event::new(Kind::End, ns));
        };
        let delta = (ns - state.last_ns) as u64;
        state.last_ns = ns;
        short_packet(out, delta, self.id_field, END_BODY);
    }

    /// The begin of a zone of static location `source` at `ns`, with neither arguments nor
    /// flow, at once when its event is known on this sequence; whether it was written (if
    /// not, write it with [`begin`](Self::begin)).
    #[inline]
    pub(super) fn begin_known(
        &mut self,
        out: &mut Vec<u8>,
        ns: i64,
        source: &'static SourceLocation,
    ) -> bool {
        let address = source as *const SourceLocation as usize;
        let Some(state) = Self::ready(&mut self.state, ns) else { return false };
        let recent = &state.recent[Incremental::slot(address)];
        if recent.address != address {
            return false;
        }
        let delta = (ns - state.last_ns) as u64;
        state.last_ns = ns;
        short_packet(out, delta, self.id_field, (recent.body, recent.len));
        true
    }

    /// `event`, a zone's begin, written the general way; a static location's begin with
    /// neither arguments nor flow is then known ([`begin_known`](Self::begin_known)).
    pub(super) fn begin(&mut self, out: &mut Vec<u8>, event: &Event<'_>) {
        self.write(out, event);
        let (Name::Location(Location::Static(source)), None, true) =
            (event.name, event.flow_in, event.args.is_empty())
        else {
            return;
        };
        let address = *source as *const SourceLocation as usize;
        let every_location = self.every_location;
        let Some(state) = self.state.as_mut() else { return };
        let (Some(&name), Some(&location)) =
            (state.names.by_address.get(&address), state.locations.by_address.get(&address))
        else {
            return;
        };
        let mut body = [0; RECENT_BODY];
        body[..3].copy_from_slice(&[TYPE_KEY, Kind::Begin as u8, NAME_IID_KEY]);
        let mut at = put_varint(&mut body, 3, name);
        if every_location {
            body[at..at + 2].copy_from_slice(&SOURCE_LOCATION_IID_KEY);
            at = put_varint(&mut body, at + 2, location);
        }
        state.recent[Incremental::slot(address)] = Recent { address, len: at as u8, body };
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
        let ids = intern(out, state, &mut self.scratch, event, self.every_location);
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
fn intern(
    out: &mut Vec<u8>,
    state: &mut Incremental,
    scratch: &mut String,
    event: &Event<'_>,
    every_location: bool,
) -> Ids {
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
            state.interned += 1;
        }
        ids.name = Some(iid);
    }
    if let Some(category) = event.category {
        let (iid, new) = state.categories.id(Key::Text(category));
        if new {
            entry(out, field::INTERNED_CATEGORIES, iid, category);
            state.interned += 1;
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
            state.interned += 1;
        }
        // A static location's later zones on the sequence name it only when asked: its
        // first names it, and a static location is one name.
        if new || every_location || matches!(location, Location::Dynamic(_)) {
            ids.source = Some(iid);
        }
    }
    let location_args = event.source.map_or(&[][..], Location::args);
    let arg_names =
        event.args.iter().map(|(name, _)| *name).chain(location_args.iter().map(|(n, _)| n.as_ref()));
    for name in arg_names {
        let (iid, new) = state.arg_names.id(Key::Text(name));
        if new {
            entry(out, field::INTERNED_ARG_NAMES, iid, name);
            state.interned += 1;
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
