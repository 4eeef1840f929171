//! [`WgpuError`]: every way a call into the wgpu backend can fail, each with a message
//! that says what failed. The backend returns one of these instead of panicking.

use std::fmt;

use sage_transformer::{ContractError, Tensor};

/// Why the wgpu backend could not start, refused its arguments, or failed on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WgpuError {
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
    /// No live `f32` buffer has this id (never allocated, or freed).
    UnknownBuffer(u32),
    /// No live `u32` buffer has this id (never allocated, or freed).
    UnknownIndexBuffer(u32),
    /// A range runs past the end of its buffer.
    OutOfRange {
        /// `"f32"` or `"u32"`: which kind of buffer.
        kind: &'static str,
        /// The buffer id.
        buffer: u32,
        /// First element of the range.
        offset: usize,
        /// Elements in the range.
        len: usize,
        /// Elements in the buffer.
        buffer_len: usize,
    },
    /// A tensor written by a call overlaps another tensor of the same call.
    Overlap(Tensor, Tensor),
    /// Sizes that do not fit together; the message names the operation and operands.
    Shape(String),
    /// An argument outside what the operation accepts (other than a size).
    BadArgument(String),
    /// `seq_starts` or cache `lengths` do not describe the batch.
    BadSequences(String),
    /// The device could not allocate a buffer of this many bytes.
    OutOfMemory(u64),
    /// Every buffer id has been handed out.
    TooManyBuffers,
}

impl fmt::Display for WgpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WgpuError::NoAdapter(why) => write!(f, "wgpu backend: no GPU adapter found: {why}"),
            WgpuError::Unsupported(why) => write!(f, "wgpu backend: adapter unsupported: {why}"),
            WgpuError::RequestDevice(why) => {
                write!(f, "wgpu backend: could not create the device: {why}")
            }
            WgpuError::Device(why) => write!(f, "wgpu backend: device error: {why}"),
            WgpuError::TooLarge(why) => write!(f, "wgpu backend: too large for the adapter: {why}"),
            WgpuError::UnknownBuffer(id) => write!(f, "wgpu backend: no live f32 buffer {id}"),
            WgpuError::UnknownIndexBuffer(id) => write!(f, "wgpu backend: no live u32 buffer {id}"),
            WgpuError::OutOfRange {
                kind,
                buffer,
                offset,
                len,
                buffer_len,
            } => write!(
                f,
                "wgpu backend: range [{offset}, {offset} + {len}) is outside {kind} buffer \
                 {buffer} of {buffer_len} elements"
            ),
            WgpuError::Overlap(a, b) => write!(
                f,
                "wgpu backend: tensors overlap in buffer {}: [{}, +{}) and [{}, +{})",
                a.buffer.0, a.offset, a.len, b.offset, b.len
            ),
            WgpuError::Shape(message)
            | WgpuError::BadArgument(message)
            | WgpuError::BadSequences(message) => write!(f, "wgpu backend: {message}"),
            WgpuError::OutOfMemory(bytes) => {
                write!(f, "wgpu backend: the device cannot allocate {bytes} bytes")
            }
            WgpuError::TooManyBuffers => write!(f, "wgpu backend: buffer ids exhausted"),
        }
    }
}

impl std::error::Error for WgpuError {}

impl From<ContractError> for WgpuError {
    fn from(e: ContractError) -> WgpuError {
        match e {
            ContractError::Shape(message) => WgpuError::Shape(message),
            ContractError::Overlap(a, b) => WgpuError::Overlap(a, b),
            ContractError::BadArgument(message) => WgpuError::BadArgument(message),
            ContractError::Sequences(message) => WgpuError::BadSequences(message),
            ContractError::TooLarge(message) => WgpuError::TooLarge(message),
        }
    }
}
