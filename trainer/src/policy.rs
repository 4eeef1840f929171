//! [`TransformerPolicy`]: the transformer on any [`Kernels`] backend as a
//! [`sage_core::Policy`]: batched generation with a KV cache, log-probs of given
//! sequences, weighted backward and AdamW steps.
//!
//! Sequences are packed end to end into micro-batches of at most
//! `max_batch_tokens` tokens (a longer sequence gets a micro-batch of its own), so
//! memory stays bounded however many sequences a call receives. `log_probs` and
//! `accumulate_gradient` run the same forward over the same packing, so ratios of new
//! to old log-probs are exactly 1 before an update on a deterministic backend.
//!
//! Generation holds every sequence's KV cache afterwards ([`HeldCaches`], within a
//! budget of tokens), so that an agent's next turn, whose prompt continues one of them,
//! prefills only its new tokens, and prefills once the prefixes several of its prompts
//! share; the held caches are forgotten when the weights can change (an optimizer step,
//! [`TransformerPolicy::parts_mut`]).

use std::fmt;

use sage_core::policy::{Generation, Policy, SamplingParams, UpdateStats};
use sage_transformer::{Kernels, ModelError, Transformer};

use crate::optim::{AdamW, AdamWConfig, OptimError};
use crate::sampling::{generate_holding, HeldCaches, SamplingError, DEFAULT_HELD_TOKENS};

/// Default token budget of one packed micro-batch.
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 4096;

/// Why a policy call failed; `E` is the backend's error.
#[derive(Debug)]
pub enum PolicyError<E> {
    /// The model rejected the input or its backend failed.
    Model(ModelError<E>),
    /// Generation failed.
    Sampling(SamplingError<E>),
    /// The optimizer failed.
    Optimizer(OptimError<E>),
    /// A training call on a policy built without an optimizer.
    NoOptimizer,
    /// Sequence `index` has fewer than two tokens, so no token has a log-prob.
    TooShort {
        /// Position of the sequence in the call.
        index: usize,
    },
    /// The coefficients of sequence `index` do not have length `len - 1`, or there is
    /// not one coefficient slice per sequence.
    Coefficients {
        /// Position of the sequence in the call (the count of slices when they
        /// differ).
        index: usize,
        /// The expected length.
        expected: usize,
        /// The length given.
        got: usize,
    },
}

impl<E: fmt::Display> fmt::Display for PolicyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Model(e) => write!(f, "model: {e}"),
            PolicyError::Sampling(e) => write!(f, "generation: {e}"),
            PolicyError::Optimizer(e) => write!(f, "optimizer: {e}"),
            PolicyError::NoOptimizer => {
                write!(
                    f,
                    "this policy has no optimizer: it was built for inference"
                )
            }
            PolicyError::TooShort { index } => {
                write!(f, "sequence {index} has fewer than 2 tokens")
            }
            PolicyError::Coefficients {
                index,
                expected,
                got,
            } => write!(
                f,
                "coefficients of sequence {index}: expected {expected} values, got {got}"
            ),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for PolicyError<E> {}

impl<E> From<ModelError<E>> for PolicyError<E> {
    fn from(e: ModelError<E>) -> Self {
        PolicyError::Model(e)
    }
}

impl<E> From<SamplingError<E>> for PolicyError<E> {
    fn from(e: SamplingError<E>) -> Self {
        PolicyError::Sampling(e)
    }
}

impl<E> From<OptimError<E>> for PolicyError<E> {
    fn from(e: OptimError<E>) -> Self {
        PolicyError::Optimizer(e)
    }
}

/// A transformer, its backend and (for training) its optimizer.
pub struct TransformerPolicy<K: Kernels> {
    kernels: K,
    model: Transformer,
    optimizer: Option<AdamW>,
    max_batch_tokens: usize,
    /// The KV caches of the last generations, for prompts that continue them.
    held: HeldCaches,
}

/// One packed micro-batch: which sequences, and the packed inputs.
struct Packed {
    /// Indices of the sequences in the call, in packing order.
    members: Vec<usize>,
    /// tokens[N]: the sequences end to end.
    tokens: Vec<u32>,
    /// targets[N]: the next token of each position (the sequence's own last token at
    /// its last position, which no caller reads).
    targets: Vec<u32>,
    /// seq_starts[S + 1].
    seq_starts: Vec<u32>,
}

