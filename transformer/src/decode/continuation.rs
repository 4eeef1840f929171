//! Continuing a prefill from a KV cache: the tokens of each prompt past those its
//! sequence's cache already holds (an agent's next turn, whose chat so far was the last
//! turn's prompt and generation) run through the model without the cached ones.
//!
//! The new tokens are laid out by position: first the first new token of every
//! continued sequence, then the second of every sequence that has one, and so on. The
//! projections and the MLP run over all of them at once. In each layer every position
//! appends its keys and values to the caches of the sequences that have a token there
//! ([`Kernels::kv_cache_append`] over those sequences' cache rows), then every new
//! token attends to its sequence's cached rows up to its own
//! ([`Kernels::attention_cached`], one call). Sequences taken in order of their new
//! tokens, most first, make every position one run of adjacent cache rows: one append
//! per position and layer, and, on a backend that runs cached attention as decoding
//! steps, one of those per position too.

use alloc::vec::Vec;
use core::ops::Range;

use super::KvCache;
use crate::kernels::{BufferId, IndexBufferId, Kernels};
use crate::layout::Slot;
use crate::model::{
    at, attention_inputs, attention_output, attention_shape, backend, mlp_forward, LayerBuffers,
    Residual, Result, Transformer,
};

/// A prefill's scratch: one layer's activations, and tokens[N] then positions[N].
#[derive(Clone, Copy)]
pub(super) struct Slab {
    pub(super) scratch: BufferId,
    pub(super) ids: IndexBufferId,
}

/// A sequence continued from its cache.
struct Continued {
    /// Its row in the cache.
    sequence: usize,
    /// Tokens its cache holds: the first new token's position.
    cached: u32,
    /// New tokens (at least 1).
    new: u32,
}

/// The continued sequences of a prefill and the windows of positions it runs them in.
pub(super) struct Continuation {
    /// In cache row order.
    sequences: Vec<Continued>,
    /// Ranges of new-token positions (0 = each sequence's first new token), each with
    /// its rows: at most the prefill's token budget, or one position.
    windows: Vec<(Range<u32>, usize)>,
}

impl Continuation {
    /// The plan for the sequences of a cache with `lengths` tokens held, to be extended
    /// to `prompts` (each longer than its held tokens), in windows of at most `budget`
    /// new tokens (or one position's). Sequences that hold nothing are not continued.
    pub(super) fn plan(lengths: &[u32], prompts: &[&[u32]], budget: usize) -> Continuation {
        let sequences: Vec<Continued> = lengths
            .iter()
            .zip(prompts)
            .enumerate()
            .filter(|&(_, (&cached, _))| cached > 0)
            .map(|(sequence, (&cached, prompt))| Continued {
                sequence,
                cached,
                new: prompt.len() as u32 - cached,
            })
            .collect();
        let longest = sequences.iter().map(|s| s.new).max().unwrap_or(0);
        let mut windows: Vec<(Range<u32>, usize)> = Vec::new();
        for position in 0..longest {
            let rows = sequences.iter().filter(|s| s.new > position).count();
            match windows.last_mut() {
                Some((range, held)) if *held + rows <= budget => {
                    range.end = position + 1;
                    *held += rows;
                }
                _ => windows.push((position..position + 1, rows)),
            }
        }
        Continuation { sequences, windows }
    }

    /// Rows of the largest window, if there is one.
    pub(super) fn most_rows(&self) -> Option<usize> {
        self.windows.iter().map(|&(_, rows)| rows).max()
    }

    /// The sequences with a new token at `position`, in cache row order.
    fn at(&self, position: u32) -> impl Iterator<Item = &Continued> {
        self.sequences.iter().filter(move |s| s.new > position)
    }
}

/// A run of sequences in adjacent cache rows with a new token at one position, and
/// where their rows start in the window.
struct Run {
    /// The first sequence's cache row.
    first: usize,
    /// Sequences in the run.
    count: usize,
    /// The run's first row in the window.
    row: usize,
    /// Per sequence: cached rows before this position's (its append row).
    filled: Vec<u32>,
}

impl Run {
    /// The runs of `position` in a window whose rows for that position start at `row`.
    fn at(continuation: &Continuation, position: u32, mut row: usize) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for s in continuation.at(position) {
            let filled = s.cached + position;
            match runs.last_mut() {
                Some(run) if run.first + run.count == s.sequence => {
                    run.count += 1;
                    run.filled.push(filled);
                }
                _ => runs.push(Run {
                    first: s.sequence,
                    count: 1,
                    row,
                    filled: alloc::vec![filled],
                }),
            }
            row += 1;
        }
        runs
    }
}

