//! GGML's tensor encodings and their dequantization to `f32`: the plain floats (F32,
//! F16, BF16), the 32-element blocks (Q4_0, Q4_1, Q8_0: one or two f16 numbers and
//! packed integers) and the 256-element K-quant super-blocks (Q4_K, Q6_K: sub-blocks
//! with their own 6-bit or 8-bit scales). Every block's value is computed in `f32` as
//! `scale * q (+ or - offset)`, the order the formats define, so the result is exact to
//! the bit for a given block.

use half::{bf16, f16};

/// How a tensor's elements are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorType {
    /// 32-bit floats.
    F32,
    /// IEEE half floats.
    F16,
    /// bfloat16.
    Bf16,
    /// Blocks of 32: an f16 scale, then 32 4-bit values less 8.
    Q4_0,
    /// Blocks of 32: an f16 scale and an f16 minimum, then 32 4-bit values.
    Q4_1,
    /// Blocks of 32: an f16 scale, then 32 signed bytes.
    Q8_0,
    /// Super-blocks of 256: f16 scale and minimum, eight 6-bit sub-block scales and
    /// minimums, then 256 4-bit values.
    Q4K,
    /// Super-blocks of 256: 4 low and 2 high bits per value, sixteen signed 8-bit
    /// sub-block scales, then an f16 scale.
    Q6K,
}

/// Elements of a K-quant super-block.
const QK_K: usize = 256;

impl TensorType {
    /// The types this importer reads, for error messages.
    pub const SUPPORTED: &'static str = "F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K and Q6_K are";

    /// The type of GGML's type id, when supported.
    pub fn from_id(id: u32) -> Option<TensorType> {
        Some(match id {
            0 => TensorType::F32,
            1 => TensorType::F16,
            2 => TensorType::Q4_0,
            3 => TensorType::Q4_1,
            8 => TensorType::Q8_0,
            12 => TensorType::Q4K,
            14 => TensorType::Q6K,
            30 => TensorType::Bf16,
            _ => return None,
        })
    }

    /// GGML's id of the type.
    pub fn id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::F16 => 1,
            TensorType::Q4_0 => 2,
            TensorType::Q4_1 => 3,
            TensorType::Q8_0 => 8,
            TensorType::Q4K => 12,
            TensorType::Q6K => 14,
            TensorType::Bf16 => 30,
        }
    }

    /// GGML's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            TensorType::F32 => "F32",
            TensorType::F16 => "F16",
            TensorType::Bf16 => "BF16",
            TensorType::Q4_0 => "Q4_0",
            TensorType::Q4_1 => "Q4_1",
            TensorType::Q8_0 => "Q8_0",
            TensorType::Q4K => "Q4_K",
            TensorType::Q6K => "Q6_K",
        }
    }

    /// Elements per block and bytes per block.
    pub fn block(self) -> (usize, usize) {
        match self {
            TensorType::F32 => (1, 4),
            TensorType::F16 | TensorType::Bf16 => (1, 2),
            TensorType::Q4_0 => (32, 2 + 16),
            TensorType::Q4_1 => (32, 2 + 2 + 16),
            TensorType::Q8_0 => (32, 2 + 32),
            TensorType::Q4K => (QK_K, 2 + 2 + 12 + QK_K / 2),
            TensorType::Q6K => (QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2),
        }
    }

    /// The bytes of `elements` elements in rows of `row` (a block never spans two rows),
    /// or why they cannot be stored so.
    pub fn bytes_for(self, elements: u64, row: u64) -> Result<u64, String> {
        let (per_block, block_bytes) = self.block();
        if row % per_block as u64 != 0 {
            return Err(format!(
                "rows of {row} elements are not whole blocks of {per_block}"
            ));
        }
        (elements / per_block as u64)
            .checked_mul(block_bytes as u64)
            .ok_or_else(|| "too many bytes".to_owned())
    }

    /// The `f32` values of `bytes`, which hold whole blocks of this type.
    pub fn dequantize(self, bytes: &[u8]) -> Vec<f32> {
        let (per_block, block_bytes) = self.block();
        let mut out = Vec::with_capacity(bytes.len() / block_bytes * per_block);
        for block in bytes.chunks_exact(block_bytes) {
            match self {
                TensorType::F32 => {
                    out.push(f32::from_le_bytes([block[0], block[1], block[2], block[3]]))
                }
                TensorType::F16 => out.push(half16(block, 0)),
                TensorType::Bf16 => out.push(bf16::from_le_bytes([block[0], block[1]]).to_f32()),
                TensorType::Q4_0 => q4_0(block, &mut out),
                TensorType::Q4_1 => q4_1(block, &mut out),
                TensorType::Q8_0 => q8_0(block, &mut out),
                TensorType::Q4K => q4_k(block, &mut out),
                TensorType::Q6K => q6_k(block, &mut out),
            }
        }
        out
    }
}

