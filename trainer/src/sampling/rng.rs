//! [`SequenceRng`]: the sampler's random numbers, one independent stream per sequence.
//!
//! The generator is SplitMix64 (Steele, Lea and Flood's `SplittableRandom` step): a
//! 64-bit Weyl counter passed through a strong bit mixer. It is written here rather than
//! taken from a crate so that the stream is fixed by this file alone: a seed gives the
//! same tokens on every platform and every future version, and the whole state is one
//! `u64` that a checkpoint can store.

/// The Weyl increment of SplitMix64 (2^64 divided by the golden ratio, made odd).
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output mixer (a bijection on `u64` with full avalanche).
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random stream of one sequence of a sampling call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceRng {
    state: u64,
}

impl SequenceRng {
    /// The stream of sequence `index` under `seed`: its starting point is a hash of both,
    /// so it does not depend on which other sequences share the batch.
    pub fn new(seed: u64, index: u64) -> SequenceRng {
        let state = mix64(seed ^ mix64(index.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)));
        SequenceRng { state }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }

    /// A uniform draw from [0, 1) with 53 random bits.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
