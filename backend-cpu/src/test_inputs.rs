//! Inputs for the kernels' unit tests.

/// Fresh inputs in [-1, 1) from a seeded xorshift, never zero.
pub(crate) fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.max(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
