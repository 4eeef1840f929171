//! The checks of the [`Kernels`](crate::Kernels) contract that do not depend on the
//! device, written once for every backend: operand lengths, whole rows, tensors a call
//! writes that overlap another of its tensors, sizes that a 32-bit kernel parameter
//! must hold, the attention and cache shapes. The one implementation of
//! [`Kernels`](crate::Kernels) for every [`Device`](crate::device::Device) runs them and
//! hands the device the checked sizes (`Rows`, `AttentionSizes`, ...); a backend turns a [`ContractError`]
//! into its own error type (`From`) and adds only the limits of its device.

mod sizes;

pub use sizes::{
    packed_tokens, AdamWScalars, AttentionSizes, CacheSizes, ChoiceSizes, DecodeSizes,
    EmbeddingSizes, LengthRule, RopeSizes, Rows, MAX_CHOICE_VOCAB,
};

use alloc::format;
use alloc::string::String;
use core::fmt;

use crate::kernels::{AttentionShape, Tensor};

/// Arguments that break the contract, whatever the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContractError {
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
    /// Every buffer id has been handed out.
    TooManyBuffers,
    /// Sizes that do not fit together; the message names the operation and operands.
    Shape(String),
    /// A tensor written by a call overlaps another tensor of the same call.
    Overlap(Tensor, Tensor),
    /// A size too large for a 32-bit kernel parameter; the message names it.
    TooLarge(String),
    /// An argument outside what the operation accepts (other than a size).
    BadArgument(String),
    /// `seq_starts` or cache `lengths` do not describe the batch.
    Sequences(String),
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContractError::UnknownBuffer(id) => write!(f, "no live f32 buffer {id}"),
            ContractError::UnknownIndexBuffer(id) => write!(f, "no live u32 buffer {id}"),
            ContractError::OutOfRange {
                kind,
                buffer,
                offset,
                len,
                buffer_len,
            } => write!(
                f,
                "range [{offset}, {offset} + {len}) is outside {kind} buffer {buffer} of \
                 {buffer_len} elements"
            ),
            ContractError::TooManyBuffers => f.write_str("buffer ids exhausted"),
            ContractError::Shape(message)
            | ContractError::TooLarge(message)
            | ContractError::BadArgument(message)
            | ContractError::Sequences(message) => f.write_str(message),
            ContractError::Overlap(a, b) => write!(
                f,
                "tensors overlap in buffer {}: [{}, +{}) and [{}, +{})",
                a.buffer.0, a.offset, a.len, b.offset, b.len
            ),
        }
    }
}

impl core::error::Error for ContractError {}

/// Fails with [`ContractError::Shape`] unless `got == expected`.
pub fn expect_len(
    op: &str,
    operand: &str,
    got: usize,
    expected: usize,
) -> Result<(), ContractError> {
    if got == expected {
        Ok(())
    } else {
        Err(ContractError::Shape(format!(
            "{op}: `{operand}` has {got} elements, expected {expected}"
        )))
    }
}

/// Rows of a `[rows, width]` operand of `len` elements; fails if `width` is zero or
/// does not divide `len`.
pub fn rows_of(op: &str, operand: &str, len: usize, width: usize) -> Result<usize, ContractError> {
    if width == 0 || len % width != 0 {
        Err(ContractError::Shape(format!(
            "{op}: `{operand}` has {len} elements, not a whole number of rows of {width}"
        )))
    } else {
        Ok(len / width)
    }
}

/// A size as a `u32` kernel parameter, or [`ContractError::TooLarge`].
pub fn to_u32(op: &str, what: &str, value: usize) -> Result<u32, ContractError> {
    u32::try_from(value).map_err(|_| {
        ContractError::TooLarge(format!("{op}: `{what}` = {value} does not fit in 32 bits"))
    })
}

/// Whether two tensors share at least one element.
pub fn overlaps(a: &Tensor, b: &Tensor) -> bool {
    a.buffer == b.buffer
        && a.len > 0
        && b.len > 0
        && a.offset < b.offset + b.len
        && b.offset < a.offset + a.len
}

/// Fails with [`ContractError::Overlap`] if a tensor a call writes shares an element
/// with another tensor of the call (tensors it only reads may overlap each other).
pub fn check_disjoint(writes: &[Tensor], reads: &[Tensor]) -> Result<(), ContractError> {
    for (i, write) in writes.iter().enumerate() {
        let others = writes[i + 1..].iter().chain(reads);
        if let Some(other) = others.into_iter().find(|other| overlaps(write, other)) {
            return Err(ContractError::Overlap(*write, *other));
        }
    }
    Ok(())
}

/// The sizes of one attention call, checked: positive, and query heads a multiple of
/// key/value heads. Layouts: q, out `[N, H*hd]`; k, v `[N, KV*hd]`; lse `[N, H]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionDims {
    /// Query heads (H).
    pub heads: usize,
    /// Key/value heads (KV).
    pub kv_heads: usize,
    /// Width of one head (hd).
    pub head_dim: usize,
    /// Query heads per key/value head (H / KV).
    pub group: usize,
    /// Elements of one row of q or out (H * hd).
    pub q_width: usize,
    /// Elements of one row of k or v (KV * hd).
    pub kv_width: usize,
}

