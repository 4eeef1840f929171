//! `sampling::generate` on the CPU backend with a tiny random model: greedy decoding
//! against the training forward pass, log-probs, seeding, batch independence, stop
//! tokens, lengths, top-k / top-p limits, empirical frequencies, and errors.

use sage_backend_cpu::CpuBackend;
use sage_core::policy::{Generation, SamplingParams, StopReason};
use sage_trainer::sampling::{generate, SamplingError};
use sage_transformer::{Kernels, KvCache, ModelConfig, Transformer};

/// A deterministic xorshift generator for test inputs.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn tokens(&mut self, len: usize, vocab: usize) -> Vec<u32> {
        (0..len)
            .map(|_| (self.next_u64() % vocab as u64) as u32)
            .collect()
    }
}

const VOCAB: usize = 37;

fn config() -> ModelConfig {
    ModelConfig {
        vocab_size: VOCAB,
        hidden_size: 16,
        intermediate_size: 24,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
        qkv_bias: true,
    }
}

/// A model with weights ~ U(-0.5, 0.5) and norm weights ~ 1 + U(-0.2, 0.2).
fn random_model(k: &mut CpuBackend, seed: u64) -> Transformer {
    let mut rng = Rng(seed);
    let model = Transformer::new(k, config()).unwrap();
    let mut params: Vec<f32> = (0..model.params().len).map(|_| 0.5 * rng.unit()).collect();
    let layout = model.layout();
    let norms = layout
        .layers
        .iter()
        .flat_map(|l| [l.input_norm, l.post_attention_norm])
        .chain([layout.final_norm]);
    for slot in norms {
        for p in &mut params[slot.offset..slot.offset + slot.len] {
            *p = 1.0 + 0.4 * *p;
        }
    }
    k.write(model.params(), &params).unwrap();
    model
}

fn greedy(max_new_tokens: u32) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_new_tokens,
        ..SamplingParams::default()
    }
}

fn sampled(seed: u64, max_new_tokens: u32) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        max_new_tokens,
        seed,
        ..SamplingParams::default()
    }
}

/// Three prompts of different lengths.
fn prompts(rng: &mut Rng) -> Vec<Vec<u32>> {
    [5, 2, 7].iter().map(|&n| rng.tokens(n, VOCAB)).collect()
}

fn refs(prompts: &[Vec<u32>]) -> Vec<&[u32]> {
    prompts.iter().map(Vec::as_slice).collect()
}

/// The next-token logits after `sequence`, by a fresh prefill of the whole sequence
/// (the training forward pass, not the decoding step).
fn logits_after(k: &mut CpuBackend, model: &mut Transformer, sequence: &[u32]) -> Vec<f32> {
    let mut cache = KvCache::new(k, model, 1, sequence.len()).unwrap();
    let logits = model.prefill(k, &mut cache, &[sequence]).unwrap();
    cache.free(k).unwrap();
    logits
}

/// Greedy decoding picks, at every step, the argmax of the logits that a full forward
/// pass over the prompt and the tokens so far gives. The two paths sum in different
/// orders (f32), so a different argmax is accepted only for a near tie: the chosen
/// token's logit within 1e-4 of the maximum. With this seed no such tie occurs.
#[test]
fn greedy_decoding_is_the_argmax_of_the_forward_pass_at_every_step() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x9e11);
    let prompts = prompts(&mut Rng(3));
    let generations = generate(&mut k, &mut model, &refs(&prompts), &greedy(8)).unwrap();
    for (prompt, generation) in prompts.iter().zip(&generations) {
        assert_eq!(generation.tokens.len(), 8);
        let mut sequence = prompt.clone();
        for &token in &generation.tokens {
            let logits = logits_after(&mut k, &mut model, &sequence);
            let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let argmax = logits.iter().position(|&x| x == max).unwrap() as u32;
            assert!(
                argmax == token || max - logits[token as usize] < 1e-4,
                "after {sequence:?}: decoded {token}, forward argmax {argmax}"
            );
            sequence.push(token);
        }
    }
}

