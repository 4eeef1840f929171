//! KV caches held between generations (`sampling::generate_holding`, and the
//! transformer policy that uses it) on the CPU backend with a tiny random model: chats
//! continued over several turns give the tokens of whole prefills, the held tokens stay
//! within their budget, and a weight change forgets them.

use sage_backend_cpu::CpuBackend;
use sage_core::policy::{Generation, Policy, SamplingParams};
use sage_trainer::optim::AdamWConfig;
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::sampling::{generate, generate_holding, HeldCaches};
use sage_transformer::{Kernels, ModelConfig, Transformer};

const VOCAB: usize = 41;

fn config() -> ModelConfig {
    ModelConfig {
        vocab_size: VOCAB,
        hidden_size: 24,
        intermediate_size: 40,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 96,
        tie_word_embeddings: false,
        qkv_bias: true,
    }
}

/// A deterministic xorshift generator for test inputs.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-0.5, 0.5).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
    fn tokens(&mut self, len: usize) -> Vec<u32> {
        (0..len)
            .map(|_| (self.next_u64() % VOCAB as u64) as u32)
            .collect()
    }
}

/// A model with weights ~ U(-0.5, 0.5) (norm weights 1 + that / 2).
fn random_model(k: &mut CpuBackend, seed: u64) -> Transformer {
    let mut rng = Rng(seed);
    let model = Transformer::new(k, config()).unwrap();
    let mut params: Vec<f32> = (0..model.params().len).map(|_| rng.unit()).collect();
    let layout = model.layout();
    let norms = layout
        .layers
        .iter()
        .flat_map(|l| [l.input_norm, l.post_attention_norm])
        .chain([layout.final_norm]);
    for slot in norms {
        for p in &mut params[slot.offset..slot.offset + slot.len] {
            *p = 1.0 + *p / 2.0;
        }
    }
    k.write(model.params(), &params).unwrap();
    model
}

/// Sampling at temperature 1 with per-prompt limits and a stop token, so sequences
/// finish at different steps (some while others run, which compacts the cache).
fn params(turn: u64, prompts: usize) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        max_new_tokens: 9,
        stop_tokens: vec![3],
        seed: 7,
        stream_keys: (0..prompts as u64).map(|i| (turn << 32) | i).collect(),
        max_new_tokens_each: (0..prompts as u32).map(|i| 4 + 2 * i).collect(),
        ..SamplingParams::default()
    }
}

fn refs(chats: &[Vec<u32>]) -> Vec<&[u32]> {
    chats.iter().map(Vec::as_slice).collect()
}

/// The same tokens, log-probs to 1e-5 (a continued prefill sums attention in another
/// order than a whole one: f32 rounding apart).
fn assert_same(got: &[Generation], want: &[Generation], turn: u64) {
    for (i, (got, want)) in got.iter().zip(want).enumerate() {
        assert_eq!(got.tokens, want.tokens, "turn {turn}, sequence {i}");
        assert_eq!(got.stop, want.stop, "turn {turn}, sequence {i}");
        for (a, b) in got.logprobs.iter().zip(&want.logprobs) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} against {b}");
        }
    }
}

/// Four chats over four turns, each turn's prompt the last prompt, its generation and
/// a random observation; from the second turn on, one chat is replaced by a new, shorter
/// one (which no held sequence prefixes, so it starts whole). Every turn generates the
/// same as `generate` without held caches, and the three continued prompts of each
/// later turn are counted.
#[test]
fn continued_chats_generate_what_whole_prefills_do() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x5eed);
    let mut rng = Rng(11);
    let mut held = HeldCaches::new(10_000);
    let mut chats: Vec<Vec<u32>> = [6, 3, 9, 4].iter().map(|&n| rng.tokens(n)).collect();
    let mut continued = 0;
    for turn in 0..4u64 {
        let prompts = refs(&chats);
        let want = generate(&mut k, &mut model, &prompts, &params(turn, 4)).unwrap();
        let got =
            generate_holding(&mut k, &mut model, &mut held, &prompts, &params(turn, 4)).unwrap();
        assert_same(&got, &want, turn);
        assert_eq!(held.reuse().continued, continued, "turn {turn}");
        assert!(
            held.live_sequences() >= 4,
            "every sequence of the turn is held"
        );
        for (chat, generation) in chats.iter_mut().zip(&got) {
            chat.extend(&generation.tokens);
            chat.extend(rng.tokens(3));
        }
        chats[1] = rng.tokens(5);
        continued += 3;
    }
    let reuse = held.reuse();
    assert_eq!(reuse.prompts, 16);
    assert!(reuse.held_tokens > 0 && reuse.held_tokens < reuse.prompt_tokens);
    held.free(&mut k).unwrap();
    assert_eq!(held.held_tokens(), 0);
}

