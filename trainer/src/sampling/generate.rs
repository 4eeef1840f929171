//! [`generate`]: batched generation for a [`Transformer`] with one KV cache.
//!
//! All prompts are prefilled together; then every decoding step extends the whole
//! batch by one token until each sequence has stopped. A sequence that has stopped
//! stays in the batch (the cache cannot drop rows): it is fed its own last token again
//! and its output is frozen, which costs a little compute and never changes another
//! sequence's result, since attention never crosses sequences.

use sage_core::policy::{Generation, SamplingParams, StopReason};
use sage_core::transformer::{Kernels, KvCache, Transformer};

use super::error::SamplingError;
use super::rng::SequenceRng;
use super::sampler::Sampler;

/// Samples one continuation per prompt (in order) from `model` on backend `k`.
///
/// Each sequence stops after a token of `params.stop_tokens` (kept as its last token)
/// or after `params.max_new_tokens` tokens. Sequence `i` draws from its own random
/// stream, derived from `(params.seed, i)`, so its tokens depend only on the seed, its
/// index and its prompt, not on the other prompts of the batch (on a backend whose
/// per-sequence results do not depend on the batch, as the CPU backend's do not).
/// `logprobs` are those of the model's own distribution, before temperature, top-k
/// and top-p.
///
/// The KV cache holds `longest prompt + max_new_tokens` tokens per sequence, which
/// must not exceed the model's `max_position_embeddings`. The call reuses the model's
/// activation buffers, so a pending backward pass is invalidated.
pub fn generate<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    prompts: &[&[u32]],
    params: &SamplingParams,
) -> Result<Vec<Generation>, SamplingError<K::Error>> {
    let sampler = Sampler::new(params)?;
    if let Some(index) = prompts.iter().position(|p| p.is_empty()) {
        return Err(SamplingError::EmptyPrompt { index });
    }
    let max_new_tokens = params.max_new_tokens as usize;
    let longest_prompt = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
    let max_positions = model.config().max_position_embeddings;
    let capacity = longest_prompt.saturating_add(max_new_tokens);
    if capacity > max_positions {
        return Err(SamplingError::TooLong {
            longest_prompt,
            max_new_tokens,
            max_positions,
        });
    }
    if prompts.is_empty() || max_new_tokens == 0 {
        return Ok(prompts.iter().map(|_| empty_generation(0)).collect());
    }
    let mut cache = KvCache::new(k, model, prompts.len(), capacity)?;
    let generations = decode(k, model, &mut cache, prompts, params, sampler);
    let freed = cache.free(k);
    let generations = generations?;
    freed?;
    Ok(generations)
}

/// A generation with no tokens yet and room for `capacity`.
fn empty_generation(capacity: usize) -> Generation {
    Generation {
        tokens: Vec::with_capacity(capacity),
        logprobs: Vec::with_capacity(capacity),
        stop: StopReason::Length,
    }
}

/// Prefills `cache` with `prompts` and decodes until every sequence has stopped.
fn decode<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    cache: &mut KvCache,
    prompts: &[&[u32]],
    params: &SamplingParams,
    sampler: Sampler,
) -> Result<Vec<Generation>, SamplingError<K::Error>> {
    let vocab = model.config().vocab_size;
    let max_new_tokens = params.max_new_tokens as usize;
    let mut rngs: Vec<SequenceRng> = (0..prompts.len())
        .map(|i| SequenceRng::new(params.seed, i as u64))
        .collect();
    let mut generations: Vec<Generation> = prompts
        .iter()
        .map(|_| empty_generation(max_new_tokens))
        .collect();
    let mut running = vec![true; prompts.len()];
    let mut logits = model.prefill(k, cache, prompts)?;
    loop {
        let rows = logits.chunks_exact(vocab);
        for (sequence, (((row, generation), rng), running)) in rows
            .zip(&mut generations)
            .zip(&mut rngs)
            .zip(&mut running)
            .enumerate()
        {
            if !*running {
                continue;
            }
            let position = generation.tokens.len();
            let choice = sampler
                .choose(row, rng)
                .ok_or(SamplingError::NonFiniteLogits { sequence, position })?;
            generation.tokens.push(choice.token);
            generation.logprobs.push(choice.logprob);
            if params.stop_tokens.contains(&choice.token) {
                generation.stop = StopReason::StopToken;
                *running = false;
            } else if generation.tokens.len() == max_new_tokens {
                *running = false;
            }
        }
        if !running.contains(&true) {
            return Ok(generations);
        }
        // Every sequence holds at least one token after the first round.
        let next: Vec<u32> = generations
            .iter()
            .map(|g| g.tokens.last().copied().unwrap_or(0))
            .collect();
        logits = model.decode_step(k, cache, &next)?;
    }
}
