//! The Vulkan device the backend times: opened by the crate (tests, demos, a quick start) or
//! the application's own, wrapped.

use super::errors::{vk_error, NO_DEVICE, NO_LOADER};
use super::handles::{CalibratedTimestamps, DeviceShared};
use super::queue::VulkanQueue;
use crate::backend::BackendError;
use ash::vk;
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

/// The parts of an application's Vulkan device the backend needs
/// ([`VulkanDevice::from_raw`]).
#[derive(Clone)]
pub struct RawDevice {
    /// The loader's entry points.
    pub entry: ash::Entry,
    /// The instance (Vulkan 1.2 or later).
    pub instance: ash::Instance,
    /// The physical device.
    pub physical_device: vk::PhysicalDevice,
    /// The logical device, made with `hostQueryReset` enabled.
    pub device: ash::Device,
    /// The queue family whose queues the application submits timed command buffers to.
    pub queue_family: u32,
    /// How many queues of that family the device was made with.
    pub queue_count: u32,
    /// Whether `VK_KHR_calibrated_timestamps` or `VK_EXT_calibrated_timestamps` is enabled
    /// on the device (then anchors are calibrated against `CLOCK_MONOTONIC`).
    pub calibrated_timestamps: bool,
}

impl std::fmt::Debug for RawDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawDevice").field("device", &self.device.handle()).finish()
    }
}

/// A Vulkan device and the queues of one queue family, shared by the backend, its queries and
/// the [`VulkanQueue`]s. Cheap to clone.
#[derive(Debug, Clone)]
pub struct VulkanDevice {
    pub(super) shared: Arc<DeviceShared>,
}

fn has_extension(available: &[vk::ExtensionProperties], name: &CStr) -> bool {
    available.iter().any(|e| e.extension_name_as_c_str() == Ok(name))
}

