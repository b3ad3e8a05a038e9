//! What the crate holds of a Vulkan device (`DeviceShared`): the handles, the queues with
//! their locks, the properties and the calibrated-timestamps functions. Every object of
//! `vulkan/` (the device, its queues, query pages, the spin shader) keeps an `Arc` to it; it
//! imports nothing of its siblings but the error helper.

use super::errors::vk_error;
use crate::backend::BackendError;
use ash::vk;
use std::sync::{Arc, Mutex};

/// Which calibrated-timestamps extension the device has enabled, with its function.
pub(super) enum CalibratedTimestamps {
    Khr(ash::khr::calibrated_timestamps::Device),
    Ext(ash::ext::calibrated_timestamps::Device),
}

impl std::fmt::Debug for CalibratedTimestamps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Khr(_) => "VK_KHR_calibrated_timestamps",
            Self::Ext(_) => "VK_EXT_calibrated_timestamps",
        })
    }
}

impl CalibratedTimestamps {
    /// The device clock and `CLOCK_MONOTONIC` read together, and the largest deviation
    /// between the two samples (ns), as the driver reports it.
    pub(super) fn read(&self) -> Result<([u64; 2], u64), BackendError> {
        let infos = [
            vk::CalibratedTimestampInfoKHR::default().time_domain(vk::TimeDomainKHR::DEVICE),
            vk::CalibratedTimestampInfoKHR::default().time_domain(vk::TimeDomainKHR::CLOCK_MONOTONIC),
        ];
        // Safety: two valid infos for time domains the device reported as calibrateable
        // (checked when the extension was chosen).
        let (times, deviation) = unsafe {
            match self {
                Self::Khr(d) => d.get_calibrated_timestamps(&infos),
                Self::Ext(d) => d.get_calibrated_timestamps(&infos),
            }
        }
        .map_err(vk_error("vkGetCalibratedTimestampsEXT"))?;
        Ok(([times[0], times[1]], deviation))
    }
}

/// What the crate holds of a device.
pub(super) struct DeviceShared {
    pub(super) entry: ash::Entry,
    pub(super) instance: ash::Instance,
    pub(super) physical: vk::PhysicalDevice,
    pub(super) device: ash::Device,
    pub(super) family: u32,
    /// One lock per queue of `family`: Vulkan requires queue submissions to be externally
    /// synchronized.
    pub(super) queues: Vec<(vk::Queue, Arc<Mutex<()>>)>,
    pub(super) calibrated: Option<CalibratedTimestamps>,
    pub(super) shader_clock: bool,
    pub(super) period: f32,
    pub(super) valid_bits: u32,
    pub(super) name: String,
    /// Whether the crate created the device and instance (and destroys them).
    pub(super) owned: bool,
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanDevice")
            .field("name", &self.name)
            .field("queue_family", &self.family)
            .field("queues", &self.queues.len())
            .field("calibrated", &self.calibrated)
            .field("timestamp_period", &self.period)
            .field("timestamp_valid_bits", &self.valid_bits)
            .finish()
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        if self.owned {
            // Safety: the last holder of the device: every query pool, command pool and
            // pipeline made from it holds an Arc to it and is gone. Waiting idle first lets
            // work still queued finish before the device goes.
            unsafe {
                let _ = self.device.device_wait_idle();
                self.device.destroy_device(None);
                self.instance.destroy_instance(None);
            }
        }
    }
}