/// `Generation::logprobs` are the model's own log-probs, before temperature, top-k and
/// top-p: they match `Transformer::forward` over prompt + continuation within 1e-4
/// (f32 on both sides, different summation orders).
#[test]
fn logprobs_match_the_forward_pass() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x1091);
    let prompts = prompts(&mut Rng(5));
    let params = SamplingParams {
        temperature: 0.7,
        top_k: 5,
        top_p: 0.9,
        ..sampled(11, 10)
    };
    let generations = generate(&mut k, &mut model, &refs(&prompts), &params).unwrap();
    for (prompt, generation) in prompts.iter().zip(&generations) {
        let full: Vec<u32> = prompt.iter().chain(&generation.tokens).copied().collect();
        let n = full.len() - 1;
        let logp = model
            .forward(&mut k, &full[..n], &full[1..], &[0, n as u32])
            .unwrap();
        let expected = &logp[prompt.len() - 1..];
        assert_eq!(generation.logprobs.len(), expected.len());
        for (i, (&got, &want)) in generation.logprobs.iter().zip(expected).enumerate() {
            assert!(
                (got - want).abs() < 1e-4,
                "token {i}: generation log-prob {got}, forward {want}"
            );
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_tokens_and_another_seed_others() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x5eed);
    let prompts = prompts(&mut Rng(7));
    let mut run = |seed| generate(&mut k, &mut model, &refs(&prompts), &sampled(seed, 12)).unwrap();
    let first = run(42);
    assert_eq!(first, run(42));
    assert_ne!(first, run(43));
}

/// Sequence i's tokens depend on the seed, i and its prompt only: changing, adding or
/// removing the other prompts of the batch changes nothing.
#[test]
fn results_do_not_depend_on_the_rest_of_the_batch() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0xba7c);
    let mut rng = Rng(9);
    let [a, b, c, d, e] = [4, 6, 3, 9, 2].map(|n| rng.tokens(n, VOCAB));
    let params = SamplingParams {
        top_p: 0.95,
        ..sampled(2024, 10)
    };
    let mut run = |batch: &[&[u32]]| generate(&mut k, &mut model, batch, &params).unwrap();
    let full = run(&[&a, &b, &c]);
    assert_same_generation(&run(&[&a])[0], &full[0]);
    assert_same_generation(&run(&[&a, &d])[0], &full[0]);
    assert_same_generation(&run(&[&e, &b])[1], &full[1]);
    assert_same_generation(&run(&[&d, &e, &c, &a])[2], &full[2]);
}

/// A prompt keyed by `stream_keys` draws the stream of its key wherever it sits in the
/// batch: moved to another place, it samples what it sampled as the key's own index.
#[test]
fn stream_keys_follow_the_prompt_not_its_place_in_the_batch() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x57e4);
    let mut rng = Rng(21);
    let [a, b, c] = [4, 6, 3].map(|n| rng.tokens(n, VOCAB));
    let plain = generate(&mut k, &mut model, &[&a, &b, &c], &sampled(77, 12)).unwrap();
    let keyed = SamplingParams {
        stream_keys: vec![2, 0, 1],
        ..sampled(77, 12)
    };
    let moved = generate(&mut k, &mut model, &[&c, &a, &b], &keyed).unwrap();
    assert_same_generation(&moved[0], &plain[2]);
    assert_same_generation(&moved[1], &plain[0]);
    assert_same_generation(&moved[2], &plain[1]);
    // Another key is another stream.
    let other = SamplingParams {
        stream_keys: vec![5],
        ..sampled(77, 12)
    };
    let alone = generate(&mut k, &mut model, &[&a], &other).unwrap();
    assert_ne!(alone[0].tokens, plain[0].tokens);
}

/// Each prompt stops at its own limit; a prompt with room for nothing gets nothing,
/// and the others sample exactly what they sample without a limit of their own.
#[test]
fn each_prompt_stops_at_its_own_limit() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x11e7);
    let prompts = prompts(&mut Rng(23));
    let free = generate(&mut k, &mut model, &refs(&prompts), &sampled(3, 10)).unwrap();
    let params = SamplingParams {
        max_new_tokens_each: vec![4, 0, 25],
        ..sampled(3, 10)
    };
    let limited = generate(&mut k, &mut model, &refs(&prompts), &params).unwrap();
    assert_eq!(limited[0].tokens, free[0].tokens[..4]);
    assert_eq!(limited[0].stop, StopReason::Length);
    assert!(limited[1].tokens.is_empty());
    // The global limit still bounds a larger entry.
    assert_same_generation(&limited[2], &free[2]);
}

/// A finished sequence whose prompt and limit fill the cache leaves it before it is fed
/// again, however few others have finished: one of five rows, its prompt of 11 tokens
/// and limit of 1 as long as the others' 4 and 8, stayed in the cache and overflowed it
/// on the second decoding step. The others generate what they generate without it.
#[test]
fn a_finished_sequence_that_fills_the_cache_leaves_it() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0xf111);
    let mut rng = Rng(29);
    let short: Vec<Vec<u32>> = (0..4).map(|_| rng.tokens(4, VOCAB)).collect();
    let long = rng.tokens(11, VOCAB);
    let mut all = refs(&short);
    all.push(&long);
    let params = SamplingParams {
        max_new_tokens_each: vec![8, 8, 8, 8, 1],
        ..greedy(8)
    };
    let together = generate(&mut k, &mut model, &all, &params).unwrap();
    let apart = generate(&mut k, &mut model, &refs(&short), &greedy(8)).unwrap();
    for (got, want) in together.iter().zip(&apart) {
        assert_same_generation(got, want);
    }
    let alone = generate(&mut k, &mut model, &[&long], &greedy(1)).unwrap();
    assert_same_generation(&together[4], &alone[0]);
}

