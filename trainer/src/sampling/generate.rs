//! [`generate`]: batched generation for a [`Transformer`] with one KV cache.
//!
//! All prompts are prefilled together; then every decoding step extends the running
//! sequences by one token until each has stopped. Once a quarter of the cache's rows
//! have stopped, the cache is compacted to the running ones, so finished sequences
//! stop costing compute; attention never crosses sequences, so this changes no
//! sequence's result. Greedy decoding and untruncated sampling pick each token on the
//! backend ([`Kernels::choose_tokens`], the same rule as the host's), so only the
//! choices are copied back; top-k and top-p pick on the host from the logits.

use sage_core::policy::{Generation, SamplingParams, StopReason};
use sage_transformer::sampling::TokenChoice;
use sage_transformer::{Kernels, KvCache, ModelError, Transformer};

use super::error::SamplingError;
use super::held::{HeldCaches, HeldRow};
use super::prefixes::prefill_shared_prefixes;
use super::rng::SequenceRng;
use super::sampler::Sampler;

/// Samples one continuation per prompt (in order) from `model` on backend `k`.
///
/// Each sequence stops after a token of `params.stop_tokens` (kept as its last token)
/// or after its limit: `params.max_new_tokens`, or less where
/// `params.max_new_tokens_each` says so. Sequence `i` draws from its own random
/// stream, derived from `(params.seed, key)` where the key is `params.stream_keys[i]`
/// (or `i` when there are none), so its tokens depend only on the seed, its key and its
/// prompt, not on the other prompts of the batch (on a backend whose per-sequence
/// results do not depend on the batch: the CPU backend's do not while the batch stays on
/// one side of its skinny-product limit, 32 sequences, where its products change kernel
/// and so the order of their sums, and in its bf16 precision whether their operands are
/// rounded). `logprobs` are
/// those of the model's own distribution, before temperature, top-k and top-p.
///
/// The KV cache holds `max(prompt + limit)` tokens per sequence, which must not exceed
/// the model's `max_position_embeddings`. The call reuses the model's activation
/// buffers, so a pending backward pass is invalidated.
pub fn generate<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    prompts: &[&[u32]],
    params: &SamplingParams,
) -> Result<Vec<Generation>, SamplingError<K::Error>> {
    generate_holding(k, model, &mut HeldCaches::new(0), prompts, params)
}

/// [`generate`], prefilling each prompt from the sequence of `held` that shares the
/// longest prefix with it (only the rest of the prompt runs through the model,
/// [`Transformer::prefill_rest`]), and afterwards holding every sequence's keys and
/// values in `held` for the next call, within its budget. Prefixes that several prompts
/// share beyond what `held` gives them (a system prompt, a group's common first turn)
/// are prefilled once first and held like the rest. The caller forgets what `held`
/// holds when the model's weights change ([`HeldCaches::forget`]). A prefill continued
/// from a cache sums attention in another order than a whole one, so its logits equal
/// a whole prefill's to f32 rounding, not to the bit, and where the prefixes fall
/// depends on the other prompts of the call.
pub fn generate_holding<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    held: &mut HeldCaches,
    prompts: &[&[u32]],
    params: &SamplingParams,
) -> Result<Vec<Generation>, SamplingError<K::Error>> {
    let sampler = Sampler::new(params)?;
    if let Some(index) = prompts.iter().position(|p| p.is_empty()) {
        return Err(SamplingError::EmptyPrompt { index });
    }
    let per_prompt = [
        ("stream_keys", params.stream_keys.len()),
        ("max_new_tokens_each", params.max_new_tokens_each.len()),
    ];
    if let Some(&(what, got)) = per_prompt
        .iter()
        .find(|&&(_, len)| len != 0 && len != prompts.len())
    {
        return Err(SamplingError::PerPrompt {
            what,
            got,
            prompts: prompts.len(),
        });
    }
    let limits = limits(params, prompts.len());
    let max_positions = model.config().max_position_embeddings;
    let (capacity, longest) = prompts
        .iter()
        .zip(&limits)
        .enumerate()
        .map(|(i, (p, &limit))| (p.len().saturating_add(limit), i))
        .max()
        .unwrap_or((0, 0));
    if capacity > max_positions {
        return Err(SamplingError::TooLong {
            longest_prompt: prompts[longest].len(),
            max_new_tokens: limits[longest],
            max_positions,
        });
    }
    if limits.iter().all(|&limit| limit == 0) {
        return Ok(prompts.iter().map(|_| empty_generation(0)).collect());
    }
    if held.budget() > 0 {
        prefill_shared_prefixes(k, model, held, prompts)?;
    }
    let (cache, rows) = start_cache(k, model, held, prompts, capacity, true)?;
    let held = (held.budget() > 0).then_some(held);
    decode(
        k, model, cache, prompts, rows, held, params, &limits, sampler,
    )
}