/// The f16 at `at` of `bytes`, as `f32`.
fn half16(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// Q4_0: element `j` of the first half is the low nibble of byte `j`, of the second half
/// the high nibble; both less 8, times the scale.
fn q4_0(block: &[u8], out: &mut Vec<f32>) {
    let d = half16(block, 0);
    let packed = &block[2..18];
    out.extend(packed.iter().map(|&b| (f32::from(b & 0x0f) - 8.0) * d));
    out.extend(packed.iter().map(|&b| (f32::from(b >> 4) - 8.0) * d));
}

/// Q4_1: as Q4_0's layout, without the offset of 8, times the scale plus the minimum.
fn q4_1(block: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (half16(block, 0), half16(block, 2));
    let packed = &block[4..20];
    out.extend(packed.iter().map(|&b| f32::from(b & 0x0f) * d + m));
    out.extend(packed.iter().map(|&b| f32::from(b >> 4) * d + m));
}

/// Q8_0: signed bytes times the scale.
fn q8_0(block: &[u8], out: &mut Vec<f32>) {
    let d = half16(block, 0);
    out.extend(block[2..34].iter().map(|&b| f32::from(b as i8) * d));
}

/// The 6-bit scale and minimum of sub-block `j` (of 8) from Q4_K's 12 packed bytes: the
/// first four sub-blocks keep theirs in the low 6 bits of bytes 0-3 (scales) and 4-7
/// (minimums); the last four in the nibbles of bytes 8-11, with their top two bits in the
/// spare high bits of bytes 0-7.
fn q4_k_scale_min(j: usize, packed: &[u8]) -> (u8, u8) {
    if j < 4 {
        (packed[j] & 63, packed[j + 4] & 63)
    } else {
        let scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
        let min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
        (scale, min)
    }
}

/// Q4_K: four chunks of 64 elements, each from 32 bytes: the low nibbles give the first
/// 32 elements (sub-block 2c), the high nibbles the next 32 (sub-block 2c + 1); an
/// element is `d * scale * q - dmin * min`.
fn q4_k(block: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (half16(block, 0), half16(block, 2));
    let packed = &block[4..16];
    let quants = &block[16..16 + QK_K / 2];
    for (chunk, bytes) in quants.chunks_exact(32).enumerate() {
        let (scale_lo, min_lo) = q4_k_scale_min(2 * chunk, packed);
        let (scale_hi, min_hi) = q4_k_scale_min(2 * chunk + 1, packed);
        let (d_lo, m_lo) = (d * f32::from(scale_lo), dmin * f32::from(min_lo));
        let (d_hi, m_hi) = (d * f32::from(scale_hi), dmin * f32::from(min_hi));
        out.extend(bytes.iter().map(|&b| d_lo * f32::from(b & 0x0f) - m_lo));
        out.extend(bytes.iter().map(|&b| d_hi * f32::from(b >> 4) - m_hi));
    }
}

/// Q6_K: two halves of 128 elements, each from 64 low-bit bytes, 32 high-bit bytes and
/// 8 scales. Element `l + 32 i` (l < 32, i < 4) of a half takes its low 4 bits from
/// byte `l` (i even) or `l + 32` (i odd), low nibble for i < 2 and high for i >= 2, its
/// high 2 bits from bits `2 i` of high byte `l`; less 32, times `d` and scale
/// `i * 2 + l / 16` of the half.
fn q6_k(block: &[u8], out: &mut Vec<f32>) {
    let low_bits = &block[..QK_K / 2];
    let high_bits = &block[QK_K / 2..QK_K / 2 + QK_K / 4];
    let scales = &block[QK_K / 2 + QK_K / 4..QK_K / 2 + QK_K / 4 + QK_K / 16];
    let d = half16(block, QK_K / 2 + QK_K / 4 + QK_K / 16);
    for half in 0..2 {
        let ql = &low_bits[64 * half..64 * half + 64];
        let qh = &high_bits[32 * half..32 * half + 32];
        let sc = &scales[8 * half..8 * half + 8];
        for i in 0..4 {
            for l in 0..32 {
                let low = if i % 2 == 0 { ql[l] } else { ql[l + 32] };
                let low = if i < 2 { low & 0x0f } else { low >> 4 };
                let high = (qh[l] >> (2 * i)) & 3;
                let q = i32::from(low | (high << 4)) - 32;
                let scale = f32::from(sc[2 * i + l / 16] as i8);
                out.push(d * scale * q as f32);
            }
        }
    }
}
