//! Token embedding: the forward gather of table rows and its backward scatter-add,
//! which is deterministic because each table row is accumulated by one task, in token
//! order.

use rayon::prelude::*;

use crate::elementwise::min_rows;
use sage_transformer::contract::EmbeddingSizes;

use crate::error::CpuError;

/// Fails unless every token is below the table's rows (V).
fn check_tokens(op: &'static str, tokens: &[u32], vocab: usize) -> Result<(), CpuError> {
    match tokens.iter().find(|&&token| token as usize >= vocab) {
        Some(&token) => Err(CpuError::TokenOutOfRange { op, token, vocab }),
        None => Ok(()),
    }
}

/// out[N, D] = table[tokens[n], :] with table [V, D] and tokens [N].
pub(crate) fn embedding_forward(
    out: &mut [f32],
    table: &[f32],
    tokens: &[u32],
    sizes: EmbeddingSizes,
) -> Result<(), CpuError> {
    check_tokens("embedding_forward", tokens, sizes.vocab)?;
    let dim = sizes.dim;
    out.par_chunks_mut(dim)
        .zip(tokens.par_iter())
        .with_min_len(min_rows(dim))
        .for_each(|(row, &token)| {
            let start = token as usize * dim;
            row.copy_from_slice(&table[start..start + dim]);
        });
    Ok(())
}

/// dtable[V, D] += dout[n, :] for each n at row tokens[n]. A counting sort groups the
/// positions of each token (in increasing n); each row of dtable then sums its group.
pub(crate) fn embedding_backward(
    dtable: &mut [f32],
    dout: &[f32],
    tokens: &[u32],
    sizes: EmbeddingSizes,
) -> Result<(), CpuError> {
    check_tokens("embedding_backward", tokens, sizes.vocab)?;
    let EmbeddingSizes { dim, vocab, .. } = sizes;
    // group_start[v]..group_start[v + 1] indexes the positions of token v in `by_token`.
    let mut group_start = vec![0usize; vocab + 1];
    for &token in tokens {
        group_start[token as usize + 1] += 1;
    }
    for v in 0..vocab {
        group_start[v + 1] += group_start[v];
    }
    let mut fill = group_start.clone();
    let mut by_token = vec![0usize; tokens.len()];
    for (n, &token) in tokens.iter().enumerate() {
        by_token[fill[token as usize]] = n;
        fill[token as usize] += 1;
    }
    dtable.par_chunks_mut(dim).enumerate().for_each(|(v, row)| {
        for &n in &by_token[group_start[v]..group_start[v + 1]] {
            for (d, g) in row.iter_mut().zip(&dout[n * dim..(n + 1) * dim]) {
                *d += g;
            }
        }
    });
    Ok(())
}