impl<K: Kernels> TransformerPolicy<K> {
    /// A policy for inference only (generation and log-probs).
    pub fn inference(kernels: K, model: Transformer) -> TransformerPolicy<K> {
        TransformerPolicy {
            kernels,
            model,
            optimizer: None,
            max_batch_tokens: DEFAULT_MAX_BATCH_TOKENS,
            held: HeldCaches::new(DEFAULT_HELD_TOKENS),
        }
    }

    /// A trainable policy with a fresh AdamW of `config`.
    pub fn trainable(
        mut kernels: K,
        model: Transformer,
        config: AdamWConfig,
    ) -> Result<TransformerPolicy<K>, PolicyError<K::Error>> {
        let optimizer = AdamW::new(&mut kernels, &model, config)?;
        Ok(TransformerPolicy::with_optimizer(kernels, model, optimizer))
    }

    /// A trainable policy with a given (e.g. restored) optimizer.
    pub fn with_optimizer(
        kernels: K,
        model: Transformer,
        optimizer: AdamW,
    ) -> TransformerPolicy<K> {
        TransformerPolicy {
            optimizer: Some(optimizer),
            ..TransformerPolicy::inference(kernels, model)
        }
    }

    /// Replaces the optimizer (if any) with a fresh AdamW of `config`: zero moments,
    /// step 0. RL from an SFT model starts so, as `sage train` does.
    pub fn reset_optimizer(&mut self, config: AdamWConfig) -> Result<(), PolicyError<K::Error>> {
        let fresh = AdamW::new(&mut self.kernels, &self.model, config)?;
        if let Some(old) = self.optimizer.replace(fresh) {
            old.free(&mut self.kernels)?;
        }
        Ok(())
    }

    /// The same policy packing at most `tokens` tokens per micro-batch (at least 1).
    pub fn with_max_batch_tokens(mut self, tokens: usize) -> TransformerPolicy<K> {
        self.max_batch_tokens = tokens.max(1);
        self
    }

    /// The same policy holding at most `tokens` tokens of KV cache between generations
    /// (default [`DEFAULT_HELD_TOKENS`]; 0: none, every prompt is prefilled whole).
    pub fn with_held_tokens(mut self, tokens: usize) -> TransformerPolicy<K> {
        self.held = HeldCaches::new(tokens);
        self
    }

    /// The KV caches held between generations.
    pub fn held_caches(&self) -> &HeldCaches {
        &self.held
    }

    /// The model.
    pub fn model(&self) -> &Transformer {
        &self.model
    }

    /// The optimizer, when the policy trains.
    pub fn optimizer(&self) -> Option<&AdamW> {
        self.optimizer.as_ref()
    }

    /// The backend, with the model and optimizer (for checkpoints, which read buffers).
    /// The held KV caches are forgotten, as the caller may change the weights.
    pub fn parts_mut(&mut self) -> (&mut K, &mut Transformer, Option<&mut AdamW>) {
        self.held.forget();
        (&mut self.kernels, &mut self.model, self.optimizer.as_mut())
    }

    /// Releases the model's and the optimizer's buffers and returns the backend, to
    /// load another model into it.
    pub fn into_backend(mut self) -> Result<K, PolicyError<K::Error>> {
        self.held.free(&mut self.kernels)?;
        if let Some(optimizer) = self.optimizer {
            optimizer.free(&mut self.kernels)?;
        }
        self.model.free(&mut self.kernels)?;
        Ok(self.kernels)
    }

    /// Splits `sequences` into packed micro-batches, in order.
    fn pack(&self, sequences: &[&[u32]]) -> Result<Vec<Packed>, PolicyError<K::Error>> {
        let mut batches: Vec<Packed> = Vec::new();
        let mut current: Option<Packed> = None;
        for (index, sequence) in sequences.iter().enumerate() {
            if sequence.len() < 2 {
                return Err(PolicyError::TooShort { index });
            }
            let fits = current
                .as_ref()
                .is_some_and(|p| p.tokens.len() + sequence.len() <= self.max_batch_tokens);
            if !fits {
                batches.extend(current.take());
            }
            let packed = current.get_or_insert_with(|| Packed {
                members: Vec::new(),
                tokens: Vec::new(),
                targets: Vec::new(),
                seq_starts: vec![0],
            });
            packed.members.push(index);
            packed.tokens.extend_from_slice(sequence);
            packed.targets.extend_from_slice(&sequence[1..]);
            packed.targets.push(sequence[sequence.len() - 1]);
            packed.seq_starts.push(packed.tokens.len() as u32);
        }
        batches.extend(current);
        Ok(batches)
    }

