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

/// Per-token loss coefficients of a batch in the `Policy` convention: the mean negative
/// log-likelihood over the batch's agent tokens has derivative `-1 / n` at each of
/// them (n = agent tokens in the batch) and 0 elsewhere.
pub fn nll_coefficients(batch: &[&SftExample]) -> Vec<Vec<f32>> {
    let n: usize = batch.iter().map(|e| e.agent_tokens()).sum();
    let weight = -1.0 / n.max(1) as f32;
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
