//! Length-bucketed batches: examples sorted by length are cut into batches of at most
//! a token budget (so sequences of a batch have similar lengths), and the order of the
//! batches is shuffled per epoch with a seeded stream.

use crate::sampling::SequenceRng;

use super::SftExample;

/// The batches of one epoch: indices into `examples`, each batch holding at most
/// `max_tokens` tokens (an example longer than that is a batch of its own). The same
/// examples, budget, seed and epoch give the same batches.
pub fn epoch_batches(
    examples: &[SftExample],
    max_tokens: usize,
    seed: u64,
    epoch: u64,
) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..examples.len()).collect();
    order.sort_by_key(|&i| (examples[i].tokens.len(), i));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut tokens = 0;
    for index in order {
        let len = examples[index].tokens.len();
        match batches.last_mut() {
            Some(batch) if tokens + len <= max_tokens => {
                batch.push(index);
                tokens += len;
            }
            _ => {
                batches.push(vec![index]);
                tokens = len;
            }
        }
    }
    let mut rng = SequenceRng::new(seed, epoch);
    for i in (1..batches.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        batches.swap(i, j);
    }
    batches
}

/// Agent tokens per batch, averaged over an epoch's batches (the same every epoch: only
/// the order of the batches changes); the normalizer of [`SftLossWeighting::Token`].
///
/// [`SftLossWeighting::Token`]: super::SftLossWeighting::Token
pub fn mean_agent_tokens(examples: &[SftExample], batches: &[Vec<usize>]) -> f64 {
    let agent: usize = batches
        .iter()
        .flatten()
        .map(|&i| examples[i].agent_tokens())
        .sum();
    agent as f64 / batches.len().max(1) as f64
}

/// Per-token loss coefficients of a batch in the `Policy` convention: the negative
/// log-likelihood summed over the batch's agent tokens and divided by `normalizer` has
/// derivative `-1 / normalizer` at each of them and 0 elsewhere. With `normalizer` the
/// batch's own agent tokens, the loss is the batch's mean.
pub fn nll_coefficients(batch: &[&SftExample], normalizer: f64) -> Vec<Vec<f32>> {
    let weight = (-1.0 / normalizer.max(1.0)) as f32;
    batch
        .iter()
        .map(|e| {
            e.loss_mask
                .iter()
                .map(|&m| if m { weight } else { 0.0 })
                .collect()
        })
        .collect()
}