impl Transformer {
    /// The layers of the continued sequences of `continuation` over `slab`, window by
    /// window: in each layer the window's keys and values go to `cache` before its
    /// attention reads them, and after the last layer each sequence's last row goes to
    /// the cache's residual row of its sequence.
    pub(super) fn continue_layers<K: Kernels>(
        &self,
        k: &mut K,
        cache: &KvCache,
        slab: Slab,
        prompts: &[&[u32]],
        continuation: &Continuation,
    ) -> Result<(), K> {
        for (positions, rows) in &continuation.windows {
            self.continue_window(
                k,
                cache,
                slab,
                prompts,
                continuation,
                positions.clone(),
                *rows,
            )?;
        }
        Ok(())
    }

    /// One window: `positions` of the continued sequences, `rows` new tokens in all.
    #[allow(clippy::too_many_arguments)]
    fn continue_window<K: Kernels>(
        &self,
        k: &mut K,
        cache: &KvCache,
        slab: Slab,
        prompts: &[&[u32]],
        continuation: &Continuation,
        positions: Range<u32>,
        rows: usize,
    ) -> Result<(), K> {
        let (c, p) = (&self.config, &self.params_layout);
        let (d, kvd) = (c.hidden_size, c.kv_dim());
        // tokens[rows] and their positions[rows], position by position.
        let mut tokens = Vec::with_capacity(rows);
        let mut position_ids = Vec::with_capacity(rows);
        for position in positions.clone() {
            for s in continuation.at(position) {
                let at = (s.cached + position) as usize;
                tokens.push(prompts[s.sequence][at]);
                position_ids.push(at as u32);
            }
        }
        let (la, position_indices) = self.embed_rows(k, slab, &tokens, &position_ids)?;
        let la = &la;
        let t = |slot: Slot| at(slab.scratch, slot);
        let buffers = LayerBuffers {
            params: self.params,
            acts: slab.scratch,
        };
        // Each position's runs, each row's sequence and attended rows, and the window
        // row of each sequence's last new token.
        let mut runs: Vec<Run> = Vec::new();
        let (mut sequences, mut attended) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
        let mut last_rows: Vec<(usize, usize)> = Vec::new();
        let mut row = 0;
        for position in positions {
            for (i, s) in continuation.at(position).enumerate() {
                sequences.push(s.sequence as u32);
                attended.push(s.cached + position + 1);
                if s.new == position + 1 {
                    last_rows.push((s.sequence, row + i));
                }
            }
            let position_runs = Run::at(continuation, position, row);
            row += position_runs.iter().map(|run| run.count).sum::<usize>();
            runs.extend(position_runs);
        }
        let span = cache.capacity * kvd;
        for (l, lp) in p.layers.iter().enumerate() {
            attention_inputs(k, c, lp, la, buffers, position_indices)?;
            let (k_cache, v_cache) = (cache.layer_cache(l, 0, kvd), cache.layer_cache(l, 1, kvd));
            for run in &runs {
                // The run's sequences' caches [count, T, KV*hd].
                k.kv_cache_append(
                    k_cache.slice(run.first * span, run.count * span),
                    v_cache.slice(run.first * span, run.count * span),
                    t(la.k).slice(run.row * kvd, run.count * kvd),
                    t(la.v).slice(run.row * kvd, run.count * kvd),
                    &run.filled,
                    cache.capacity,
                    kvd,
                )
                .map_err(backend)?;
            }
            k.attention_cached(
                t(la.attn),
                t(la.q),
                k_cache,
                v_cache,
                &sequences,
                &attended,
                cache.capacity,
                attention_shape(c),
            )
            .map_err(backend)?;
            attention_output(k, c, lp, la, buffers, Residual::InPlace, rows)?;
            mlp_forward(k, c, lp, la, buffers, Residual::InPlace, rows)?;
        }
        let residual_rows = at(cache.steps.scratch, cache.residual());
        for (sequence, row) in last_rows {
            k.copy(
                residual_rows.slice(sequence * d, d),
                t(la.residual_in).slice(row * d, d),
            )
            .map_err(backend)?;
        }
        Ok(())
    }
}