/// Same tokens and stop reason exactly; log-probs within 1e-5, because the backend's
/// GEMM blocks by the number of rows, so another batch size sums in another order
/// (last-ulp differences; the sampled tokens do not change).
fn assert_same_generation(got: &Generation, want: &Generation) {
    assert_eq!(got.tokens, want.tokens);
    assert_eq!(got.stop, want.stop);
    assert_eq!(got.logprobs.len(), want.logprobs.len());
    for (i, (g, w)) in got.logprobs.iter().zip(&want.logprobs).enumerate() {
        assert!((g - w).abs() < 1e-5, "log-prob {i}: {g} vs {w}");
    }
}

/// Generation stops after a stop token, which ends the output; sequences that stopped
/// early do not disturb the others, which continue exactly as without stop tokens.
#[test]
fn stop_tokens_end_a_sequence_and_are_kept() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x5709);
    let prompts = prompts(&mut Rng(13));
    let free_run = generate(&mut k, &mut model, &refs(&prompts), &sampled(5, 16)).unwrap();
    let stop = free_run[0].tokens[3];
    let params = SamplingParams {
        stop_tokens: vec![stop],
        ..sampled(5, 16)
    };
    let stopped = generate(&mut k, &mut model, &refs(&prompts), &params).unwrap();
    let mut stopped_any = false;
    for (free, got) in free_run.iter().zip(&stopped) {
        let expected: Generation = match free.tokens.iter().position(|&t| t == stop) {
            Some(i) => {
                stopped_any = true;
                Generation {
                    tokens: free.tokens[..=i].to_vec(),
                    logprobs: free.logprobs[..=i].to_vec(),
                    stop: StopReason::StopToken,
                }
            }
            None => free.clone(),
        };
        assert_eq!(got, &expected);
    }
    assert!(stopped_any);
    assert!(stopped[0].tokens.len() <= 4);
}

#[test]
fn max_new_tokens_bounds_every_sequence() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x3a7);
    let prompts = prompts(&mut Rng(17));
    for max_new in [1, 6] {
        let generations =
            generate(&mut k, &mut model, &refs(&prompts), &sampled(1, max_new)).unwrap();
        for g in generations {
            assert_eq!(g.tokens.len(), max_new as usize);
            assert_eq!(g.logprobs.len(), max_new as usize);
            assert_eq!(g.stop, StopReason::Length);
        }
    }
    let none = generate(&mut k, &mut model, &refs(&prompts), &sampled(1, 0)).unwrap();
    assert!(none
        .iter()
        .all(|g| g.tokens.is_empty() && g.stop == StopReason::Length));
    assert!(generate(&mut k, &mut model, &[], &sampled(1, 4))
        .unwrap()
        .is_empty());
}

/// Top-k = 1 and a tiny top-p leave only the most likely token, so at any temperature
/// and seed they reproduce greedy decoding.
#[test]
fn top_k_one_and_tiny_top_p_equal_greedy() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x70b);
    let prompts = prompts(&mut Rng(19));
    let reference = generate(&mut k, &mut model, &refs(&prompts), &greedy(10)).unwrap();
    let limited = [
        SamplingParams {
            top_k: 1,
            temperature: 1.5,
            ..sampled(3, 10)
        },
        SamplingParams {
            top_p: 1e-6,
            temperature: 1.0,
            ..sampled(4, 10)
        },
    ];
    for params in limited {
        let got = generate(&mut k, &mut model, &refs(&prompts), &params).unwrap();
        assert_eq!(got, reference, "{params:?}");
    }
}

