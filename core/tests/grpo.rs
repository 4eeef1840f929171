//! GRPO math: hand-computed advantages, clip branches and aggregation modes; finite
//! differences of an independent `f64` reference loss against the returned
//! coefficients; masking, the ratio clamp, and input validation.

use sage_core::grpo::{
    chain_advantages, group_advantages, policy_loss, weight_negative_advantages, GrpoConfig,
    GrpoError, GrpoStats, LossAggregation, TokenBatch,
};

/// Asserts `|a - b| <= tol * max(1, |b|)`.
fn close(a: f32, b: f32, tol: f32, what: &str) {
    assert!(
        (a - b).abs() <= tol * b.abs().max(1.0),
        "{what}: got {a}, expected {b}"
    );
}

/// A batch owning its slices.
#[derive(Clone, Debug)]
struct Batch {
    logp: Vec<f32>,
    logp_old: Vec<f32>,
    logp_ref: Option<Vec<f32>>,
    mask: Vec<bool>,
    seq_lens: Vec<usize>,
    advantages: Vec<f32>,
}

impl Batch {
    fn view(&self) -> TokenBatch<'_> {
        TokenBatch {
            logp: &self.logp,
            logp_old: &self.logp_old,
            logp_ref: self.logp_ref.as_deref(),
            mask: &self.mask,
            seq_lens: &self.seq_lens,
            advantages: &self.advantages,
        }
    }

    fn run(&self, config: &GrpoConfig) -> Result<(GrpoStats, Vec<f32>), GrpoError> {
        let mut coef = vec![f32::NAN; self.logp.len()];
        let stats = policy_loss(config, &self.view(), &mut coef)?;
        Ok((stats, coef))
    }
}

/// A batch of one unmasked token with ratio `ratio`, advantage `adv`, and reference
/// log-prob `logp + ref_offset` when given.
fn one_token(ratio: f32, adv: f32, ref_offset: Option<f32>) -> Batch {
    let logp = -1.0f32;
    Batch {
        logp: vec![logp],
        logp_old: vec![logp - ratio.ln()],
        logp_ref: ref_offset.map(|d| vec![logp + d]),
        mask: vec![true],
        seq_lens: vec![1],
        advantages: vec![adv],
    }
}