impl VulkanDevice {
    /// Opens the first Vulkan 1.2 device with a compute queue family that writes timestamps:
    /// a new instance and device, with every queue of that family, `hostQueryReset`, the
    /// calibrated-timestamps extension and `shaderDeviceClock` where the device has them.
    ///
    /// Fails with [`ErrorKind::NoDevice`](crate::ErrorKind::NoDevice) when the Vulkan loader
    /// cannot be opened or no such device exists (the code says which, and why).
    pub fn open() -> Result<Self, BackendError> {
        // Safety: loads the system's Vulkan loader; its entry points are used only through
        // `ash`'s typed wrappers.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| BackendError::new("dlopen(libvulkan)", format!("{NO_LOADER}: {e}")))?;
        // Safety: a valid create info naming no layer and no extension.
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let instance =
            unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None) }
                .map_err(vk_error("vkCreateInstance"))?;
        match Self::open_device(&entry, &instance) {
            Ok(shared) => Ok(Self { shared: Arc::new(shared) }),
            Err(e) => {
                // Safety: nothing was made from the instance (open_device cleans up).
                unsafe { instance.destroy_instance(None) };
                Err(e)
            }
        }
    }

    fn open_device(entry: &ash::Entry, instance: &ash::Instance) -> Result<DeviceShared, BackendError> {
        // Safety: the instance is live.
        let physicals = unsafe { instance.enumerate_physical_devices() }
            .map_err(vk_error("vkEnumeratePhysicalDevices"))?;
        let chosen = physicals.into_iter().find_map(|physical| {
            // Safety: a physical device of this instance.
            let props = unsafe { instance.get_physical_device_properties(physical) };
            if props.api_version < vk::API_VERSION_1_2 || props.limits.timestamp_period <= 0.0 {
                return None;
            }
            // Safety: as above.
            let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
            families
                .iter()
                .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.timestamp_valid_bits > 0)
                .map(|family| (physical, props, family as u32, families[family]))
        });
        let Some((physical, props, family, family_props)) = chosen else {
            return Err(BackendError::new("vkEnumeratePhysicalDevices", NO_DEVICE));
        };
        // Safety: a physical device of this instance.
        let available = unsafe { instance.enumerate_device_extension_properties(physical) }
            .map_err(vk_error("vkEnumerateDeviceExtensionProperties"))?;
        let domains_ok = |domains: Vec<vk::TimeDomainKHR>| {
            domains.contains(&vk::TimeDomainKHR::DEVICE)
                && domains.contains(&vk::TimeDomainKHR::CLOCK_MONOTONIC)
        };
        let calibration = if has_extension(&available, ash::khr::calibrated_timestamps::NAME) {
            let fns = ash::khr::calibrated_timestamps::Instance::new(entry, instance);
            // Safety: the extension is supported by this physical device.
            unsafe { fns.get_physical_device_calibrateable_time_domains(physical) }
                .ok()
                .filter(|d| domains_ok(d.clone()))
                .map(|_| ash::khr::calibrated_timestamps::NAME)
        } else if has_extension(&available, ash::ext::calibrated_timestamps::NAME) {
            let fns = ash::ext::calibrated_timestamps::Instance::new(entry, instance);
            // Safety: as above.
            unsafe { fns.get_physical_device_calibrateable_time_domains(physical) }
                .ok()
                .filter(|d| domains_ok(d.clone()))
                .map(|_| ash::ext::calibrated_timestamps::NAME)
        } else {
            None
        };
        let mut clock_features = vk::PhysicalDeviceShaderClockFeaturesKHR::default();
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut features =
            vk::PhysicalDeviceFeatures2::default().push_next(&mut clock_features).push_next(&mut v12);
        // Safety: a physical device of this instance; the chain holds valid structures.
        unsafe { instance.get_physical_device_features2(physical, &mut features) };
        let base = features.features;
        if v12.host_query_reset == vk::FALSE {
            return Err(BackendError::new(
                "vkGetPhysicalDeviceFeatures2",
                format!("{NO_DEVICE}: no hostQueryReset"),
            ));
        }
        let shader_clock = has_extension(&available, ash::khr::shader_clock::NAME)
            && clock_features.shader_device_clock == vk::TRUE
            && base.shader_int64 == vk::TRUE;
        let mut extensions = Vec::new();
        extensions.extend(calibration.map(CStr::as_ptr));
        if shader_clock {
            extensions.push(ash::khr::shader_clock::NAME.as_ptr());
        }
        let priorities = vec![1.0f32; family_props.queue_count as usize];
        let queue_info =
            [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
        let mut enable_clock =
            vk::PhysicalDeviceShaderClockFeaturesKHR::default().shader_device_clock(shader_clock);
        let mut enable_v12 = vk::PhysicalDeviceVulkan12Features::default().host_query_reset(true);
        let enable_base = vk::PhysicalDeviceFeatures::default().shader_int64(shader_clock);
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&extensions)
            .enabled_features(&enable_base)
            .push_next(&mut enable_v12);
        if shader_clock {
            info = info.push_next(&mut enable_clock);
        }
        // Safety: valid create info: supported extensions and features, one family.
        let device =
            unsafe { instance.create_device(physical, &info, None) }.map_err(vk_error("vkCreateDevice"))?;
        let raw = RawDevice {
            entry: entry.clone(),
            instance: instance.clone(),
            physical_device: physical,
            device,
            queue_family: family,
            queue_count: family_props.queue_count,
            calibrated_timestamps: calibration.is_some(),
        };
        let mut shared = Self::shared(raw, true, props, family_props.timestamp_valid_bits);
        shared.shader_clock = shader_clock;
        Ok(shared)
    }

    /// Wraps an application's device. The backend records into the application's command
    /// buffers of `queue_family` and submits its own work (anchors without calibrated
    /// timestamps) to queue 0 of that family through [`VulkanQueue`]'s lock.
    ///
    /// # Safety
    ///
    /// Every handle in `raw` is valid and stays so while anything made from the returned
    /// device lives (the crate never destroys them); the device was made with
    /// `hostQueryReset` enabled, with `queue_count` queues of `queue_family`, and with a
    /// calibrated-timestamps extension enabled if `calibrated_timestamps` says so; the
    /// application submits to those queues only through `TracingContext::queue_submit` or while
    /// holding [`VulkanQueue::lock`].
    pub unsafe fn from_raw(raw: RawDevice) -> Self {
        // Safety: the caller's physical device of the caller's instance.
        let props = unsafe { raw.instance.get_physical_device_properties(raw.physical_device) };
        // Safety: as above.
        let families =
            unsafe { raw.instance.get_physical_device_queue_family_properties(raw.physical_device) };
        let valid_bits = families.get(raw.queue_family as usize).map_or(0, |f| f.timestamp_valid_bits);
        Self { shared: Arc::new(Self::shared(raw, false, props, valid_bits)) }
    }

    fn shared(
        raw: RawDevice,
        owned: bool,
        props: vk::PhysicalDeviceProperties,
        valid_bits: u32,
    ) -> DeviceShared {
        let queues = (0..raw.queue_count)
            // Safety: the device was made with `queue_count` queues of `queue_family`.
            .map(|i| (unsafe { raw.device.get_device_queue(raw.queue_family, i) }, Arc::new(Mutex::new(()))))
            .collect();
        let calibrated = raw.calibrated_timestamps.then(|| {
            // The KHR entry point if that extension is enabled (the loader has it), else EXT's.
            if khr_loaded(&raw) {
                CalibratedTimestamps::Khr(ash::khr::calibrated_timestamps::Device::new(
                    &raw.instance,
                    &raw.device,
                ))
            } else {
                CalibratedTimestamps::Ext(ash::ext::calibrated_timestamps::Device::new(
                    &raw.instance,
                    &raw.device,
                ))
            }
        });
        let name = props
            .device_name_as_c_str()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string_lossy().into_owned());
        DeviceShared {
            entry: raw.entry,
            instance: raw.instance,
            physical: raw.physical_device,
            device: raw.device,
            family: raw.queue_family,
            queues,
            calibrated,
            shader_clock: false,
            period: props.limits.timestamp_period,
            valid_bits,
            name,
            owned,
        }
    }

    /// Queue `index` of the device's queue family ([`queue_count`](Self::queue_count) of
    /// them), as its own lane.
    pub fn queue(&self, index: u32) -> Option<VulkanQueue> {
        let (raw, lock) = self.shared.queues.get(index as usize)?;
        Some(VulkanQueue::new(Arc::clone(&self.shared), *raw, Arc::clone(lock)))
    }

    /// Queues in the device's queue family.
    pub fn queue_count(&self) -> u32 {
        self.shared.queues.len() as u32
    }

    /// The queue family the backend times.
    pub fn queue_family(&self) -> u32 {
        self.shared.family
    }

    /// The device's name (`deviceName`: "llvmpipe (LLVM 15.0.6, 256 bits)" for lavapipe).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether anchors can be calibrated (a calibrated-timestamps extension is enabled).
    pub fn has_calibrated_timestamps(&self) -> bool {
        self.shared.calibrated.is_some()
    }

    /// Whether shaders can read the device clock (`shaderDeviceClock`, needed by
    /// [`SpinShader`](super::SpinShader)).
    pub fn has_shader_clock(&self) -> bool {
        self.shared.shader_clock
    }

    /// `timestampPeriod`: nanoseconds per timestamp tick.
    pub fn timestamp_period(&self) -> f32 {
        self.shared.period
    }

    /// `timestampValidBits` of the queue family.
    pub fn timestamp_valid_bits(&self) -> u32 {
        self.shared.valid_bits
    }

    /// The logical device, to make command pools and pipelines with.
    pub fn device(&self) -> &ash::Device {
        &self.shared.device
    }

    /// The instance.
    pub fn instance(&self) -> &ash::Instance {
        &self.shared.instance
    }

    /// The loader's entry points.
    pub fn entry(&self) -> &ash::Entry {
        &self.shared.entry
    }

    /// The physical device.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.shared.physical
    }
}

/// Whether the device exposes the KHR calibrated-timestamps entry point (the KHR extension is
/// enabled), asked of the loader by name.
fn khr_loaded(raw: &RawDevice) -> bool {
    // Safety: a valid device and a NUL-terminated name.
    let fp = unsafe {
        raw.instance.get_device_proc_addr(raw.device.handle(), c"vkGetCalibratedTimestampsKHR".as_ptr())
    };
    fp.is_some()
}
