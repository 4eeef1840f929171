//! [`CpuError`]: every way a call into the CPU backend can fail. The backend returns
//! one of these instead of panicking on a bad handle, range or shape.

use std::fmt;

use sage_transformer::{ContractError, Tensor};

/// Why a CPU kernel refused its arguments (or could not allocate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuError {
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
    /// A token id or target is not below the vocabulary size.
    TokenOutOfRange {
        /// The operation.
        op: &'static str,
        /// The offending id.
        token: u32,
        /// Rows of the table (V).
        vocab: usize,
    },
    /// `seq_starts` or cache `lengths` do not describe the batch.
    BadSequences(String),
    /// A buffer of this many elements could not be allocated.
    OutOfMemory(usize),
    /// Every buffer id has been handed out.
    TooManyBuffers,
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuError::UnknownBuffer(id) => write!(f, "cpu backend: no live f32 buffer {id}"),
            CpuError::UnknownIndexBuffer(id) => write!(f, "cpu backend: no live u32 buffer {id}"),
            CpuError::OutOfRange {
                kind,
                buffer,
                offset,
                len,
                buffer_len,
            } => write!(
                f,
                "cpu backend: range [{offset}, {offset} + {len}) is outside {kind} buffer {buffer} \
                 of {buffer_len} elements"
            ),
            CpuError::Overlap(a, b) => write!(
                f,
                "cpu backend: tensors overlap in buffer {}: [{}, +{}) and [{}, +{})",
                a.buffer.0, a.offset, a.len, b.offset, b.len
            ),
            CpuError::Shape(message) | CpuError::BadArgument(message) => {
                write!(f, "cpu backend: {message}")
            }
            CpuError::TokenOutOfRange { op, token, vocab } => write!(
                f,
                "cpu backend: {op}: token {token} is not below the vocabulary size {vocab}"
            ),
            CpuError::BadSequences(message) => write!(f, "cpu backend: {message}"),
            CpuError::OutOfMemory(len) => {
                write!(f, "cpu backend: cannot allocate {len} elements")
            }
            CpuError::TooManyBuffers => write!(f, "cpu backend: buffer ids exhausted"),
        }
    }
}

impl std::error::Error for CpuError {}

impl From<ContractError> for CpuError {
    fn from(e: ContractError) -> CpuError {
        match e {
            ContractError::Shape(message) | ContractError::TooLarge(message) => {
                CpuError::Shape(message)
            }
            ContractError::Overlap(a, b) => CpuError::Overlap(a, b),
            ContractError::BadArgument(message) => CpuError::BadArgument(message),
            ContractError::Sequences(message) => CpuError::BadSequences(message),
        }
    }
}
