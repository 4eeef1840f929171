//! [`CudaError`]: every way a call into the CUDA backend can fail, each with a message
//! that says what failed. The backend returns one of these instead of panicking.

use std::fmt;

use sage_transformer::ContractError;

/// Why the CUDA backend could not start, refused its arguments, or failed on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaError {
    /// The call breaks the `Kernels` contract: a bad handle, range, size or overlap.
    Contract(ContractError),
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
    /// A size or model does not fit what the kernels or the device support.
    TooLarge(String),
    /// A call a CUDA graph cannot hold, met while recording a repeated step; the
    /// backend then runs the step as ordinary launches, so callers do not see it.
    StepNotRecorded(String),
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::Contract(e) => write!(f, "cuda backend: {e}"),
            CudaError::NoLibrary(why) => {
                write!(f, "cuda backend: a CUDA library is missing: {why}")
            }
            CudaError::NoDevice(why) => write!(f, "cuda backend: no usable CUDA device: {why}"),
            CudaError::Compile(why) => write!(f, "cuda backend: NVRTC compilation failed: {why}"),
            CudaError::Driver(why) => write!(f, "cuda backend: driver error: {why}"),
            CudaError::Blas(why) => write!(f, "cuda backend: cuBLAS error: {why}"),
            CudaError::TooLarge(why) => write!(f, "cuda backend: too large: {why}"),
            CudaError::StepNotRecorded(why) => {
                write!(
                    f,
                    "cuda backend: the step cannot be recorded as a graph: {why}"
                )
            }
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
        CudaError::Contract(e)
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
