//! A bounded best-k buffer with deterministic ties: higher score first, then lower slot
//! (earlier insertion) first.

use alloc::vec::Vec;

/// The `k` best `(score, slot)` pairs offered so far, best first.
pub(crate) struct TopK<S> {
    k: usize,
    best: Vec<(S, usize)>,
}

impl<S: Ord + Copy> TopK<S> {
    /// An empty buffer keeping at most `k` pairs.
    pub(crate) fn new(k: usize) -> TopK<S> {
        TopK {
            k,
            best: Vec::new(),
        }
    }

    /// Offers `(score, slot)`; `keep` is asked only when the pair would enter, and the
    /// pair is dropped when it says no.
    pub(crate) fn offer(&mut self, score: S, slot: usize, keep: impl FnOnce() -> bool) {
        let full = self.best.len() >= self.k;
        if full
            && !self
                .best
                .last()
                .is_some_and(|&last| ranks_before((score, slot), last))
        {
            return;
        }
        if !keep() {
            return;
        }
        let at = self
            .best
            .partition_point(|&held| ranks_before(held, (score, slot)));
        self.best.insert(at, (score, slot));
        self.best.truncate(self.k);
    }

    /// The kept pairs, best first.
    pub(crate) fn into_sorted(self) -> Vec<(S, usize)> {
        self.best
    }
}

/// `a` comes before `b`: higher score, or equal score and lower slot.
fn ranks_before<S: Ord>(a: (S, usize), b: (S, usize)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}
