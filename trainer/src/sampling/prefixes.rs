//! Prefixes shared within one generation: the prompts of an evaluation's first turns
//! open with the same system prompt, and a GRPO group's rollouts with the same whole
//! first turn. Before a holding generation prefills its prompts, every prefix that
//! several of them share beyond what the held caches already give them is prefilled
//! once and held ([`prefill_shared_prefixes`]); the prompts then continue from it as
//! from any held sequence. A shared prefix is not spent when a prompt continues it:
//! the generation's later batches (and the next turn's new chats) continue it too,
//! until the chats end and the policy frees what it holds.

use sage_transformer::{Kernels, ModelError, Transformer};

use super::generate::start_cache;
use super::held::{common_prefix, HeldCaches, MIN_SHARED_TOKENS};

/// The prefixes of `prompts` worth prefilling once: for each prompt, the longest
/// prefix it shares with another prompt (up to all but its last token), when that
/// reaches at least [`MIN_SHARED_TOKENS`] past the `covered[i]` tokens the held caches
/// give it. Distinct, in lexicographic order.
pub(super) fn shared_prefixes(prompts: &[&[u32]], covered: &[u32]) -> Vec<Vec<u32>> {
    let mut order: Vec<usize> = (0..prompts.len()).collect();
    order.sort_by_key(|&i| prompts[i]);
    // next[r]: tokens shared by the prompts at sorted places r and r + 1. A prompt's
    // longest prefix shared with any other is shared with a neighbour in this order.
    let next: Vec<usize> = order
        .windows(2)
        .map(|pair| common_prefix(prompts[pair[0]], prompts[pair[1]]))
        .collect();
    let mut candidates: Vec<Vec<u32>> = Vec::new();
    for (r, &i) in order.iter().enumerate() {
        let before = r.checked_sub(1).map_or(0, |r| next[r]);
        let after = next.get(r).copied().unwrap_or(0);
        let shared = before.max(after).min(prompts[i].len() - 1);
        if shared >= (covered[i] + MIN_SHARED_TOKENS) as usize {
            candidates.push(prompts[i][..shared].to_vec());
        }
    }
    candidates.sort();
    candidates.dedup();
    // A candidate that extends a shorter one by fewer than MIN_SHARED_TOKENS is left
    // out: its prompts continue from the shorter one. (Kept, it would share all of the
    // shorter one but its last token, and the next level down would peel off one token
    // a level.) Sorted, a prefix comes before its extensions.
    let mut prefixes: Vec<Vec<u32>> = Vec::new();
    for candidate in candidates {
        let near = prefixes.iter().any(|shorter| {
            candidate.starts_with(shorter)
                && candidate.len() - shorter.len() < MIN_SHARED_TOKENS as usize
        });
        if !near {
            prefixes.push(candidate);
        }
    }
    prefixes
}

