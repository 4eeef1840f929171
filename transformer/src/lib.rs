//! # sage-transformer
//!
//! The policy model: a Qwen2 / Llama-style decoder whose forward, backward and decoding
//! step are written once, here, as a sequence of calls to a [`Kernels`] backend, in the
//! style of llm.c: explicit loops over layers, saved activations, no general autograd.
//! The compute backends (`sage-backend-cpu`, `-cuda`, `-wgpu`) implement [`Device`], and
//! so [`Kernels`];
//! the trainer drives the model. Nothing here knows about skills or SAGE.
//!
//! - [`config`]: the model's hyper-parameters ([`ModelConfig`]);
//! - [`layout`]: the parameter and activation slabs carved into named tensors;
//! - [`kernels`]: the contract the model calls;
//! - [`device`]: what a backend implements (its buffers and kernels), with
//!   [`Kernels`] implemented once over it;
//! - [`contract`]: the checks of that contract that do not depend on the device, and
//!   the checked sizes a device receives;
//! - [`model`]: the forward and backward passes over it ([`Transformer`]);
//! - [`decode`]: prefill and one-token decoding steps against a [`KvCache`];
//! - [`lora`]: low-rank adapters trained on the frozen model.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod config;
pub mod contract;
pub mod decode;
pub mod device;
pub mod kernels;
pub mod layout;
pub mod lora;
pub mod model;
pub mod sampling;

pub use config::{ConfigError, ModelConfig};
pub use contract::ContractError;
pub use decode::{CachedRows, KvCache, DEFAULT_PREFILL_TOKENS};
pub use device::Device;
pub use kernels::{
    AdamWStep, AttentionShape, BufferId, IndexBufferId, Indices, Kernels, MatmulShape,
    ProjectedRows, Tensor, COLUMN_SUM_ROWS,
};
pub use layout::{ActLayout, LayerActs, LayerParams, ParamLayout, Slot};
pub use lora::{Adapter, AdapterLayout, LoraConfig, Projection};
pub use model::{InputError, ModelError, Transformer};
