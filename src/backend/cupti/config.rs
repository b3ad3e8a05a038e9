//! [`CuptiConfig`]: what a [`CuptiBackend`](super::CuptiBackend) is made with, and whether
//! it falls back to CUDA events when another tool holds CUPTI.

use super::{CuptiError, TracerConfig};
use std::time::Duration;

/// A [`CuptiBackend`](super::CuptiBackend)'s settings (what the tracer needs; the context's
/// own settings, its name, sinks and hold limit, are the [`Builder`](crate::Builder)'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuptiConfig {
    /// CUPTI's buffer pool. CUPTI fills a buffer per stream with work in flight (and one for
    /// records of no stream): give at least two per stream the process uses at once.
    /// Default: 64 buffers of 1 MiB.
    pub buffers: TracerConfig,
    /// How often the backend's flush thread asks CUPTI for the buffers whose records are all
    /// complete (`cuptiActivityFlushAll`, not forced) and reads them: this bounds how late a
    /// zone comes out. Zero: no flush thread, each collect asks. Default 5 ms. (Measured on
    /// the H200: asking from busy recording threads bent CUPTI's times against the host
    /// clock by tens of microseconds; one thread did not.)
    pub flush_period: Duration,
    /// Whether CUPTI calls the backend at each launching API call, to tie the launch to the
    /// zone open on the thread (default on). Off, launches cost CUPTI's record alone, all
    /// work comes out at depth 0, and zones, with no work tied to them, are counted empty.
    pub launch_callback: bool,
    /// The most records read out of CUPTI and not collected yet (default 2^18): past it the
    /// flush thread leaves CUPTI's buffers unread until a collect.
    pub max_pending_records: usize,
    /// The most launch links not collected yet (default 2^20): past it a link is dropped
    /// (counted in `ActivityLosses::links_dropped`) and its work comes out at depth 0.
    pub max_pending_links: usize,
    /// When another CUPTI subscriber holds CUPTI (Nsight Systems, Kineto, another library:
    /// [`CuptiError::OtherSubscriber`]), time zones with CUDA events instead of failing
    /// (default off): the backend then works as a [`CudaBackend`](crate::backend::cuda::CudaBackend) does (each zone spans its
    /// own begin and end events; kernels are not zones of their own), with the same lists,
    /// guards and sinks, and [`Backend::timing`](crate::Backend::timing) and `Stats::timing` say
    /// [`Timing::Events`](crate::backend::Timing::Events).
    pub fall_back_to_events: bool,
}

impl Default for CuptiConfig {
    fn default() -> Self {
        Self {
            buffers: TracerConfig { buffer_size: 1 << 20, buffer_count: 64 },
            flush_period: Duration::from_millis(5),
            launch_callback: true,
            max_pending_records: 1 << 18,
            max_pending_links: 1 << 20,
            fall_back_to_events: false,
        }
    }
}

/// What a tracer that failed to start leaves: a fall-back to CUDA events when another
/// subscriber holds CUPTI and `config` asks for it (`Ok`), else the error.
pub(super) fn fall_back(error: CuptiError, config: &CuptiConfig) -> Result<(), CuptiError> {
    match error {
        CuptiError::OtherSubscriber { .. } if config.fall_back_to_events => Ok(()),
        error => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_another_subscriber_falls_back_to_cuda_events_and_only_when_asked() {
        let other = CuptiError::OtherSubscriber { call: "cuptiSubscribe" };
        let asked = CuptiConfig { fall_back_to_events: true, ..CuptiConfig::default() };
        assert_eq!(fall_back(other.clone(), &asked), Ok(()));
        assert_eq!(fall_back(other.clone(), &CuptiConfig::default()), Err(other));
        let denied = CuptiError::NotPermitted { call: "cuptiSubscribe" };
        assert_eq!(fall_back(denied.clone(), &asked), Err(denied), "not permitted is not held by another");
        assert_eq!(fall_back(CuptiError::AlreadyStarted, &asked), Err(CuptiError::AlreadyStarted));
    }
}
