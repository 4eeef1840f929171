//! Causal grouped-query attention for training over packed sequences, flash-style: the
//! forward pass walks keys in tiles with an online softmax and saves the log-sum-exp;
//! the backward pass computes delta = rowsum(dout * out), then dq from query blocks and
//! dk, dv from key blocks, recomputing the probabilities from the saved log-sum-exp, so
//! every output element has one writer (the tensor-core dk, dv: one writer per query
//! head's share, then a sum over each group in head order). Two kernel sets share these
//! layouts and this schedule: the exact f32 one on CUDA cores (`kernels/attention.cu`, [`Precision::F32`])
//! and the tensor-core one with bf16 operands and f32 accumulation (`kernels/flash.cu`,
//! [`Precision::Bf16`]). Decoding against a KV cache is in `decode`.
//!
//! Query head h reads key/value head h / (H / KV). Layouts: q, out, dq [N, H*hd];
//! k, v, dk, dv [N, KV*hd]; lse [N, H].

use sage_transformer::contract::{AttentionDims, AttentionSizes};
use sage_transformer::device::{AttentionGrads, AttentionSaved};
use sage_transformer::Tensor;

use crate::error::CudaError;
use crate::launch::Arg;
use crate::matmul::{copy_out, Precision};
use crate::scratch::{IndexScratch, Scratch};
use crate::CudaBackend;
use sage_transformer::contract::to_u32;

/// Widest head the kernels hold in shared memory (MAX_HEAD_DIM in attention.cu and
/// decode.cu, FLASH_MAX_HEAD_DIM in flash.cu).
pub(crate) const MAX_HEAD_DIM: usize = 128;
/// Threads per block of the attention kernels (ATTN_THREADS, FLASH_THREADS): 4 warps.
const ATTENTION_THREADS: u32 = 128;
/// (row, head) tasks per block of the delta kernel: one per warp.
const DELTA_TASKS: usize = 4;
/// Threads per block of flash_dkv_group_sum (FLASH_SUM_THREADS).
const GROUP_SUM_THREADS: u32 = 256;

/// The kernels of one precision and the rows each block of them owns.
struct AttentionKernels {
    forward: &'static str,
    backward_dq: &'static str,
    backward_dkv: &'static str,
    /// Query rows per block of the forward kernel.
    forward_rows: usize,
    /// Query rows per block of the dq kernel, key rows per block of the dk/dv kernel.
    backward_rows: usize,
    /// `None`: the dk/dv kernel runs one block per key/value head and writes dk, dv.
    /// `Some(sum)`: it runs one block per query head and writes each head's share
    /// [N, H*hd] (into dk, dv themselves when the group is 1), and `sum` adds each
    /// group's shares into dk, dv.
    dkv_group_sum: Option<&'static str>,
}

/// attention.cu: FORWARD_ROWS 16, BACKWARD_ROWS 8.
const EXACT: AttentionKernels = AttentionKernels {
    forward: "attention_forward",
    backward_dq: "attention_backward_dq",
    backward_dkv: "attention_backward_dkv",
    forward_rows: 16,
    backward_rows: 8,
    dkv_group_sum: None,
};

/// flash.cu: FLASH_ROWS 64 for every kernel.
const TENSOR_CORE: AttentionKernels = AttentionKernels {
    forward: "flash_forward",
    backward_dq: "flash_backward_dq",
    backward_dkv: "flash_backward_dkv",
    forward_rows: 64,
    backward_rows: 64,
    dkv_group_sum: Some("flash_dkv_group_sum"),
};

/// flash.cu's kernels for heads of at most [`NARROW_HEAD_DIM`]: the same arithmetic in
/// the same order, with half the accumulators and staged tiles of [`TENSOR_CORE`].
const TENSOR_CORE_NARROW: AttentionKernels = AttentionKernels {
    forward: "flash_forward64",
    backward_dq: "flash_backward_dq64",
    backward_dkv: "flash_backward_dkv64",
    ..TENSOR_CORE
};

/// [`TENSOR_CORE_NARROW`] with its dk/dv kernel over tiles of 32 queries instead of 16.
const TENSOR_CORE_NARROW_WIDE_DKV: AttentionKernels = AttentionKernels {
    backward_dkv: "flash_backward_dkv64_wide",
    ..TENSOR_CORE_NARROW
};

/// Widest head of the narrow tensor-core kernels.
const NARROW_HEAD_DIM: usize = 64;

