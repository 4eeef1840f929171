//! Token choice where the logits lie: each row of logits picked by the rule every
//! backend follows ([`sage_transformer::sampling::choice_numbers`]), compiled for the
//! CPU's widest vectors (the rule's exponentials and sums vectorise), the rows on
//! rayon's threads, with no copy of the logits. A row's choice depends on its row and
//! its uniform number alone, so the thread count and the vector width change nothing.

use rayon::prelude::*;
use sage_transformer::contract::ChoiceSizes;
use sage_transformer::sampling::choice_numbers;

use crate::math::vectorized;

/// choices[rows, 2] = (token id, log-probability) of each row of logits[rows, vocab],
/// drawn at uniforms[row] (0 past their end, as greedy rows need none); (-1, NaN) for
/// a row with no choice (a logit that is not finite).
pub(crate) fn choose_tokens(
    choices: &mut [f32],
    logits: &[f32],
    uniforms: &[f64],
    sizes: ChoiceSizes,
) {
    choices
        .par_chunks_exact_mut(2)
        .zip(logits.par_chunks_exact(sizes.vocab))
        .enumerate()
        .for_each(|(row_index, (choice, row))| {
            let unit = uniforms.get(row_index).copied().unwrap_or(0.0);
            let numbers = vectorized(RowChoice {
                row,
                temperature: sizes.temperature,
                unit,
            });
            choice.copy_from_slice(&numbers);
        });
}

/// One row's [`choice_numbers`], as a vectorised operation.
struct RowChoice<'a> {
    row: &'a [f32],
    temperature: f32,
    unit: f64,
}

impl pulp::WithSimd for RowChoice<'_> {
    type Output = [f32; 2];

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> [f32; 2] {
        choice_numbers(self.row, self.temperature, self.unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_inputs::random;

    /// Every row's choice is, to the bit, what the host's rule picks from that row at
    /// that row's uniform number, in that row's place: greedy (no uniform numbers),
    /// sampled at temperature 1 and 0.7, over rows of a vocabulary that is not a
    /// multiple of any vector width, one row holding a NaN.
    #[test]
    fn each_row_is_picked_as_the_host_picks_it() {
        let (rows, vocab) = (37, 1001);
        let mut logits: Vec<f32> = random(rows * vocab, 5).iter().map(|x| 6.0 * x).collect();
        logits[9 * vocab + 4] = f32::NAN;
        let uniforms: Vec<f64> = random(rows, 6)
            .iter()
            .map(|&x| f64::from(x.abs().fract()))
            .collect();
        for (temperature, units) in [(0.0, &[][..]), (1.0, &uniforms[..]), (0.7, &uniforms[..])] {
            let sizes = ChoiceSizes {
                rows,
                vocab,
                temperature,
            };
            let mut choices = vec![0.0; 2 * rows];
            choose_tokens(&mut choices, &logits, units, sizes);
            for (b, row) in logits.chunks_exact(vocab).enumerate() {
                let unit = units.get(b).copied().unwrap_or(0.0);
                let want = choice_numbers(row, temperature, unit);
                let got = [choices[2 * b], choices[2 * b + 1]];
                assert_eq!(
                    got.map(f32::to_bits),
                    want.map(f32::to_bits),
                    "temperature {temperature}, row {b}"
                );
            }
        }
    }
}
