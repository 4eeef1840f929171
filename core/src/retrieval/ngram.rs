//! Query n-gram retrieval: Jaccard similarity of the sets of word n-grams of two
//! instructions, and [`NgramIndex`], an inverted index from n-gram hash to the skills
//! whose origin instruction contains it.
//!
//! A text with at least one word but fewer than `n` words counts as a single n-gram made
//! of all its words, so short instructions still match; a text without words has no
//! n-gram and is similar to nothing (Jaccard 0).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::num::NonZeroUsize;
use hashbrown::HashMap;

use super::topk::TopK;
use super::words::{gram_hash, ngram_hashes, word_hashes};
use super::Hit;

/// Jaccard similarity of the word `n`-gram sets of `a` and `b`: shared n-grams over
/// distinct n-grams of both, in `[0, 1]`; 0 when either text has no word.
pub fn jaccard(a: &str, b: &str, n: NonZeroUsize) -> f32 {
    let (a, b) = (gram_set(a, n), gram_set(b, n));
    let shared = shared_count(&a, &b);
    Overlap::new(shared, a.len() + b.len() - shared).value()
}

/// An inverted index over the word n-grams of the origin instruction of each skill.
///
/// Entries keep the position they were first added at (replacing an entry keeps it),
/// which breaks ties in [`top_k`](NgramIndex::top_k). A removed entry leaves an empty
/// slot of a few bytes behind. A query costs one pass over the posting lists of its
/// n-grams, not over the whole index.
#[derive(Clone, Debug)]
pub struct NgramIndex {
    n: NonZeroUsize,
    entries: Vec<Option<Entry>>,
    slots: HashMap<String, usize>,
    postings: HashMap<u64, Vec<usize>>,
}

/// One indexed skill: its name and the sorted, distinct n-gram hashes of its instruction.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    grams: Vec<u64>,
}

impl NgramIndex {
    /// An empty index over word `n`-grams.
    pub fn new(n: NonZeroUsize) -> NgramIndex {
        NgramIndex {
            n,
            entries: Vec::new(),
            slots: HashMap::new(),
            postings: HashMap::new(),
        }
    }

    /// The n-gram length.
    pub fn n(&self) -> NonZeroUsize {
        self.n
    }

    /// Number of indexed skills.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// No skill is indexed.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A skill called `name` is indexed.
    pub fn contains(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }

    /// Indexes skill `name` under `instruction`, the instruction of the task that wrote
    /// it. An entry of the same name is replaced in place. Returns whether one was.
    pub fn insert(&mut self, name: &str, instruction: &str) -> bool {
        let grams = gram_set(instruction, self.n);
        let replaced = self.slots.get(name).copied();
        let slot = replaced.unwrap_or(self.entries.len());
        if let Some(old) = self.entries.get_mut(slot).and_then(Option::take) {
            unlink(&mut self.postings, slot, &old.grams);
        }
        link(&mut self.postings, slot, &grams);
        let entry = Some(Entry {
            name: name.into(),
            grams,
        });
        match self.entries.get_mut(slot) {
            Some(held) => *held = entry,
            None => {
                self.entries.push(entry);
                self.slots.insert(name.into(), slot);
            }
        }
        replaced.is_some()
    }