/// The queries per tile of the tensor-core dk/dv kernel (`flash_dkv` in flash.cu).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DkvTile {
    /// 16 queries per tile.
    #[default]
    Queries16,
    /// 32 queries per tile where heads are at most 64 wide (16 elsewhere): twice the
    /// products per barrier, for 16 more registers of scores.
    Queries32,
}

/// The kernel set the backend's precision runs on heads `head_dim` wide: in bf16 the
/// narrow kernels where the heads fit them.
fn kernels(b: &CudaBackend, head_dim: usize) -> &'static AttentionKernels {
    let narrow = head_dim <= NARROW_HEAD_DIM;
    match (b.precision, narrow, b.dkv_tile) {
        (Precision::F32, _, _) => &EXACT,
        (Precision::Bf16, true, DkvTile::Queries32) => &TENSOR_CORE_NARROW_WIDE_DKV,
        (Precision::Bf16, true, DkvTile::Queries16) => &TENSOR_CORE_NARROW,
        (Precision::Bf16, false, _) => &TENSOR_CORE,
    }
}

/// Fails unless the kernels can hold the heads: no wider than [`MAX_HEAD_DIM`], and
/// few enough for the grid.
pub(crate) fn check_head_limits(op: &str, dims: &AttentionDims) -> Result<(), CudaError> {
    if dims.head_dim > MAX_HEAD_DIM {
        return Err(CudaError::TooLarge(format!(
            "{op}: heads of width {}; the CUDA kernels hold at most {MAX_HEAD_DIM}",
            dims.head_dim
        )));
    }
    if dims.heads > 65_535 {
        return Err(CudaError::TooLarge(format!(
            "{op}: {} heads exceed the grid's second dimension",
            dims.heads
        )));
    }
    Ok(())
}

/// The sizes every attention kernel takes after its pointers: rows, H, group, hd,
/// scale.
fn kernel_args(op: &str, dims: &AttentionDims, rows: usize) -> Result<[Arg; 5], CudaError> {
    Ok([
        Arg::U32(to_u32(op, "N", rows)?),
        Arg::U32(to_u32(op, "H", dims.heads)?),
        Arg::U32(to_u32(op, "group", dims.group)?),
        Arg::U32(to_u32(op, "hd", dims.head_dim)?),
        Arg::F32(dims.scale()),
    ])
}

/// The device address of spans[N, 2] = (start, end) of each row's sequence, uploaded
/// when `seq_starts` changes.
fn spans(b: &mut CudaBackend, seq_starts: &[u32], n: usize) -> Result<u64, CudaError> {
    if b.scratch.spans_of == seq_starts {
        return b.index_scratch_space(IndexScratch::Spans, 2 * n);
    }
    let mut spans = Vec::with_capacity(2 * n);
    for w in seq_starts.windows(2) {
        for _ in w[0]..w[1] {
            spans.extend([w[0], w[1]]);
        }
    }
    let address = b
        .scratch
        .upload_indices(&b.gpu, IndexScratch::Spans, &spans)?;
    b.scratch.spans_of = seq_starts.to_vec();
    Ok(address)
}

/// Blocks covering `rows` rows, `per_block` at a time.
fn row_blocks(op: &str, rows: usize, per_block: usize) -> Result<u32, CudaError> {
    Ok(to_u32(op, "row blocks", rows.div_ceil(per_block))?)
}

/// out[N, H*hd] and lse[N, H] of causal attention of q over k, v within each sequence
/// of `seq_starts`; out's bf16 copy too where GEMMs read it ([`copy_out`]).
pub(crate) fn attention_forward(
    b: &mut CudaBackend,
    (out, lse): (Tensor, Tensor),
    [q, k, v]: [Tensor; 3],
    seq_starts: &[u32],
    sizes: AttentionSizes,
) -> Result<(), CudaError> {
    let op = "attention_forward";
    let AttentionSizes { tokens: n, dims } = sizes;
    check_head_limits(op, &dims)?;
    let out_at = b.store.address(out)?;
    let rest = [
        Arg::Ptr(b.store.address(lse)?),
        Arg::Ptr(b.store.address(q)?),
        Arg::Ptr(b.store.address(k)?),
        Arg::Ptr(b.store.address(v)?),
    ];
    if n == 0 {
        return Ok(());
    }
    let spans = spans(b, seq_starts, n)?;
    let mut args = vec![Arg::Ptr(out_at), Arg::Ptr(copy_out(b, out)?)];
    args.extend(rest);
    args.push(Arg::Ptr(spans));
    args.extend(kernel_args(op, &dims, n)?);
    let set = kernels(b, dims.head_dim);
    let grid = (row_blocks(op, n, set.forward_rows)?, dims.heads as u32);
    b.launch(set.forward, grid, ATTENTION_THREADS, &args)
}

