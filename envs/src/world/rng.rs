//! [`Rng`]: the generator's small deterministic random number generator (SplitMix64).
//! Written here rather than taken from a crate so that a seed gives the same world on
//! every platform and every dependency version.

/// A SplitMix64 stream. The same seed always yields the same numbers.
#[derive(Clone, Debug)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A stream for `seed`.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// An independent stream derived from this seed and a label, so that adding data to
    /// one part of the world does not shift the numbers of another.
    pub(crate) fn fork(seed: u64, label: &str) -> Rng {
        let mut rng = Rng::new(seed);
        for byte in label.bytes() {
            rng.state ^= u64::from(byte);
            rng.next_u64();
        }
        rng
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A number in `low..=high` (`low` when the range is empty).
    pub(crate) fn range(&mut self, low: i64, high: i64) -> i64 {
        if high <= low {
            return low;
        }
        let span = (high - low) as u64 as usize;
        low + self.below(span.saturating_add(1)) as i64
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// One element of a non-empty array (checked at compile time).
    pub(crate) fn pick<'a, T, const N: usize>(&mut self, items: &'a [T; N]) -> &'a T {
        const { assert!(N > 0, "pick needs a non-empty array") };
        &items[self.below(N)]
    }

    /// One element of a slice, `None` when it is empty.
    pub(crate) fn choose<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len()))
    }

    /// Shuffles in place (Fisher-Yates).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }

    /// Up to `k` distinct elements of `items`, in random order.
    pub(crate) fn sample<T: Clone>(&mut self, items: &[T], k: usize) -> Vec<T> {
        let mut all = items.to_vec();
        self.shuffle(&mut all);
        all.truncate(k);
        all
    }
}

/// SplitMix64's finaliser: a bijective scramble of 64 bits. Also used to derive tokens.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
