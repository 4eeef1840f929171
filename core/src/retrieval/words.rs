//! Words and word n-grams of a text, and their deterministic 64-bit hashes (FNV-1a over
//! the lowercased UTF-8 bytes, finished with the splitmix64 mixer; no random state).

use alloc::string::String;
use alloc::vec::Vec;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The words of `text`: maximal runs of alphanumeric characters, lowercased. An
/// underscore separates words, so `send_money` is `send`, `money`.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            out.push(core::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The hash of each word of `text` (as [`words`] splits it), in order.
pub(crate) fn word_hashes(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut hash = FNV_OFFSET;
    let mut in_word = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            for lower in c.to_lowercase() {
                let mut utf8 = [0u8; 4];
                for &byte in lower.encode_utf8(&mut utf8).as_bytes() {
                    hash = (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
                }
            }
            in_word = true;
        } else if in_word {
            out.push(mix(hash));
            hash = FNV_OFFSET;
            in_word = false;
        }
    }
    if in_word {
        out.push(mix(hash));
    }
    out
}

/// The hash of a sequence of word hashes; depends on the order and the length.
pub(crate) fn gram_hash(words: &[u64]) -> u64 {
    words
        .iter()
        .fold(mix(words.len() as u64), |hash, &word| mix(hash ^ word))
}

/// Appends the hash of every run of `n` consecutive words to `out` (none when there are
/// fewer than `n` words).
pub(crate) fn ngram_hashes(words: &[u64], n: usize, out: &mut Vec<u64>) {
    if n == 0 {
        return;
    }
    out.extend(words.windows(n).map(gram_hash));
}

/// The splitmix64 finaliser: spreads every input bit over the output.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
