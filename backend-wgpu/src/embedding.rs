//! Token embedding: the forward gather of table rows and its backward scatter-add,
//! done without float atomics: the workgroup of a token's first position sums, in
//! position order, every gradient row of that token into the table row, so each row
//! has one writer and the result is deterministic.
//!
//! Token ids live on the device; an id at or above V reads or writes nothing.

use sage_core::transformer::{Indices, Tensor};

use crate::error::{expect_len, rows_of, to_u32, WgpuError};
use crate::pipelines::{Family, Kernel};
use crate::store::Operand;
use crate::WgpuBackend;

const FORWARD: Kernel = Kernel {
    family: Family::Embedding,
    entry: "embedding_forward",
    bindings: 3,
};
const BACKWARD: Kernel = Kernel {
    family: Family::Embedding,
    entry: "embedding_backward",
    bindings: 3,
};

/// out[N, D] = table[tokens[n], :] with table [V, D] and tokens [N].
pub(crate) fn embedding_forward(
    b: &mut WgpuBackend,
    out: Tensor,
    table: Tensor,
    tokens: Indices,
    dim: usize,
) -> Result<(), WgpuError> {
    let op = "embedding_forward";
    let vocab = rows_of(op, "table", table.len, dim)?;
    expect_len(op, "out", out.len, tokens.len * dim)?;
    b.store.locate(Operand::U32(tokens))?;
    if out.len == 0 {
        return Ok(());
    }
    let grid = b.grid_for(op, out.len)?;
    b.launch(
        FORWARD,
        &[out.into(), table.into(), tokens.into()],
        &[
            to_u32(op, "N", tokens.len)?,
            to_u32(op, "D", dim)?,
            to_u32(op, "V", vocab)?,
        ],
        grid,
    )
}

/// dtable[V, D] += dout[n, :] for each n at row tokens[n]; one workgroup per position.
pub(crate) fn embedding_backward(
    b: &mut WgpuBackend,
    dtable: Tensor,
    dout: Tensor,
    tokens: Indices,
    dim: usize,
) -> Result<(), WgpuError> {
    let op = "embedding_backward";
    let vocab = rows_of(op, "dtable", dtable.len, dim)?;
    expect_len(op, "dout", dout.len, tokens.len * dim)?;
    b.store.locate(Operand::U32(tokens))?;
    if dout.len == 0 {
        return Ok(());
    }
    let grid = b.grid(op, tokens.len)?;
    b.launch(
        BACKWARD,
        &[dtable.into(), dout.into(), tokens.into()],
        &[
            to_u32(op, "N", tokens.len)?,
            to_u32(op, "D", dim)?,
            to_u32(op, "V", vocab)?,
        ],
        grid,
    )
}
