//! Decoding with a KV cache: [`KvCache`] holds the keys and values of B sequences in
//! the backend; [`Transformer::prefill`] fills it from prompts and
//! [`Transformer::decode_step`] extends every sequence by one token, returning logits.
//! Their `_choosing` forms pick each sequence's next token on the backend instead
//! ([`Kernels::choose_tokens`]) and return only the choices, so the logits stay there.

use alloc::vec;
use alloc::vec::Vec;

use super::kernels::{BufferId, IndexBufferId, Indices, Kernels, ProjectedRows, Tensor};
use super::layout::{ActLayout, LayerActs, Slot};
use super::model::{
    at, attention_output, attention_projections, attention_shape, backend, input, layer_forward,
    mlp_forward, same_len, InputError, LayerBuffers, Residual, Result, Transformer,
};
use super::sampling::TokenChoice;

mod continuation;

use continuation::{Continuation, Slab};

/// Prompt tokens a prefill runs through the layers at once by default: the scratch of
/// one layer's activations is sized for this many tokens (about 210 MB for a 0.5B
/// model), not for every prompt of the batch together.
pub const DEFAULT_PREFILL_TOKENS: usize = 4096;

/// Keys and values of B sequences, up to `capacity` tokens each, in one backend
/// buffer, with the scratch a decoding step needs.
pub struct KvCache {
    batch: usize,
    capacity: usize,
    /// Sequences each layer's blocks of `cache` have room for: B when allocated, more
    /// once [`Transformer::retain_sequences`] has kept fewer in place (the first B are
    /// the cache's sequences).
    room: usize,
    /// Most prompt tokens one group of a prefill holds (a longer prompt runs alone).
    prefill_tokens: usize,
    /// Tokens cached per sequence.
    lengths: Vec<u32>,
    /// Per layer: k[room, T, KV*hd] then v[room, T, KV*hd].
    cache: BufferId,
    /// One layer's activations for B rows and the step's outputs.
    steps: StepBuffers,
}

/// What a decoding step or a prefill's last positions need besides the keys and values,
/// for B sequences: one layer's activations, the last hidden states, logits, choices
/// and the token and position indices.
struct StepBuffers {
    /// One layer's activations for B rows, reused by every layer.
    scratch_layout: ActLayout,
    /// `scratch_layout`, then last_hidden[B, D], logits[B, V] and choices[B, 2].
    scratch: BufferId,
    last_hidden: Slot,
    logits: Slot,
    choices: Slot,
    /// tokens[B] then positions[B].
    indices: IndexBufferId,
}

impl StepBuffers {
    /// Allocates them for `batch` sequences of `model`; nothing is left allocated on
    /// error.
    fn new<K: Kernels>(k: &mut K, model: &Transformer, batch: usize) -> Result<StepBuffers, K> {
        let c = model.config();
        let scratch_layout = ActLayout::for_decoding(c, batch);
        let last_hidden = Slot {
            offset: scratch_layout.total,
            len: batch * c.hidden_size,
            shape: [batch, c.hidden_size],
        };
        let logits = Slot {
            offset: last_hidden.offset + last_hidden.len,
            len: batch * c.vocab_size,
            shape: [batch, c.vocab_size],
        };
        let choices = Slot {
            offset: logits.offset + logits.len,
            len: 2 * batch,
            shape: [batch, 2],
        };
        let scratch = k.alloc(choices.offset + choices.len).map_err(backend)?;
        let indices = match k.alloc_indices(2 * batch) {
            Ok(indices) => indices,
            Err(e) => {
                k.free(scratch).map_err(backend)?;
                return Err(backend(e));
            }
        };
        Ok(StepBuffers {
            scratch_layout,
            scratch,
            last_hidden,
            logits,
            choices,
            indices,
        })
    }

    /// Releases them.
    fn free<K: Kernels>(self, k: &mut K) -> Result<(), K> {
        k.free(self.scratch).map_err(backend)?;
        k.free_indices(self.indices).map_err(backend)
    }
}

