//! What a packet holds: a track event (its kind, name, arguments, counter value, flows) as
//! the sinks and the `tracing` layer describe it, and the field numbers of Perfetto's protos
//! that the crate writes. A leaf of `perfetto/`: imports only `location.rs` of the crate.

use crate::location::{ArgValue, Location};

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
