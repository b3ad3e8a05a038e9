//! Every failure code a backend of this crate reports on purpose (the `code` of a
//! `BackendError`), and [`ErrorKind`], the one typed view of them a program matches on
//! (`BackendError::kind`). A leaf of `backend/`, importing nothing of the crate, compiled
//! without any feature: a program built with one backend still names the others' kinds, and
//! the codes live in one table (the backends' `code` strings are these constants).
//!
//! Codes a backend passes through from its API (a `CUresult` name, a `vk::Result`) have no
//! kind of their own, except those that mean "no GPU here" ([`ErrorKind::NoDevice`]).

/// CUDA: the driver library could not be loaded.
pub(crate) const CUDA_NO_DRIVER_LIBRARY: &str = "NO_DRIVER_LIBRARY";
/// CUDA and the simulation: a graph zone read before its graph's first launch.
pub(crate) const GRAPH_NOT_LAUNCHED: &str = "GRAPH_NOT_LAUNCHED";
/// CUDA: a zone node added to a graph already instantiated.
pub(crate) const GRAPH_ALREADY_INSTANTIATED: &str = "GRAPH_ALREADY_INSTANTIATED";
/// Vulkan: the loader could not be opened (its message follows).
pub(crate) const VK_NO_LOADER: &str = "NO_VULKAN_LOADER";
/// Vulkan: no Vulkan 1.2 device with a compute queue that writes timestamps.
pub(crate) const VK_NO_DEVICE: &str = "NO_VULKAN_DEVICE";
/// Vulkan: a wait gave up after the backend's wait timeout.
pub(crate) const VK_WAIT_TIMEOUT: &str = "WAIT_TIMEOUT";
/// Vulkan: calibrated anchors asked of a device without the extension.
pub(crate) const VK_NOT_CALIBRATED: &str = "NO_CALIBRATED_TIMESTAMPS";
/// Vulkan: the spin shader on a device without `shaderDeviceClock`.
pub(crate) const VK_NO_SHADER_CLOCK: &str = "NO_SHADER_CLOCK";
/// wgpu: a zone mark on a device without `Features::TIMESTAMP_QUERY`.
pub(crate) const WGPU_NO_TIMESTAMPS: &str = "the device has no TIMESTAMP_QUERY";
/// wgpu: a zone mark inside a pass without `Features::TIMESTAMP_QUERY_INSIDE_PASSES`.
pub(crate) const WGPU_NO_PASS_TIMESTAMPS: &str = "the device has no TIMESTAMP_QUERY_INSIDE_PASSES";
/// wgpu: a readback limit of zero.
pub(crate) const WGPU_ZERO_READBACK_LIMIT: &str = "a readback limit of zero lets every readback go";
/// wgpu: a timestamp's readback never came.
pub(crate) const WGPU_LOST: &str = "the timestamp's readback never came";
/// wgpu: a stream marked other than through its `WgpuList`.
pub(crate) const WGPU_NO_SITE: &str = "a wgpu stream is recorded through its WgpuList";
/// wgpu: `WgpuList::resolve` while a pass zone is open.
pub(crate) const WGPU_PASS_OPEN: &str = "a pass zone of the list is open";
/// wgpu: an event of another `WgpuBackend`.
pub(crate) const WGPU_FOREIGN_EVENT: &str = "the event belongs to another wgpu backend";
/// wgpu: a wait gave up before the readback came.
pub(crate) const WGPU_WAIT_TIMEOUT: &str = "the timestamp's readback did not come in time";

/// What a [`BackendError`](crate::BackendError) means, for the failures a program may act on
/// ([`BackendError::kind`](crate::BackendError::kind)); `None` there for a failure passed
/// through from the GPU API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No usable GPU of this backend here (the error of `CudaBackend::new` or
    /// `VulkanDevice::open`): no driver library or Vulkan loader, no device, only the CUDA
    /// driver's stub library, or a Vulkan driver that refuses to start. Tests and examples
    /// skip on it; any other error there is a real failure.
    NoDevice,
    /// A wait for an event gave up: Vulkan's `wait_timeout`, or wgpu's readback that did not
    /// come in time.
    WaitTimeout,
    /// A graph zone read before its graph's first launch (CUDA, the simulation).
    GraphNotLaunched,
    /// A zone node added to a CUDA graph already instantiated (the instance would never
    /// record it).
    GraphAlreadyInstantiated,
    /// Calibrated anchors asked of a Vulkan device without `VK_KHR_calibrated_timestamps`.
    NotCalibrated,
    /// The Vulkan spin shader on a device without `shaderDeviceClock`.
    NoShaderClock,
    /// A wgpu zone mark on a device without `Features::TIMESTAMP_QUERY`: the zone is dropped
    /// and counted.
    NoTimestamps,
    /// A wgpu zone mark inside a pass on a device without
    /// `Features::TIMESTAMP_QUERY_INSIDE_PASSES`: the pass's own zone is timed, the zones
    /// inside it are dropped and counted.
    NoPassTimestamps,
    /// `WgpuBackend::set_readback_limit(Duration::ZERO)`: every readback would be let go.
    ZeroReadbackLimit,
    /// A wgpu timestamp's readback never came: its encoder dropped unfinished, its command
    /// buffer dropped unsubmitted, the mapping failed, or it was held past the readback limit.
    ReadbackLost,
    /// A wgpu stream marked other than through its `WgpuList`, which writes each timestamp on
    /// the encoder or pass it is given.
    NoSite,
    /// `WgpuList::resolve` while a pass zone of the list is open (its end query is written
    /// when the pass ends, after the resolve would read it).
    PassOpen,
    /// An event made by another `WgpuBackend` (not a clone of this one) recorded here.
    ForeignEvent,
}

