//! [`CpuError`]: every way a call into the CPU backend can fail. The backend returns
//! one of these instead of panicking on a bad handle, range or shape.

use std::fmt;

use sage_transformer::ContractError;

/// Why a CPU kernel refused its arguments (or could not allocate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuError {
    /// The call breaks the `Kernels` contract: a bad handle, range, size or overlap.
    Contract(ContractError),
    /// A token id or target is not below the vocabulary size.
    TokenOutOfRange {
        /// The operation.
        op: &'static str,
        /// The offending id.
        token: u32,
        /// Rows of the table (V).
        vocab: usize,
    },
    /// A buffer of this many elements could not be allocated.
    OutOfMemory(usize),
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuError::Contract(e) => write!(f, "cpu backend: {e}"),
            CpuError::TokenOutOfRange { op, token, vocab } => write!(
                f,
                "cpu backend: {op}: token {token} is not below the vocabulary size {vocab}"
            ),
            CpuError::OutOfMemory(len) => {
                write!(f, "cpu backend: cannot allocate {len} elements")
            }
        }
    }
}

impl std::error::Error for CpuError {}

impl From<ContractError> for CpuError {
    fn from(e: ContractError) -> CpuError {
        CpuError::Contract(e)
    }
}
