//! [`HeldCaches`]: the KV caches of earlier generations, kept so that a prompt which
//! continues one of their sequences is prefilled from where that sequence stopped.
//!
//! An agent's next turn is its last prompt, the turn it generated and the observation
//! that came back; re-running the whole chat through the model every turn spends most
//! of an evaluation's prefill on tokens it has already seen. After a generation every
//! sequence's keys and values (its prompt and the tokens it generated, but the last,
//! which was never fed back) are copied into a compact cache and held with the tokens
//! they are of. The next generation gathers, for each prompt, the held row that shares
//! the longest prefix with it into its own cache ([`Transformer::gather_sequences`])
//! and prefills only the rest ([`Transformer::prefill_rest`]). A row serves any number
//! of prompts; once a prompt continues the whole of it, the chat has moved on and the
//! row is spent, unless it is a prefix that several prompts share (`prefixes`), which
//! is held until the chats end. The cached keys and values are those of the weights
//! that made them, so a policy forgets them when its weights change
//! ([`HeldCaches::forget`]).
//!
//! Memory is bounded by a budget of held tokens (sequences times capacity, the cache
//! rows allocated): past it, the oldest caches are freed first.

use sage_transformer::{CachedRows, Kernels, KvCache, ModelError, Transformer};

/// Default budget of held tokens: 3 GiB of f32 keys and values for SmolLM2-135M
/// (30 layers, 3 key/value heads of 64), 1.5 GiB for Qwen2.5-0.5B.
pub const DEFAULT_HELD_TOKENS: usize = 65_536;

/// Fewest tokens of a held row worth gathering for a prompt that continues only part of
/// it (a prompt that continues the whole row takes it however short): below this the
/// copy and the separate pass cost about what they save. Also the fewest tokens a
/// prefix shared within a generation must add to be prefilled once for all its prompts.
pub const MIN_SHARED_TOKENS: u32 = 32;

/// Caches held between generations, oldest first.
pub struct HeldCaches {
    /// Most held tokens (0: hold nothing).
    budget: usize,
    held: Vec<Held>,
    reuse: Reuse,
}

/// What the held caches saved so far: prompt tokens given to generations, and those
/// of them taken from a held cache instead of being prefilled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reuse {
    /// Prompts given to generations.
    pub prompts: u64,
    /// Of them, prompts continued from a held sequence.
    pub continued: u64,
    /// Prompt tokens given to generations.
    pub prompt_tokens: u64,
    /// Of them, tokens whose keys and values came from a held cache.
    pub held_tokens: u64,
    /// Tokens prefilled once for prefixes that several prompts of one generation share
    /// (their prompts count them again in `held_tokens`).
    pub prefix_tokens: u64,
}

impl Reuse {
    /// Prompt tokens that ran through the model: those no held cache gave, and the
    /// shared prefixes, once each.
    pub fn prefilled_tokens(&self) -> u64 {
        self.prompt_tokens - self.held_tokens + self.prefix_tokens
    }
}

/// One held cache and, per sequence, the tokens whose keys and values it holds
/// (`None` once spent or forgotten).
struct Held {
    cache: KvCache,
    tokens: Vec<Option<Vec<u32>>>,
    /// Prefixes shared within a generation, kept for every prompt that shares them
    /// (the generation's other batches) until the chats end: never spent.
    shared: bool,
}

/// A held sequence a prompt continues: cache `held`, sequence `sequence`, its first
/// `len` tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct HeldRow {
    pub(super) held: usize,
    pub(super) sequence: usize,
    pub(super) len: u32,
}

impl HeldCaches {
    /// Holds at most `budget` tokens (0: nothing, every generation prefills whole).
    pub fn new(budget: usize) -> HeldCaches {
        HeldCaches {
            budget,
            held: Vec::new(),
            reuse: Reuse::default(),
        }
    }

    /// The budget of held tokens.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// What holding has saved since this was made.
    pub fn reuse(&self) -> Reuse {
        self.reuse
    }

    /// Tokens held now: every held cache's sequences times its capacity.
    pub fn held_tokens(&self) -> usize {
        self.held
            .iter()
            .map(|h| h.cache.batch() * h.cache.capacity())
            .sum()
    }

    /// Sequences held now that a prompt could still continue.
    pub fn live_sequences(&self) -> usize {
        self.held
            .iter()
            .map(|h| h.tokens.iter().flatten().count())
            .sum()
    }

    /// Forgets every held sequence (their keys and values belong to weights that have
    /// changed); the caches are freed by the next generation or [`HeldCaches::free`].
    pub fn forget(&mut self) {
        for held in &mut self.held {
            held.tokens.iter_mut().for_each(|tokens| *tokens = None);
        }
    }

    /// Frees every held cache.
    pub fn free<K: Kernels>(&mut self, k: &mut K) -> Result<(), ModelError<K::Error>> {
        for held in self.held.drain(..) {
            held.cache.free(k)?;
        }
        Ok(())
    }

