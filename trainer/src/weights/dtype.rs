//! [`Dtype`]: the floating-point formats a checkpoint may store, and the conversion
//! of their little-endian bytes from and to the `f32` the model computes in.

use half::{bf16, f16};

/// A floating-point format of tensors on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE single precision (lossless for this project's `f32` parameters).
    F32,
    /// bfloat16: the exponent range of f32 with an 8-bit significand.
    BF16,
    /// IEEE half precision.
    F16,
}

impl Dtype {
    /// The format of a safetensors dtype, if it is one of the supported ones.
    pub fn from_safetensors(dtype: safetensors::Dtype) -> Option<Dtype> {
        match dtype {
            safetensors::Dtype::F32 => Some(Dtype::F32),
            safetensors::Dtype::BF16 => Some(Dtype::BF16),
            safetensors::Dtype::F16 => Some(Dtype::F16),
            _ => None,
        }
    }

    /// The safetensors dtype of this format.
    pub fn to_safetensors(self) -> safetensors::Dtype {
        match self {
            Dtype::F32 => safetensors::Dtype::F32,
            Dtype::BF16 => safetensors::Dtype::BF16,
            Dtype::F16 => safetensors::Dtype::F16,
        }
    }

    /// The name PyTorch gives this format (`torch_dtype` of a Hugging Face config).
    pub fn torch_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::BF16 => "bfloat16",
            Dtype::F16 => "float16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::BF16 | Dtype::F16 => 2,
        }
    }

    /// Decodes little-endian `bytes` of this format (a whole number of elements).
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        match self {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                .collect(),
        }
    }

    /// Encodes `values` as little-endian bytes of this format, rounding to nearest
    /// (ties to even) where the format is narrower than f32.
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * self.size());
        match self {
            Dtype::F32 => values
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Dtype::BF16 => values
                .iter()
                .for_each(|&v| out.extend_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes())),
            Dtype::F16 => values
                .iter()
                .for_each(|&v| out.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes())),
        }
        out
    }
}
