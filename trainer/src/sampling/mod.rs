//! Sampling continuations from the transformer policy: batched generation with one KV
//! cache, greedy or temperature sampling with top-k and top-p, stop tokens, and a
//! seeded random stream per sequence.
//!
//! - [`generate`]: the generation loop over any `Kernels` backend;
//! - [`HeldCaches`]: KV caches kept between generations, so that a chat's next turn
//!   is prefilled from where its last one stopped ([`generate_holding`]);
//! - `prefixes`: prefixes several prompts of one generation share, prefilled once;
//! - `sampler`: the choice of one token from a row of logits;
//! - `rng`: the portable per-sequence random streams;
//! - [`SamplingError`]: what can go wrong.

mod error;
mod generate;
mod held;
mod prefixes;
mod rng;
mod sampler;

pub use error::SamplingError;
pub use generate::{generate, generate_holding};
pub use held::{HeldCaches, Reuse, DEFAULT_HELD_TOKENS, MIN_SHARED_TOKENS};
pub use rng::SequenceRng;
pub use sampler::ParamsError;
