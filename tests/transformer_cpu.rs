//! The transformer of `sage-transformer` (forward, backward, KV-cache decoding, written once
//! over `Kernels`) run on the CPU backend: whole-model gradients against finite
//! differences, decoding against the training forward pass, a few AdamW steps that
//! must lower the loss, and clear errors on malformed batches.

use sage_backend_cpu::CpuBackend;
use sage_transformer::{
    AdamWStep, AdapterLayout, InputError, Kernels, KvCache, LoraConfig, ModelConfig, ModelError,
    Projection, Transformer,
};

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
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

fn config(tied: bool) -> ModelConfig {
    ModelConfig {
        vocab_size: 37,
        hidden_size: 16,
        intermediate_size: 24,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 64,
        tie_word_embeddings: tied,
        qkv_bias: true,
    }
}

/// The parameter ranges of `model`'s RMSNorm weights.
fn norm_ranges(model: &Transformer) -> Vec<std::ops::Range<usize>> {
    let layout = model.layout();
    layout
        .layers
        .iter()
        .flat_map(|l| [l.input_norm, l.post_attention_norm])
        .chain([layout.final_norm])
        .map(|slot| slot.offset..slot.offset + slot.len)
        .collect()
}

/// `f` on a rayon pool of `threads` threads.
fn on_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(f)
}

/// A model with random parameters: weights ~ U(-0.5, 0.5), norm weights ~ 1 + U(-0.2, 0.2).
fn random_model(k: &mut CpuBackend, config: ModelConfig, rng: &mut Rng) -> Transformer {
    let model = Transformer::new(k, config).unwrap();
    let mut params: Vec<f32> = (0..model.params().len).map(|_| 0.5 * rng.unit()).collect();
    for range in norm_ranges(&model) {
        for p in &mut params[range] {
            *p = 1.0 + 0.4 * *p;
        }
    }
    k.write(model.params(), &params).unwrap();
    model
}

/// Two packed sequences of 6 and 4 tokens, with next-token targets.
fn batch(rng: &mut Rng, vocab: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let tokens: Vec<u32> = (0..10).map(|_| rng.below(vocab) as u32).collect();
    let targets: Vec<u32> = (0..10).map(|_| rng.below(vocab) as u32).collect();
    (tokens, targets, vec![0, 6, 10])
}

fn weighted_logp(logp: &[f32], weights: &[f32]) -> f64 {
    logp.iter()
        .zip(weights)
        .map(|(&l, &w)| f64::from(l) * f64::from(w))
        .sum()
}

/// Every parameter tensor's gradient at random elements against central differences
/// of L = sum_t w_t logp_t. The forward runs in f32, so with step h = 1e-2 the
/// difference carries a rounding error of about eps_f32 * |L| / h ~ 1e-4 and a
/// truncation error of order h^2 times the third derivative; we accept an absolute
/// error of 2e-3 plus 2% of the gradient, far below what a wrong term would give
/// (a missing path changes a gradient by its own order of magnitude).
fn check_model_gradients(tied: bool) {
    let mut rng = Rng(0x5eed_0000 + tied as u64);
    let mut k = CpuBackend::new();
    let config = config(tied);
    let mut model = random_model(&mut k, config.clone(), &mut rng);
    let (tokens, targets, starts) = batch(&mut rng, config.vocab_size);
    let weights: Vec<f32> = (0..tokens.len()).map(|_| rng.unit()).collect();

    // No gradient slab until the first backward pass (an inference-only model never
    // holds one); zeroing it before then is a no-op.
    assert_eq!(model.grads().len, 0);
    model.zero_grads(&mut k).unwrap();
    model.forward(&mut k, &tokens, &targets, &starts).unwrap();
    model.backward(&mut k, &weights).unwrap();
    assert_eq!(model.grads().len, model.params().len);
    let mut grads = vec![0.0f32; model.grads().len];
    k.read(model.grads(), &mut grads).unwrap();
    let mut params = vec![0.0f32; model.params().len];
    k.read(model.params(), &mut params).unwrap();

    let h = 1e-2f32;
    let mut checked = 0;
    for (name, slot) in model.layout().named() {
        for _ in 0..3 {
            let i = slot.offset + rng.below(slot.len);
            let mut loss_at = |value: f32| {
                let mut p = params.clone();
                p[i] = value;
                k.write(model.params(), &p).unwrap();
                let logp = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
                weighted_logp(&logp, &weights)
            };
            let fd = (loss_at(params[i] + h) - loss_at(params[i] - h)) / (2.0 * f64::from(h));
            let analytic = f64::from(grads[i]);
            assert!(
                (fd - analytic).abs() <= 2e-3 + 2e-2 * analytic.abs(),
                "{name}[{}]: analytic {analytic}, finite difference {fd} (tied {tied})",
                i - slot.offset
            );
            checked += 1;
        }
    }
    assert!(checked >= 3 * 12, "checked only {checked} elements");
}

