//! [`Gpu`]: the adapter, device and queue, requested with the adapter's own limits,
//! and the sink where the device reports errors so that calls return them instead of
//! panicking.

use std::sync::{Arc, Mutex};

use crate::error::WgpuError;

/// Bytes of push constants every kernel may use: its binding offsets, then its sizes.
pub(crate) const PARAM_BYTES: u32 = 128;

/// Storage buffers the widest kernel binds (the key/value gradient of attention).
pub(crate) const MAX_BINDINGS: u32 = 10;

/// Invocations in one workgroup of every kernel.
pub(crate) const WORKGROUP: u32 = 256;

/// Workgroup memory the largest kernel declares (the GEMM tiles), in bytes.
const WORKGROUP_BYTES: u32 = 8 * 1024;

/// The device and what the kernels must know about it.
pub(crate) struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    /// The first error the device reported since it was last taken.
    errors: Arc<Mutex<Option<String>>>,
}

impl Gpu {
    /// Requests the best adapter (Vulkan, Metal or DX12) and a device with all of its
    /// limits and push constants; fails clearly when there is none or it falls short.
    pub(crate) fn new() -> Result<Gpu, WgpuError> {
        let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor {
            backends: wgpu::Backends::PRIMARY,
            ..Default::default()
        });
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
        }))
        .map_err(|e| WgpuError::NoAdapter(e.to_string()))?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        check_adapter(&info, &limits, adapter.features())?;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("sage"),
            required_features: wgpu::Features::PUSH_CONSTANTS,
            required_limits: limits.clone(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| WgpuError::RequestDevice(format!("{} ({e})", info.name)))?;
        let errors = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&errors);
        device.on_uncaptured_error(Box::new(move |error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| error.to_string());
            }
        }));
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            errors,
        })
    }

    /// Fails with the first error the device reported since the last check.
    pub(crate) fn check_errors(&self) -> Result<(), WgpuError> {
        let reported = match self.errors.lock() {
            Ok(mut slot) => slot.take(),
            Err(_) => Some("the error sink was poisoned".to_string()),
        };
        match reported {
            Some(message) => Err(WgpuError::Device(message)),
            None => Ok(()),
        }
    }

    /// "name (device type), driver ..., backend".
    pub(crate) fn description(&self) -> String {
        let i = &self.info;
        format!(
            "{} ({:?}), driver {} {}, {:?}",
            i.name, i.device_type, i.driver, i.driver_info, i.backend
        )
    }
}

/// Fails unless the adapter has push constants and the limits every kernel relies on.
fn check_adapter(
    info: &wgpu::AdapterInfo,
    limits: &wgpu::Limits,
    features: wgpu::Features,
) -> Result<(), WgpuError> {
    let name = &info.name;
    if !features.contains(wgpu::Features::PUSH_CONSTANTS) {
        return Err(WgpuError::Unsupported(format!(
            "{name} has no push constants"
        )));
    }
    let needs = [
        (
            "max_push_constant_size",
            limits.max_push_constant_size,
            PARAM_BYTES,
        ),
        (
            "max_storage_buffers_per_shader_stage",
            limits.max_storage_buffers_per_shader_stage,
            MAX_BINDINGS,
        ),
        (
            "max_compute_invocations_per_workgroup",
            limits.max_compute_invocations_per_workgroup,
            WORKGROUP,
        ),
        (
            "max_compute_workgroup_size_x",
            limits.max_compute_workgroup_size_x,
            WORKGROUP,
        ),
        (
            "max_compute_workgroup_storage_size",
            limits.max_compute_workgroup_storage_size,
            WORKGROUP_BYTES,
        ),
    ];
    for (limit, has, needed) in needs {
        if has < needed {
            return Err(WgpuError::Unsupported(format!(
                "{name}: {limit} is {has}, the kernels need {needed}"
            )));
        }
    }
    Ok(())
}
