//! `optim` on the CPU backend: AdamW against a hand-computed update, no decay on 1-D
//! tensors, gradient clipping, skipped non-finite steps, checkpointable state, learning
//! rate schedules and config checks.

use sage_backend_cpu::CpuBackend;
use sage_trainer::optim::{AdamW, AdamWConfig, AdamWState, LrSchedule, OptimError};
use sage_transformer::{Kernels, ModelConfig, Transformer};

/// A deterministic xorshift generator for test inputs.
struct Rng(u64);

impl Rng {
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| scale * self.unit()).collect()
    }
}

/// A tiny model (untied, with q/k/v bias): 1-D slots are the two layer norms, the
/// final norm and the three biases.
/// A tiny model holding its gradient slab, as after a backward pass.
fn tiny_model(k: &mut CpuBackend) -> Transformer {
    let mut model = fresh_model(k);
    // The tests write gradients by hand: the slab a backward pass would allocate.
    model.hold_grads(k).unwrap();
    model
}

/// A tiny model as `Transformer::new` leaves it: no gradient slab yet.
fn fresh_model(k: &mut CpuBackend) -> Transformer {
    let config = ModelConfig {
        vocab_size: 8,
        hidden_size: 4,
        intermediate_size: 6,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 16,
        tie_word_embeddings: false,
        qkv_bias: true,
    };
    Transformer::new(k, config).unwrap()
}

fn read(k: &mut CpuBackend, t: sage_transformer::Tensor) -> Vec<f32> {
    let mut out = vec![0.0; t.len];
    k.read(t, &mut out).unwrap();
    out
}

/// Which elements of the slab belong to 1-D tensors (no weight decay).
fn vector_mask(model: &Transformer) -> Vec<bool> {
    let mut mask = vec![false; model.params().len];
    for (_, slot) in model.layout().named() {
        if slot.shape[1] == 1 {
            mask[slot.offset..slot.offset + slot.len].fill(true);
        }
    }
    mask
}

fn config(lr: f32, weight_decay: f32, max_grad_norm: Option<f32>) -> AdamWConfig {
    AdamWConfig {
        schedule: LrSchedule::Constant { lr },
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay,
        max_grad_norm,
    }
}

/// Two AdamW steps against the textbook update computed here in f64 for every
/// element (PyTorch's AdamW: m, v, bias corrections, decoupled decay of matrices
/// only). The kernel works in f32, so we accept 1e-6 absolute plus 1e-5 relative.
#[test]
fn two_steps_match_the_hand_computed_update() {
    let mut k = CpuBackend::new();
    let mut model = tiny_model(&mut k);
    let n = model.params().len;
    let mut rng = Rng(0xada);
    let mut params: Vec<f64> = rng.vec(n, 1.0).iter().map(|&x| f64::from(x)).collect();
    let initial: Vec<f32> = params.iter().map(|&x| x as f32).collect();
    k.write(model.params(), &initial).unwrap();
    let cfg = config(0.05, 0.1, None);
    let mut opt = AdamW::new(&mut k, &model, cfg.clone()).unwrap();
    let vectors = vector_mask(&model);
    let (b1, b2, eps) = (
        f64::from(cfg.beta1),
        f64::from(cfg.beta2),
        f64::from(cfg.eps),
    );
    let (lr, wd) = (0.05f64, 0.1f64);
    let mut m = vec![0.0f64; n];
    let mut v = vec![0.0f64; n];

    for t in 1..=2 {
        let grads = rng.vec(n, 0.1);
        k.write(model.grads(), &grads).unwrap();
        let report = opt.update(&mut k, &mut model).unwrap();
        assert!(!report.skipped && !report.clipped);
        assert_eq!(report.stats.learning_rate, 0.05);
        assert_eq!(opt.step(), t);
        for i in 0..n {
            let g = f64::from(grads[i]);
            m[i] = b1 * m[i] + (1.0 - b1) * g;
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
            let m_hat = m[i] / (1.0 - b1.powi(t as i32));
            let v_hat = v[i] / (1.0 - b2.powi(t as i32));
            let decay = if vectors[i] { 0.0 } else { wd };
            params[i] -= lr * (m_hat / (v_hat.sqrt() + eps) + decay * params[i]);
        }
        let got = read(&mut k, model.params());
        for (i, (&got, &want)) in got.iter().zip(&params).enumerate() {
            assert!(
                (f64::from(got) - want).abs() <= 1e-6 + 1e-5 * want.abs(),
                "step {t}, element {i}: {got} vs {want}"
            );
        }
        assert!(read(&mut k, model.grads()).iter().all(|&g| g == 0.0));
    }
}