#[test]
fn defaults_match_sage() {
    let c = GrpoConfig::default();
    assert_eq!((c.clip_eps_low, c.clip_eps_high), (0.2, 0.2));
    assert_eq!(c.dual_clip, None);
    assert_eq!(c.kl_coef, 0.0);
    assert_eq!(c.aggregation, LossAggregation::SeqMeanTokenMean);
    assert!(!c.normalize_std);
    assert_eq!(c.negative_weight, 1.0);
    c.validate().unwrap();
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(serde_json::from_str::<GrpoConfig>(&json).unwrap(), c);
    let partial: GrpoConfig = serde_json::from_str(r#"{"dual_clip":3.0}"#).unwrap();
    assert_eq!(partial.dual_clip, Some(3.0));
    assert_eq!(partial.clip_eps_high, 0.2);
}

#[test]
fn advantages_hand_computed() {
    let mut out = [0.0; 4];
    group_advantages(&[0.0, 1.0, 2.0, 3.0], false, 1e-6, &mut out).unwrap();
    assert_eq!(out, [-1.5, -0.5, 0.5, 1.5]);
    // Population std of 0, 1, 2, 3 is sqrt(1.25).
    group_advantages(&[0.0, 1.0, 2.0, 3.0], true, 0.0, &mut out).unwrap();
    let s = 1.25f32.sqrt();
    for (a, e) in out.iter().zip([-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s]) {
        close(*a, e, 1e-6, "std-normalised advantage");
    }
    group_advantages(&[2.0, 0.0], true, 1.0, &mut out[..2]).unwrap();
    assert_eq!(&out[..2], &[0.5, -0.5]);
}

/// Only negative advantages are scaled: a group's successes keep their full weight.
#[test]
fn negative_advantages_are_weighted_and_positive_ones_kept() {
    let mut advantages = [1.5, -0.5, 0.0, -1.0, 0.25];
    weight_negative_advantages(&mut advantages, 0.25);
    assert_eq!(advantages, [1.5, -0.125, 0.0, -0.25, 0.25]);
    weight_negative_advantages(&mut advantages, 0.0);
    assert_eq!(advantages, [1.5, 0.0, 0.0, 0.0, 0.25]);
}

#[test]
fn advantages_of_degenerate_groups_are_zero() {
    let mut one = [9.0];
    group_advantages(&[0.7], true, 0.0, &mut one).unwrap();
    assert_eq!(one, [0.0]);
    for normalize in [false, true] {
        for eps in [0.0, 1e-6] {
            let mut out = [9.0; 8];
            group_advantages(&[0.3; 8], normalize, eps, &mut out).unwrap();
            assert_eq!(out, [0.0; 8]);
        }
    }
    let mut empty: [f32; 0] = [];
    group_advantages(&[], true, 0.0, &mut empty).unwrap();
}

#[test]
fn chain_advantages_group_by_chain_position() {
    // Two chains, G = 3 rollouts, K = 2 positions; layout [chain][rollout][position].
    let rewards = [
        1.0, 2.0, /**/ 0.0, 0.0, /**/ 0.5, 1.0, // chain 0
        -1.0, 0.0, /**/ -1.0, 0.0, /**/ -1.0, 3.0, // chain 1
    ];
    let mut out = [0.0; 12];
    chain_advantages(&rewards, 3, 2, false, 1e-6, &mut out).unwrap();
    // Chain 0: position 0 mean 0.5, position 1 mean 1. Chain 1: means -1 and 1.
    let expected = [
        0.5, 1.0, /**/ -0.5, -1.0, /**/ 0.0, 0.0, //
        0.0, -1.0, /**/ 0.0, -1.0, /**/ 0.0, 2.0,
    ];
    assert_eq!(out, expected);
    // K = 1 is a batch of plain groups.
    chain_advantages(&rewards, 6, 1, false, 0.0, &mut out).unwrap();
    let mut first = [0.0; 6];
    group_advantages(&rewards[..6], false, 0.0, &mut first).unwrap();
    assert_eq!(&out[..6], &first);
}

#[test]
fn advantage_inputs_are_validated() {
    let mut out = [0.0; 4];
    let r = [0.0, 1.0, 2.0, 3.0];
    assert!(matches!(
        group_advantages(&r, false, 0.0, &mut out[..3]),
        Err(GrpoError::LengthMismatch { .. })
    ));
    assert!(matches!(
        group_advantages(&[0.0, f32::NAN], false, 0.0, &mut out[..2]),
        Err(GrpoError::NonFinite { .. })
    ));
    assert!(matches!(
        group_advantages(&r, true, -1.0, &mut out),
        Err(GrpoError::InvalidConfig { .. })
    ));
    assert!(matches!(
        chain_advantages(&r, 3, 1, false, 0.0, &mut out),
        Err(GrpoError::LengthMismatch { .. })
    ));
    assert!(matches!(
        chain_advantages(&r, 0, 2, false, 0.0, &mut out),
        Err(GrpoError::InvalidConfig { .. })
    ));
    assert!(matches!(
        chain_advantages(&r, usize::MAX, 2, false, 0.0, &mut out),
        Err(GrpoError::InvalidConfig { .. })
    ));
}

/// (ratio, advantage, dual clip, loss, d loss / d logp, clipped, dual clipped)
type ClipCase = (f32, f32, Option<f32>, f32, f32, bool, bool);

#[test]
fn every_clip_branch_by_hand() {
    #[rustfmt::skip]
    let cases: [ClipCase; 12] = [
        (1.1, 1.0, None, -1.1, -1.1, false, false),     // A > 0, inside the clip range
        (1.5, 1.0, None, -1.2, 0.0, true, false),       // A > 0, above: clipped
        (0.5, 1.0, None, -0.5, -0.5, false, false),     // A > 0, below: min keeps ratio
        (0.5, -1.0, None, 0.8, 0.0, true, false),       // A < 0, below: clipped
        (1.5, -1.0, None, 1.5, 1.5, false, false),      // A < 0, above: min keeps ratio
        (0.9, -2.0, None, 1.8, 1.8, false, false),      // A < 0, inside
        (4.0, -1.0, Some(3.0), 3.0, 0.0, false, true),  // dual clip caps at c |A|
        (4.0, -0.5, Some(3.0), 1.5, 0.0, false, true),
        (2.0, -1.0, Some(3.0), 2.0, 2.0, false, false), // under the cap
        (0.5, -1.0, Some(3.0), 0.8, 0.0, true, false),
        (4.0, 1.0, Some(3.0), -1.2, 0.0, true, false),  // dual clip ignores A > 0
        (1.7, 0.0, None, 0.0, 0.0, false, false),       // A = 0
    ];
    for (ratio, adv, dual_clip, loss, grad, clipped, dual) in cases {
        let config = GrpoConfig {
            dual_clip,
            ..GrpoConfig::default()
        };
        let (stats, coef) = one_token(ratio, adv, None).run(&config).unwrap();
        let what = format!("ratio {ratio}, A {adv}, dual {dual_clip:?}");
        close(stats.loss, loss, 1e-6, &what);
        close(coef[0], grad, 1e-6, &what);
        close(stats.mean_ratio, ratio, 1e-6, &what);
        assert_eq!(stats.clip_fraction, f32::from(u8::from(clipped)), "{what}");
        assert_eq!(
            stats.dual_clip_fraction,
            f32::from(u8::from(dual)),
            "{what}"
        );
    }
}

#[test]
fn clip_higher() {
    let config = GrpoConfig {
        clip_eps_high: 0.28,
        ..GrpoConfig::default()
    };
    let (stats, coef) = one_token(1.25, 1.0, None).run(&config).unwrap();
    close(stats.loss, -1.25, 1e-6, "inside");
    close(coef[0], -1.25, 1e-6, "inside");
    let (stats, coef) = one_token(1.3, 1.0, None).run(&config).unwrap();
    close(stats.loss, -1.28, 1e-6, "above");
    assert_eq!(coef[0], 0.0);
    // The lower side still clips at 0.8.
    let (stats, coef) = one_token(0.7, -1.0, None).run(&config).unwrap();
    close(stats.loss, 0.8, 1e-6, "below");
    assert_eq!(coef[0], 0.0);
}

#[test]
fn k3_kl_to_reference_by_hand() {
    let config = GrpoConfig {
        kl_coef: 0.1,
        ..GrpoConfig::default()
    };
    let ln2 = core::f32::consts::LN_2;
    // d = ref - logp = -ln 2: k3 = 1/2 + ln 2 - 1, d k3 / d logp = 1 - 1/2.
    let (stats, coef) = one_token(1.0, 1.0, Some(-ln2)).run(&config).unwrap();
    let k3 = 0.5 + ln2 - 1.0;
    close(stats.ref_kl, k3, 1e-6, "k3");
    close(stats.loss, -1.0 + 0.1 * k3, 1e-6, "loss");
    close(coef[0], -1.0 + 0.1 * 0.5, 1e-6, "coef");
    // d = +ln 2: k3 = 2 - ln 2 - 1, d k3 / d logp = 1 - 2.
    let (stats, coef) = one_token(1.0, 1.0, Some(ln2)).run(&config).unwrap();
    close(stats.ref_kl, 1.0 - ln2, 1e-6, "k3");
    close(coef[0], -1.0 - 0.1, 1e-6, "coef");
    // Without a coefficient the reference is only reported.
    let (stats, coef) = one_token(1.0, 1.0, Some(ln2))
        .run(&GrpoConfig::default())
        .unwrap();
    close(stats.ref_kl, 1.0 - ln2, 1e-6, "k3 reported");
    close(coef[0], -1.0, 1e-6, "coef without KL");
    // A KL coefficient needs reference log-probs.
    assert_eq!(
        one_token(1.0, 1.0, None).run(&config).unwrap_err(),
        GrpoError::MissingReference
    );
}

#[test]
fn approx_kl_to_the_sampling_policy() {
    let (stats, _) = one_token(1.1, 1.0, None)
        .run(&GrpoConfig::default())
        .unwrap();
    close(stats.approx_kl, 0.1 - 1.1f32.ln(), 1e-5, "approx kl");
    let (stats, _) = one_token(1.0, 1.0, None)
        .run(&GrpoConfig::default())
        .unwrap();
    assert_eq!(stats.approx_kl, 0.0);
}

/// Three sequences at ratio 1, so token loss = -A: (A = 1, 3 of 4 tokens unmasked),
/// (A = -2, 1 of 3), (A = 5, none).
fn aggregation_batch() -> Batch {
    Batch {
        logp: vec![-0.5; 9],
        logp_old: vec![-0.5; 9],
        logp_ref: None,
        mask: vec![true, true, false, true, false, true, false, false, false],
        seq_lens: vec![4, 3, 2],
        advantages: vec![1.0, -2.0, 5.0],
    }
}

#[test]
fn every_aggregation_mode_by_hand() {
    // (mode, loss, coefficient of sequence 0's tokens, of sequence 1's token)
    let cases = [
        // N = 4 tokens: (3 * -1 + 2) / 4.
        (LossAggregation::TokenMean, -0.25, -0.25, 0.5),
        // S = 2 sequences: (mean(-1, -1, -1) + mean(2)) / 2.
        (LossAggregation::SeqMeanTokenMean, 0.5, -1.0 / 6.0, 1.0),
        // (sum(-1, -1, -1) + sum(2)) / 2.
        (LossAggregation::SeqMeanTokenSum, -0.5, -0.5, 1.0),
        // (-3 + 2) / (2 * L), L = 4.
        (LossAggregation::SeqMeanTokenSumNorm, -0.125, -0.125, 0.25),
    ];
    for (aggregation, loss, c0, c1) in cases {
        let config = GrpoConfig {
            aggregation,
            norm_length: 4,
            ..GrpoConfig::default()
        };
        let (stats, coef) = aggregation_batch().run(&config).unwrap();
        close(stats.loss, loss, 1e-6, &format!("{aggregation:?} loss"));
        let expected = [c0, c0, 0.0, c0, 0.0, c1, 0.0, 0.0, 0.0];
        for (t, (&got, want)) in coef.iter().zip(expected).enumerate() {
            close(got, want, 1e-6, &format!("{aggregation:?} coef {t}"));
        }
        assert_eq!((stats.tokens, stats.sequences), (4, 2));
        assert_eq!(stats.mean_ratio, 1.0);
    }
}

#[test]
fn masked_positions_are_ignored_and_get_exactly_zero() {
    let mut batch = aggregation_batch();
    for (t, m) in batch.mask.iter().enumerate() {
        if !m {
            batch.logp[t] = f32::NAN;
            batch.logp_old[t] = f32::INFINITY;
        }
    }
    let (stats, coef) = batch.run(&GrpoConfig::default()).unwrap();
    close(stats.loss, 0.5, 1e-6, "loss");
    for (t, m) in batch.mask.iter().enumerate() {
        if !m {
            assert_eq!(coef[t].to_bits(), 0, "coef {t}");
        }
    }
}

#[test]
fn empty_batches() {
    let batch = Batch {
        logp: vec![],
        logp_old: vec![],
        logp_ref: None,
        mask: vec![],
        seq_lens: vec![],
        advantages: vec![],
    };
    assert_eq!(
        batch.run(&GrpoConfig::default()).unwrap().0,
        GrpoStats::default()
    );
    let all_masked = Batch {
        mask: vec![false; 9],
        ..aggregation_batch()
    };
    let (stats, coef) = all_masked.run(&GrpoConfig::default()).unwrap();
    assert_eq!(stats, GrpoStats::default());
    assert!(coef.iter().all(|&c| c == 0.0));
}

#[test]
fn ratio_clamp_keeps_extreme_inputs_finite() {
    let config = GrpoConfig {
        kl_coef: 0.1,
        ..GrpoConfig::default()
    };
    let extremes = [
        (0.0, -1000.0, 0.0),
        (-1000.0, 0.0, 0.0),
        (f32::NEG_INFINITY, 0.0, 0.0),
        (0.0, f32::NEG_INFINITY, f32::NEG_INFINITY),
        (-1e30, -1e-30, 0.0),
        (0.0, 0.0, f32::NEG_INFINITY),
    ];
    for (logp, logp_old, logp_ref) in extremes {
        for adv in [-3.0, 0.0, 3.0] {
            let batch = Batch {
                logp: vec![logp],
                logp_old: vec![logp_old],
                logp_ref: Some(vec![logp_ref]),
                mask: vec![true],
                seq_lens: vec![1],
                advantages: vec![adv],
            };
            let (stats, coef) = batch.run(&config).unwrap();
            let what = format!("logp {logp}, old {logp_old}, ref {logp_ref}, A {adv}");
            assert!(stats.loss.is_finite(), "{what}: loss {}", stats.loss);
            assert!(coef[0].is_finite(), "{what}: coef {}", coef[0]);
            assert!(stats.mean_ratio <= 20f32.exp() * 1.0001, "{what}");
        }
    }
    // Beyond the clamp the ratio is constant, so its derivative is zero.
    let beyond = Batch {
        logp: vec![0.0],
        logp_old: vec![-1000.0],
        logp_ref: None,
        mask: vec![true],
        seq_lens: vec![1],
        advantages: vec![-1.0],
    };
    let (stats, coef) = beyond.run(&GrpoConfig::default()).unwrap();
    close(stats.loss, 20f32.exp(), 1e-5, "clamped loss");
    assert_eq!(coef[0], 0.0);
}

#[test]
fn nan_on_an_unmasked_token_is_an_error() {
    for (logp, logp_old) in [
        (f32::NAN, 0.0),
        (0.0, f32::NAN),
        (f32::NEG_INFINITY, f32::NEG_INFINITY),
    ] {
        let batch = Batch {
            logp: vec![logp, 0.0],
            logp_old: vec![logp_old, 0.0],
            logp_ref: None,
            mask: vec![true, true],
            seq_lens: vec![2],
            advantages: vec![1.0],
        };
        assert!(matches!(
            batch.run(&GrpoConfig::default()),
            Err(GrpoError::NonFinite { .. })
        ));
    }
}

#[test]
fn bad_shapes_and_configs_are_errors() {
    let good = aggregation_batch();
    let config = GrpoConfig::default();
    let mismatch = |b: &Batch| {
        assert!(
            matches!(b.run(&config), Err(GrpoError::LengthMismatch { .. })),
            "{b:?}"
        );
    };
    let mut b = good.clone();
    b.logp_old.pop();
    mismatch(&b);
    let mut b = good.clone();
    b.mask.push(true);
    mismatch(&b);
    let mut b = good.clone();
    b.logp_ref = Some(vec![0.0; 3]);
    mismatch(&b);
    let mut b = good.clone();
    b.seq_lens = vec![4, 3, 3];
    mismatch(&b);
    let mut b = good.clone();
    b.seq_lens = vec![usize::MAX, 10, 0];
    mismatch(&b);
    let mut b = good.clone();
    b.advantages.pop();
    mismatch(&b);
    let mut coef = vec![0.0; 8];
    assert!(matches!(
        policy_loss(&config, &good.view(), &mut coef),
        Err(GrpoError::LengthMismatch { what: "coef", .. })
    ));
    let mut b = good.clone();
    b.advantages[1] = f32::INFINITY;
    assert!(matches!(b.run(&config), Err(GrpoError::NonFinite { .. })));

    let bad_configs = [
        GrpoConfig {
            clip_eps_low: 1.5,
            ..config
        },
        GrpoConfig {
            clip_eps_high: f32::NAN,
            ..config
        },
        GrpoConfig {
            dual_clip: Some(1.0),
            ..config
        },
        GrpoConfig {
            kl_coef: -0.1,
            ..config
        },
        GrpoConfig {
            std_eps: f32::INFINITY,
            ..config
        },
        GrpoConfig {
            max_log_ratio: 100.0,
            ..config
        },
        GrpoConfig {
            max_log_ratio: 0.0,
            ..config
        },
        GrpoConfig {
            norm_length: 0,
            ..config
        },
        GrpoConfig {
            negative_weight: 1.5,
            ..config
        },
        GrpoConfig {
            negative_weight: f32::NAN,
            ..config
        },
    ];
    for bad in bad_configs {
        let err = good.run(&bad).unwrap_err();
        assert!(matches!(err, GrpoError::InvalidConfig { .. }), "{bad:?}");
        assert!(!err.to_string().is_empty());
    }
}

/// A small deterministic generator (xorshift64*), uniform in `[0, 1)`.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32
    }

    fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.uniform()
    }
}

