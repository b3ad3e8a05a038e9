//! What a list writes at each recorded event and the collector reads back: the record each
//! pool slot carries (the pool stores it, never reads it).

use super::lanes::LaneSeq;
use crate::backend::Lane;
use crate::location::Location;
use crate::sink::Zone;
use crate::slots::freelist::NIL;

/// What happened at one recorded event, written by the owning list, read by the collector.
#[derive(Debug)]
pub(crate) struct EventRecord {
    /// Where the event was recorded.
    pub(crate) lane: Lane,
    /// This event ends the innermost open zone of its list.
    pub(crate) ends: bool,
    /// This event begins a zone at this location.
    pub(crate) begins: Option<Location>,
    /// The zone begun here was never ended (its end could not be recorded): skip it.
    pub(crate) begin_dropped: bool,
    /// The slot's `launch` holds where and when the host recorded this begin (only while the
    /// context records launches).
    pub(crate) launched: bool,
    /// On a submitted list's first slot only: the list's last slot, length, id, its place in
    /// its home lane's order, and what the collector found.
    pub(crate) list_last: u32,
    pub(crate) list_len: u32,
    pub(crate) list_id: u64,
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
}

/// What a list on the collector's queues is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Submitted; its times are not read yet.
    Submitted,
    /// Its times are read and its zones built (`zones` on the head, times since its first
    /// event; the other records are cleared).
    Read,
    /// Its times could not be read: its zones are dropped.
    Failed,
}

impl Default for EventRecord {
    fn default() -> Self {
        Self {
            lane: Lane::Stream(0),
            ends: false,
            begins: None,
            begin_dropped: false,
            launched: false,
            list_last: NIL,
            list_len: 0,
            list_id: 0,
            list_seq: LaneSeq { entry: 0, seq: 0 },
            list_kind: ListKind::Submitted,
            list_probed: false,
            zones: Vec::new(),
            list_placed: None,
        }
    }
}