/// With a zero gradient, AdamW's update is pure weight decay: matrices shrink by
/// (1 - lr * wd), while norm weights and biases stay exactly as they were. The model
/// has had no backward pass, so it holds no gradient slab until the step allocates
/// one (zero).
#[test]
fn one_dimensional_tensors_are_not_decayed() {
    let mut k = CpuBackend::new();
    let mut model = fresh_model(&mut k);
    let initial = Rng(5).vec(model.params().len, 1.0);
    k.write(model.params(), &initial).unwrap();
    let mut opt = AdamW::new(&mut k, &model, config(0.1, 0.5, None)).unwrap();
    assert_eq!(model.grads().len, 0, "no slab before a backward pass");
    opt.update(&mut k, &mut model).unwrap();
    assert_eq!(model.grads().len, model.params().len);
    let after = read(&mut k, model.params());
    let vectors = vector_mask(&model);
    assert!(vectors.iter().any(|&v| v) && vectors.iter().any(|&v| !v));
    for (i, ((&before, &after), &vector)) in initial.iter().zip(&after).zip(&vectors).enumerate() {
        if vector {
            assert_eq!(after, before, "1-D element {i} changed");
        } else {
            assert!((after - 0.95 * before).abs() <= 1e-6, "element {i}");
        }
    }
}

/// A model frozen for inference (`Transformer::new_frozen`) takes no optimizer step:
/// the update fails by name and leaves the weights as they were.
#[test]
fn a_frozen_model_takes_no_step() {
    let mut k = CpuBackend::new();
    let shape = fresh_model(&mut k).config().clone();
    let mut model = Transformer::new_frozen(&mut k, shape).unwrap();
    let initial = Rng(6).vec(model.params().len, 1.0);
    k.write(model.params(), &initial).unwrap();
    let mut opt = AdamW::new(&mut k, &model, config(0.1, 0.5, None)).unwrap();
    let err = opt.update(&mut k, &mut model).unwrap_err();
    assert!(matches!(err, OptimError::Frozen), "{err}");
    assert!(err.to_string().contains("frozen"), "{err}");
    assert_eq!(read(&mut k, model.params()), initial);
}