    /// For each prompt, the held row sharing the longest prefix with it, up to all but
    /// the prompt's last token (the prompt must add one): taken when the prompt
    /// continues the whole row or shares at least [`MIN_SHARED_TOKENS`] with it.
    pub(super) fn best_rows(&self, prompts: &[&[u32]]) -> Vec<Option<HeldRow>> {
        prompts
            .iter()
            .map(|prompt| {
                let most = prompt.len().saturating_sub(1);
                // (tokens shared, whether that is the whole row): of rows sharing as
                // much, the one continued whole, which is then spent and freed.
                let mut best: Option<((usize, bool), HeldRow)> = None;
                for (h, held) in self.held.iter().enumerate() {
                    for (sequence, tokens) in held.tokens.iter().enumerate() {
                        let Some(tokens) = tokens else { continue };
                        let shared = common_prefix(tokens, prompt).min(most);
                        let whole = shared == tokens.len();
                        let worth = whole || shared >= MIN_SHARED_TOKENS as usize;
                        let key = (shared, whole);
                        if worth && shared > 0 && best.is_none_or(|(b, _)| key > b) {
                            let row = HeldRow {
                                held: h,
                                sequence,
                                len: shared as u32,
                            };
                            best = Some((key, row));
                        }
                    }
                }
                best.map(|(_, row)| row)
            })
            .collect()
    }

    /// [`HeldCaches::best_rows`] for `prompts`, marking spent every row a prompt
    /// continues whole; counted in [`Reuse`] when `counted` (prompts of a generation,
    /// not the prefixes it shares).
    pub(super) fn take(&mut self, prompts: &[&[u32]], counted: bool) -> Vec<Option<HeldRow>> {
        let rows = self.best_rows(prompts);
        for row in rows.iter().flatten() {
            let held = &mut self.held[row.held];
            let tokens = &mut held.tokens[row.sequence];
            if !held.shared && tokens.as_ref().is_some_and(|t| t.len() == row.len as usize) {
                *tokens = None;
            }
        }
        if counted {
            for (prompt, row) in prompts.iter().zip(&rows) {
                self.reuse.prompts += 1;
                self.reuse.prompt_tokens += prompt.len() as u64;
                if let Some(row) = row {
                    self.reuse.continued += 1;
                    self.reuse.held_tokens += u64::from(row.len);
                }
            }
        }
        rows
    }

    /// Counts `tokens` prefilled for prefixes shared within a generation.
    pub(super) fn count_prefix_tokens(&mut self, tokens: usize) {
        self.reuse.prefix_tokens += tokens as u64;
    }

    /// The rows of a new cache for `rows` (taken by [`HeldCaches::take`]; `None`: a
    /// sequence that starts empty), to gather from the held caches.
    pub(super) fn sources<'a>(&'a self, rows: &[Option<HeldRow>]) -> Vec<Option<CachedRows<'a>>> {
        rows.iter()
            .map(|row| {
                row.map(|row| CachedRows {
                    cache: &self.held[row.held].cache,
                    sequence: row.sequence,
                    len: row.len,
                })
            })
            .collect()
    }

    /// Frees the held caches none of whose sequences can be continued any more.
    pub(super) fn release_spent<K: Kernels>(
        &mut self,
        k: &mut K,
    ) -> Result<(), ModelError<K::Error>> {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].tokens.iter().all(Option::is_none) {
                self.held.remove(i).cache.free(k)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Holds the sequences of `cache` flagged in `keep`: sequence i's first
    /// `tokens[i].len()` cached rows, which are of those tokens, copied into a cache
    /// just large enough; then frees the oldest held caches while past the budget (the
    /// new one too, when it alone is). `cache` is left as it was.
    pub(super) fn keep<K: Kernels>(
        &mut self,
        k: &mut K,
        model: &Transformer,
        cache: &KvCache,
        tokens: Vec<Option<Vec<u32>>>,
    ) -> Result<(), ModelError<K::Error>> {
        let kept: Vec<(usize, Vec<u32>)> = tokens
            .into_iter()
            .enumerate()
            .filter_map(|(sequence, tokens)| tokens.map(|t| (sequence, t)))
            .filter(|(_, tokens)| !tokens.is_empty())
            .collect();
        let capacity = kept.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
        if self.budget == 0 || kept.is_empty() || kept.len() * capacity > self.budget {
            return Ok(());
        }
        let rows: Vec<Option<CachedRows<'_>>> = kept
            .iter()
            .map(|(sequence, tokens)| {
                Some(CachedRows {
                    cache,
                    sequence: *sequence,
                    len: tokens.len() as u32,
                })
            })
            .collect();
        let gathered = model.gather_sequences(k, &rows, capacity)?;
        let tokens = kept.into_iter().map(|(_, t)| t).collect();
        self.hold(k, gathered, tokens, false)
    }

    /// Holds `cache` itself, whose sequence i holds the keys and values of `tokens[i]`
    /// and nothing past them, as prefixes shared within a generation when `shared`
    /// (never spent: later batches continue them too); then frees the oldest held
    /// caches while past the budget (`cache` too, when it alone is).
    pub(super) fn hold<K: Kernels>(
        &mut self,
        k: &mut K,
        cache: KvCache,
        tokens: Vec<Vec<u32>>,
        shared: bool,
    ) -> Result<(), ModelError<K::Error>> {
        if cache.batch() * cache.capacity() > self.budget {
            return cache.free(k);
        }
        self.held.push(Held {
            cache,
            tokens: tokens.into_iter().map(Some).collect(),
            shared,
        });
        while self.held_tokens() > self.budget {
            self.held.remove(0).cache.free(k)?;
        }
        Ok(())
    }
}

/// How many leading tokens `a` and `b` share.
pub(super) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