    /// Runs the forward pass of `packed` and returns log-probs per position.
    fn forward(&mut self, packed: &Packed) -> Result<Vec<f32>, PolicyError<K::Error>> {
        Ok(self.model.forward(
            &mut self.kernels,
            &packed.tokens,
            &packed.targets,
            &packed.seq_starts,
        )?)
    }
}

impl<K: Kernels> Policy for TransformerPolicy<K> {
    type Error = PolicyError<K::Error>;

    fn generate(
        &mut self,
        prompts: &[&[u32]],
        params: &SamplingParams,
    ) -> Result<Vec<Generation>, Self::Error> {
        Ok(generate_holding(
            &mut self.kernels,
            &mut self.model,
            &mut self.held,
            prompts,
            params,
        )?)
    }

    fn log_probs(&mut self, sequences: &[&[u32]]) -> Result<Vec<Vec<f32>>, Self::Error> {
        let mut out = vec![Vec::new(); sequences.len()];
        for packed in self.pack(sequences)? {
            let logp = self.forward(&packed)?;
            for (window, &member) in packed.seq_starts.windows(2).zip(&packed.members) {
                let (start, end) = (window[0] as usize, window[1] as usize);
                out[member] = logp[start..end - 1].to_vec();
            }
        }
        Ok(out)
    }

    fn accumulate_gradient(
        &mut self,
        sequences: &[&[u32]],
        coefficients: &[&[f32]],
    ) -> Result<f32, Self::Error> {
        if self.optimizer.is_none() {
            return Err(PolicyError::NoOptimizer);
        }
        if coefficients.len() != sequences.len() {
            return Err(PolicyError::Coefficients {
                index: coefficients.len(),
                expected: sequences.len(),
                got: coefficients.len(),
            });
        }
        for (index, (sequence, coef)) in sequences.iter().zip(coefficients).enumerate() {
            let expected = sequence.len().saturating_sub(1);
            if coef.len() != expected {
                return Err(PolicyError::Coefficients {
                    index,
                    expected,
                    got: coef.len(),
                });
            }
        }
        let mut weighted_sum = 0.0f64;
        for packed in self.pack(sequences)? {
            // weights[N]: d objective / d logp, zero at each sequence's last position.
            let mut weights = vec![0.0f32; packed.tokens.len()];
            for (window, &member) in packed.seq_starts.windows(2).zip(&packed.members) {
                let start = window[0] as usize;
                let coef = coefficients[member];
                weights[start..start + coef.len()].copy_from_slice(coef);
            }
            // Only the rows of nonzero weight need the output head.
            let scored: Vec<bool> = weights.iter().map(|&w| w != 0.0).collect();
            let logp = self.model.forward_scored(
                &mut self.kernels,
                &packed.tokens,
                &packed.targets,
                &packed.seq_starts,
                &scored,
            )?;
            weighted_sum += weights
                .iter()
                .zip(&logp)
                .map(|(&w, &l)| f64::from(w) * f64::from(l))
                .sum::<f64>();
            self.model.backward(&mut self.kernels, &weights)?;
        }
        Ok(weighted_sum as f32)
    }

    fn optimizer_step(&mut self) -> Result<UpdateStats, Self::Error> {
        let optimizer = self.optimizer.as_mut().ok_or(PolicyError::NoOptimizer)?;
        self.held.forget();
        Ok(optimizer.update(&mut self.kernels, &mut self.model)?.stats)
    }

    /// Frees the held KV caches: no chat will continue.
    fn chats_ended(&mut self) -> Result<(), Self::Error> {
        Ok(self.held.free(&mut self.kernels)?)
    }
}