/// A gradient of norm 10 with max_grad_norm 1 is scaled to norm 1 (up to the 1e-6
/// in the clipping factor's denominator, and f32 rounding: 1e-5 relative); the
/// report gives the norm before clipping. The clipped gradient is read back from the
/// first moment, m = (1 - beta1) g after one step. A gradient under the limit is kept.
#[test]
fn clipping_scales_the_gradient_to_max_norm() {
    let mut k = CpuBackend::new();
    let mut model = tiny_model(&mut k);
    let n = model.params().len;
    let raw = Rng(11).vec(n, 1.0);
    let norm = raw
        .iter()
        .map(|&g| f64::from(g).powi(2))
        .sum::<f64>()
        .sqrt();

    for (target_norm, max_norm, clipped) in [(10.0, 1.0, true), (0.5, 1.0, false)] {
        let grads: Vec<f32> = raw
            .iter()
            .map(|&g| (f64::from(g) * target_norm / norm) as f32)
            .collect();
        k.write(model.grads(), &grads).unwrap();
        let mut opt = AdamW::new(&mut k, &model, config(1e-3, 0.0, Some(max_norm))).unwrap();
        let report = opt.update(&mut k, &mut model).unwrap();
        assert_eq!(report.clipped, clipped);
        assert!((f64::from(report.stats.grad_norm) - target_norm).abs() <= 1e-5 * target_norm);
        let (m, _) = opt.moments();
        let applied: Vec<f64> = read(&mut k, m)
            .iter()
            .map(|&m| f64::from(m) / 0.1)
            .collect();
        let applied_norm = applied.iter().map(|g| g * g).sum::<f64>().sqrt();
        let expected_norm = if clipped {
            f64::from(max_norm)
        } else {
            target_norm
        };
        assert!(
            (applied_norm - expected_norm).abs() <= 1e-5 * expected_norm,
            "applied norm {applied_norm}, expected {expected_norm}"
        );
        let scale = expected_norm / target_norm;
        for (&a, &g) in applied.iter().zip(&grads) {
            assert!((a - scale * f64::from(g)).abs() <= 1e-5 * (1.0 + a.abs()));
        }
        opt.free(&mut k).unwrap();
    }
}

/// A NaN or infinite gradient skips the step: parameters, moments and the step counter
/// stay as they were, the gradient is zeroed, and the report says so.
#[test]
fn a_non_finite_gradient_skips_the_step() {
    let mut k = CpuBackend::new();
    let mut model = tiny_model(&mut k);
    let n = model.params().len;
    let initial = Rng(3).vec(n, 1.0);
    k.write(model.params(), &initial).unwrap();
    let mut opt = AdamW::new(&mut k, &model, config(1e-2, 0.1, Some(1.0))).unwrap();
    for bad in [f32::NAN, f32::INFINITY] {
        let mut grads = Rng(4).vec(n, 1.0);
        grads[n / 2] = bad;
        k.write(model.grads(), &grads).unwrap();
        let report = opt.update(&mut k, &mut model).unwrap();
        assert!(report.skipped && !report.clipped);
        assert!(!report.stats.grad_norm.is_finite());
        assert_eq!(report.stats.learning_rate, 1e-2);
        assert_eq!(opt.step(), 0);
        assert_eq!(read(&mut k, model.params()), initial);
        let (m, v) = opt.moments();
        assert!(read(&mut k, m)
            .iter()
            .chain(&read(&mut k, v))
            .all(|&x| x == 0.0));
        assert!(read(&mut k, model.grads()).iter().all(|&g| g == 0.0));
    }
}

/// Restoring the moments and step counter into a fresh optimizer continues the run
/// exactly as the original would.
#[test]
fn moments_and_step_restore_the_optimizer() {
    let mut k = CpuBackend::new();
    let mut model = tiny_model(&mut k);
    let n = model.params().len;
    let mut rng = Rng(21);
    k.write(model.params(), &rng.vec(n, 1.0)).unwrap();
    let schedule = LrSchedule::WarmupCosine {
        peak_lr: 1e-2,
        min_lr: 1e-3,
        warmup_steps: 2,
        total_steps: 10,
    };
    let cfg = AdamWConfig {
        schedule,
        ..config(0.0, 0.1, Some(1.0))
    };
    let mut original = AdamW::new(&mut k, &model, cfg.clone()).unwrap();
    for _ in 0..3 {
        k.write(model.grads(), &rng.vec(n, 1.0)).unwrap();
        original.update(&mut k, &mut model).unwrap();
    }
    let (m, v) = original.moments();
    let saved = (read(&mut k, m), read(&mut k, v), original.step());
    let params = read(&mut k, model.params());

    let mut restored = AdamW::new(&mut k, &model, cfg).unwrap();
    let (rm, rv) = restored.moments();
    k.write(rm, &saved.0).unwrap();
    k.write(rv, &saved.1).unwrap();
    restored.set_step(saved.2);

    let grads = rng.vec(n, 1.0);
    let mut next = Vec::new();
    for opt in [&mut original, &mut restored] {
        k.write(model.params(), &params).unwrap();
        k.write(model.grads(), &grads).unwrap();
        let report = opt.update(&mut k, &mut model).unwrap();
        next.push((read(&mut k, model.params()), report));
    }
    assert_eq!(next[0], next[1]);
    assert_eq!(restored.step(), 4);
    assert_eq!(next[1].1.stats.learning_rate, schedule_at(3));
}