#[test]
fn model_gradients_match_finite_differences_untied() {
    check_model_gradients(false);
}

#[test]
fn model_gradients_match_finite_differences_tied() {
    check_model_gradients(true);
}

/// Adapters of rank 2 on q, v, o and down, A and B random: every adapter's gradient at
/// random elements against central differences of the same loss, each evaluated on
/// the weights merged from the perturbed adapters (the tolerances of
/// `check_model_gradients`, for the same reasons). Nothing frozen has a gradient: the
/// model's gradient slab is released.
#[test]
fn lora_gradients_match_finite_differences() {
    let mut rng = Rng(0x10aa_0001);
    let mut k = CpuBackend::new();
    let config = config(false);
    let mut model = random_model(&mut k, config.clone(), &mut rng);
    let lora = LoraConfig {
        rank: 2,
        alpha: 4.0,
        targets: vec![
            Projection::Q,
            Projection::V,
            Projection::O,
            Projection::Down,
        ],
    };
    let layout = AdapterLayout::new(model.layout(), &lora);
    let adapters: Vec<f32> = (0..layout.total).map(|_| 0.5 * rng.unit()).collect();
    model.enable_lora(&mut k, lora, &adapters).unwrap();
    let (tokens, targets, starts) = batch(&mut rng, config.vocab_size);
    let weights: Vec<f32> = (0..tokens.len()).map(|_| rng.unit()).collect();

    model.zero_grads(&mut k).unwrap();
    model.forward(&mut k, &tokens, &targets, &starts).unwrap();
    model.backward(&mut k, &weights).unwrap();
    let adapter_slab = model.adapter_params().unwrap();
    let mut grads = vec![0.0f32; layout.total];
    k.read(model.adapter_grads().unwrap(), &mut grads).unwrap();
    assert_eq!(
        model.grads().len,
        0,
        "the frozen parameters' gradient slab is released"
    );

    let h = 1e-2f32;
    for (name, slot) in layout.named() {
        for _ in 0..3 {
            let i = slot.offset + rng.below(slot.len);
            let mut loss_at = |value: f32| {
                let mut a = adapters.clone();
                a[i] = value;
                k.write(adapter_slab, &a).unwrap();
                model.merge_adapters(&mut k).unwrap();
                let logp = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
                weighted_logp(&logp, &weights)
            };
            let fd = (loss_at(adapters[i] + h) - loss_at(adapters[i] - h)) / (2.0 * f64::from(h));
            let analytic = f64::from(grads[i]);
            assert!(
                analytic.abs() > 1e-4 || fd.abs() < 1e-3,
                "{name}: a vanishing gradient"
            );
            assert!(
                (fd - analytic).abs() <= 2e-3 + 2e-2 * analytic.abs(),
                "{name}[{}]: analytic {analytic}, finite difference {fd}",
                i - slot.offset
            );
        }
    }
}