/// Prompts that share prefixes within one generation: three copies of a 68-token first
/// turn and two 46-token prompts under the same 34-token system prompt, and one
/// unrelated prompt. The system prompt and the copies' opening are prefilled once
/// (the system prompt's first 33 tokens a level below, as the two prefixes share
/// them), every prompt continues from them, and the tokens are those of whole
/// prefills; so are a later batch's, whose new chat continues the held system prompt
/// without prefilling it again, and the next turn's, which continues the held chats.
#[test]
fn prefixes_shared_within_a_generation_are_prefilled_once() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0x5ade);
    let mut rng = Rng(23);
    let system = rng.tokens(34);
    let copied = [system.as_slice(), &rng.tokens(34)].concat();
    let mut chats: Vec<Vec<u32>> = vec![
        copied.clone(),
        [system.as_slice(), &rng.tokens(12)].concat(),
        copied.clone(),
        rng.tokens(20),
        [system.as_slice(), &rng.tokens(12)].concat(),
        copied,
    ];
    let mut held = HeldCaches::new(10_000);
    let mut params = params(0, 6);
    params.max_new_tokens = 4;
    let mut generate_both =
        |k: &mut CpuBackend, held: &mut HeldCaches, chats: &[Vec<u32>], turn| {
            params.stream_keys = (0..chats.len() as u64).map(|i| (turn << 32) | i).collect();
            params.max_new_tokens_each = (0..chats.len() as u32).map(|i| 2 + i).collect();
            let want = generate(k, &mut model, &refs(chats), &params).unwrap();
            let got = generate_holding(k, &mut model, held, &refs(chats), &params).unwrap();
            assert_same(&got, &want, turn);
            got
        };
    let first = generate_both(&mut k, &mut held, &chats, 0);
    let reuse = held.reuse();
    assert_eq!((reuse.prompts, reuse.continued), (6, 5));
    assert_eq!(reuse.prompt_tokens, 3 * 68 + 2 * 46 + 20);
    assert_eq!(reuse.held_tokens, 3 * 67 + 2 * 34);
    assert_eq!(reuse.prefix_tokens, 33 + 1 + 34);
    // Three copies' last tokens, two prompts' own 12, the unrelated 20, the prefixes.
    assert_eq!(reuse.prefilled_tokens(), 3 + 24 + 20 + 68);
    assert_eq!(
        held.live_sequences(),
        6 + 3,
        "the six chats and the three shared prefixes"
    );
    // A later batch: a new chat under the system prompt continues the held prefix.
    let later = vec![[system.as_slice(), &rng.tokens(12)].concat()];
    generate_both(&mut k, &mut held, &later, 1);
    let reuse = held.reuse();
    assert_eq!((reuse.continued, reuse.prefix_tokens), (6, 68));
    assert_eq!(reuse.prefilled_tokens(), 3 + 24 + 20 + 68 + 12);
    for (chat, generation) in chats.iter_mut().zip(&first) {
        chat.extend(&generation.tokens);
        chat.extend(rng.tokens(3));
    }
    generate_both(&mut k, &mut held, &chats, 2);
    assert_eq!(
        held.reuse().continued,
        12,
        "every chat continues in the next turn"
    );
    held.free(&mut k).unwrap();
    assert_eq!(held.held_tokens(), 0);
    // Two copies of a 50-token prompt share 49 tokens: prefilled once under a budget
    // that holds them, not at all under one that could not.
    let copies = vec![rng.tokens(50); 2];
    for (budget, shared) in [(120, 49), (40, 0)] {
        let mut held = HeldCaches::new(budget);
        generate_both(&mut k, &mut held, &copies, 3);
        assert_eq!(held.reuse().prefix_tokens, shared, "budget {budget}");
        held.free(&mut k).unwrap();
    }
}

/// Held tokens never exceed the budget (the oldest caches go first; sequences that
/// leave the cache together and alone exceed it are not held), and a budget of 0 holds
/// nothing.
#[test]
fn held_tokens_stay_within_the_budget() {
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, 0xb0d9);
    let mut rng = Rng(5);
    for budget in [0, 20, 60, 200] {
        let mut held = HeldCaches::new(budget);
        for turn in 0..3 {
            let chats: Vec<Vec<u32>> = (0..3).map(|_| rng.tokens(8)).collect();
            generate_holding(
                &mut k,
                &mut model,
                &mut held,
                &refs(&chats),
                &params(turn, 3),
            )
            .unwrap();
            assert!(
                held.held_tokens() <= budget,
                "budget {budget}: {}",
                held.held_tokens()
            );
        }
        match budget {
            0 => assert_eq!(held.held_tokens(), 0),
            20 => assert!(held.live_sequences() < 3, "all three do not fit"),
            _ => assert!(held.live_sequences() >= 3, "budget {budget}"),
        }
        held.free(&mut k).unwrap();
    }
}

/// The policy holds its generations' caches and forgets them at an optimizer step (the
/// weights they were made with are gone); the next generation frees them and prefills
/// whole; `chats_ended` frees what it holds.
#[test]
fn an_optimizer_step_forgets_the_held_caches() {
    let mut k = CpuBackend::new();
    let model = random_model(&mut k, 0xf0f0);
    let mut policy = TransformerPolicy::trainable(k, model, AdamWConfig::default()).unwrap();
    let mut rng = Rng(9);
    let chats: Vec<Vec<u32>> = (0..2).map(|_| rng.tokens(6)).collect();
    let first = policy.generate(&refs(&chats), &params(0, 2)).unwrap();
    assert_eq!(policy.held_caches().live_sequences(), 2);
    let sequences: Vec<Vec<u32>> = chats
        .iter()
        .zip(&first)
        .map(|(chat, g)| [chat.as_slice(), &g.tokens, &[1, 2]].concat())
        .collect();
    let coefficients: Vec<Vec<f32>> = sequences.iter().map(|s| vec![0.1; s.len() - 1]).collect();
    let coefficient_refs: Vec<&[f32]> = coefficients.iter().map(Vec::as_slice).collect();
    policy
        .accumulate_gradient(&refs(&sequences), &coefficient_refs)
        .unwrap();
    assert_eq!(
        policy.held_caches().live_sequences(),
        2,
        "no weight changed yet"
    );
    policy.optimizer_step().unwrap();
    assert_eq!(policy.held_caches().live_sequences(), 0);
    policy.generate(&refs(&sequences), &params(1, 2)).unwrap();
    assert_eq!(policy.held_caches().reuse().continued, 0);
    assert_eq!(policy.held_caches().live_sequences(), 2);
    // Told that the chats ended (the rollout says so after its episodes), it frees them.
    policy.chats_ended().unwrap();
    assert_eq!(policy.held_caches().held_tokens(), 0);
}