fn schedule_at(step: u64) -> f32 {
    LrSchedule::WarmupCosine {
        peak_lr: 1e-2,
        min_lr: 1e-3,
        warmup_steps: 2,
        total_steps: 10,
    }
    .learning_rate(step)
}

fn close(a: f32, b: f64) -> bool {
    (f64::from(a) - b).abs() <= 1e-6 * b.abs().max(1e-9)
}

/// Warmup 10 steps to 1e-3, cosine to 1e-5 at step 110: step 0 is a tenth of the peak,
/// warmup ends at the peak (steps 9 and 10), the midpoint of the decay (step 60) is
/// the mean of peak and floor, and the floor holds from step 110 on.
#[test]
fn warmup_cosine_values_at_key_steps() {
    let s = LrSchedule::WarmupCosine {
        peak_lr: 1e-3,
        min_lr: 1e-5,
        warmup_steps: 10,
        total_steps: 110,
    };
    s.validate().unwrap();
    let expected = [
        (0, 1e-4),
        (4, 5e-4),
        (9, 1e-3),
        (10, 1e-3),
        (
            35,
            1e-5 + (1e-3 - 1e-5) * 0.5 * (1.0 + (std::f64::consts::PI / 4.0).cos()),
        ),
        (60, (1e-3 + 1e-5) / 2.0),
        (110, 1e-5),
        (1_000_000, 1e-5),
    ];
    for (step, want) in expected {
        let got = s.learning_rate(step);
        assert!(close(got, want), "step {step}: {got} vs {want}");
    }
    let decay: Vec<f32> = (10..=110).map(|t| s.learning_rate(t)).collect();
    assert!(decay.windows(2).all(|w| w[1] <= w[0]));

    let no_warmup = LrSchedule::WarmupCosine {
        peak_lr: 2.0,
        min_lr: 0.0,
        warmup_steps: 0,
        total_steps: 4,
    };
    assert_eq!(no_warmup.learning_rate(0), 2.0);
    assert!(close(no_warmup.learning_rate(2), 1.0));
    assert_eq!(no_warmup.learning_rate(4), 0.0);
    let constant = LrSchedule::Constant { lr: 3e-4 };
    assert!([0, 1, 1_000]
        .iter()
        .all(|&t| constant.learning_rate(t) == 3e-4));
}