fn random_batch(rng: &mut Rng, with_ref: bool) -> Batch {
    let seq_lens: Vec<usize> = (0..6)
        .map(|_| 1 + (rng.uniform() * 12.0) as usize)
        .collect();
    let n: usize = seq_lens.iter().sum();
    let logp_old: Vec<f32> = (0..n).map(|_| rng.range(-4.0, -0.01)).collect();
    let logp = logp_old.iter().map(|&o| o + rng.range(-0.8, 0.8)).collect();
    let logp_ref = with_ref.then(|| logp_old.iter().map(|&o| o + rng.range(-0.5, 0.5)).collect());
    Batch {
        logp,
        logp_old,
        logp_ref,
        mask: (0..n).map(|_| rng.uniform() < 0.7).collect(),
        seq_lens,
        advantages: (0..6).map(|_| rng.range(-2.0, 2.0)).collect(),
    }
}

/// The loss of `batch` with `logp` replaced, in `f64`, written from the definitions
/// independently of the library: collect each sequence's token losses, then combine.
fn reference_loss(config: &GrpoConfig, batch: &Batch, logp: &[f64]) -> f64 {
    let (low, high) = (
        1.0 - f64::from(config.clip_eps_low),
        1.0 + f64::from(config.clip_eps_high),
    );
    let mut per_seq: Vec<Vec<f64>> = Vec::new();
    let mut t = 0;
    for (&len, &adv) in batch.seq_lens.iter().zip(&batch.advantages) {
        let adv = f64::from(adv);
        let mut losses = Vec::new();
        for t in t..t + len {
            if !batch.mask[t] {
                continue;
            }
            let ratio = (logp[t] - f64::from(batch.logp_old[t])).exp();
            let mut loss = -(ratio * adv).min(ratio.clamp(low, high) * adv);
            if let (Some(c), true) = (config.dual_clip, adv < 0.0) {
                loss = loss.min(-f64::from(c) * adv);
            }
            if let Some(r) = &batch.logp_ref {
                let d = f64::from(r[t]) - logp[t];
                loss += f64::from(config.kl_coef) * (d.exp() - d - 1.0);
            }
            losses.push(loss);
        }
        per_seq.push(losses);
        t += len;
    }
    per_seq.retain(|l| !l.is_empty());
    let s = per_seq.len() as f64;
    let all: Vec<f64> = per_seq.iter().flatten().copied().collect();
    match config.aggregation {
        LossAggregation::TokenMean => all.iter().sum::<f64>() / all.len() as f64,
        LossAggregation::SeqMeanTokenMean => {
            per_seq
                .iter()
                .map(|l| l.iter().sum::<f64>() / l.len() as f64)
                .sum::<f64>()
                / s
        }
        LossAggregation::SeqMeanTokenSum => all.iter().sum::<f64>() / s,
        LossAggregation::SeqMeanTokenSumNorm => {
            all.iter().sum::<f64>() / (s * f64::from(config.norm_length))
        }
    }
}