/// Prefills, once each, the prefixes that several of `prompts` (none empty) share
/// past what `held` gives them, and holds their keys and values in `held` for the
/// prompts to continue (nothing, when they would not fit its budget). Prefixes that share a prefix of their own are prefilled from
/// it in turn, so a system prompt common to groups that each share a longer opening
/// runs through the model once.
pub(super) fn prefill_shared_prefixes<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    held: &mut HeldCaches,
    prompts: &[&[u32]],
) -> Result<(), ModelError<K::Error>> {
    let covered: Vec<u32> = held
        .best_rows(prompts)
        .iter()
        .map(|row| row.map_or(0, |row| row.len))
        .collect();
    let prefixes = shared_prefixes(prompts, &covered);
    let capacity = prefixes.iter().map(Vec::len).max().unwrap_or(0);
    // Prefixes that the budget could not hold would be prefilled for nothing.
    if prefixes.is_empty() || prefixes.len() * capacity > held.budget() {
        return Ok(());
    }
    let prefix_refs: Vec<&[u32]> = prefixes.iter().map(Vec::as_slice).collect();
    prefill_shared_prefixes(k, model, held, &prefix_refs)?;
    let (mut cache, rows) = start_cache(k, model, held, &prefix_refs, capacity, false)?;
    let new_tokens: usize = rows
        .iter()
        .zip(cache.lengths())
        .map(|(&i, &cached)| prefixes[i].len() - cached as usize)
        .sum();
    let row_prefixes: Vec<&[u32]> = rows.iter().map(|&i| prefix_refs[i]).collect();
    if let Err(e) = model.extend_cache(k, &mut cache, &row_prefixes) {
        cache.free(k)?;
        return Err(e);
    }
    held.count_prefix_tokens(new_tokens);
    let tokens = row_prefixes.iter().map(|p| p.to_vec()).collect();
    held.hold(k, cache, tokens, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(prompts: &[Vec<u32>]) -> Vec<&[u32]> {
        prompts.iter().map(Vec::as_slice).collect()
    }

    /// `len` tokens counting up from `from`.
    fn run(from: u32, len: u32) -> Vec<u32> {
        (from..from + len).collect()
    }

    /// Two groups of identical prompts under one system prompt: each group's prompt
    /// but its last token, once; a prompt shared with nobody gives nothing.
    #[test]
    fn each_group_shares_its_prompt_but_the_last_token() {
        let system = run(1000, 40);
        let a = [system.clone(), run(0, 50)].concat();
        let b = [system.clone(), run(500, 45)].concat();
        let alone = run(2000, 90);
        let prompts = vec![a.clone(), b.clone(), a.clone(), alone, b.clone(), a.clone()];
        let prefixes = shared_prefixes(&refs(&prompts), &[0; 6]);
        assert_eq!(prefixes, vec![a[..89].to_vec(), b[..84].to_vec()]);
        // The two prefixes share the system prompt, 40 tokens: the next level down.
        let next = shared_prefixes(&refs(&prefixes), &[0; 2]);
        assert_eq!(next, vec![system]);
    }

    /// A prefix is prefilled only when it adds at least MIN_SHARED_TOKENS to what the
    /// held caches cover, and the shorter of two prompts keeps at least one token.
    #[test]
    fn a_prefix_must_add_enough_past_the_held_rows() {
        let short = run(0, 40);
        let prompts = vec![short.clone(), run(0, 80)];
        // Shared: all of `short` but its last token for `short` (39), all of it for
        // `long` (40), which is left out as one token past the other.
        assert_eq!(
            shared_prefixes(&refs(&prompts), &[0, 0]),
            vec![short[..39].to_vec()]
        );
        assert_eq!(
            shared_prefixes(&refs(&prompts), &[7, 7]),
            vec![short[..39].to_vec()]
        );
        // Past 7 held tokens only `long`'s 40 add 32.
        assert_eq!(shared_prefixes(&refs(&prompts), &[8, 8]), vec![short]);
        assert!(shared_prefixes(&refs(&prompts), &[9, 9]).is_empty());
        let unrelated = vec![run(0, 40), run(100, 40)];
        assert!(shared_prefixes(&refs(&unrelated), &[0, 0]).is_empty());
    }

    /// A prompt that is a prefix of another: one prefix, all of the shorter prompt but
    /// its last token, not also the whole of it one token further (whose own prefix
    /// would be one token shorter again, a level down, and so on); the levels below
    /// end at once.
    #[test]
    fn a_prompt_inside_another_gives_one_prefix() {
        let inner = run(0, 40);
        let outer = run(0, 100);
        let prompts = vec![outer.clone(), inner.clone(), outer];
        let prefixes = shared_prefixes(&refs(&prompts), &[0; 3]);
        assert_eq!(prefixes, vec![inner[..39].to_vec(), run(0, 99)]);
        let next = shared_prefixes(&refs(&prefixes), &[0; 2]);
        assert_eq!(next, vec![run(0, 38)]);
        assert!(shared_prefixes(&refs(&next), &[0]).is_empty());
    }
}