    /// Removes skill `name` from the index. Returns whether it was indexed.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(slot) = self.slots.remove(name) else {
            return false;
        };
        if let Some(old) = self.entries.get_mut(slot).and_then(Option::take) {
            unlink(&mut self.postings, slot, &old.grams);
        }
        true
    }

    /// The Jaccard similarity of `query` to the instruction indexed for `name`.
    pub fn score(&self, query: &str, name: &str) -> Option<f32> {
        let entry = self.entry(*self.slots.get(name)?)?;
        let query = gram_set(query, self.n);
        let shared = shared_count(&query, &entry.grams);
        Some(Overlap::new(shared, query.len() + entry.grams.len() - shared).value())
    }

    /// The at most `k` skills most similar to `query`, best first; ties go to the entry
    /// added first. Skills sharing no n-gram with the query are never returned.
    pub fn top_k(&self, query: &str, k: usize) -> Vec<Hit> {
        self.top_k_where(query, k, |_| true)
    }

    /// As [`top_k`](NgramIndex::top_k), over the skills for which `keep(name)` holds
    /// (asked only of skills that would enter the top `k`).
    pub fn top_k_where(
        &self,
        query: &str,
        k: usize,
        mut keep: impl FnMut(&str) -> bool,
    ) -> Vec<Hit> {
        let query = gram_set(query, self.n);
        if k == 0 || query.is_empty() {
            return Vec::new();
        }
        let mut shared = vec![0u32; self.entries.len()];
        let mut touched = Vec::new();
        for gram in &query {
            for &slot in self.postings.get(gram).into_iter().flatten() {
                if let Some(count) = shared.get_mut(slot) {
                    if *count == 0 {
                        touched.push(slot);
                    }
                    *count = count.saturating_add(1);
                }
            }
        }
        let mut top = TopK::new(k);
        for slot in touched {
            let (Some(entry), Some(&count)) = (self.entry(slot), shared.get(slot)) else {
                continue;
            };
            let count = count as usize;
            let overlap = Overlap::new(count, query.len() + entry.grams.len() - count);
            top.offer(overlap, slot, || keep(&entry.name));
        }
        top.into_sorted()
            .into_iter()
            .filter_map(|(overlap, slot)| {
                Some(Hit {
                    name: self.entry(slot)?.name.clone(),
                    score: overlap.value(),
                })
            })
            .collect()
    }

    fn entry(&self, slot: usize) -> Option<&Entry> {
        self.entries.get(slot)?.as_ref()
    }
}

/// The sorted, distinct n-gram hashes of `text` (see the module doc for short texts).
fn gram_set(text: &str, n: NonZeroUsize) -> Vec<u64> {
    let words = word_hashes(text);
    let mut grams = Vec::new();
    if words.is_empty() {
        return grams;
    }
    if words.len() < n.get() {
        grams.push(gram_hash(&words));
    } else {
        ngram_hashes(&words, n.get(), &mut grams);
    }
    grams.sort_unstable();
    grams.dedup();
    grams
}

/// How many values two sorted, distinct slices share.
fn shared_count(a: &[u64], b: &[u64]) -> usize {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        match x.cmp(y) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    shared
}

/// Adds `slot` to the posting list of every gram, keeping lists sorted.
fn link(postings: &mut HashMap<u64, Vec<usize>>, slot: usize, grams: &[u64]) {
    for &gram in grams {
        let list = postings.entry(gram).or_default();
        if let Err(at) = list.binary_search(&slot) {
            list.insert(at, slot);
        }
    }
}

/// Removes `slot` from the posting list of every gram, dropping emptied lists.
fn unlink(postings: &mut HashMap<u64, Vec<usize>>, slot: usize, grams: &[u64]) {
    for gram in grams {
        if let Some(list) = postings.get_mut(gram) {
            if let Ok(at) = list.binary_search(&slot) {
                list.remove(at);
            }
            if list.is_empty() {
                postings.remove(gram);
            }
        }
    }
}

/// A Jaccard ratio kept exact (shared over union), so equal ratios tie exactly.
#[derive(Clone, Copy, Debug)]
struct Overlap {
    shared: u64,
    union: u64,
}

impl Overlap {
    fn new(shared: usize, union: usize) -> Overlap {
        Overlap {
            shared: shared as u64,
            union: union.max(1) as u64,
        }
    }

    fn value(self) -> f32 {
        (self.shared as f64 / self.union as f64) as f32
    }
}

impl Ord for Overlap {
    fn cmp(&self, other: &Overlap) -> Ordering {
        let lhs = u128::from(self.shared) * u128::from(other.union);
        let rhs = u128::from(other.shared) * u128::from(self.union);
        lhs.cmp(&rhs)
    }
}

impl PartialOrd for Overlap {
    fn partial_cmp(&self, other: &Overlap) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Overlap {
    fn eq(&self, other: &Overlap) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Overlap {}