/// With B = 0 the adapted model is the model (log-probs bit-equal); merging random
/// adapters changes it; rebasing takes the frozen weights back from the merged ones,
/// so that B = 0 merges to the original weights again (to f32 rounding).
#[test]
fn lora_starts_from_the_model_and_rebases_to_it() {
    let mut rng = Rng(0x10aa_0002);
    let mut k = CpuBackend::new();
    let config = config(true);
    let mut model = random_model(&mut k, config.clone(), &mut rng);
    let (tokens, targets, starts) = batch(&mut rng, config.vocab_size);
    let before = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
    let mut original = vec![0.0f32; model.params().len];
    k.read(model.params(), &mut original).unwrap();
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: Projection::ALL.to_vec(),
    };
    let layout = AdapterLayout::new(model.layout(), &lora);
    let mut adapters: Vec<f32> = (0..layout.total).map(|_| rng.unit()).collect();
    let zero_b = |adapters: &mut Vec<f32>| {
        for adapter in &layout.adapters {
            adapters[adapter.b.offset..adapter.b.offset + adapter.b.len].fill(0.0);
        }
    };
    let mut started = adapters.clone();
    zero_b(&mut started);
    model.enable_lora(&mut k, lora.clone(), &started).unwrap();
    let same = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
    assert_eq!(same, before, "B = 0 must leave the model as it was");

    let slab = model.adapter_params().unwrap();
    k.write(slab, &adapters).unwrap();
    model.merge_adapters(&mut k).unwrap();
    let moved = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
    assert_ne!(moved, before, "random adapters must change the model");
    model.rebase_adapters(&mut k).unwrap();
    zero_b(&mut adapters);
    k.write(slab, &adapters).unwrap();
    model.merge_adapters(&mut k).unwrap();
    let mut back = vec![0.0f32; original.len()];
    k.read(model.params(), &mut back).unwrap();
    let worst = back
        .iter()
        .zip(&original)
        .map(|(b, o)| (b - o).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= 1e-5, "rebased weights differ by {worst}");

    let error = model.enable_lora(&mut k, lora, &adapters).unwrap_err();
    assert!(
        matches!(error, ModelError::Input(InputError::Lora(_))),
        "{error:?}"
    );
}

/// log-softmax of `logits` at `target`, in f64.
fn log_softmax_at(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[target as usize] as f64 - max - sum.ln()
}

/// Prefill plus decoding steps give, at every position, the same next-token
/// distribution as one training forward pass over the whole sequence. Both run in
/// f32 with different summation orders, hence the 1e-4 tolerance on log-probs.
#[test]
fn decoding_matches_the_training_forward_pass() {
    let mut rng = Rng(0xdec0de);
    let mut k = CpuBackend::new();
    let config = config(false);
    let vocab = config.vocab_size;
    let mut model = random_model(&mut k, config, &mut rng);
    let full: [Vec<u32>; 2] = [
        (0..9).map(|_| rng.below(vocab) as u32).collect(),
        (0..7).map(|_| rng.below(vocab) as u32).collect(),
    ];
    let prompt_lens = [4usize, 2];

    // Reference: the training forward over each whole sequence, targets = next token.
    let mut reference: Vec<Vec<f64>> = Vec::new();
    for seq in &full {
        let n = seq.len() - 1;
        let logp = model
            .forward(&mut k, &seq[..n], &seq[1..], &[0, n as u32])
            .unwrap();
        reference.push(logp.iter().map(|&x| f64::from(x)).collect());
    }

    let mut cache = KvCache::new(&mut k, &model, 2, 16).unwrap();
    let prompts: Vec<&[u32]> = full.iter().zip(prompt_lens).map(|(s, p)| &s[..p]).collect();
    let mut logits = model.prefill(&mut k, &mut cache, &prompts).unwrap();
    let steps = 5;
    for step in 0..=steps {
        for (b, seq) in full.iter().enumerate() {
            let pos = prompt_lens[b] + step; // the token being predicted
            if pos >= seq.len() {
                continue;
            }
            let row = &logits[b * vocab..(b + 1) * vocab];
            let decoded = log_softmax_at(row, seq[pos]);
            let expected = reference[b][pos - 1];
            assert!(
                (decoded - expected).abs() < 1e-4,
                "sequence {b}, position {pos}: decoded {decoded}, forward {expected}"
            );
        }
        if step == steps {
            break;
        }
        let next: Vec<u32> = full
            .iter()
            .zip(prompt_lens)
            .map(|(s, p)| s[(p + step).min(s.len() - 1)])
            .collect();
        logits = model.decode_step(&mut k, &mut cache, &next).unwrap();
    }
    assert_eq!(cache.lengths(), &[4 + steps as u32, 2 + steps as u32]);
}

