//! The clocks a trace relates: `Instant` (the crate's host clock), Linux's `CLOCK_MONOTONIC`
//! (what `Instant` reads there, and what the trace's timestamps are on), `CLOCK_BOOTTIME`
//! (a system trace's clock) and `CLOCK_REALTIME` (the wall clock). Each pair is read back to
//! back, the tightest of three kept, which places it within the bracket of that read.
//!
//! Every trace of the process places an `Instant` alike, so that two traces of one run (a
//! streamed trace and a flight recorder's dump) put a zone at the same nanosecond: where an
//! `Instant` is on `CLOCK_MONOTONIC` is measured once per process (on Linux they are one
//! clock: it never changes), and the distances to `CLOCK_BOOTTIME` and `CLOCK_REALTIME` are
//! measured for each trace but kept from the previous trace while the new reading's bracket
//! overlaps the previous one's (neither clock stepped: no suspend, no wall-clock change in
//! between). A leaf: imports nothing of the crate.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// Perfetto's ids of the builtin clocks (`BuiltinClock`).
pub(super) const REALTIME: u32 = 1;
pub(super) const MONOTONIC: u32 = 3;
pub(super) const BOOTTIME: u32 = 6;

/// How the clocks stood against each other when the trace was made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clocks {
    /// An `Instant` and the `CLOCK_MONOTONIC` nanoseconds it was.
    anchor: Instant,
    anchor_mono_ns: i64,
    /// `CLOCK_BOOTTIME - CLOCK_MONOTONIC` (the time the machine spent suspended), on Linux.
    boot_minus_mono_ns: Option<i64>,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC`.
    real_minus_mono_ns: i64,
}

/// Nanoseconds from `b` to `a`, negative when `a` is earlier.
fn signed_ns(a: Instant, b: Instant) -> i64 {
    match a.checked_duration_since(b) {
        Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from(b.duration_since(a).as_nanos()).unwrap_or(i64::MAX),
    }
}

#[cfg(target_os = "linux")]
fn read(clock: libc::clockid_t) -> i64 {
    let mut at = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: `at` is a valid, writable `timespec` for the call's duration, and both clocks
    // asked for exist on every Linux since 2.6.39.
    let failed = unsafe { libc::clock_gettime(clock, &mut at) } != 0;
    debug_assert!(!failed, "clock_gettime({clock})");
    // `time_t` and `c_long` are `i64` on 64-bit targets, `i32` on 32-bit ones.
    #[allow(clippy::useless_conversion)]
    let ns = i64::from(at.tv_sec) * 1_000_000_000 + i64::from(at.tv_nsec);
    ns
}

/// A distance between two clocks, `other - first`, and the width of the bracket it was read
/// in: the true distance is within half the width of it.
#[derive(Debug, Clone, Copy)]
struct Distance {
    ns: i64,
    width: i64,
}

impl Distance {
    /// `self`, or `earlier` where their brackets overlap: the clocks did not step in between,
    /// and every trace of the process then writes the same distance.
    fn or_unchanged(self, earlier: Option<Self>) -> Self {
        match earlier {
            // Each is within half its width of the truth (the halves rounded down: 1 ns).
            Some(earlier) if (self.ns - earlier.ns).abs() <= (self.width + earlier.width) / 2 + 1 => earlier,
            _ => self,
        }
    }
}

/// Reads `other` between two reads of `first`, three times: `other`'s reading and `first`'s
/// at the same moment (the middle of the tightest bracket), and the bracket's width.
fn pair(first: impl Fn() -> i64, other: impl Fn() -> i64) -> (i64, i64, i64) {
    (0..3)
        .map(|_| {
            let before = first();
            let value = other();
            let after = first();
            (after - before, before + (after - before) / 2, value)
        })
        .min_by_key(|&(width, _, _)| width)
        .map(|(width, first, other)| (first, other, width))
        .expect("three readings")
}

/// `other - first`, read by [`pair`].
fn distance(first: impl Fn() -> i64, other: impl Fn() -> i64) -> Distance {
    let (first, other, width) = pair(first, other);
    Distance { ns: other - first, width }
}

/// An `Instant` and the `CLOCK_MONOTONIC` nanoseconds it was, for the whole process.
fn anchor() -> (Instant, i64) {
    static ANCHOR: OnceLock<(Instant, i64)> = OnceLock::new();
    *ANCHOR.get_or_init(|| {
        let anchor = Instant::now();
        #[cfg(target_os = "linux")]
        {
            // `Instant` reads CLOCK_MONOTONIC on Linux: its distance from `anchor` is exact.
            let (mono, since_anchor, _) =
                pair(|| read(libc::CLOCK_MONOTONIC), || signed_ns(Instant::now(), anchor));
            (anchor, mono - since_anchor)
        }
        #[cfg(not(target_os = "linux"))]
        {
            // No CLOCK_MONOTONIC to name: the trace's "monotonic" clock counts from a second
            // before the first trace was made.
            (anchor, 1_000_000_000)
        }
    })
}

/// The distances measured for the latest trace: (boot, real).
static DISTANCES: Mutex<Option<(Option<Distance>, Distance)>> = Mutex::new(None);

impl Clocks {
    /// The clocks now.
    pub(crate) fn measure() -> Self {
        let (anchor, anchor_mono_ns) = anchor();
        #[cfg(target_os = "linux")]
        let (boot, real) = (
            Some(distance(|| read(libc::CLOCK_MONOTONIC), || read(libc::CLOCK_BOOTTIME))),
            distance(|| read(libc::CLOCK_MONOTONIC), || read(libc::CLOCK_REALTIME)),
        );
        #[cfg(not(target_os = "linux"))]
        let (boot, real) = {
            let mono_now = || anchor_mono_ns + signed_ns(Instant::now(), anchor);
            let wall = || match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
                Ok(since) => i64::try_from(since.as_nanos()).unwrap_or(i64::MAX),
                Err(_) => 0,
            };
            (None, distance(mono_now, wall))
        };
        let mut latest = DISTANCES.lock().unwrap_or_else(PoisonError::into_inner);
        let (earlier_boot, earlier_real) = latest.map_or((None, None), |(boot, real)| (boot, Some(real)));
        let boot = boot.map(|boot| boot.or_unchanged(earlier_boot));
        let real = real.or_unchanged(earlier_real);
        *latest = Some((boot, real));
        Self {
            anchor,
            anchor_mono_ns,
            boot_minus_mono_ns: boot.map(|boot| boot.ns),
            real_minus_mono_ns: real.ns,
        }
    }

    /// `at` on `CLOCK_MONOTONIC`, in nanoseconds.
    pub(crate) fn mono_ns(&self, at: Instant) -> i64 {
        self.anchor_mono_ns.saturating_add(signed_ns(at, self.anchor))
    }

    /// The clocks at `mono_ns` on `CLOCK_MONOTONIC` (id, timestamp), the trace's clock
    /// (BOOTTIME where there is one) first.
    pub(super) fn snapshot(&self, mono_ns: i64) -> Vec<(u32, u64)> {
        let at = |offset: i64| mono_ns.saturating_add(offset).max(0) as u64;
        let mut clocks = Vec::with_capacity(3);
        if let Some(boot) = self.boot_minus_mono_ns {
            clocks.push((BOOTTIME, at(boot)));
        }
        clocks.push((MONOTONIC, at(0)));
        clocks.push((REALTIME, at(self.real_minus_mono_ns)));
        clocks
    }

    /// The clock the trace is read on: BOOTTIME, as a Linux system trace, where there is one.
    pub(super) fn primary(&self) -> u32 {
        if self.boot_minus_mono_ns.is_some() {
            BOOTTIME
        } else {
            MONOTONIC
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Clocks;
    use std::time::{Duration, Instant};

    #[test]
    fn every_trace_of_the_process_places_an_instant_and_the_other_clocks_alike() {
        let (first, second) = (Clocks::measure(), Clocks::measure());
        let now = Instant::now();
        assert_eq!(first.mono_ns(now), second.mono_ns(now));
        assert_eq!(first.snapshot(first.mono_ns(now)), second.snapshot(second.mono_ns(now)));
    }

    #[test]
    fn instants_map_onto_the_monotonic_clock_at_their_distances() {
        let clocks = Clocks::measure();
        let now = Instant::now();
        let later = now + Duration::from_nanos(1_234_567);
        assert_eq!(clocks.mono_ns(later) - clocks.mono_ns(now), 1_234_567);
        let snapshot = clocks.snapshot(clocks.mono_ns(now));
        let real = snapshot.iter().find(|(id, _)| *id == super::REALTIME).expect("realtime").1;
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        assert!(
            (wall.as_nanos() as i64 - real as i64).abs() < 1_000_000_000,
            "the wall clock, within a second"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_instant_is_where_clock_monotonic_reads_it() {
        let clocks = Clocks::measure();
        let before = super::read(libc::CLOCK_MONOTONIC);
        let at = clocks.mono_ns(Instant::now());
        let after = super::read(libc::CLOCK_MONOTONIC);
        // Within the reads around it, give or take the anchor's bracket (well under 10 µs).
        assert!(at >= before - 10_000 && at <= after + 10_000, "{before} <= {at} <= {after}");
    }
}
