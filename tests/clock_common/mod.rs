//! Simulated worlds with a known truth, for the clock's tests (docs/design.md, section 8).
//!
//! A [`World`] is a simulated GPU and host clock and a workload: the host clock drifts against
//! the GPU (and changes its rate in steps and slews), the GPU reaches events late in
//! patterns, host reads are delayed (time passes around them, as when the reading thread is
//! descheduled), the first pair can be wrong, the host clock can stop (a suspend) or step,
//! the GPU counter can stand still, collects come from every millisecond to every twenty
//! minutes, and reads can be absurd. Every event's simulated time is logged as it is
//! recorded, so each zone's true host begin and end are known whatever the collector makes
//! of its GPU times. [`run`] runs a world and checks, for every zone:
//!
//! - P1: its true host begin and end lie within its reported bounds;
//! - P2: its bounds are at most 2 µs from 1 s on, in a world that gives tight intervals
//!   ([`World::tight`]);
//! - P3: no list is lost to the clock unless its own reads are impossible (an absurd read
//!   that persists), each discontinuity is counted once, and a list complete at a collect is
//!   emitted by it or the next;
//! - P4: durations and gaps inside a list are the GPU's, exact;
//!
//! and, in a world collected at least every 4 ms with nothing absurd, that GPU times are
//! exact.
#![allow(dead_code)]

mod gpu;
mod run;

pub use gpu::{Read, WorldGpu};
// (Not every test file that shares this module uses it.)
#[allow(unused_imports)]
pub use gpu::Lagged;
pub use run::{run, Outcome};

pub const US: i64 = 1_000;
pub const MS: i64 = 1_000_000;
pub const S: i64 = 1_000 * MS;

/// How late the GPU reaches an event recorded on an idle stream while another stream is
/// busy (a queue that is never empty, a loaded GPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lateness {
    None,
    /// Always this late (the GPU kept busy all along).
    Constant(i64),
    /// This late while busy, `on` ns of every `on + off`.
    Bursts {
        late: i64,
        on: i64,
        off: i64,
    },
    /// Uniform in `0..=max`, drawn for every record (the GPU kept busy all along).
    Random(i64),
    /// Rising by `per_s` ns every second, from 0 (the GPU kept busy all along).
    Rising {
        per_s: i64,
    },
}

/// A discontinuity of the clocks, at a simulated time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jump {
    /// The host clock stops for this long while the GPU runs on (a suspend).
    Suspend(i64),
    /// The GPU counter stands still for this long while the host clock runs on (a power-gated
    /// counter): the host clock steps forward against it.
    CounterStop(i64),
    /// The host clock steps by this much.
    HostStep(i64),
}

/// A wrong first pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BadPair {
    /// The backend claims an exact host time 10 ms late for the base and start-up pairs.
    Claimed,
    /// The host clock reads 10 ms high around the base event (its first two reads).
    Reads,
}

/// One world.
#[derive(Clone)]
pub struct World {
    pub name: String,
    /// The seed of its random choices (kernel lengths, delays, lateness).
    pub seed: u64,
    /// The host clock's rate against the GPU's, ppm, from the start.
    pub drift_ppm: f64,
    /// From simulated time `.0` on, the host clock's rate is `.1` ppm (steps; a slew is many).
    pub rates: Vec<(i64, f64)>,
    pub lateness: Lateness,
    /// Host reads delayed by up to this (uniform, before and after the read).
    pub read_delay: i64,
    pub bad_pair: Option<BadPair>,
    /// Discontinuities, at simulated times.
    pub jumps: Vec<(i64, Jump)>,
    /// One round of work every `period`, collected partway through (at most 2 ms in) and at
    /// its end.
    pub period: i64,
    /// Simulated time of the rounds.
    pub duration: i64,
    /// Every this many rounds a zone of 4.9 s on a stream of its own (0: never).
    pub long_every: u64,
    /// From simulated time `.0` on, the next `.3` reads of kind `.1` return `.2` ns.
    pub absurd: Option<(i64, Read, i64, u32)>,
}

impl std::fmt::Debug for World {
    /// On one line: the world a failing test reports.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "World {{ name: {:?}, seed: {:#x}, drift_ppm: {:?}, rates: {:?}, lateness: {:?}, read_delay: {}, bad_pair: {:?}, \
             jumps: {:?}, period: {}, duration: {}, long_every: {}, absurd: {:?} }}",
            self.name, self.seed, self.drift_ppm, self.rates, self.lateness, self.read_delay, self.bad_pair,
            self.jumps, self.period, self.duration, self.long_every, self.absurd
        )
    }
}

impl World {
    /// A quiet world: no drift, nothing going wrong, collected every `period`, for `duration`.
    pub fn quiet(name: &str, period: i64, duration: i64) -> Self {
        Self {
            name: name.to_owned(),
            seed: 0x9e37_79b9_7f4a_7c15,
            drift_ppm: 0.0,
            rates: Vec::new(),
            lateness: Lateness::None,
            read_delay: 0,
            bad_pair: None,
            jumps: Vec::new(),
            period,
            duration,
            long_every: 0,
            absurd: None,
        }
    }

    /// Whether the world gives the collector tight intervals: a GPU idle at its collects, host
    /// reads on time, collected at least every 2 ms (a round of at most 2 ms, collected
    /// partway and at its end): P2 applies.
    pub fn tight(&self) -> bool {
        // (A read that is no distance, read twice alike, is taken for a jump: none of P2 near
        // it, as near any.)
        let absurd_twice = self.absurd.is_some_and(|(_, _, _, times)| times > 1);
        self.lateness == Lateness::None && self.read_delay == 0 && self.period <= 2 * MS && !absurd_twice
    }

    /// Whether a read that is no distance persists for a list's place (read twice alike, it
    /// is taken for a discontinuity between the anchor and the list: the list is placed from
    /// its own reads, with the GPU times read).
    pub fn misplaced(&self) -> bool {
        self.absurd.is_some_and(|(_, read, ns, times)| read == Read::Placement && times > 1 && ns > 0)
    }

    /// Whether GPU times must come out exact: collected at least every 2 ms (a jump comes
    /// with a pause in collects, and a suspend with a second of GPU time no anchor saw, read
    /// as one `f32` distance), anchors reached within 1 ms, nothing absurd (docs/design.md,
    /// section 8, "Exactness").
    pub fn exact(&self) -> bool {
        let late = match self.lateness {
            Lateness::None => 0,
            Lateness::Constant(l) | Lateness::Random(l) | Lateness::Bursts { late: l, .. } => l,
            Lateness::Rising { per_s } => per_s.saturating_mul(self.duration / S + 1),
        };
        self.period <= 4 * MS && self.absurd.is_none() && late <= MS && self.jumps.is_empty()
    }

    /// The discontinuities the collector must count: each jump, a first pair whose reads are
    /// wrong together, and an anchor step read far too long twice alike (as a GPU counter
    /// that jumped: the timeline takes it).
    pub fn discontinuities(&self, absurd_injected: bool) -> usize {
        let stepped = absurd_injected
            && self.absurd.is_some_and(|(_, read, ns, times)| {
                read == Read::AnchorStep && times > 1 && ns > 0 && ns < i64::MAX / 2
            });
        self.jumps.len() + usize::from(self.bad_pair == Some(BadPair::Reads)) + usize::from(stepped)
    }
}