/// In the bf16 precision a model decodes from its weights' bf16 copy: loaded for
/// inference (`Transformer::new_frozen`) from the first product, trainable from its
/// second decoding step (the second read of each weight). The logits of the prefill and
/// the decoding steps (all products of at most 32 rows) stay within 1e-2 of their scale
/// of the f32 model's (weights rounded by 2^-9 relative, over sums of at most 96
/// terms), differ from them (the copy was read), and are the same bits on 1 and 3
/// threads.
#[test]
fn a_model_in_bf16_decodes_within_bf16_rounding() {
    use sage_backend_cpu::Precision;
    let config = ModelConfig {
        vocab_size: 97,
        hidden_size: 64,
        intermediate_size: 96,
        ..config(true)
    };
    let prompts: [&[u32]; 2] = [&[5, 17, 3, 60, 41], &[88, 2, 9]];
    let steps: [[u32; 2]; 4] = [[7, 70], [33, 1], [96, 50], [12, 12]];
    let run = |precision: Precision, frozen: bool| {
        let mut k = CpuBackend::with_precision(precision);
        let mut model = if frozen {
            Transformer::new_frozen(&mut k, config.clone()).unwrap()
        } else {
            Transformer::new(&mut k, config.clone()).unwrap()
        };
        let mut rng = Rng(0xdec0);
        // Weights of a trained model's scale (|w| < 0.15), norms near 1.
        let mut params: Vec<f32> = (0..model.params().len).map(|_| 0.15 * rng.unit()).collect();
        for range in norm_ranges(&model) {
            for p in &mut params[range] {
                *p += 1.0;
            }
        }
        k.write(model.params(), &params).unwrap();
        let mut cache = KvCache::new(&mut k, &model, 2, 16).unwrap();
        let mut logits = model.prefill(&mut k, &mut cache, &prompts).unwrap();
        for next in steps {
            logits.extend(model.decode_step(&mut k, &mut cache, &next).unwrap());
        }
        logits
    };
    let f32_logits = run(Precision::F32, true);
    let scale = f32_logits.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    for frozen in [true, false] {
        let bf16_logits = run(Precision::Bf16, frozen);
        let error = f32_logits
            .iter()
            .zip(&bf16_logits)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()))
            / scale;
        assert!(
            error < 1e-2,
            "frozen {frozen}: logits {error:e} of their scale"
        );
        // The last step's logits: trainable weights are copied by then too.
        let last = f32_logits.len() - 2 * config.vocab_size;
        assert_ne!(
            bits(&f32_logits[last..]),
            bits(&bf16_logits[last..]),
            "frozen {frozen}: bf16 gave f32's logits to the bit"
        );
        let on = |threads: usize| on_threads(threads, || run(Precision::Bf16, frozen));
        assert_eq!(
            bits(&on(1)),
            bits(&on(3)),
            "frozen {frozen}: depends on threads"
        );
    }
}

/// A prefill run in groups of a few prompts gives the same logits, cache and next
/// step as one over the whole batch, to the bit: every group holds more than the
/// skinny-GEMM row limit (32), so each row's products sum in the same order either way.
#[test]
fn a_prefill_in_groups_equals_one_over_the_whole_batch() {
    let mut rng = Rng(0x9a0f);
    let mut k = CpuBackend::new();
    let config = config(false);
    let vocab = config.vocab_size;
    let mut model = random_model(&mut k, config, &mut rng);
    let prompts: Vec<Vec<u32>> = [40usize, 34, 45]
        .iter()
        .map(|&len| (0..len).map(|_| rng.below(vocab) as u32).collect())
        .collect();
    let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let next: Vec<u32> = (0..3).map(|_| rng.below(vocab) as u32).collect();
    let mut run = |budget: Option<usize>| {
        let mut cache = KvCache::new(&mut k, &model, 3, 48).unwrap();
        if let Some(budget) = budget {
            cache.set_prefill_tokens(budget);
        }
        let first = model.prefill(&mut k, &mut cache, &refs).unwrap();
        let second = model.decode_step(&mut k, &mut cache, &next).unwrap();
        let lengths = cache.lengths().to_vec();
        cache.free(&mut k).unwrap();
        (first, second, lengths)
    };
    let whole = run(None);
    assert_eq!(whole.2, vec![41, 35, 46]);
    // Budget 35: three groups of one prompt (the first longer than the budget); 80: two.
    for budget in [35, 80] {
        assert_eq!(run(Some(budget)), whole, "prefill budget {budget}");
    }
}

