//! [`Config`]: how a context is built, checked before anything is made.

use crate::error::ConfigError;
use crate::location::Verbosity;
use crate::slots::freelist::NIL;
use crate::slots::pool::Pool;
use std::time::Duration;

/// The largest slot index a pool may hand out: the two indices above it mark a list's
/// dropped and skipped zones (`record/list.rs`).
pub(crate) const MAX_SLOTS: u32 = NIL - 2;

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
    /// Default 16384 (the seed had a fixed 16128).
    pub max_capacity: u32,
    /// Slots a list reserves with one CAS. Default 16.
    pub batch: u32,
    /// Zones above this level record nothing. Default `Fine` (everything).
    pub verbosity: Verbosity,
    /// The collector takes a new time anchor when the newest one is older than this. While
    /// anchors are under 16 ms apart (collect at least every 16 ms minus this), every
    /// timestamp is exact to the nanosecond: each time is read as an `f32` millisecond
    /// distance from an anchor, which converts back to whole nanoseconds exactly below
    /// 16 ms. Default 5 ms.
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
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (initial, max) = (self.initial_capacity, self.max_capacity);
        if initial == 0 || max == 0 {
            return Err(ConfigError::ZeroCapacity { initial, max });
        }
        if initial > max {
            return Err(ConfigError::InvertedCapacity { initial, max });
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
}