/// The kind of a failure code (`code`, the `code` of a `BackendError`).
pub(super) fn kind_of(code: &str) -> Option<ErrorKind> {
    use ErrorKind::*;
    let kind = match code {
        CUDA_NO_DRIVER_LIBRARY
        | "CUDA_ERROR_NO_DEVICE"
        | "CUDA_ERROR_STUB_LIBRARY"
        | "CUDA_ERROR_INVALID_DEVICE"
        | "ERROR_INCOMPATIBLE_DRIVER"
        | "ERROR_INITIALIZATION_FAILED" => NoDevice,
        // The Vulkan codes of a missing loader or device carry the reason after the code.
        _ if code.starts_with(VK_NO_LOADER) || code.starts_with(VK_NO_DEVICE) => NoDevice,
        VK_WAIT_TIMEOUT | WGPU_WAIT_TIMEOUT => WaitTimeout,
        GRAPH_NOT_LAUNCHED => GraphNotLaunched,
        GRAPH_ALREADY_INSTANTIATED => GraphAlreadyInstantiated,
        VK_NOT_CALIBRATED => NotCalibrated,
        VK_NO_SHADER_CLOCK => NoShaderClock,
        WGPU_NO_TIMESTAMPS => NoTimestamps,
        WGPU_NO_PASS_TIMESTAMPS => NoPassTimestamps,
        WGPU_ZERO_READBACK_LIMIT => ZeroReadbackLimit,
        WGPU_LOST => ReadbackLost,
        WGPU_NO_SITE => NoSite,
        WGPU_PASS_OPEN => PassOpen,
        WGPU_FOREIGN_EVENT => ForeignEvent,
        _ => return None,
    };
    Some(kind)
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_kind_and_no_two_codes_collide() {
        let table = [
            (CUDA_NO_DRIVER_LIBRARY, ErrorKind::NoDevice),
            (GRAPH_NOT_LAUNCHED, ErrorKind::GraphNotLaunched),
            (GRAPH_ALREADY_INSTANTIATED, ErrorKind::GraphAlreadyInstantiated),
            (VK_NO_LOADER, ErrorKind::NoDevice),
            (VK_NO_DEVICE, ErrorKind::NoDevice),
            (VK_WAIT_TIMEOUT, ErrorKind::WaitTimeout),
            (VK_NOT_CALIBRATED, ErrorKind::NotCalibrated),
            (VK_NO_SHADER_CLOCK, ErrorKind::NoShaderClock),
            (WGPU_NO_TIMESTAMPS, ErrorKind::NoTimestamps),
            (WGPU_NO_PASS_TIMESTAMPS, ErrorKind::NoPassTimestamps),
            (WGPU_ZERO_READBACK_LIMIT, ErrorKind::ZeroReadbackLimit),
            (WGPU_LOST, ErrorKind::ReadbackLost),
            (WGPU_NO_SITE, ErrorKind::NoSite),
            (WGPU_PASS_OPEN, ErrorKind::PassOpen),
            (WGPU_FOREIGN_EVENT, ErrorKind::ForeignEvent),
            (WGPU_WAIT_TIMEOUT, ErrorKind::WaitTimeout),
        ];
        for (code, kind) in table {
            assert_eq!(kind_of(code), Some(kind), "{code}");
        }
        let mut codes: Vec<_> = table.iter().map(|(code, _)| *code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), table.len(), "two kinds share a code");
    }

    #[test]
    fn a_missing_loader_or_device_keeps_its_kind_with_the_reason_after_it() {
        let code = format!("{VK_NO_LOADER}: libvulkan.so.1 not found");
        assert_eq!(kind_of(&code), Some(ErrorKind::NoDevice));
        let code = format!("{VK_NO_DEVICE} (no compute queue with timestamps)");
        assert_eq!(kind_of(&code), Some(ErrorKind::NoDevice));
    }

    #[test]
    fn codes_passed_through_from_the_api_have_no_kind() {
        for code in
            ["CUDA_ERROR_LAUNCH_FAILED", "ERROR_DEVICE_LOST", "", "WAIT_TIMEOUT_", "graph_not_launched"]
        {
            assert_eq!(kind_of(code), None, "{code:?}");
        }
    }
}