/// A cache of `capacity` tokens per sequence for `prompts`, each sequence holding the
/// held row that shares the longest prefix with its prompt ([`HeldCaches::take`],
/// counted in its [`Reuse`](super::Reuse) when `counted`), and the order of its rows:
/// row r is prompt `rows[r]`. The continued prompts come first, most new tokens first
/// (each position of the continued prefill is then one run of rows), then the others
/// in order. Held caches left with nothing to continue are freed.
pub(super) fn start_cache<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    held: &mut HeldCaches,
    prompts: &[&[u32]],
    capacity: usize,
    counted: bool,
) -> Result<(KvCache, Vec<usize>), ModelError<K::Error>> {
    let taken = held.take(prompts, counted);
    let mut rows: Vec<usize> = (0..prompts.len()).collect();
    rows.sort_by_key(|&i| {
        (
            taken[i].is_none(),
            core::cmp::Reverse(new_tokens(prompts[i], taken[i])),
        )
    });
    let cache = if taken.iter().any(Option::is_some) {
        let sources: Vec<Option<HeldRow>> = rows.iter().map(|&i| taken[i]).collect();
        model.gather_sequences(k, &held.sources(&sources), capacity)?
    } else {
        KvCache::new(k, model, prompts.len(), capacity)?
    };
    if let Err(e) = held.release_spent(k) {
        cache.free(k)?;
        return Err(e);
    }
    Ok((cache, rows))
}

/// Tokens of `prompt` past those of its held sequence.
fn new_tokens(prompt: &[u32], taken: Option<HeldRow>) -> usize {
    prompt.len() - taken.map_or(0, |row| row.len as usize)
}

/// The new-token limit of each of `prompts` prompts.
fn limits(params: &SamplingParams, prompts: usize) -> Vec<usize> {
    let max = params.max_new_tokens as usize;
    if params.max_new_tokens_each.is_empty() {
        return vec![max; prompts];
    }
    params
        .max_new_tokens_each
        .iter()
        .map(|&each| max.min(each as usize))
        .collect()
}

/// A generation with no tokens yet and room for `capacity`.
fn empty_generation(capacity: usize) -> Generation {
    Generation {
        tokens: Vec::with_capacity(capacity),
        logprobs: Vec::with_capacity(capacity),
        stop: StopReason::Length,
    }
}

/// Prefills `cache` (row r: sequence `rows[r]`, holding what the cache holds of its
/// prompt) with the rest of `prompts`, decodes until every sequence has stopped (or
/// reached its entry of `limits`), and frees the cache (also on error). With `held`,
/// the sequences that stop are held there as they leave the cache.
#[allow(clippy::too_many_arguments)]
fn decode<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    mut cache: KvCache,
    prompts: &[&[u32]],
    mut rows: Vec<usize>,
    mut held: Option<&mut HeldCaches>,
    params: &SamplingParams,
    limits: &[usize],
    sampler: Sampler,
) -> Result<Vec<Generation>, SamplingError<K::Error>> {
    let mut picker = Picker {
        sampler,
        on_device: sampler.on_device(model.config().vocab_size),
        rngs: (0..prompts.len())
            .map(|i| {
                let key = params.stream_keys.get(i).copied().unwrap_or(i as u64);
                SequenceRng::new(params.seed, key)
            })
            .collect(),
    };
    let mut generations: Vec<Generation> = limits
        .iter()
        .map(|&limit| empty_generation(limit))
        .collect();
    // A sequence with no room is done before its first token.
    let mut done: Vec<bool> = limits.iter().map(|&limit| limit == 0).collect();
    let row_prompts: Vec<&[u32]> = rows.iter().map(|&sequence| prompts[sequence]).collect();
    let mut step = Step::Prefill(&row_prompts);
    loop {
        let choices = match picker.next_tokens(k, model, &mut cache, step, &rows, &done) {
            Ok(choices) => choices,
            Err(e) => {
                cache.free(k)?;
                return Err(e.into());
            }
        };
        for (r, choice) in choices.into_iter().enumerate() {
            let sequence = rows[r];
            if done[sequence] {
                continue;
            }
            let generation = &mut generations[sequence];
            let position = generation.tokens.len();
            let Some(choice) = choice else {
                cache.free(k)?;
                return Err(SamplingError::NonFiniteLogits { sequence, position });
            };
            generation.tokens.push(choice.token);
            generation.logprobs.push(choice.logprob);
            if params.stop_tokens.contains(&choice.token) {
                generation.stop = StopReason::StopToken;
                done[sequence] = true;
            } else if generation.tokens.len() == limits[sequence] {
                done[sequence] = true;
            }
        }
        let running: Vec<bool> = rows.iter().map(|&sequence| !done[sequence]).collect();
        let still = running.iter().filter(|&&r| r).count();
        // Finished rows leave the cache once they are a quarter of it, or as soon as one
        // is full: fed again, it would overflow (a running row never fills its row, as
        // its prompt and limit fit the capacity and its last token is not fed).
        let full = rows
            .iter()
            .zip(cache.lengths())
            .any(|(&sequence, &cached)| done[sequence] && cached as usize >= cache.capacity());
        let compact = full || 4 * (rows.len() - still) >= rows.len();
        if still == 0 || compact {
            if let Some(held) = held.as_deref_mut() {
                let tokens = held_tokens(&cache, &rows, &done, prompts, &generations);
                if let Err(e) = held.keep(k, model, &cache, tokens) {
                    cache.free(k)?;
                    return Err(e.into());
                }
            }
        }
        if still == 0 {
            cache.free(k)?;
            return Ok(generations);
        }
        if compact {
            cache = model.retain_sequences(k, cache, &running)?;
            rows.retain(|&sequence| !done[sequence]);
        }
        // A finished row still in the cache (too few finished to compact) is fed its
        // last token again; its output stays frozen.
        let next: Vec<u32> = rows
            .iter()
            .map(|&sequence| generations[sequence].tokens.last().copied().unwrap_or(0))
            .collect();
        step = Step::Decode(next);
    }
}

