//! Rotary position embedding (the Qwen2 half-rotation layout) forward and backward, in
//! place, the forward with the projection's bias added in the same pass when it has one;
//! the inverse frequencies are computed on the host in f32 exactly as the CPU backend
//! computes them, and kept on the device while theta and hd stay the same. Kernel in
//! `kernels/rope.cu`.

use sage_transformer::{Indices, Tensor};

use crate::error::CudaError;
use crate::launch::{blocks_for, kernel_for, Arg, THREADS};
use crate::matmul::copy_out;
use crate::scratch::Scratch;
use crate::CudaBackend;
use sage_transformer::contract::{to_u32, RopeSizes};

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
