//! # sage-trainer
//!
//! Everything that turns a model and a world into a trained skill-library agent:
//! tokenizer, policy over the transformer, rollout engine, SFT, SAGE reinforcement
//! learning, evaluation, checkpoints, and the `sage` command-line interface.
//!
//! What exists so far:
//! - [`weights`]: Hugging Face Qwen2 checkpoints (safetensors, single or sharded, f32 /
//!   bf16 / f16, and `config.json`) into and out of a transformer on any backend;
//! - [`sampling`]: batched generation with a KV cache (temperature, top-k, top-p,
//!   seeded per sequence, stop tokens);
//! - [`optim`]: AdamW over the parameter slab with global-norm clipping and
//!   learning-rate schedules;
//! - [`tokenizer`]: loading any `tokenizer.json` and training a byte-level BPE with the
//!   ChatML special tokens;
//! - [`checkpoint`]: atomic, resumable checkpoints (model, tokenizer, optimizer, trainer
//!   state, skill library) with pruning to the newest few;
//! - [`metrics`]: metrics as JSON lines and CSV, resumable, and PNG line charts;
//! - backend selection by cargo feature, which the CLI reports.
//!
//! Still to come (issues 5 and 6): chat episodes, the `Policy` implementation, SFT,
//! the rollout engine, evaluation, SAGE RL and the `sage demo` pipeline.

pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod eval;
pub mod init;
pub mod metrics;
pub mod optim;
pub mod pipeline;
pub mod policy;
pub mod rollout;
pub mod sampling;
pub mod sft;
pub mod tokenizer;
pub mod weights;

/// The compute backends compiled into this build, by cargo feature (`cpu` is the
/// default; `cuda` and `wgpu` are opt-in).
pub fn compiled_backends() -> Vec<&'static str> {
    let mut backends = Vec::new();
    if cfg!(feature = "cpu") {
        backends.push("cpu");
    }
    if cfg!(feature = "cuda") {
        backends.push("cuda");
    }
    if cfg!(feature = "wgpu") {
        backends.push("wgpu");
    }
    backends
}
