//! The SwiGLU activation of the MLP, silu(gate) * up, and its backward.

use rayon::prelude::*;

use crate::elementwise::CHUNK;
use crate::error::{expect_len, CpuError};
use crate::math::sigmoid;

/// out[N, I] = silu(gate[N, I]) * up[N, I], silu(g) = g * sigmoid(g).
pub(crate) fn swiglu_forward(out: &mut [f32], gate: &[f32], up: &[f32]) -> Result<(), CpuError> {
    expect_len("swiglu_forward", "gate", gate.len(), out.len())?;
    expect_len("swiglu_forward", "up", up.len(), out.len())?;
    out.par_chunks_mut(CHUNK)
        .zip(gate.par_chunks(CHUNK))
        .zip(up.par_chunks(CHUNK))
        .for_each(|((out, gate), up)| {
            for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *o = g * sigmoid(g) * u;
            }
        });
    Ok(())
}

/// dgate[N, I] = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))) and
/// dup[N, I] = dout * silu(g), from dout[N, I], gate (g) and up [N, I].
pub(crate) fn swiglu_backward(
    dgate: &mut [f32],
    dup: &mut [f32],
    dout: &[f32],
    gate: &[f32],
    up: &[f32],
) -> Result<(), CpuError> {
    let len = dout.len();
    for (name, got) in [
        ("dgate", dgate.len()),
        ("dup", dup.len()),
        ("gate", gate.len()),
        ("up", up.len()),
    ] {
        expect_len("swiglu_backward", name, got, len)?;
    }
    dgate
        .par_chunks_mut(CHUNK)
        .zip(dup.par_chunks_mut(CHUNK))
        .zip(dout.par_chunks(CHUNK))
        .zip(gate.par_chunks(CHUNK).zip(up.par_chunks(CHUNK)))
        .for_each(|(((dgate, dup), dout), (gate, up))| {
            for ((((dg, du), &d), &g), &u) in dgate
                .iter_mut()
                .zip(dup.iter_mut())
                .zip(dout)
                .zip(gate)
                .zip(up)
            {
                let s = sigmoid(g);
                *du = d * g * s;
                *dg = d * u * s * (1.0 + g * (1.0 - s));
            }
        });
    Ok(())
}