/// Per row of `cache`, for the rows whose sequence is `done`, the tokens whose keys and
/// values the row holds: its prompt and the generated tokens fed back, as many as the
/// row has cached. The last generated token is fed only if the row stayed in the cache
/// after it finished; the rows cached past it, its last token fed again, are not kept.
fn held_tokens(
    cache: &KvCache,
    rows: &[usize],
    done: &[bool],
    prompts: &[&[u32]],
    generations: &[Generation],
) -> Vec<Option<Vec<u32>>> {
    rows.iter()
        .zip(cache.lengths())
        .map(|(&sequence, &cached)| {
            done[sequence].then(|| {
                let mut tokens = prompts[sequence].to_vec();
                tokens.extend(&generations[sequence].tokens);
                tokens.truncate(cached as usize);
                tokens
            })
        })
        .collect()
}

/// What a step feeds the model: the prompts, or each row's last token.
enum Step<'a> {
    Prefill(&'a [&'a [u32]]),
    Decode(Vec<u32>),
}

/// How each row's next token is picked, with every sequence's random stream.
struct Picker {
    sampler: Sampler,
    /// The rule's temperature when the backend can pick ([`Sampler::on_device`]).
    on_device: Option<f32>,
    rngs: Vec<SequenceRng>,
}

impl Picker {
    /// Runs `step` on `cache` and picks the next token of each row: one entry per row,
    /// `None` for a row whose logits are not all finite; a row whose sequence is `done`
    /// draws nothing from its stream and its entry is to be ignored.
    fn next_tokens<K: Kernels>(
        &mut self,
        k: &mut K,
        model: &mut Transformer,
        cache: &mut KvCache,
        step: Step<'_>,
        rows: &[usize],
        done: &[bool],
    ) -> Result<Vec<Option<TokenChoice>>, ModelError<K::Error>> {
        if let Some(temperature) = self.on_device {
            // One uniform number per running row, drawn as the host's sampler would.
            let uniforms: Vec<f64> = if temperature == 0.0 {
                Vec::new()
            } else {
                rows.iter()
                    .map(|&sequence| {
                        if done[sequence] {
                            0.0
                        } else {
                            self.rngs[sequence].next_unit()
                        }
                    })
                    .collect()
            };
            return match step {
                Step::Prefill(prompts) => {
                    model.prefill_rest_choosing(k, cache, prompts, temperature, &uniforms)
                }
                Step::Decode(tokens) => {
                    model.decode_step_choosing(k, cache, &tokens, temperature, &uniforms)
                }
            };
        }
        let logits = match step {
            Step::Prefill(prompts) => model.prefill_rest(k, cache, prompts)?,
            Step::Decode(tokens) => model.decode_step(k, cache, &tokens)?,
        };
        let vocab = model.config().vocab_size;
        Ok(logits
            .chunks_exact(vocab)
            .zip(rows)
            .map(|(row, &sequence)| {
                if done[sequence] {
                    None
                } else {
                    self.sampler.choose(row, &mut self.rngs[sequence])
                }
            })
            .collect())
    }
}
