//! [`ModelConfig`]: the shape of a Qwen2-style decoder, with the field names of a
//! Hugging Face `config.json` so checkpoints round-trip.

use core::fmt;
use serde::{Deserialize, Serialize};

/// Hyper-parameters of a Qwen2-style decoder: RMSNorm, RoPE, grouped-query attention
/// with q/k/v bias, SwiGLU MLP, optionally tied input/output embeddings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Tokens in the vocabulary (V).
    pub vocab_size: usize,
    /// Width of the residual stream (D).
    pub hidden_size: usize,
    /// Width of the MLP's hidden layer (I).
    pub intermediate_size: usize,
    /// Decoder layers (L).
    pub num_hidden_layers: usize,
    /// Query heads (H); `hidden_size` must be a multiple of it.
    pub num_attention_heads: usize,
    /// Key/value heads (KV); `num_attention_heads` must be a multiple of it.
    pub num_key_value_heads: usize,
    /// Base of the rotary embedding frequencies.
    pub rope_theta: f32,
    /// Epsilon inside RMSNorm's square root.
    pub rms_norm_eps: f32,
    /// Longest sequence the model is meant for (bounds KV caches).
    pub max_position_embeddings: usize,
    /// The output projection shares the input embedding table.
    pub tie_word_embeddings: bool,
    /// q, k and v projections carry a bias (true for Qwen2).
    #[serde(default = "default_qkv_bias")]
    pub qkv_bias: bool,
}

fn default_qkv_bias() -> bool {
    true
}

/// A [`ModelConfig`] that cannot describe a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A size that must be positive is zero.
    Zero(&'static str),
    /// `hidden_size` is not a multiple of `num_attention_heads`.
    HeadsDoNotDivideHidden,
    /// `num_attention_heads` is not a multiple of `num_key_value_heads`.
    KvHeadsDoNotDivideHeads,
    /// The head dimension is odd, so rotary embeddings cannot pair its halves.
    OddHeadDim,
    /// `rope_theta` or `rms_norm_eps` is not a positive finite number.
    BadFloat(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Zero(field) => write!(f, "model config: `{field}` must be positive"),
            ConfigError::HeadsDoNotDivideHidden => write!(
                f,
                "model config: `hidden_size` must be a multiple of `num_attention_heads`"
            ),
            ConfigError::KvHeadsDoNotDivideHeads => write!(
                f,
                "model config: `num_attention_heads` must be a multiple of `num_key_value_heads`"
            ),
            ConfigError::OddHeadDim => write!(
                f,
                "model config: the head dimension (hidden_size / num_attention_heads) must be even"
            ),
            ConfigError::BadFloat(field) => {
                write!(
                    f,
                    "model config: `{field}` must be a positive finite number"
                )
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConfigError {}

impl ModelConfig {
    /// Checks that the sizes describe a model; every other method assumes they do.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.hidden_size % self.num_attention_heads != 0 {
            return Err(ConfigError::HeadsDoNotDivideHidden);
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return Err(ConfigError::KvHeadsDoNotDivideHeads);
        }
        if self.head_dim() % 2 != 0 {
            return Err(ConfigError::OddHeadDim);
        }
        for (name, value) in [
            ("rope_theta", self.rope_theta),
            ("rms_norm_eps", self.rms_norm_eps),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::BadFloat(name));
            }
        }
        Ok(())
    }

    /// Width of one attention head (hd = D / H).
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Width of all query heads together (H * hd, equal to D).
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim()
    }

    /// Width of all key (or value) heads together (KV * hd).
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim()
    }

    /// The "tiny" benchmark model: V 4096, D 256, I 768, 6 layers, 8 heads, 2 kv heads.
    pub fn tiny() -> ModelConfig {
        ModelConfig {
            vocab_size: 4096,
            hidden_size: 256,
            intermediate_size: 768,
            num_hidden_layers: 6,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-6,
            max_position_embeddings: 2048,
            tie_word_embeddings: true,
            qkv_bias: true,
        }
    }
}
