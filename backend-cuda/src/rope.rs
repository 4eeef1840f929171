//! Rotary position embedding (the Qwen2 half-rotation layout) forward and backward, in
//! place, the forward with the projection's bias added in the same pass when it has one;
//! and a decoding step's biases, rotations and cache append in one pass. The inverse
//! frequencies are computed on the host in f32 exactly as the CPU backend computes them,
//! and kept on the device while theta and hd stay the same. Kernels in `kernels/rope.cu`.

use sage_transformer::device::rope_append_kv_by_parts;
use sage_transformer::{Indices, ProjectedRows, Tensor};

use crate::decode::cache_pair;
use crate::error::CudaError;
use crate::launch::{blocks_for, kernel_for, Arg, THREADS};
use crate::matmul::copy_out;
use crate::scratch::{IndexScratch, Scratch};
use crate::CudaBackend;
use sage_transformer::contract::{to_u32, DecodeSizes, RopeSizes};

/// Rotates x[N, heads * hd] in place by pos * inv_freq, by the opposite angles when
/// `sign` is -1 (the backward pass), after adding `bias[heads * hd]` to every row when
/// given (the forward pass of a projection with a bias; it may be frozen bf16 weights);
/// x's bf16 copy too where GEMMs read it ([`copy_out`]: the query and key gradients,
/// which their projections' backward GEMMs read next).
pub(crate) fn rope(
    b: &mut CudaBackend,
    op: &str,
    (x, bias, positions): (Tensor, Option<Tensor>, Indices),
    sizes: RopeSizes,
    theta: f32,
    sign: f32,
) -> Result<(), CudaError> {
    let RopeSizes {
        rows,
        heads,
        head_dim,
    } = sizes;
    let (bias_at, bias_bf16) = match bias {
        Some(bias) => b.store.weight_address(bias)?,
        None => (0, false),
    };
    let (xs, pos) = (b.store.address(x)?, b.store.index_address(positions)?);
    if x.len == 0 {
        return Ok(());
    }
    let inv_freq = frequencies(b, theta, head_dim)?;
    let copy = copy_out(b, x)?;
    b.launch(
        kernel_for(bias_bf16, "rope", "rope_bias_bf16"),
        (blocks_for(x.len as u64 / 2), 1),
        THREADS,
        &[
            Arg::Ptr(xs),
            Arg::Ptr(copy),
            Arg::Ptr(bias_at),
            Arg::Ptr(pos),
            Arg::Ptr(inv_freq),
            Arg::U32(to_u32(op, "N", rows)?),
            Arg::U32(to_u32(op, "heads", heads)?),
            Arg::U32(to_u32(op, "hd", head_dim)?),
            Arg::F32(sign),
        ],
    )
}

/// A decoding step's new rows between their projections and attention, in one kernel
/// (`rope_append_kv` in rope.cu): q += q_bias rotated in place, k + k_bias rotated and
/// v + v_bias written into the caches [B, T, KV*hd] at row lengths[b]; k and v are read,
/// not written. Where the backend is set to the separate calls, or the biases are not
/// all held alike, [`rope_append_kv_by_parts`] runs them.
pub(crate) fn rope_append_kv(
    b: &mut CudaBackend,
    rows: ProjectedRows,
    (positions, theta): (Indices, f32),
    caches: [Tensor; 2],
    lengths: &[u32],
    sizes: DecodeSizes,
) -> Result<(), CudaError> {
    let op = "rope_append_kv";
    let (caches_at, cache_bf16) = cache_pair(b, op, caches)?;
    // Each bias's address (0 for none), and whether the present ones are held alike.
    let mut biases = [0u64; 3];
    let (mut bias_bf16, mut alike) = (None, true);
    for (at, bias) in biases.iter_mut().zip(rows.biases) {
        if let Some(bias) = bias {
            let (address, bf16) = b.store.weight_address(bias)?;
            *at = address;
            alike &= *bias_bf16.get_or_insert(bf16) == bf16;
        }
    }
    let bias_bf16 = bias_bf16.unwrap_or(cache_bf16);
    let kernel = match (cache_bf16, bias_bf16) {
        (false, false) => Some("rope_append_kv"),
        (true, false) => Some("rope_append_kv_bf16"),
        (true, true) => Some("rope_append_kv_bf16_bias_bf16"),
        // f32 caches beside frozen bf16 weights: no mode makes them, no kernel takes them.
        (false, true) => None,
    };
    let (Some(kernel), true, true) = (kernel, alike, b.fused_rope_append) else {
        let at = (positions, theta);
        return rope_append_kv_by_parts(b, rows, at, caches, lengths, sizes);
    };
    let q = b.store.address(rows.q)?;
    let (k, v) = (b.store.address_read(rows.k)?, b.store.address_read(rows.v)?);
    let pos = b.store.index_address(positions)?;
    let DecodeSizes { dims, cache } = sizes;
    if cache.batch == 0 {
        return Ok(());
    }
    let inv_freq = frequencies(b, theta, dims.head_dim)?;
    let q_copy = copy_out(b, rows.q)?;
    let filled = b
        .scratch
        .upload_indices_once(&b.gpu, IndexScratch::AppendRows, lengths)?;
    let pairs = cache.batch * (dims.heads + 2 * dims.kv_heads) * dims.head_dim / 2;
    b.launch(
        kernel,
        (blocks_for(pairs as u64), 1),
        THREADS,
        &[
            Arg::Ptr(q),
            Arg::Ptr(q_copy),
            Arg::Ptr(caches_at[0]),
            Arg::Ptr(caches_at[1]),
            Arg::Ptr(k),
            Arg::Ptr(v),
            Arg::Ptr(biases[0]),
            Arg::Ptr(biases[1]),
            Arg::Ptr(biases[2]),
            Arg::Ptr(pos),
            Arg::Ptr(filled),
            Arg::Ptr(inv_freq),
            Arg::U32(to_u32(op, "B", cache.batch)?),
            Arg::U32(to_u32(op, "heads", dims.heads)?),
            Arg::U32(to_u32(op, "kv heads", dims.kv_heads)?),
            Arg::U32(to_u32(op, "hd", dims.head_dim)?),
            Arg::U32(to_u32(op, "T", cache.capacity)?),
        ],
    )
}

/// The device address of inv_freq[hd / 2] = 1 / theta^(2i / hd), uploaded when theta or
/// hd changes.
fn frequencies(b: &mut CudaBackend, theta: f32, head_dim: usize) -> Result<u64, CudaError> {
    let half = head_dim / 2;
    let key = (theta.to_bits(), head_dim);
    if b.scratch.rope_of == Some(key) {
        return b.scratch_space(Scratch::RopeFrequencies, half);
    }
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32))
        .collect();
    let address = b
        .scratch
        .upload(&b.gpu, Scratch::RopeFrequencies, &inv_freq)?;
    b.scratch.rope_of = Some(key);
    Ok(address)
}