/// A prefill runs in a scratch slab of its own: a forward pass, then a prefill of other
/// prompts (longer than the batch, so a shared slab would have to grow), then the
/// backward pass gives bit for bit the gradients of the forward and backward alone.
/// A prefill that reused the training activations would fail the backward (no
/// forward pass) or change its gradients.
#[test]
fn a_prefill_leaves_a_pending_backward_pass_intact() {
    let mut rng = Rng(0xbac4);
    let mut k = CpuBackend::new();
    let config = config(false);
    let mut model = random_model(&mut k, config.clone(), &mut rng);
    let (tokens, targets, starts) = batch(&mut rng, config.vocab_size);
    let weights: Vec<f32> = (0..tokens.len()).map(|_| rng.unit()).collect();
    let mut gradients = |model: &mut Transformer, k: &mut CpuBackend, prefill: bool| {
        model.zero_grads(k).unwrap();
        model.forward(k, &tokens, &targets, &starts).unwrap();
        if prefill {
            let prompts: Vec<Vec<u32>> = [9usize, 13]
                .iter()
                .map(|&len| {
                    (0..len)
                        .map(|_| rng.below(config.vocab_size) as u32)
                        .collect()
                })
                .collect();
            let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            let mut cache = KvCache::new(k, model, 2, 16).unwrap();
            let logits = model.prefill(k, &mut cache, &refs).unwrap();
            assert!(logits.iter().all(|x| x.is_finite()));
            cache.free(k).unwrap();
        }
        model.backward(k, &weights).unwrap();
        let mut grads = vec![0.0f32; model.grads().len];
        k.read(model.grads(), &mut grads).unwrap();
        grads
    };
    let alone = gradients(&mut model, &mut k, false);
    let with_prefill = gradients(&mut model, &mut k, true);
    assert!(alone.iter().any(|&g| g != 0.0));
    assert_eq!(alone, with_prefill);
}

/// Ten AdamW steps on one small batch (memorisation) must lower the negative
/// log-likelihood substantially; a sign error or a missing gradient path would not.
#[test]
fn adamw_steps_lower_the_loss() {
    let mut rng = Rng(0xada3);
    let mut k = CpuBackend::new();
    let config = config(true);
    let mut model = random_model(&mut k, config.clone(), &mut rng);
    let (tokens, targets, starts) = batch(&mut rng, config.vocab_size);
    let n = tokens.len();
    let total = model.params().len;
    let (m, v) = (k.alloc(total).unwrap(), k.alloc(total).unwrap());
    let nll = |logp: &[f32]| -logp.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;

    let mut losses = Vec::new();
    for step in 1..=10 {
        model.zero_grads(&mut k).unwrap();
        let logp = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
        losses.push(nll(&logp));
        // Minimise mean NLL: d loss / d logp_t = -1/n.
        model.backward(&mut k, &vec![-1.0 / n as f32; n]).unwrap();
        let step = AdamWStep {
            learning_rate: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            step,
        };
        let whole = |b| sage_transformer::Tensor::whole(b, total);
        k.adamw(model.params(), model.grads(), whole(m), whole(v), step)
            .unwrap();
    }
    let logp = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
    let last = nll(&logp);
    assert!(
        last < 0.5 * losses[0],
        "loss went from {} to {last}: {losses:?}",
        losses[0]
    );
}