/// Whether a token sits within `margin` of a kink of the loss (a clip or dual-clip
/// boundary), where the derivative is one-sided and finite differences straddle it.
fn near_kink(config: &GrpoConfig, logp: f32, logp_old: f32, margin: f64) -> bool {
    let ratio = (f64::from(logp) - f64::from(logp_old)).exp();
    let mut kinks = vec![
        1.0 - f64::from(config.clip_eps_low),
        1.0 + f64::from(config.clip_eps_high),
    ];
    kinks.extend(config.dual_clip.map(f64::from));
    kinks.iter().any(|k| (ratio - k).abs() < margin)
}

#[test]
fn finite_differences_of_a_reference_loss_match_the_coefficients() {
    // The library computes in f32; the reference in f64 with central differences
    // (h = 1e-6, truncation error ~1e-12). Agreement is required to 2e-6 absolute plus
    // 1e-4 relative: the f32 rounding of one coefficient.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    let mut clipped = 0.0;
    for aggregation in [
        LossAggregation::TokenMean,
        LossAggregation::SeqMeanTokenMean,
        LossAggregation::SeqMeanTokenSum,
        LossAggregation::SeqMeanTokenSumNorm,
    ] {
        for (dual_clip, kl_coef) in [(None, 0.0), (Some(1.6), 0.0), (Some(2.0), 0.3)] {
            let config = GrpoConfig {
                clip_eps_high: 0.28,
                dual_clip,
                kl_coef,
                aggregation,
                norm_length: 16,
                ..GrpoConfig::default()
            };
            for _ in 0..5 {
                let batch = random_batch(&mut rng, kl_coef > 0.0);
                let (stats, coef) = batch.run(&config).unwrap();
                let x: Vec<f64> = batch.logp.iter().map(|&v| f64::from(v)).collect();
                let reference = reference_loss(&config, &batch, &x);
                let what = format!("{config:?}");
                close(stats.loss, reference as f32, 1e-5, &what);
                clipped += stats.clip_fraction + stats.dual_clip_fraction;
                for t in 0..x.len() {
                    if !batch.mask[t] {
                        assert_eq!(coef[t], 0.0);
                        continue;
                    }
                    if near_kink(&config, batch.logp[t], batch.logp_old[t], 1e-4) {
                        continue;
                    }
                    let h = 1e-6;
                    let (mut plus, mut minus) = (x.clone(), x.clone());
                    plus[t] += h;
                    minus[t] -= h;
                    let fd = (reference_loss(&config, &batch, &plus)
                        - reference_loss(&config, &batch, &minus))
                        / (2.0 * h);
                    let err = (f64::from(coef[t]) - fd).abs();
                    assert!(
                        err <= 2e-6 + 1e-4 * fd.abs(),
                        "{what}: token {t}: coef {} vs fd {fd}",
                        coef[t]
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "only {checked} tokens checked");
    assert!(clipped > 1.0, "the random batches never clip");
}

#[test]
fn finite_differences_of_the_library_loss_itself() {
    // Direct check in f32 on one short sequence: h = 1e-2 keeps rounding (~1e-7 / h)
    // and truncation (~h^2) far below the 1e-3 tolerance. Includes tokens beyond the
    // ratio clamp (max_log_ratio = 1), whose coefficient must be 0.
    let config = GrpoConfig {
        max_log_ratio: 1.0,
        kl_coef: 0.2,
        clip_eps_low: 0.9,
        clip_eps_high: 5.0,
        ..GrpoConfig::default()
    };
    let base = Batch {
        logp: vec![-1.0, -0.3, -2.0, 0.0, -0.1],
        logp_old: vec![-1.2, -0.3, -0.5, -3.0, -0.5],
        logp_ref: Some(vec![-1.1, -0.4, -1.5, -0.2, -0.2]),
        mask: vec![true; 5],
        seq_lens: vec![5],
        advantages: vec![-0.7],
    };
    let (_, coef) = base.run(&config).unwrap();
    for (t, &c) in coef.iter().enumerate() {
        let h = 1e-2;
        let shifted = |d: f32| {
            let mut b = base.clone();
            b.logp[t] += d;
            b.run(&config).unwrap().0.loss
        };
        let fd = (shifted(h) - shifted(-h)) / (2.0 * h);
        assert!((fd - c).abs() < 1e-3, "token {t}: {c} vs {fd}");
    }
    // Token 3 is beyond the clamp: only its KL term has a derivative.
    close(
        coef[3],
        0.2 * (1.0 - (-0.2f32).exp()) / 5.0,
        1e-6,
        "clamped token",
    );
}