impl KvCache {
    /// Allocates a cache for `batch` sequences of up to `capacity` tokens of `model`.
    pub fn new<K: Kernels>(
        k: &mut K,
        model: &Transformer,
        batch: usize,
        capacity: usize,
    ) -> Result<KvCache, K> {
        if batch == 0 || capacity == 0 {
            return Err(input(InputError::Empty));
        }
        let c = model.config();
        let per_layer = 2 * batch * capacity * c.kv_dim();
        let cache = k
            .alloc_kv_cache(per_layer * c.num_hidden_layers)
            .map_err(backend)?;
        let steps = match StepBuffers::new(k, model, batch) {
            Ok(steps) => steps,
            Err(e) => {
                k.free(cache).map_err(backend)?;
                return Err(e);
            }
        };
        Ok(KvCache {
            batch,
            capacity,
            room: batch,
            prefill_tokens: DEFAULT_PREFILL_TOKENS,
            lengths: vec![0; batch],
            cache,
            steps,
        })
    }

    /// Sequences in the cache (B).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Tokens each sequence can hold (T).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Tokens cached for each sequence.
    pub fn lengths(&self) -> &[u32] {
        &self.lengths
    }

    /// Sets how many prompt tokens a prefill runs through the layers at once
    /// (at least 1; default [`DEFAULT_PREFILL_TOKENS`]). Consecutive prompts are grouped
    /// up to this many tokens, a longer prompt runs alone; the results do not depend on
    /// it, only the prefill's scratch memory and its GEMMs' sizes do.
    pub fn set_prefill_tokens(&mut self, tokens: usize) {
        self.prefill_tokens = tokens.max(1);
    }

    /// Releases the cache's buffers.
    pub fn free<K: Kernels>(self, k: &mut K) -> Result<(), K> {
        k.free(self.cache).map_err(backend)?;
        self.steps.free(k)
    }

    /// The key (`which = 0`) or value (`which = 1`) cache of `layer`, [B, T, KV*hd]: the
    /// first B sequences of the layer's block of `room`.
    fn layer_cache(&self, layer: usize, which: usize, kv_dim: usize) -> Tensor {
        let sequence = self.capacity * kv_dim;
        Tensor {
            buffer: self.cache,
            offset: (2 * layer + which) * self.room * sequence,
            len: self.batch * sequence,
        }
    }

    /// Rows `[start, start + len)` of sequence `seq` in a `[B, T, width]` cache tensor.
    fn rows(&self, cache: Tensor, seq: usize, start: usize, len: usize, width: usize) -> Tensor {
        cache.slice((seq * self.capacity + start) * width, len * width)
    }

    /// The residual stream of one row per sequence in the scratch, [B, D] (the decoding
    /// layer's input and output).
    fn residual(&self) -> Slot {
        self.steps.scratch_layout.layers[0].residual_in
    }

    fn ids(&self, which: usize) -> Indices {
        Indices {
            buffer: self.steps.indices,
            offset: which * self.batch,
            len: self.batch,
        }
    }
}

/// The first `len` cached tokens of sequence `sequence` of `cache`: what
/// [`Transformer::gather_sequences`] copies into a sequence of a new cache.
#[derive(Clone, Copy)]
pub struct CachedRows<'a> {
    /// The cache holding them.
    pub cache: &'a KvCache,
    /// The sequence (row) of that cache.
    pub sequence: usize,
    /// Tokens copied, at most the sequence's length in that cache.
    pub len: u32,
}