#[test]
fn schedules_and_configs_round_trip_through_json() {
    let parsed: LrSchedule = serde_json::from_str(r#"{"constant":{"lr":0.5}}"#).unwrap();
    assert_eq!(parsed, LrSchedule::Constant { lr: 0.5 });
    let cfg = AdamWConfig {
        schedule: LrSchedule::WarmupCosine {
            peak_lr: 1e-3,
            min_lr: 1e-5,
            warmup_steps: 10,
            total_steps: 110,
        },
        max_grad_norm: None,
        ..AdamWConfig::default()
    };
    let json = serde_json::to_string(&cfg).unwrap();
    assert!(json.contains(r#""schedule":{"warmup_cosine":{"#), "{json}");
    assert_eq!(serde_json::from_str::<AdamWConfig>(&json).unwrap(), cfg);
    let partial: AdamWConfig = serde_json::from_str(r#"{"weight_decay":0.1}"#).unwrap();
    assert_eq!(
        partial,
        AdamWConfig {
            weight_decay: 0.1,
            ..AdamWConfig::default()
        }
    );
}

#[test]
fn bad_hyper_parameters_are_named() {
    let mut k = CpuBackend::new();
    let model = tiny_model(&mut k);
    let bad = [
        (
            AdamWConfig {
                beta1: 1.0,
                ..AdamWConfig::default()
            },
            "beta1",
        ),
        (
            AdamWConfig {
                eps: 0.0,
                ..AdamWConfig::default()
            },
            "eps",
        ),
        (
            AdamWConfig {
                max_grad_norm: Some(f32::NAN),
                ..AdamWConfig::default()
            },
            "max_grad_norm",
        ),
        (
            AdamWConfig {
                schedule: LrSchedule::WarmupCosine {
                    peak_lr: 1e-3,
                    min_lr: 1e-2,
                    warmup_steps: 0,
                    total_steps: 5,
                },
                ..AdamWConfig::default()
            },
            "min_lr",
        ),
        (
            AdamWConfig {
                schedule: LrSchedule::WarmupCosine {
                    peak_lr: 1e-3,
                    min_lr: 0.0,
                    warmup_steps: 6,
                    total_steps: 5,
                },
                ..AdamWConfig::default()
            },
            "total_steps",
        ),
    ];
    for (cfg, field) in bad {
        match AdamW::new(&mut k, &model, cfg) {
            Err(OptimError::Config(e)) => {
                assert_eq!(e.field, field);
                assert!(e.to_string().contains(&format!("`{field}`")));
            }
            other => panic!("{field}: expected a config error, got {other:?}"),
        }
    }
}

/// An optimizer built for one model refuses a model with another parameter count.
#[test]
fn a_model_of_another_size_is_refused() {
    let mut k = CpuBackend::new();
    let model = tiny_model(&mut k);
    let mut opt = AdamW::new(&mut k, &model, AdamWConfig::default()).unwrap();
    let mut other = Transformer::new(
        &mut k,
        ModelConfig {
            num_hidden_layers: 2,
            ..model.config().clone()
        },
    )
    .unwrap();
    assert!(matches!(
        opt.update(&mut k, &mut other),
        Err(OptimError::SlabMismatch { .. })
    ));
}

/// `export_state` then `from_state` gives an optimizer whose next update equals the
/// original's; a state of another length is refused.
#[test]
fn exported_state_rebuilds_the_optimizer() {
    let mut k = CpuBackend::new();
    let mut model = tiny_model(&mut k);
    let n = model.params().len;
    let mut rng = Rng(33);
    k.write(model.params(), &rng.vec(n, 1.0)).unwrap();
    let mut original = AdamW::new(&mut k, &model, config(1e-2, 0.1, Some(1.0))).unwrap();
    for _ in 0..2 {
        k.write(model.grads(), &rng.vec(n, 1.0)).unwrap();
        original.update(&mut k, &mut model).unwrap();
    }
    let state = original.export_state(&mut k).unwrap();
    assert_eq!(state.step, 2);
    assert_eq!((state.m.len(), state.v.len()), (n, n));
    assert!(state.v.iter().all(|&v| v > 0.0));
    let mut rebuilt = AdamW::from_state(&mut k, &model, &state).unwrap();
    assert_eq!(rebuilt.export_state(&mut k).unwrap(), state);

    let params = read(&mut k, model.params());
    let grads = rng.vec(n, 1.0);
    let mut next = Vec::new();
    for opt in [&mut original, &mut rebuilt] {
        k.write(model.params(), &params).unwrap();
        k.write(model.grads(), &grads).unwrap();
        opt.update(&mut k, &mut model).unwrap();
        next.push(read(&mut k, model.params()));
    }
    assert_eq!(next[0], next[1]);
    assert_ne!(next[0], params);

    let short = AdamWState {
        m: state.m[1..].to_vec(),
        ..state
    };
    assert!(matches!(
        AdamW::from_state(&mut k, &model, &short),
        Err(OptimError::SlabMismatch { expected, got }) if expected == n - 1 && got == n
    ));
}
