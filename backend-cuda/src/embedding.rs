//! Token embedding: the forward gather of table rows and its deterministic backward
//! scatter-add (a links pass, then one block per token's first position walking the
//! positions of that token in order; see `kernels/embedding.cu`).
//!
//! Token ids live on the device; an id at or above V reads zeros and writes nothing.

use sage_transformer::{Indices, Tensor};

use crate::error::CudaError;
use crate::launch::{blocks_for, blocks_per_task, kernel_for, Arg, THREADS};
use crate::scratch::IndexScratch;
use crate::CudaBackend;
use sage_transformer::contract::{to_u32, EmbeddingSizes};

/// out[N, D] = table[tokens[n], :] with table [V, D] (f32, or frozen bf16 weights) and
/// tokens [N].
pub(crate) fn embedding_forward(
    b: &mut CudaBackend,
    out: Tensor,
    table: Tensor,
    tokens: Indices,
    sizes: EmbeddingSizes,
) -> Result<(), CudaError> {
    let op = "embedding_forward";
    let EmbeddingSizes { dim, vocab, .. } = sizes;
    let (o, (t, bf16), ids) = (
        b.store.address(out)?,
        // Read only: a tied output head's kept bf16 copy stays current.
        b.store.weight_address(table)?,
        b.store.index_address(tokens)?,
    );
    if out.len == 0 {
        return Ok(());
    }
    b.launch(
        kernel_for(bf16, op, "embedding_forward_bf16"),
        (blocks_for(out.len as u64), 1),
        THREADS,
        &[
            Arg::Ptr(o),
            Arg::Ptr(t),
            Arg::Ptr(ids),
            Arg::U32(to_u32(op, "N", tokens.len)?),
            Arg::U32(to_u32(op, "D", dim)?),
            Arg::U32(to_u32(op, "V", vocab)?),
        ],
    )
}

/// dtable[V, D] += dout[n, :] for each n at row tokens[n], in position order.
pub(crate) fn embedding_backward(
    b: &mut CudaBackend,
    dtable: Tensor,
    dout: Tensor,
    tokens: Indices,
    sizes: EmbeddingSizes,
) -> Result<(), CudaError> {
    let op = "embedding_backward";
    let EmbeddingSizes { dim, vocab, .. } = sizes;
    let (dt, d, ids) = (
        b.store.address(dtable)?,
        b.store.address(dout)?,
        b.store.index_address(tokens)?,
    );
    if dout.len == 0 {
        return Ok(());
    }
    let n = to_u32(op, "N", tokens.len)?;
    // links[2, N]: the next position of the same token, then first-position flags.
    let links = b.index_scratch_space(IndexScratch::Links, 2 * tokens.len)?;
    let grid = (blocks_per_task(tokens.len), 1);
    b.launch(
        "embedding_links",
        grid,
        THREADS,
        &[Arg::Ptr(links), Arg::Ptr(ids), Arg::U32(n)],
    )?;
    b.launch(
        op,
        grid,
        THREADS,
        &[
            Arg::Ptr(dt),
            Arg::Ptr(d),
            Arg::Ptr(ids),
            Arg::Ptr(links),
            Arg::U32(n),
            Arg::U32(to_u32(op, "D", dim)?),
            Arg::U32(to_u32(op, "V", vocab)?),
        ],
    )
}
