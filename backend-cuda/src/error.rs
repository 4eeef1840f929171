//! [`CudaError`]: every way a call into the CUDA backend can fail, each with a message
//! that says what failed. The backend returns one of these instead of panicking.

use std::fmt;

use sage_transformer::{ContractError, Tensor};

/// Why the CUDA backend could not start, refused its arguments, or failed on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaError {
    /// A CUDA library (the driver, NVRTC or cuBLAS) could not be loaded.
    NoLibrary(String),
    /// The driver loaded but found no usable device, or the context failed.
    NoDevice(String),
    /// NVRTC failed to compile a kernel source; carries its log.
    Compile(String),
    /// A driver call failed (launch, copy, allocation, module load).
    Driver(String),
    /// A cuBLAS call failed.
    Blas(String),
    /// A size or model does not fit what the kernels support.
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
    /// Every buffer id has been handed out.
    TooManyBuffers,
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NoLibrary(why) => {
                write!(f, "cuda backend: a CUDA library is missing: {why}")
            }
            CudaError::NoDevice(why) => write!(f, "cuda backend: no usable CUDA device: {why}"),
            CudaError::Compile(why) => write!(f, "cuda backend: NVRTC compilation failed: {why}"),
            CudaError::Driver(why) => write!(f, "cuda backend: driver error: {why}"),
            CudaError::Blas(why) => write!(f, "cuda backend: cuBLAS error: {why}"),
            CudaError::TooLarge(why) => write!(f, "cuda backend: too large: {why}"),
            CudaError::UnknownBuffer(id) => write!(f, "cuda backend: no live f32 buffer {id}"),
            CudaError::UnknownIndexBuffer(id) => write!(f, "cuda backend: no live u32 buffer {id}"),
            CudaError::OutOfRange {
                kind,
                buffer,
                offset,
                len,
                buffer_len,
            } => write!(
                f,
                "cuda backend: range [{offset}, {offset} + {len}) is outside {kind} buffer \
                 {buffer} of {buffer_len} elements"
            ),
            CudaError::Overlap(a, b) => write!(
                f,
                "cuda backend: tensors overlap in buffer {}: [{}, +{}) and [{}, +{})",
                a.buffer.0, a.offset, a.len, b.offset, b.len
            ),
            CudaError::Shape(message)
            | CudaError::BadArgument(message)
            | CudaError::BadSequences(message) => write!(f, "cuda backend: {message}"),
            CudaError::TooManyBuffers => write!(f, "cuda backend: buffer ids exhausted"),
        }
    }
}

impl std::error::Error for CudaError {}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> CudaError {
        CudaError::Driver(e.to_string())
    }
}

impl From<cudarc::cublas::result::CublasError> for CudaError {
    fn from(e: cudarc::cublas::result::CublasError) -> CudaError {
        CudaError::Blas(format!("{e:?}"))
    }
}

impl From<ContractError> for CudaError {
    fn from(e: ContractError) -> CudaError {
        match e {
            ContractError::Shape(message) => CudaError::Shape(message),
            ContractError::Overlap(a, b) => CudaError::Overlap(a, b),
            ContractError::BadArgument(message) => CudaError::BadArgument(message),
            ContractError::Sequences(message) => CudaError::BadSequences(message),
            ContractError::TooLarge(message) => CudaError::TooLarge(message),
        }
    }
}

/// A size as a cuBLAS `int`, or [`CudaError::TooLarge`].
pub(crate) fn to_i32(op: &str, what: &str, value: usize) -> Result<i32, CudaError> {
    i32::try_from(value).map_err(|_| {
        CudaError::TooLarge(format!(
            "{op}: `{what}` = {value} does not fit cuBLAS's 32-bit int"
        ))
    })
}
