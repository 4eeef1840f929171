//! # sage-trainer
//!
//! Everything that turns a model and a world into a trained skill-library agent:
//! tokenizer, policy over the transformer, rollout engine, SFT, SAGE reinforcement
//! learning, evaluation, checkpoints, and the `sage` command-line interface.
//!
//! Modules:
//! - [`tokenizer`]: loading any `tokenizer.json` and training a byte-level BPE with the
//!   ChatML special tokens;
//! - [`chat`]: ChatML episodes assembled token-exactly, with the agent-token mask;
//! - [`weights`]: Hugging Face Qwen2 checkpoints (safetensors, single or sharded, f32 /
//!   bf16 / f16, and `config.json`) into and out of a transformer on any backend;
//! - [`init`]: seeded initialisation of a fresh model;
//! - [`sampling`]: batched generation with a KV cache (temperature, top-k, top-p,
//!   seeded per sequence, stop tokens);
//! - [`optim`]: AdamW over the parameter slab (or the LoRA adapters) with global-norm
//!   clipping and learning-rate schedules;
//! - [`lora`]: the `[sft.lora]` / `[rl.lora]` settings and the adapters' start;
//! - [`policy`]: `TransformerPolicy`, the `core::Policy` over the transformer and any
//!   backend (batched generation, log-probs, weighted backward, optimizer step);
//! - [`data`]: the scripted expert's trajectories as SFT data;
//! - [`sft`]: supervised fine-tuning on the agent's tokens, resumable;
//! - [`rollout`]: multi-turn episodes against any `core::Environment`, batched per turn;
//! - [`rl`]: SAGE reinforcement learning: sequential rollout over chains of tasks with
//!   per-rollout skill libraries, the skill-integrated reward, the GRPO update;
//! - [`eval`]: TGC, SGC, steps, tokens and skill usage per split and retrieval mode;
//! - [`probe`]: a seconds-long RL problem on the tiny world (a tiny SFT model, RL
//!   against its update-off control) for learning tests and update diagnostics;
//! - [`experiment`]: the arms of the paper-style comparison (SFT only, GRPO without
//!   skills, SAGE and its reward and chain-length ablations) and their settings;
//! - [`files`]: writing a file atomically (temporary file, sync, rename);
//! - [`import`]: a GGUF model (Llama or Qwen2, quantized or not) as a Hugging Face
//!   directory (`sage import`);
//! - [`checkpoint`]: atomic, resumable checkpoints (model, tokenizer, optimizer, trainer
//!   state, skill library) with pruning to the newest few;
//! - [`metrics`]: metrics as JSON lines and CSV, resumable, and PNG line charts;
//! - [`config`]: the TOML run configuration;
//! - [`text`]: serde for settings written as text (enums by name);
//! - [`pipeline`]: the stages of a run (data, tokenizer, model, SFT, RL's one loop,
//!   evaluation, the demo, the experiment over seeds) shared by the CLI and the example
//!   programs;
//! - backend selection by cargo feature ([`backend::Backend`]).
//!
#![forbid(unsafe_code)]

pub mod backend;
pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod environments;
pub mod eval;
pub mod experiment;
pub mod files;
pub mod import;
pub mod init;
pub mod interrupt;
pub mod lora;
pub mod metrics;
pub mod optim;
pub mod pipeline;
pub mod policy;
pub mod probe;
pub mod rl;
pub mod rollout;
pub mod sampling;
pub mod settings;
pub mod sft;
pub mod text;
pub mod tokenizer;
pub mod weights;
