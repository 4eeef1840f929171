//! Group-relative advantages: each reward minus the mean of its group, optionally
//! divided by the group's population standard deviation plus `eps`.
//!
//! A group holds the rollouts of one prompt (in SAGE: of one chain position of one
//! chain). A group of one, or a group whose rewards are all equal, gets advantage 0.
//! Sums are taken in `f64`.

use super::GrpoError;

/// Writes the advantage of each reward of one group into `out` (same length):
/// `A_i = R_i - mean(R)`, divided by `std(R) + eps` (population std) when
/// `normalize_std` is set.
pub fn group_advantages(
    rewards: &[f32],
    normalize_std: bool,
    eps: f32,
    out: &mut [f32],
) -> Result<(), GrpoError> {
    chain_advantages(rewards, rewards.len(), 1, normalize_std, eps, out)
}

/// Advantages of a batch of chains, grouped per chain position (SAGE: `A_i^k = R_i^k -
/// mean_j R_j^k` over the `rollouts` rollouts `j` of the same chain).
///
/// Layout of `rewards` and `out`: `[chain][rollout][position]`, i.e. the reward of
/// chain `c`, rollout `i`, position `k` is at `(c * rollouts + i) * chain_len + k`: each
/// rollout's rewards as [`Reward::rewards`](crate::reward::Reward::rewards) writes them,
/// the rollouts of a chain one after another. With `chain_len = 1` this is a batch of
/// consecutive groups of `rollouts` rewards.
pub fn chain_advantages(
    rewards: &[f32],
    rollouts: usize,
    chain_len: usize,
    normalize_std: bool,
    eps: f32,
    out: &mut [f32],
) -> Result<(), GrpoError> {
    if out.len() != rewards.len() {
        return Err(GrpoError::LengthMismatch {
            what: "advantages",
            expected: rewards.len(),
            found: out.len(),
        });
    }
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(GrpoError::InvalidConfig {
            what: "std eps must be finite and >= 0",
        });
    }
    if rewards.is_empty() {
        return Ok(());
    }
    let chain_size = match rollouts.checked_mul(chain_len) {
        Some(size) if size > 0 => size,
        _ => {
            return Err(GrpoError::InvalidConfig {
                what: "rollouts * chain_len must be > 0 and fit in usize",
            })
        }
    };
    if rewards.len() % chain_size != 0 {
        return Err(GrpoError::LengthMismatch {
            what: "rewards (a multiple of rollouts * chain_len)",
            expected: rewards.len() - rewards.len() % chain_size,
            found: rewards.len(),
        });
    }
    if !rewards.iter().all(|r| r.is_finite()) {
        return Err(GrpoError::NonFinite { what: "a reward" });
    }
    for (chain, chain_out) in rewards
        .chunks_exact(chain_size)
        .zip(out.chunks_exact_mut(chain_size))
    {
        for k in 0..chain_len {
            let group = chain.iter().skip(k).step_by(chain_len);
            let group_out = chain_out.iter_mut().skip(k).step_by(chain_len);
            centre(group, group_out, rollouts, normalize_std, eps);
        }
    }
    Ok(())
}

/// Multiplies every negative advantage by `weight` (GRPO's
/// [`negative_weight`](super::GrpoConfig::negative_weight)), leaving positive ones as
/// they are.
pub fn weight_negative_advantages(advantages: &mut [f32], weight: f32) {
    for a in advantages.iter_mut().filter(|a| **a < 0.0) {
        *a *= weight;
    }
}

/// Writes the advantages of one group of `len` rewards.
fn centre<'a>(
    group: impl Iterator<Item = &'a f32> + Clone,
    out: impl Iterator<Item = &'a mut f32>,
    len: usize,
    normalize_std: bool,
    eps: f32,
) {
    let n = len as f64;
    let mean = group.clone().map(|&r| f64::from(r)).sum::<f64>() / n;
    let scale = if normalize_std {
        let var = group
            .clone()
            .map(|&r| (f64::from(r) - mean) * (f64::from(r) - mean))
            .sum::<f64>()
            / n;
        let denom = libm::sqrt(var) + f64::from(eps);
        // Zero spread means every deviation is zero: leave them undivided.
        if denom > 0.0 {
            1.0 / denom
        } else {
            1.0
        }
    } else {
        1.0
    };
    for (&r, a) in group.zip(out) {
        *a = ((f64::from(r) - mean) * scale) as f32;
    }
}