/// The distribution one step of sampling should follow: temperature, then the
/// `top_k` best tokens (ties to the lower id), then the smallest prefix of those
/// reaching `top_p` of their mass, renormalised. Computed in f64.
fn expected_distribution(logits: &[f32], temperature: f64, top_k: usize, top_p: f64) -> Vec<f64> {
    let mut ranked: Vec<usize> = (0..logits.len()).collect();
    ranked.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    ranked.truncate(top_k);
    let max = f64::from(logits[ranked[0]]);
    let weights: Vec<f64> = ranked
        .iter()
        .map(|&id| ((f64::from(logits[id]) - max) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut kept = 0;
    let mut mass = 0.0;
    while mass < top_p * total {
        mass += weights[kept];
        kept += 1;
    }
    let mut p = vec![0.0; logits.len()];
    for (&id, &w) in ranked.iter().zip(&weights).take(kept) {
        p[id] = w / mass;
    }
    p
}

/// Draws one token for each of N copies of a prompt (each copy its own random stream)
/// and compares token frequencies with the expected distribution: every token's count
/// must lie within 4.5 standard deviations (sqrt(N p (1 - p))) plus 1 of N p. For a
/// correct sampler a single token fails that with probability about 7e-6, so about
/// 3e-4 for the whole vocabulary; the test is seeded, so it is deterministic anyway.
/// Tokens outside the truncated support must never appear.
fn check_frequencies(params: SamplingParams, temperature: f64, top_k: usize, top_p: f64) {
    const N: usize = 20_000;
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0xf4e9);
    let prompt = [3u32, 17];
    let logits = logits_after(&mut k, &mut model, &prompt);
    let p = expected_distribution(&logits, temperature, top_k, top_p);
    let batch = vec![&prompt[..]; N];
    let generations = generate(&mut k, &mut model, &batch, &params).unwrap();
    let mut counts = vec![0usize; VOCAB];
    for g in &generations {
        counts[g.tokens[0] as usize] += 1;
    }
    for (token, (&count, &p)) in counts.iter().zip(&p).enumerate() {
        let mean = N as f64 * p;
        let sd = (N as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (count as f64 - mean).abs() <= 4.5 * sd + 1.0,
            "token {token}: {count} draws, expected {mean:.1} (sd {sd:.1}); {params:?}"
        );
    }
}

#[test]
fn temperature_one_frequencies_match_the_softmax() {
    check_frequencies(sampled(77, 1), 1.0, VOCAB, 1.0);
}

#[test]
fn truncated_frequencies_match_temperature_top_k_and_top_p() {
    let params = SamplingParams {
        temperature: 0.6,
        top_k: 8,
        top_p: 0.8,
        ..sampled(78, 1)
    };
    check_frequencies(params, 0.6, 8, 0.8);
}

#[test]
fn bad_requests_are_clear_errors() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0xe77);
    let long = vec![1u32; 60];
    let err = generate(&mut k, &mut model, &[&[1, 2], &long], &sampled(0, 5)).unwrap_err();
    assert!(matches!(
        err,
        SamplingError::TooLong {
            longest_prompt: 60,
            max_new_tokens: 5,
            max_positions: 64
        }
    ));
    assert!(err.to_string().contains("max_position_embeddings (64)"));
    assert!(matches!(
        generate(&mut k, &mut model, &[&[1], &[]], &sampled(0, 5)),
        Err(SamplingError::EmptyPrompt { index: 1 })
    ));
    for params in [
        SamplingParams {
            temperature: -1.0,
            ..sampled(0, 5)
        },
        SamplingParams {
            temperature: f32::NAN,
            ..sampled(0, 5)
        },
        SamplingParams {
            top_p: 0.0,
            ..sampled(0, 5)
        },
        SamplingParams {
            top_p: 1.5,
            ..sampled(0, 5)
        },
    ] {
        let err = generate(&mut k, &mut model, &[&[1]], &params).unwrap_err();
        assert!(matches!(err, SamplingError::Params(_)), "{params:?}");
        assert!(err.to_string().starts_with("sampling parameters: "));
    }
    assert!(matches!(
        generate(&mut k, &mut model, &[&[1, VOCAB as u32]], &sampled(0, 5)),
        Err(SamplingError::Model(_))
    ));
    let wrong_keys = SamplingParams {
        stream_keys: vec![1],
        ..sampled(0, 5)
    };
    let err = generate(&mut k, &mut model, &[&[1], &[2]], &wrong_keys).unwrap_err();
    assert!(err
        .to_string()
        .contains("stream_keys has 1 entries for 2 prompts"));
    let wrong_limits = SamplingParams {
        max_new_tokens_each: vec![1, 2, 3],
        ..sampled(0, 5)
    };
    let err = generate(&mut k, &mut model, &[&[1], &[2]], &wrong_limits).unwrap_err();
    assert!(matches!(
        err,
        SamplingError::PerPrompt {
            what: "max_new_tokens_each",
            got: 3,
            prompts: 2
        }
    ));
    // A per-prompt limit lets a long prompt through when its own limit fits.
    let fits = SamplingParams {
        max_new_tokens_each: vec![5, 4],
        ..sampled(0, 5)
    };
    generate(&mut k, &mut model, &[&[1, 2], &long], &fits).unwrap();
}
