//! Rotary position embedding in the Qwen2 / Hugging Face "rotate_half" layout: in each
//! head, element i is paired with element i + hd/2 and the pair is rotated by
//! pos * theta^(-2i/hd). The backward pass is the inverse rotation.

use rayon::prelude::*;

use crate::elementwise::min_rows;
use sage_transformer::contract::RopeSizes;

/// Forward rotates by +angle, backward by -angle.
#[derive(Clone, Copy)]
enum Direction {
    Forward,
    Backward,
}

/// Rotates x[N, heads * hd] in place by the angles of positions[N].
pub(crate) fn rope_forward(x: &mut [f32], positions: &[u32], sizes: RopeSizes, theta: f32) {
    rotate(x, positions, sizes, theta, Direction::Forward);
}

/// The transpose of [`rope_forward`] (rotation by the opposite angles), in place on dx.
pub(crate) fn rope_backward(dx: &mut [f32], positions: &[u32], sizes: RopeSizes, theta: f32) {
    rotate(dx, positions, sizes, theta, Direction::Backward);
}

/// The rotation both directions share. Angles are computed in f32 as Hugging Face does:
/// inv_freq[i] = 1 / theta^(2i / hd), angle = pos * inv_freq[i].
fn rotate(x: &mut [f32], positions: &[u32], sizes: RopeSizes, theta: f32, direction: Direction) {
    let RopeSizes {
        heads, head_dim, ..
    } = sizes;
    let width = heads * head_dim;
    let half = head_dim / 2;
    // inv_freq[hd/2]
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32))
        .collect();
    let sign = match direction {
        Direction::Forward => 1.0f32,
        Direction::Backward => -1.0f32,
    };
    x.par_chunks_mut(width)
        .zip(positions.par_iter())
        .with_min_len(min_rows(width))
        .for_each_init(
            || (vec![0.0f32; half], vec![0.0f32; half]),
            |(cos, sin), (row, &pos)| {
                for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(&inv_freq) {
                    let (sine, cosine) = (pos as f32 * f).sin_cos();
                    *c = cosine;
                    *s = sign * sine;
                }
                for head in row.chunks_exact_mut(head_dim) {
                    let (first, second) = head.split_at_mut(half);
                    for (((x1, x2), &c), &s) in
                        first.iter_mut().zip(second).zip(cos.iter()).zip(sin.iter())
                    {
                        let (a, b) = (*x1, *x2);
                        *x1 = a * c - b * s;
                        *x2 = b * c + a * s;
                    }
                }
            },
        );
}