impl AttentionDims {
    /// Checks `shape` for `op`.
    pub fn new(op: &str, shape: AttentionShape) -> Result<AttentionDims, ContractError> {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim,
        } = shape;
        if heads == 0 || kv_heads == 0 || head_dim == 0 || heads % kv_heads != 0 {
            return Err(ContractError::Shape(format!(
                "{op}: {heads} heads, {kv_heads} kv heads of width {head_dim}: need positive \
                 sizes and heads a multiple of kv heads"
            )));
        }
        Ok(AttentionDims {
            heads,
            kv_heads,
            head_dim,
            group: heads / kv_heads,
            q_width: heads * head_dim,
            kv_width: kv_heads * head_dim,
        })
    }

    /// The scale of the attention scores, 1 / sqrt(hd).
    pub fn scale(&self) -> f32 {
        1.0 / libm::sqrtf(self.head_dim as f32)
    }
}

/// The sizes of an output-head call (`logprob_forward` / `logprob_backward`): rows N,
/// width D and vocabulary V, from `targets[N]`, `hidden[N, D]` and `lm_head[V, D]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadDims {
    /// Rows (N).
    pub rows: usize,
    /// Hidden width (D); 0 when there are no rows.
    pub dim: usize,
    /// Vocabulary (V); 0 when there are no rows.
    pub vocab: usize,
}

impl HeadDims {
    /// Checks that `hidden` holds `rows` whole rows and `lm_head` whole rows of the
    /// same width (no rows: `hidden` must be empty).
    pub fn new(
        op: &str,
        rows: usize,
        hidden: usize,
        lm_head: usize,
    ) -> Result<HeadDims, ContractError> {
        if rows == 0 {
            expect_len(op, "hidden", hidden, 0)?;
            return Ok(HeadDims {
                rows,
                dim: 0,
                vocab: 0,
            });
        }
        let dim = rows_of(op, "hidden", hidden, rows)?;
        let vocab = rows_of(op, "lm_head", lm_head, dim)?;
        Ok(HeadDims { rows, dim, vocab })
    }

    /// The sizes of a `logits` call: `out[B, V] = hidden[B, D] · lm_head[V, D]^T`, with
    /// B and V from `hidden`, `lm_head` and the width `dim`; `out` must hold B x V.
    pub fn of_logits(
        hidden: usize,
        lm_head: usize,
        out: usize,
        dim: usize,
    ) -> Result<HeadDims, ContractError> {
        let rows = rows_of("logits", "hidden", hidden, dim)?;
        let vocab = rows_of("logits", "lm_head", lm_head, dim)?;
        expect_len("logits", "out", out, rows * vocab)?;
        Ok(HeadDims { rows, dim, vocab })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::BufferId;
    use alloc::string::ToString;

    fn tensor(buffer: u32, offset: usize, len: usize) -> Tensor {
        Tensor {
            buffer: BufferId(buffer),
            offset,
            len,
        }
    }

    #[test]
    fn writes_may_not_overlap_anything_reads_may_overlap_each_other() {
        let (a, b, c) = (tensor(0, 0, 4), tensor(0, 4, 4), tensor(0, 2, 4));
        assert_eq!(check_disjoint(&[a], &[b]), Ok(()));
        assert_eq!(
            check_disjoint(&[a], &[b, c]),
            Err(ContractError::Overlap(a, c))
        );
        assert_eq!(
            check_disjoint(&[a, c], &[]),
            Err(ContractError::Overlap(a, c))
        );
        assert_eq!(
            check_disjoint(&[b], &[c, c]),
            Err(ContractError::Overlap(b, c))
        );
        assert_eq!(
            check_disjoint(&[a], &[tensor(1, 0, 4), tensor(0, 4, 0)]),
            Ok(())
        );
    }

    #[test]
    fn sizes_are_checked_with_the_operand_named() {
        assert_eq!(rows_of("op", "x", 12, 4), Ok(3));
        let error = rows_of("op", "x", 10, 4).unwrap_err().to_string();
        assert_eq!(
            error,
            "op: `x` has 10 elements, not a whole number of rows of 4"
        );
        assert!(rows_of("op", "x", 0, 0).is_err());
        assert!(expect_len("op", "y", 3, 4)
            .unwrap_err()
            .to_string()
            .contains("`y` has 3"));
        assert_eq!(to_u32("op", "n", 7), Ok(7));
        assert!(matches!(
            to_u32("op", "n", usize::MAX),
            Err(ContractError::TooLarge(_))
        ));
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
        };
        let dims = AttentionDims::new("attn", shape).unwrap();
        assert_eq!((dims.group, dims.q_width, dims.kv_width), (2, 32, 16));
        let bad = AttentionShape {
            kv_heads: 3,
            ..shape
        };
        assert!(AttentionDims::new("attn", bad).is_err());
    }
}
