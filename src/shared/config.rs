//! [`Config`]: how a context is built, checked before anything is made.

use crate::error::ConfigError;
use crate::location::Verbosity;
use crate::slots::freelist::NIL;
use crate::slots::pool::Pool;
use std::time::Duration;

/// The most slots a pool may have, 2^24 - 3; slot indices are below it. Above them, `NIL`
/// (2^24 - 1, the top of the freelist head's 24-bit index field) and `NIL - 1` mark a list's
/// dropped and skipped zones (`record/list/mod.rs`).
pub(crate) const MAX_SLOTS: u32 = NIL - 2;

/// Free slots a list needs to begin a zone: one for the begin event, one kept for its end (a
/// zone that begins can always end: `record/list/mod.rs`). A pool smaller than this could never
/// record a zone.
pub(crate) const BEGIN_SLOTS: u32 = 2;

/// Lists that can each hold a full reservation batch at once: a batch is cut to
/// `max_capacity / BATCH_SHARES` (at least [`BEGIN_SLOTS`]).
const BATCH_SHARES: u32 = 16;

/// How a context is built. Every field has a sensible default ([`Config::default`]); set
/// fields on a default value, or use the [`Builder`](crate::Builder)'s setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The context's name (sinks show it: a Chrome process name, a Tracy GPU context name).
    pub name: String,
    /// Events created with the context (rounded up to a power of two). Default 64.
    pub initial_capacity: u32,
    /// Most events the pool may grow to; at the maximum, zones are dropped and counted.
    /// At most 16,777,213 (2^24 - 3: what the freelist can index, less two markers). Default
    /// 16384 (the seed had a fixed 16128).
    pub max_capacity: u32,
    /// Most slots in a segment of free slots: a list's reservation is refilled with whole
    /// segments (from its thread's magazine, or the freelist with one CAS), and a list's
    /// recorded slots go back to the pool cut into segments of this length. Default 16.
    /// When the context is built, a batch above a sixteenth of
    /// `max_capacity` (at least 2) is cut to that, so that one list's reservation cannot
    /// starve the others: at least 16 lists can each hold a batch at once in a pool of 32
    /// slots or more. [`TracingContext::config`](crate::TracingContext::config) shows the
    /// batch used.
    pub batch: u32,
    /// Zones above this level record nothing. Default `Fine` (everything).
    pub verbosity: Verbosity,
    /// The collector takes a new time anchor when the newest one is older than this.
    /// Default 5 ms.
    ///
    /// **Exact times.** A zone's GPU times are exact to the nanosecond when the events of
    /// its list are under 16 ms apart and the context is collected at least every 4 ms, with
    /// this at its default and while the GPU reaches the collector's anchors within 1 ms of
    /// their record: every time is then read as an `f32` millisecond distance under 16 ms
    /// (from the event before, or from an anchor), which converts back to whole nanoseconds
    /// exactly. A longer distance is off by at most 2^-24 of it plus 1 ns (a zone of 1 s by
    /// up to 60 ns).
    pub anchor_interval: Duration,
    /// How long a list still being recorded may hold back the later lists of its lane (the
    /// lane's GPU order waits for its place). Past it, the collector reports
    /// `Error::LaneHeld` (which list, where its first zone is, for how long) and emits the
    /// lane's later lists without it; the late list is emitted when it comes, apart from the
    /// lane's in-order zones. Default 500 ms.
    pub hold_limit: Duration,
    /// With `Some(period)`, the context runs its own collector thread, which calls
    /// [`TracingContext::collect`](crate::TracingContext::collect) every `period` until the last handle is dropped. Default
    /// `None`: the application calls `collect`.
    pub collect_every: Option<Duration>,
    /// Whether each zone also pushes an NVTX range on the recording thread (feature `nvtx`;
    /// [`TracingContext::set_nvtx_ranges`](crate::TracingContext::set_nvtx_ranges) switches it at run time). Default `true`.
    #[cfg(feature = "nvtx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
    pub nvtx_ranges: bool,
    /// Whether each zone keeps where and when the host recorded it
    /// ([`Zone::launch`](crate::sink::Zone::launch): two host clock reads and a thread-local
    /// per zone begun;
    /// [`TracingContext::set_record_launches`](crate::TracingContext::set_record_launches)
    /// switches it at run time). Default `false`.
    pub record_launches: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: "gpu".to_owned(),
            initial_capacity: 64,
            max_capacity: 16384,
            batch: 16,
            verbosity: Verbosity::Fine,
            anchor_interval: Duration::from_millis(5),
            hold_limit: Duration::from_millis(500),
            collect_every: None,
            #[cfg(feature = "nvtx")]
            nvtx_ranges: true,
            record_launches: false,
        }
    }
}

impl Config {
    /// Checks the configuration: the errors [`Builder::build`](crate::Builder::build) returns
    /// for it. A batch too large is not an error: `build` cuts it ([`Config::batch`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (initial, max) = (self.initial_capacity, self.max_capacity);
        if initial == 0 || max == 0 {
            return Err(ConfigError::ZeroCapacity { initial, max });
        }
        if initial > max {
            return Err(ConfigError::InvertedCapacity { initial, max });
        }
        if max < BEGIN_SLOTS {
            return Err(ConfigError::TooSmall { max, least: BEGIN_SLOTS });
        }
        if self.batch == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        let rounded = initial.checked_next_power_of_two().ok_or(ConfigError::InitialTooLarge { initial })?;
        let shift = rounded.trailing_zeros();
        let limit = Pool::<(), ()>::max_reachable(shift).min(u64::from(MAX_SLOTS));
        if u64::from(max) > limit || Pool::<(), ()>::pages_needed(shift, max).is_none() {
            return Err(ConfigError::TooLarge { initial: rounded, max, limit });
        }
        Ok(())
    }
    /// Cuts the batch to its share of the pool ([`Config::batch`]).
    pub(crate) fn cut_batch(&mut self) {
        self.batch = self.batch.min((self.max_capacity / BATCH_SHARES).max(BEGIN_SLOTS));
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_maximum_capacity_is_what_the_freelist_can_index() {
        let config = |max| Config { initial_capacity: 1, max_capacity: max, ..Config::default() };
        assert_eq!(MAX_SLOTS, (1 << 24) - 3);
        assert_eq!(config(MAX_SLOTS).validate(), Ok(()));
        assert_eq!(
            config(MAX_SLOTS + 1).validate(),
            Err(ConfigError::TooLarge { initial: 1, max: MAX_SLOTS + 1, limit: u64::from(MAX_SLOTS) })
        );
    }
}