/// dq, dk, dv of [`attention_forward`]: delta[N, H], then the query gradient and the
/// key/value gradient kernels.
pub(crate) fn attention_backward(
    b: &mut CudaBackend,
    grads: AttentionGrads,
    saved: AttentionSaved,
    seq_starts: &[u32],
    sizes: AttentionSizes,
) -> Result<(), CudaError> {
    let op = "attention_backward";
    let AttentionSizes { tokens: n, dims } = sizes;
    check_head_limits(op, &dims)?;
    let AttentionGrads { dq, dk, dv } = grads;
    let AttentionSaved {
        dout,
        q,
        k,
        v,
        out,
        lse,
    } = saved;
    let a = |t: Tensor| b.store.address(t);
    let (dq, dk, dv, dout, q, k, v, out, lse) = (
        a(dq)?,
        a(dk)?,
        a(dv)?,
        a(dout)?,
        a(q)?,
        a(k)?,
        a(v)?,
        a(out)?,
        a(lse)?,
    );
    if n == 0 {
        return Ok(());
    }
    let spans = spans(b, seq_starts, n)?;
    let delta = b.scratch_space(Scratch::Delta, n * dims.heads)?;
    let tasks = n * dims.heads;
    b.launch(
        "attention_delta",
        (to_u32(op, "delta blocks", tasks.div_ceil(DELTA_TASKS))?, 1),
        ATTENTION_THREADS,
        &[
            Arg::Ptr(delta),
            Arg::Ptr(dout),
            Arg::Ptr(out),
            Arg::U32(to_u32(op, "N", n)?),
            Arg::U32(to_u32(op, "H", dims.heads)?),
            Arg::U32(to_u32(op, "hd", dims.head_dim)?),
        ],
    )?;
    let sizes = kernel_args(op, &dims, n)?;
    let mut args = vec![
        Arg::Ptr(dq),
        Arg::Ptr(q),
        Arg::Ptr(k),
        Arg::Ptr(v),
        Arg::Ptr(dout),
        Arg::Ptr(lse),
        Arg::Ptr(delta),
        Arg::Ptr(spans),
    ];
    args.extend(sizes);
    let set = kernels(b, dims.head_dim);
    let blocks = row_blocks(op, n, set.backward_rows)?;
    b.launch(
        set.backward_dq,
        (blocks, dims.heads as u32),
        ATTENTION_THREADS,
        &args,
    )?;
    // A kernel set with a group sum runs dk/dv per query head; the sum (and the scratch
    // of the heads' shares) is needed only where a group has more than one query head.
    let dkv_heads = match set.dkv_group_sum {
        Some(_) => dims.heads,
        None => dims.kv_heads,
    };
    let group_sum = set.dkv_group_sum.filter(|_| dims.group > 1);
    let (dk_out, dv_out) = match group_sum {
        Some(_) => {
            let share = n * dims.heads * dims.head_dim;
            let shares = b.scratch_space(Scratch::DkvHeads, 2 * share)?;
            (shares, shares + (share * std::mem::size_of::<f32>()) as u64)
        }
        None => (dk, dv),
    };
    let mut args = vec![
        Arg::Ptr(dk_out),
        Arg::Ptr(dv_out),
        Arg::Ptr(q),
        Arg::Ptr(k),
        Arg::Ptr(v),
        Arg::Ptr(dout),
        Arg::Ptr(lse),
        Arg::Ptr(delta),
        Arg::Ptr(spans),
    ];
    args.extend(sizes);
    b.launch(
        set.backward_dkv,
        (blocks, to_u32(op, "dk/dv heads", dkv_heads)?),
        ATTENTION_THREADS,
        &args,
    )?;
    let Some(sum) = group_sum else {
        return Ok(());
    };
    let elements = n * dims.kv_heads * dims.head_dim;
    let sum_blocks = to_u32(
        op,
        "group-sum blocks",
        elements.div_ceil(GROUP_SUM_THREADS as usize),
    )?;
    b.launch(
        sum,
        (sum_blocks, 1),
        GROUP_SUM_THREADS,
        &[
            Arg::Ptr(dk),
            Arg::Ptr(dv),
            Arg::Ptr(dk_out),
            Arg::Ptr(dv_out),
            Arg::U32(to_u32(op, "N", n)?),
            Arg::U32(to_u32(op, "H", dims.heads)?),
            Arg::U32(to_u32(op, "group", dims.group)?),
            Arg::U32(to_u32(op, "hd", dims.head_dim)?),
        ],
    )
}
