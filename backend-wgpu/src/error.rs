//! [`WgpuError`]: every way a call into the wgpu backend can fail, each with a message
//! that says what failed. The backend returns one of these instead of panicking.

use std::fmt;

use sage_transformer::ContractError;

/// Why the wgpu backend could not start, refused its arguments, or failed on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WgpuError {
    /// The call breaks the `Kernels` contract: a bad handle, range, size or overlap.
    Contract(ContractError),
    /// No Vulkan, Metal or DX12 adapter was found.
    NoAdapter(String),
    /// The adapter lacks a feature or limit the kernels need.
    Unsupported(String),
    /// The device could not be created.
    RequestDevice(String),
    /// The device reported an error (validation, lost device, failed map).
    Device(String),
    /// A model or tensor does not fit the adapter's limits.
    TooLarge(String),
    /// The device could not allocate a buffer of this many bytes.
    OutOfMemory(u64),
}

impl fmt::Display for WgpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WgpuError::Contract(e) => write!(f, "wgpu backend: {e}"),
            WgpuError::NoAdapter(why) => write!(f, "wgpu backend: no GPU adapter found: {why}"),
            WgpuError::Unsupported(why) => write!(f, "wgpu backend: adapter unsupported: {why}"),
            WgpuError::RequestDevice(why) => {
                write!(f, "wgpu backend: could not create the device: {why}")
            }
            WgpuError::Device(why) => write!(f, "wgpu backend: device error: {why}"),
            WgpuError::TooLarge(why) => write!(f, "wgpu backend: too large for the adapter: {why}"),
            WgpuError::OutOfMemory(bytes) => {
                write!(f, "wgpu backend: the device cannot allocate {bytes} bytes")
            }
        }
    }
}

impl std::error::Error for WgpuError {}

impl From<ContractError> for WgpuError {
    fn from(e: ContractError) -> WgpuError {
        WgpuError::Contract(e)
    }
}
