//! Picking a token from one row of logits by the rules a backend may run on the device
//! ([`Kernels::choose_tokens`](crate::Kernels::choose_tokens)): the greedy choice, or a
//! draw from the temperature-scaled distribution, taken in id order at a given uniform
//! number. Written once, in f64, for the host path every backend can fall back on and
//! for the trainer's sampler, which adds top-k and top-p on top of the same pieces.

/// A token picked from a row of logits, and its log-probability under the unscaled
/// softmax of that row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenChoice {
    /// The token id.
    pub token: u32,
    /// `log softmax(logits)[token]`.
    pub logprob: f32,
}

/// The id of the highest logit, the lowest id among equals (-0 and +0 are equal).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (id, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = id;
        }
    }
    best
}

/// The unnormalised weight exp((logit - max) / temperature) of a logit, given the row's
/// maximum and 1 / temperature, in f64.
pub fn scaled_weight(logit: f32, max: f32, inverse_temperature: f64) -> f64 {
    libm::exp((f64::from(logit) - f64::from(max)) * inverse_temperature)
}

/// The index of `weights` (non-negative, finite, not all zero) whose interval of the
/// running sum, in index order, holds `unit` (in [0, 1)) times the total: index i is
/// drawn with probability `weights[i] / total`. `None` only when rounding leaves the
/// target past the last weight.
pub fn draw(weights: &[f64], unit: f64) -> Option<usize> {
    let total: f64 = weights.iter().sum();
    let target = unit * total;
    let mut cumulative = 0.0;
    weights.iter().position(|&w| {
        cumulative += w;
        cumulative > target
    })
}

/// `log softmax(row)[token]`, accumulated in f64.
pub fn log_softmax_at(row: &[f32], token: usize) -> f64 {
    let max = f64::from(row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)));
    let sum: f64 = row.iter().map(|&x| libm::exp(f64::from(x) - max)).sum();
    f64::from(row[token]) - max - libm::log(sum)
}

/// The token of `row` that [`Kernels::choose_tokens`](crate::Kernels::choose_tokens)
/// picks: [`argmax`] when `temperature` is 0, else the [`draw`] at `unit` from the
/// [`scaled_weight`]s (the last id when rounding runs past them). `None` when the row
/// is empty or holds a logit that is not finite.
pub fn choose(row: &[f32], temperature: f32, unit: f64) -> Option<TokenChoice> {
    if row.is_empty() || !row.iter().all(|x| x.is_finite()) {
        return None;
    }
    let token = if temperature == 0.0 {
        argmax(row)
    } else {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let inverse = 1.0 / f64::from(temperature);
        let weights: alloc::vec::Vec<f64> = row
            .iter()
            .map(|&x| scaled_weight(x, max, inverse))
            .collect();
        draw(&weights, unit).unwrap_or(row.len() - 1)
    };
    Some(TokenChoice {
        token: token as u32,
        logprob: log_softmax_at(row, token) as f32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_lowest_of_equal_maxima_and_its_log_probability() {
        let row = [0.5, 2.0, -1.0, 2.0];
        let choice = choose(&row, 0.0, 0.99).unwrap();
        assert_eq!(choice.token, 1);
        let sum: f64 = row.iter().map(|&x| (f64::from(x) - 2.0).exp()).sum();
        assert!((f64::from(choice.logprob) + sum.ln()).abs() < 1e-6);
    }

    #[test]
    fn a_draw_walks_the_running_sum_in_id_order() {
        // Temperature 1 over logits ln 1, ln 2, ln 1: weights 0.5, 1, 0.5 of total 2.
        let row = [0.0, core::f32::consts::LN_2, 0.0];
        let token = |unit| choose(&row, 1.0, unit).unwrap().token;
        assert_eq!(
            [
                token(0.0),
                token(0.24),
                token(0.26),
                token(0.74),
                token(0.76)
            ],
            [0, 0, 1, 1, 2]
        );
        // A high temperature flattens the weights toward a third each.
        assert_eq!(choose(&row, 1000.0, 0.34).unwrap().token, 1);
    }

    #[test]
    fn a_row_with_a_non_finite_logit_has_no_choice() {
        assert_eq!(choose(&[0.0, f32::NAN], 1.0, 0.5), None);
        assert_eq!(choose(&[f32::INFINITY], 0.0, 0.5), None);
        assert_eq!(choose(&[], 0.0, 0.5), None);
    }
}