/// The head run on some rows only (`forward_scored`) gives, on those rows, exactly the
/// log-probs of the full forward pass and, for weights that are 0 elsewhere, exactly its
/// gradients: the scored rows go through the same products in the same order, so the
/// comparison is bitwise. Unscored rows read 0, a nonzero weight on one is an error,
/// and a batch with no scored row leaves the head's gradient at 0.
#[test]
fn the_head_on_scored_rows_only_matches_the_full_forward_pass() {
    let mut rng = Rng(0x5c0_4ed);
    let mut k = CpuBackend::new();
    let config = config(true);
    let mut model = random_model(&mut k, config.clone(), &mut rng);
    let (tokens, targets, starts) = batch(&mut rng, config.vocab_size);
    let scored: Vec<bool> = (0..tokens.len()).map(|t| t % 3 != 1).collect();
    let weights: Vec<f32> = scored
        .iter()
        .map(|&s| if s { rng.unit() } else { 0.0 })
        .collect();
    let grads_of = |k: &mut CpuBackend, model: &mut Transformer, scored: Option<&[bool]>| {
        model.zero_grads(k).unwrap();
        let logp = match scored {
            Some(scored) => model
                .forward_scored(k, &tokens, &targets, &starts, scored)
                .unwrap(),
            None => model.forward(k, &tokens, &targets, &starts).unwrap(),
        };
        model.backward(k, &weights).unwrap();
        let mut grads = vec![0.0f32; model.grads().len];
        k.read(model.grads(), &mut grads).unwrap();
        (logp, grads)
    };
    let (full_logp, full_grads) = grads_of(&mut k, &mut model, None);
    let (logp, grads) = grads_of(&mut k, &mut model, Some(&scored));
    for (t, (&s, (&l, &full))) in scored.iter().zip(logp.iter().zip(&full_logp)).enumerate() {
        assert_eq!(l, if s { full } else { 0.0 }, "log-prob of row {t}");
    }
    assert!(full_grads.iter().any(|&g| g != 0.0));
    assert_eq!(grads, full_grads);

    let unscored = scored.iter().position(|&s| !s).unwrap();
    let mut bad = weights.clone();
    bad[unscored] = 0.5;
    model
        .forward_scored(&mut k, &tokens, &targets, &starts, &scored)
        .unwrap();
    assert!(matches!(
        model.backward(&mut k, &bad),
        Err(ModelError::Input(InputError::WeightOnUnscoredRow { index })) if index == unscored
    ));

    let none = vec![false; tokens.len()];
    model.zero_grads(&mut k).unwrap();
    let logp = model
        .forward_scored(&mut k, &tokens, &targets, &starts, &none)
        .unwrap();
    assert!(logp.iter().all(|&l| l == 0.0));
    model.backward(&mut k, &vec![0.0; tokens.len()]).unwrap();
    let mut grads = vec![0.0f32; model.grads().len];
    k.read(model.grads(), &mut grads).unwrap();
    let head = model.layout().lm_head;
    assert!(grads[head.offset..head.offset + head.len]
        .iter()
        .all(|&g| g == 0.0));
}

#[test]
fn malformed_batches_are_clear_errors() {
    let mut rng = Rng(7);
    let mut k = CpuBackend::new();
    let mut model = random_model(&mut k, config(false), &mut rng);
    let input_error = |r: Result<Vec<f32>, ModelError<_>>| match r {
        Err(ModelError::Input(e)) => e,
        other => panic!("expected an input error, got {other:?}"),
    };
    assert_eq!(
        input_error(model.forward(&mut k, &[1, 2, 3], &[1, 2, 3], &[0, 2])),
        InputError::BadSeqStarts
    );
    assert_eq!(
        input_error(model.forward(&mut k, &[1, 2], &[1], &[0, 2])),
        InputError::LengthMismatch {
            what: "targets",
            expected: 2,
            got: 1
        }
    );
    assert_eq!(
        input_error(model.forward(&mut k, &[1, 99], &[1, 2], &[0, 2])),
        InputError::TokenOutOfVocab {
            index: 1,
            token: 99
        }
    );
    assert!(matches!(
        model.backward(&mut k, &[1.0]),
        Err(ModelError::Input(InputError::NoForward))
    ));
    model.forward(&mut k, &[1, 2], &[2, 3], &[0, 2]).unwrap();
    assert!(matches!(
        model.backward(&mut k, &[1.0]),
        Err(ModelError::Input(InputError::LengthMismatch { .. }))
    ));
    let bad = ModelConfig {
        num_key_value_heads: 3,
        ..config(false)
    };
    assert!(matches!(
        Transformer::new(&mut k, bad),
        Err(ModelError::Config(_))
    ));
}