impl Transformer {
    /// Runs the prompts (one per sequence of `cache`, none empty) through the model,
    /// stores their keys and values in `cache` (replacing what it held), and returns the
    /// logits of each prompt's next token, [B, V] row-major.
    ///
    /// The prompts' activations live in a scratch slab of one layer's size for the
    /// call only; a pending backward pass is left as it was.
    pub fn prefill<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        prompts: &[&[u32]],
    ) -> Result<Vec<f32>, K> {
        cache.lengths.fill(0);
        self.prefill_hidden(k, cache, prompts)?;
        self.read_logits(k, cache)
    }

    /// [`Transformer::prefill`], then each prompt's next token picked on the backend by
    /// [`Kernels::choose_tokens`] at `temperature` (0: greedy) with `uniforms[b]` for
    /// sequence b; `None` for a sequence whose logits are not all finite.
    pub fn prefill_choosing<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        prompts: &[&[u32]],
        temperature: f32,
        uniforms: &[f64],
    ) -> Result<Vec<Option<TokenChoice>>, K> {
        cache.lengths.fill(0);
        self.prefill_hidden(k, cache, prompts)?;
        self.choose_next(k, cache, temperature, uniforms)
    }

    /// [`Transformer::prefill`] of the part of each prompt that `cache` does not hold
    /// yet: sequence b's cache holds the keys and values of the first
    /// `cache.lengths()[b]` tokens of `prompts[b]` (put there by an earlier prefill,
    /// decoding steps or [`Transformer::gather_sequences`]; the caller vouches that
    /// they are those tokens), and each prompt must add at least one token. A sequence
    /// that holds nothing is prefilled whole. Returns the logits of each prompt's next
    /// token, equal to a whole prefill's up to the order of floating-point sums.
    pub fn prefill_rest<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        prompts: &[&[u32]],
    ) -> Result<Vec<f32>, K> {
        self.prefill_hidden(k, cache, prompts)?;
        self.read_logits(k, cache)
    }

    /// [`Transformer::prefill_rest`] for its keys and values alone: `cache` then holds
    /// every prompt whole, and no logits are computed (a prefix that later prompts
    /// continue needs no next token).
    pub fn extend_cache<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        prompts: &[&[u32]],
    ) -> Result<(), K> {
        self.prefill_hidden(k, cache, prompts)
    }

    /// [`Transformer::prefill_rest`], then each prompt's next token picked on the
    /// backend, as [`Transformer::prefill_choosing`] does.
    pub fn prefill_rest_choosing<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        prompts: &[&[u32]],
        temperature: f32,
        uniforms: &[f64],
    ) -> Result<Vec<Option<TokenChoice>>, K> {
        self.prefill_hidden(k, cache, prompts)?;
        self.choose_next(k, cache, temperature, uniforms)
    }

    /// The prefill of each prompt past the tokens its sequence's cache holds, up to
    /// each prompt's last hidden state in `cache.steps.last_hidden`. Sequences that hold
    /// nothing run in groups of consecutive such prompts of at most
    /// `cache.prefill_tokens` tokens (a longer prompt alone), each group packed through
    /// every layer in turn; the others continue from their caches
    /// ([`continuation`]), in windows of at most that many new tokens. Both run over
    /// one layer's slots of a scratch slab ([`ActLayout::for_decoding`] of the largest
    /// group's or window's tokens), freed at the end: the training activations are
    /// neither used nor resized.
    fn prefill_hidden<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        prompts: &[&[u32]],
    ) -> Result<(), K> {
        same_len("prompts", cache.batch, prompts.len())?;
        if prompts.iter().any(|p| p.is_empty()) {
            return Err(input(InputError::BadSeqStarts));
        }
        if prompts.iter().any(|p| p.len() > cache.capacity) {
            return Err(input(InputError::CacheFull {
                capacity: cache.capacity,
            }));
        }
        for (sequence, (prompt, &cached)) in prompts.iter().zip(&cache.lengths).enumerate() {
            if prompt.len() <= cached as usize {
                return Err(input(InputError::NothingNew { sequence, cached }));
            }
            self.check_tokens(prompt)?;
        }
        let fresh: Vec<usize> = (0..cache.batch)
            .filter(|&b| cache.lengths[b] == 0)
            .collect();
        let fresh_lengths: Vec<usize> = fresh.iter().map(|&b| prompts[b].len()).collect();
        let groups = prefill_groups(&fresh_lengths, cache.prefill_tokens);
        let continuation = Continuation::plan(&cache.lengths, prompts, cache.prefill_tokens);
        let most_tokens = groups
            .iter()
            .map(|group| fresh_lengths[group.clone()].iter().sum::<usize>())
            .chain(continuation.most_rows())
            .max()
            .unwrap_or(0);
        let scratch_len = ActLayout::for_decoding(&self.config, most_tokens).total;
        let scratch = k.alloc(scratch_len).map_err(backend)?;
        let ids = match k.alloc_indices(2 * most_tokens) {
            Ok(ids) => ids,
            Err(e) => {
                k.free(scratch).map_err(backend)?;
                return Err(backend(e));
            }
        };
        let slab = Slab { scratch, ids };
        let ran = groups
            .into_iter()
            .try_for_each(|group| self.prefill_layers(k, cache, slab, prompts, &fresh[group]))
            .and_then(|()| self.continue_layers(k, cache, slab, prompts, &continuation));
        let freed = k.free(scratch).and_then(|()| k.free_indices(ids));
        ran?;
        freed.map_err(backend)?;
        self.final_norm(k, cache)?;
        for (length, prompt) in cache.lengths.iter_mut().zip(prompts) {
            *length = prompt.len() as u32;
        }
        Ok(())
    }

    /// Lays `slab`'s scratch out for one layer of `tokens.len()` rows, writes the tokens
    /// and their `positions` to its indices, and embeds the tokens into the layer's
    /// residual stream: the layer's slots and the positions' indices, for the layers to
    /// run over.
    fn embed_rows<K: Kernels>(
        &self,
        k: &mut K,
        Slab { scratch, ids }: Slab,
        tokens: &[u32],
        positions: &[u32],
    ) -> Result<(LayerActs, Indices), K> {
        let n = tokens.len();
        let layout = ActLayout::for_decoding(&self.config, n);
        let Some(la) = layout.layers.into_iter().next() else {
            return Err(input(InputError::Empty));
        };
        let token_ids = Indices {
            buffer: ids,
            offset: 0,
            len: n,
        };
        let position_ids = Indices {
            offset: n,
            ..token_ids
        };
        k.write_indices(token_ids, tokens).map_err(backend)?;
        k.write_indices(position_ids, positions).map_err(backend)?;
        k.embedding_forward(
            at(scratch, la.residual_in),
            at(self.params, self.params_layout.embed),
            token_ids,
            self.config.hidden_size,
        )
        .map_err(backend)?;
        Ok((la, position_ids))
    }

    /// The layers of a prefill of the prompts of sequences `group` of `cache` over
    /// `slab`, its scratch laid out for their tokens, with tokens[N] then positions[N]
    /// in its indices: each layer's keys and values go to `cache` as soon as the layer
    /// has run, and the last row of each prompt to the cache's residual row of its
    /// sequence.
    fn prefill_layers<K: Kernels>(
        &self,
        k: &mut K,
        cache: &KvCache,
        slab: Slab,
        prompts: &[&[u32]],
        group: &[usize],
    ) -> Result<(), K> {
        let (c, p) = (&self.config, &self.params_layout);
        let tokens: Vec<u32> = group
            .iter()
            .flat_map(|&b| prompts[b].iter().copied())
            .collect();
        let mut seq_starts = vec![0u32];
        for &b in group {
            seq_starts.push(seq_starts[seq_starts.len() - 1] + prompts[b].len() as u32);
        }
        let (d, kvd) = (c.hidden_size, c.kv_dim());
        let position_ids: Vec<u32> = seq_starts.windows(2).flat_map(|w| 0..w[1] - w[0]).collect();
        let (la, positions) = self.embed_rows(k, slab, &tokens, &position_ids)?;
        let la = &la;
        let t = |slot: Slot| at(slab.scratch, slot);
        let buffers = LayerBuffers {
            params: self.params,
            acts: slab.scratch,
        };
        for (l, lp) in p.layers.iter().enumerate() {
            layer_forward(
                k,
                c,
                lp,
                la,
                buffers,
                positions,
                &seq_starts,
                Residual::InPlace,
            )?;
            let (k_cache, v_cache) = (cache.layer_cache(l, 0, kvd), cache.layer_cache(l, 1, kvd));
            for (w, &b) in seq_starts.windows(2).zip(group) {
                let (start, len) = (w[0] as usize, (w[1] - w[0]) as usize);
                for (cache_tensor, fresh) in [(k_cache, la.k), (v_cache, la.v)] {
                    let src = t(fresh).slice(start * kvd, len * kvd);
                    k.copy(cache.rows(cache_tensor, b, 0, len, kvd), src)
                        .map_err(backend)?;
                }
            }
        }
        // Each prompt's last row into the cache's one-row-per-sequence residual slot.
        let rows = at(cache.steps.scratch, cache.residual());
        for (w, &b) in seq_starts.windows(2).zip(group) {
            let last = w[1] as usize - 1;
            k.copy(rows.slice(b * d, d), t(la.residual_in).slice(last * d, d))
                .map_err(backend)?;
        }
        Ok(())
    }

    /// Appends `tokens[b]` to sequence b of `cache` and returns the logits of every
    /// sequence's next token, [B, V] row-major.
    pub fn decode_step<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        tokens: &[u32],
    ) -> Result<Vec<f32>, K> {
        self.decode_hidden(k, cache, tokens)?;
        self.read_logits(k, cache)
    }

    /// [`Transformer::decode_step`], then each sequence's next token picked on the
    /// backend, as [`Transformer::prefill_choosing`] does.
    pub fn decode_step_choosing<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        tokens: &[u32],
        temperature: f32,
        uniforms: &[f64],
    ) -> Result<Vec<Option<TokenChoice>>, K> {
        self.decode_hidden(k, cache, tokens)?;
        self.choose_next(k, cache, temperature, uniforms)
    }

    /// The decoding step up to each sequence's last hidden state in `cache.steps.last_hidden`:
    /// the token ids and positions written, then the layers as one
    /// [`Kernels::repeated_step`] (the same launches every step but for the lengths the
    /// backend uploads), then the lengths advanced.
    fn decode_hidden<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: &mut KvCache,
        tokens: &[u32],
    ) -> Result<(), K> {
        same_len("decode tokens", cache.batch, tokens.len())?;
        if cache.lengths.iter().any(|&l| l as usize >= cache.capacity) {
            return Err(input(InputError::CacheFull {
                capacity: cache.capacity,
            }));
        }
        self.check_tokens(tokens)?;
        k.write_indices(cache.ids(0), tokens).map_err(backend)?;
        k.write_indices(cache.ids(1), &cache.lengths)
            .map_err(backend)?;
        let attended: Vec<u32> = cache.lengths.iter().map(|l| l + 1).collect();
        let cache_now: &KvCache = cache;
        k.repeated_step(&mut |k| self.decode_layers(k, cache_now, &attended))
            .map_err(backend)??;
        cache.lengths = attended;
        Ok(())
    }

    /// Every layer of one decoding step and the final norm, for tokens and positions
    /// already in `cache.ids(0)` and `cache.ids(1)`; each sequence b attends to
    /// `attended[b]` cached rows, its new one included. It changes nothing on the host,
    /// so a backend may run it more than once ([`Kernels::repeated_step`]).
    fn decode_layers<K: Kernels>(
        &self,
        k: &mut K,
        cache: &KvCache,
        attended: &[u32],
    ) -> Result<(), K> {
        let (c, p) = (&self.config, &self.params_layout);
        let kvd = c.kv_dim();
        let a = &cache.steps.scratch_layout;
        let Some(la) = a.layers.first() else {
            return Err(input(InputError::Empty));
        };
        let t = |slot: Slot| at(cache.steps.scratch, slot);
        let buffers = LayerBuffers {
            params: self.params,
            acts: cache.steps.scratch,
        };
        let (tokens_ids, positions) = (cache.ids(0), cache.ids(1));
        k.embedding_forward(
            t(la.residual_in),
            at(self.params, p.embed),
            tokens_ids,
            c.hidden_size,
        )
        .map_err(backend)?;
        for (l, lp) in p.layers.iter().enumerate() {
            attention_projections(k, c, lp, la, buffers, cache.batch)?;
            let (k_cache, v_cache) = (cache.layer_cache(l, 0, kvd), cache.layer_cache(l, 1, kvd));
            let rows = ProjectedRows {
                q: t(la.q),
                k: t(la.k),
                v: t(la.v),
                biases: [lp.q_bias, lp.k_bias, lp.v_bias]
                    .map(|bias| bias.map(|b| at(self.params, b))),
            };
            k.rope_append_kv(
                rows,
                positions,
                k_cache,
                v_cache,
                &cache.lengths,
                cache.capacity,
                attention_shape(c),
                c.rope_theta,
            )
            .map_err(backend)?;
            k.attention_decode(
                t(la.attn),
                t(la.q),
                k_cache,
                v_cache,
                attended,
                cache.capacity,
                attention_shape(c),
            )
            .map_err(backend)?;
            attention_output(k, c, lp, la, buffers, Residual::InPlace, cache.batch)?;
            mlp_forward(k, c, lp, la, buffers, Residual::InPlace, cache.batch)?;
        }
        self.final_norm(k, cache)
    }

    /// `cache.steps.last_hidden[B, D]` = the final RMSNorm of each sequence's residual row in
    /// the cache's scratch.
    fn final_norm<K: Kernels>(&self, k: &mut K, cache: &KvCache) -> Result<(), K> {
        let a = &cache.steps.scratch_layout;
        let t = |slot: Slot| at(cache.steps.scratch, slot);
        k.rmsnorm_forward(
            t(cache.steps.last_hidden),
            t(a.final_rstd),
            t(cache.residual()),
            at(self.params, self.params_layout.final_norm),
            self.config.hidden_size,
            self.config.rms_norm_eps,
        )
        .map_err(backend)
    }

    /// Keeps the sequences of `cache` whose `keep` flag is set, in order (their keys,
    /// values and lengths unchanged): sequences that finished stop costing decoding
    /// steps. The kept sequences move down within the cache's own buffer, each to its
    /// new place in every layer (one that keeps its place is not copied), so no second
    /// cache is allocated or zero-filled; the buffer keeps its room for the sequences
    /// that left, and the step buffers are made again for the smaller batch. The cache
    /// is freed on error.
    pub fn retain_sequences<K: Kernels>(
        &self,
        k: &mut K,
        mut cache: KvCache,
        keep: &[bool],
    ) -> Result<KvCache, K> {
        let kept: Vec<usize> = (0..keep.len()).filter(|&i| keep[i]).collect();
        if keep.len() != cache.batch || kept.is_empty() {
            let error = if kept.is_empty() {
                InputError::Empty
            } else {
                InputError::LengthMismatch {
                    what: "kept sequences",
                    expected: cache.batch,
                    got: keep.len(),
                }
            };
            cache.free(k)?;
            return Err(input(error));
        }
        if kept.len() == cache.batch {
            return Ok(cache);
        }
        let compacted = self
            .move_down(k, &cache, &kept)
            .and_then(|()| StepBuffers::new(k, self, kept.len()));
        let steps = match compacted {
            Ok(steps) => steps,
            Err(e) => {
                cache.free(k)?;
                return Err(e);
            }
        };
        cache.batch = kept.len();
        cache.lengths = kept
            .iter()
            .map(|&sequence| cache.lengths[sequence])
            .collect();
        if let Err(e) = core::mem::replace(&mut cache.steps, steps).free(k) {
            cache.free(k)?;
            return Err(e);
        }
        Ok(cache)
    }

    /// Copies the cached rows of sequence `kept[i]` of `cache` to sequence i, in every
    /// layer, for each i where the two differ. `kept` is increasing, so each sequence
    /// lands on a place whose own sequence has already moved or is not kept, and the
    /// two rows of a copy never overlap.
    fn move_down<K: Kernels>(&self, k: &mut K, cache: &KvCache, kept: &[usize]) -> Result<(), K> {
        let kvd = self.config.kv_dim();
        for layer in 0..self.config.num_hidden_layers {
            for which in 0..2 {
                let blocks = cache.layer_cache(layer, which, kvd);
                for (to, &from) in kept.iter().enumerate() {
                    let len = cache.lengths[from] as usize;
                    if to == from || len == 0 {
                        continue;
                    }
                    k.copy(
                        cache.rows(blocks, to, 0, len, kvd),
                        cache.rows(blocks, from, 0, len, kvd),
                    )
                    .map_err(backend)?;
                }
            }
        }
        Ok(())
    }

    /// A new cache of `rows.len()` sequences of up to `capacity` tokens whose sequence
    /// i holds the keys and values `rows[i]` names, copied from another cache of this
    /// model (`None`: a sequence that holds nothing yet). The source caches are left as
    /// they were; the new one's length of sequence i is `rows[i].len` (or 0).
    pub fn gather_sequences<K: Kernels>(
        &self,
        k: &mut K,
        rows: &[Option<CachedRows<'_>>],
        capacity: usize,
    ) -> Result<KvCache, K> {
        for from in rows.iter().flatten() {
            let held = from.cache.lengths.get(from.sequence).copied();
            if held.is_none_or(|held| from.len > held) {
                return Err(input(InputError::LengthMismatch {
                    what: "tokens gathered from a cached sequence",
                    expected: held.unwrap_or(0) as usize,
                    got: from.len as usize,
                }));
            }
            if from.len as usize > capacity {
                return Err(input(InputError::CacheFull { capacity }));
            }
        }
        let mut gathered = KvCache::new(k, self, rows.len(), capacity)?;
        let kvd = self.config.kv_dim();
        let mut copied = Ok(());
        'layers: for layer in 0..self.config.num_hidden_layers {
            for which in 0..2 {
                let to = gathered.layer_cache(layer, which, kvd);
                for (row, from) in rows.iter().enumerate() {
                    let Some(from) = from.filter(|from| from.len > 0) else {
                        continue;
                    };
                    let source = from.cache.layer_cache(layer, which, kvd);
                    let len = from.len as usize;
                    copied = k.copy(
                        gathered.rows(to, row, 0, len, kvd),
                        from.cache.rows(source, from.sequence, 0, len, kvd),
                    );
                    if copied.is_err() {
                        break 'layers;
                    }
                }
            }
        }
        if let Err(e) = copied {
            gathered.free(k)?;
            return Err(backend(e));
        }
        gathered.lengths = rows
            .iter()
            .map(|from| from.map_or(0, |from| from.len))
            .collect();
        Ok(gathered)
    }

    /// logits[B, V] of the hidden states in `cache.steps.last_hidden`, on the backend.
    fn logits<K: Kernels>(&self, k: &mut K, cache: &KvCache) -> Result<Tensor, K> {
        let logits = at(cache.steps.scratch, cache.steps.logits);
        k.logits(
            logits,
            at(cache.steps.scratch, cache.steps.last_hidden),
            at(self.params, self.params_layout.lm_head),
            self.config.hidden_size,
        )
        .map_err(backend)?;
        Ok(logits)
    }

    /// logits[B, V] of the hidden states in `cache.steps.last_hidden`, read to the host.
    fn read_logits<K: Kernels>(&self, k: &mut K, cache: &KvCache) -> Result<Vec<f32>, K> {
        let logits = self.logits(k, cache)?;
        let mut out = vec![0.0; logits.len];
        k.read(logits, &mut out).map_err(backend)?;
        Ok(out)
    }

    /// The token each sequence picks from its logits, chosen on the backend; only the
    /// choices are read to the host.
    fn choose_next<K: Kernels>(
        &self,
        k: &mut K,
        cache: &KvCache,
        temperature: f32,
        uniforms: &[f64],
    ) -> Result<Vec<Option<TokenChoice>>, K> {
        let logits = self.logits(k, cache)?;
        let choices = at(cache.steps.scratch, cache.steps.choices);
        k.choose_tokens(choices, logits, uniforms, temperature)
            .map_err(backend)?;
        let mut pairs = vec![0.0; choices.len];
        k.read(choices, &mut pairs).map_err(backend)?;
        Ok(pairs
            .chunks_exact(2)
            .map(|pair| {
                (pair[0] >= 0.0).then(|| TokenChoice {
                    token: pair[0] as u32,
                    logprob: pair[1],
                })
            })
            .collect())
    }
}

/// Prompts of `lengths` tokens split into runs of consecutive prompts of at most
/// `budget` tokens together (a prompt longer than `budget` alone), as ranges of indices
/// into `lengths`.
fn prefill_groups(lengths: &[usize], budget: usize) -> Vec<core::ops::Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (b, &length) in lengths.iter().enumerate() {
        if b > start && tokens + length > budget {
            groups.push(start..b);
            (start, tokens) = (b, 0);
        }
        tokens += length;
    }
    if start < lengths.len() {
        groups.push(start..lengths.len());
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::prefill_groups;
    use alloc::vec;

    #[test]
    fn prefill_groups_fill_up_to_the_budget_and_keep_a_long_prompt_alone() {
        let prompts = [3, 4, 9, 2];
        assert_eq!(prefill_groups(&prompts, 7), vec![0..2, 2..3, 3..4]);
        assert_eq!(prefill_groups(&prompts, 6), vec![0..1, 1..2, 2..3, 3..4]);
        assert_eq!(prefill_groups(&prompts, 100), vec![0..4]);
        assert_eq!(prefill_groups(&prompts, 1), vec![0..1, 1..2, 2..3, 3..4]);
        assert!(prefill_groups(&[], 4).is_empty());
    }
}
