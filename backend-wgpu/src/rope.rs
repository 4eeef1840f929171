//! Rotary position embedding in the Qwen2 / Hugging Face "rotate_half" layout, in
//! place; the backward pass is the inverse rotation. The inverse frequencies are
//! computed on the host exactly as the CPU backend computes them (and uploaded once per
//! theta and head width); the kernel reduces each angle and evaluates sine and cosine
//! itself, so its accuracy does not depend on the GPU's builtins.

use sage_transformer::{Indices, Kernels, Tensor};

use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::scratch::Scratch;
use crate::store::Operand;
use crate::WgpuBackend;
use sage_transformer::contract::{to_u32, RopeSizes};

const ROPE: Kernel = Kernel {
    family: Family::Rope,
    entry: "rope",
    bindings: 3,
};

/// Rotates x[N, heads * hd] in place by the angles of positions[N], by +angle when
/// `sign` is 1 (forward) and -angle when it is -1 (backward).
pub(crate) fn rope(
    b: &mut WgpuBackend,
    op: &str,
    x: Tensor,
    positions: Indices,
    sizes: RopeSizes,
    theta: f32,
    sign: f32,
) -> Result<(), WgpuError> {
    let RopeSizes {
        rows,
        heads,
        head_dim,
    } = sizes;
    b.store.locate(Operand::U32(positions))?;
    if x.len == 0 {
        return Ok(());
    }
    let half = head_dim / 2;
    let inv_freq = frequencies(b, theta, head_dim)?;
    let grid = b.grid_for(op, rows * heads * half)?;
    b.launch(
        ROPE,
        &[x.into(), positions.into(), inv_freq.into()],
        &[
            to_u32(op, "N", rows)?,
            to_u32(op, "heads", heads)?,
            to_u32(op, "hd / 2", half)?,
            sign.to_bits(),
        ],
        grid,
    )
}

/// inv_freq[hd / 2] = 1 / theta^(2i / hd) in f32, as Hugging Face computes it; kept on
/// the device until theta or hd changes.
fn frequencies(b: &mut WgpuBackend, theta: f32, head_dim: usize) -> Result<Tensor, WgpuError> {
    let half = head_dim / 2;
    let key = (theta.to_bits(), head_dim);
    let table = b.scratch(Scratch::RopeFrequencies, half)?;
    if b.scratch.rope_of != Some(key) {
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32))
            .collect();
        b.write(table, &inv_freq)?;
        b.scratch.rope_of = Some(key);
    }
    Ok(table)
}
