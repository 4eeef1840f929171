//! Token embedding: the forward gather of table rows and its backward scatter-add,
//! done without float atomics: a first pass links each position to the next one with
//! the same token (O(N^2 / 256) comparisons per invocation, no sort), then the
//! workgroup of a token's first position walks that chain, adding the gradient rows in
//! position order into the table row: each row has one writer, the result is
//! deterministic, and the adds cost O(N * D).
//!
//! Token ids live on the device; an id at or above V reads or writes nothing.

use sage_transformer::{Indices, Tensor};

use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::scratch::IndexScratch;
use crate::store::Operand;
use crate::WgpuBackend;
use sage_transformer::contract::{to_u32, EmbeddingSizes};

const FORWARD: Kernel = Kernel {
    family: Family::Embedding,
    entry: "embedding_forward",
    bindings: 3,
};
const LINKS: Kernel = Kernel {
    family: Family::Embedding,
    entry: "embedding_links",
    bindings: 2,
};
const BACKWARD: Kernel = Kernel {
    family: Family::Embedding,
    entry: "embedding_backward",
    bindings: 4,
};

/// out[N, D] = table[tokens[n], :] with table [V, D] and tokens [N].
pub(crate) fn embedding_forward(
    b: &mut WgpuBackend,
    out: Tensor,
    table: Tensor,
    tokens: Indices,
    sizes: EmbeddingSizes,
) -> Result<(), WgpuError> {
    let op = "embedding_forward";
    let EmbeddingSizes { rows, dim, vocab } = sizes;
    b.store.locate(Operand::U32(tokens))?;
    if out.len == 0 {
        return Ok(());
    }
    let grid = b.grid_for(op, out.len)?;
    b.launch(
        FORWARD,
        &[out.into(), table.into(), tokens.into()],
        &[
            to_u32(op, "N", rows)?,
            to_u32(op, "D", dim)?,
            to_u32(op, "V", vocab)?,
        ],
        grid,
    )
}

/// dtable[V, D] += dout[n, :] for each n at row tokens[n]: the links pass, then the
/// walks; one workgroup per position in each.
pub(crate) fn embedding_backward(
    b: &mut WgpuBackend,
    dtable: Tensor,
    dout: Tensor,
    tokens: Indices,
    sizes: EmbeddingSizes,
) -> Result<(), WgpuError> {
    let op = "embedding_backward";
    let EmbeddingSizes { rows, dim, vocab } = sizes;
    b.store.locate(Operand::U32(tokens))?;
    if dout.len == 0 {
        return Ok(());
    }
    let n = to_u32(op, "N", rows)?;
    // links[2, N]: next position of the same token, then first-position flags.
    let links = b.index_space(IndexScratch::EmbeddingLinks, 2 * rows)?;
    let grid = b.grid(op, rows)?;
    b.launch(LINKS, &[links.into(), tokens.into()], &[n], grid)?;
    b.launch(
        BACKWARD,
        &[dtable.into(), dout.into(), tokens.into(), links.into()],
        &[n, to_u32(op, "D", dim)?, to_u32(op, "V", vocab)?],
        grid,
    )
}
