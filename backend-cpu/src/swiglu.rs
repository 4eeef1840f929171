//! The SwiGLU activation of the MLP, silu(gate) * up, and its backward.

use rayon::prelude::*;

use crate::elementwise::CHUNK;

use crate::math::{sigmoid, vectorized};

/// out[N, I] = silu(gate[N, I]) * up[N, I], silu(g) = g * sigmoid(g).
pub(crate) fn swiglu_forward(out: &mut [f32], gate: &[f32], up: &[f32]) {
    out.par_chunks_mut(CHUNK)
        .zip(gate.par_chunks(CHUNK))
        .zip(up.par_chunks(CHUNK))
        .for_each(|((out, gate), up)| vectorized(Forward { out, gate, up }));
}

/// One chunk of [`swiglu_forward`], as a vectorised operation.
struct Forward<'a> {
    out: &'a mut [f32],
    gate: &'a [f32],
    up: &'a [f32],
}

impl pulp::WithSimd for Forward<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for ((o, &g), &u) in self.out.iter_mut().zip(self.gate).zip(self.up) {
            *o = g * sigmoid(g) * u;
        }
    }
}

/// dgate[N, I] = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))) and
/// dup[N, I] = dout * silu(g), from dout[N, I], gate (g) and up [N, I].
pub(crate) fn swiglu_backward(
    dgate: &mut [f32],
    dup: &mut [f32],
    dout: &[f32],
    gate: &[f32],
    up: &[f32],
) {
    dgate
        .par_chunks_mut(CHUNK)
        .zip(dup.par_chunks_mut(CHUNK))
        .zip(dout.par_chunks(CHUNK))
        .zip(gate.par_chunks(CHUNK).zip(up.par_chunks(CHUNK)))
        .for_each(|(((dgate, dup), dout), (gate, up))| {
            vectorized(Backward {
                dgate,
                dup,
                dout,
                gate,
                up,
            })
        });
}

/// One chunk of [`swiglu_backward`], as a vectorised operation.
struct Backward<'a> {
    dgate: &'a mut [f32],
    dup: &'a mut [f32],
    dout: &'a [f32],
    gate: &'a [f32],
    up: &'a [f32],
}

impl pulp::WithSimd for Backward<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let grads = self.dgate.iter_mut().zip(self.dup.iter_mut());
        let inputs = self.dout.iter().zip(self.gate).zip(self.up);
        for ((dg, du), ((&d, &g), &u)) in grads.zip(inputs) {
            let s = sigmoid(g);
            *du = d * g * s;
            *dg = d * u * s * (1.0 + g * (1.0 - s));
        }
    }
}