/// The bf16 precision against f32 on one model and batch: log-probs and gradients of a
/// forward and backward pass whose products have 80 rows (more than the 32 a decoding
/// step's products have, which stay f32), with weights of a trained model's scale.
/// Rounding every product's operands to bf16
/// (8 bits of mantissa, a relative error of at most 2^-9 each) moves a log-prob by
/// about that fraction of the logits' scale and a gradient by a few times it: we accept
/// 1e-2 of the largest |log-prob| and 3e-2 of the gradients' norm, where a wrong term
/// would be of order 1. The two must differ (bf16 did run), and bf16 gives the same bits
/// on 1 and 3 threads.
#[test]
fn bf16_precision_tracks_f32_within_bf16_rounding() {
    use sage_backend_cpu::Precision;
    let config = ModelConfig {
        vocab_size: 97,
        hidden_size: 64,
        intermediate_size: 96,
        ..config(true)
    };
    let mut rng = Rng(0xbf16);
    let tokens: Vec<u32> = (0..80)
        .map(|_| rng.below(config.vocab_size) as u32)
        .collect();
    let targets: Vec<u32> = (0..80)
        .map(|_| rng.below(config.vocab_size) as u32)
        .collect();
    let starts = [0, 48, 80];
    let weights: Vec<f32> = (0..tokens.len()).map(|_| rng.unit()).collect();
    let run = |precision: Precision| {
        let mut k = CpuBackend::with_precision(precision);
        let mut model = random_model(&mut k, config.clone(), &mut Rng(0x5eed));
        // Weights of a trained model's scale (|w| < 0.15 rather than 0.5), norms as drawn.
        let mut params = vec![0.0f32; model.params().len];
        k.read(model.params(), &mut params).unwrap();
        let norms = norm_ranges(&model);
        for (i, p) in params.iter_mut().enumerate() {
            if !norms.iter().any(|range| range.contains(&i)) {
                *p *= 0.3;
            }
        }
        k.write(model.params(), &params).unwrap();
        let logp = model.forward(&mut k, &tokens, &targets, &starts).unwrap();
        model.backward(&mut k, &weights).unwrap();
        let mut grads = vec![0.0f32; model.grads().len];
        k.read(model.grads(), &mut grads).unwrap();
        (logp, grads)
    };
    let (logp32, grads32) = run(Precision::F32);
    let (logp16, grads16) = run(Precision::Bf16);
    let scale = logp32.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let logp_error = logp32
        .iter()
        .zip(&logp16)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale;
    assert!(
        logp_error < 1e-2,
        "log-probs: {logp_error:e} of their scale"
    );
    assert!(logp_error > 0.0, "bf16 gave f32's log-probs to the bit");
    let norm = |x: &[f32]| x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
    let difference: Vec<f32> = grads32.iter().zip(&grads16).map(|(a, b)| a - b).collect();
    let grad_error = norm(&difference) / norm(&grads32);
    assert!(grad_error < 3e-2, "gradients: {grad_error:e} of their norm");
    let on = |threads: usize| on_threads(threads, || run(Precision::Bf16));
    let (one, three) = (on(1), on(3));
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    assert_eq!(
        bits(&one.0),
        bits(&three.0),
        "bf16 log-probs depend on threads"
    );
    assert_eq!(
        bits(&one.1),
        bits(&three.1),
        "bf16 gradients depend on threads"
    );
}
