//! The clocks a trace relates: `Instant` (the crate's host clock), Linux's `CLOCK_MONOTONIC`
//! (what `Instant` reads there, and what the trace's timestamps are on), `CLOCK_BOOTTIME`
//! (a system trace's clock) and `CLOCK_REALTIME` (the wall clock). Measured once per trace:
//! each pair is read back to back, the tightest of three kept. A leaf: imports nothing of
//! the crate.

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

/// Reads `other` between two reads of `first`, three times: `other`'s reading and `first`'s
/// at the same moment (the middle of the tightest bracket).
fn pair(first: impl Fn() -> i64, other: impl Fn() -> i64) -> (i64, i64) {
    (0..3)
        .map(|_| {
            let before = first();
            let value = other();
            let after = first();
            (after - before, before + (after - before) / 2, value)
        })
        .min_by_key(|&(width, _, _)| width)
        .map(|(_, first, other)| (first, other))
        .expect("three readings")
}

impl Clocks {
    /// The clocks now.
    pub(crate) fn measure() -> Self {
        let anchor = Instant::now();
        #[cfg(target_os = "linux")]
        {
            // `Instant` reads CLOCK_MONOTONIC on Linux: its distance from `anchor` is exact.
            let (anchor_mono_ns, since_anchor) =
                pair(|| read(libc::CLOCK_MONOTONIC), || signed_ns(Instant::now(), anchor));
            let anchor_mono_ns = anchor_mono_ns - since_anchor;
            let (mono, boot) = pair(|| read(libc::CLOCK_MONOTONIC), || read(libc::CLOCK_BOOTTIME));
            let (mono_r, real) = pair(|| read(libc::CLOCK_MONOTONIC), || read(libc::CLOCK_REALTIME));
            Self {
                anchor,
                anchor_mono_ns,
                boot_minus_mono_ns: Some(boot - mono),
                real_minus_mono_ns: real - mono_r,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            // No CLOCK_MONOTONIC to name: the trace's "monotonic" clock counts from a second
            // before the trace was made.
            let anchor_mono_ns = 1_000_000_000;
            let wall = || match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
                Ok(since) => i64::try_from(since.as_nanos()).unwrap_or(i64::MAX),
                Err(_) => 0,
            };
            let (mono, real) = pair(|| anchor_mono_ns + signed_ns(Instant::now(), anchor), wall);
            Self { anchor, anchor_mono_ns, boot_minus_mono_ns: None, real_minus_mono_ns: real - mono }
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
