//! GRPO math throughput: token coefficients of a realistic batch (64 sequences of 1500
//! positions, about 80% of them the model's own tokens in turn-sized spans, random
//! log-probs) and group advantages. Run with `cargo bench -p sage-core --bench grpo`.
//!
//! Two batches: off-policy (`logp != logp_old`, one `libm::expf` per unmasked token,
//! whose own cost is printed for reference) and on-policy (`logp == logp_old`, SAGE's
//! single update per batch of rollouts, where the ratio is exactly 1 and no `exp` runs).

#[path = "harness.rs"]
mod harness;

use std::hint::black_box;
use std::time::Duration;

use sage_core::grpo::{chain_advantages, policy_loss, GrpoConfig, LossAggregation, TokenBatch};

const SEQUENCES: usize = 64;
const POSITIONS: usize = 1500;
/// Target of the coefficient computation, per position.
const TARGET_NS_PER_TOKEN: f64 = 5.0;

/// A small deterministic generator (xorshift64*), uniform in `[0, 1)`.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A mask of agent turns (unmasked spans of 100-300 tokens) separated by observations
/// (masked spans of 25-75 tokens): about 80% unmasked.
fn turn_mask(rng: &mut Rng, len: usize) -> Vec<bool> {
    let mut mask = Vec::with_capacity(len);
    while mask.len() < len {
        let turn = 100 + (rng.uniform() * 200.0) as usize;
        let observation = 25 + (rng.uniform() * 50.0) as usize;
        mask.extend(std::iter::repeat_n(true, turn));
        mask.extend(std::iter::repeat_n(false, observation));
    }
    mask.truncate(len);
    mask
}

struct Data {
    logp: Vec<f32>,
    logp_old: Vec<f32>,
    logp_ref: Vec<f32>,
    mask: Vec<bool>,
    seq_lens: Vec<usize>,
    advantages: Vec<f32>,
}

fn data() -> Data {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let n = SEQUENCES * POSITIONS;
    // Sampled tokens are mostly likely ones: log-probs in (-3, 0]; the trained policy
    // moves a little (|logp - logp_old| < 0.3, some tokens clip).
    let logp_old: Vec<f32> = (0..n)
        .map(|_| -3.0 * rng.uniform() * rng.uniform())
        .collect();
    let logp = logp_old
        .iter()
        .map(|&o| o + 0.6 * rng.uniform() - 0.3)
        .collect();
    let logp_ref = logp_old
        .iter()
        .map(|&o| o + 0.2 * rng.uniform() - 0.1)
        .collect();
    let mask = (0..SEQUENCES)
        .flat_map(|_| turn_mask(&mut rng, POSITIONS))
        .collect();
    Data {
        logp,
        logp_old,
        logp_ref,
        mask,
        seq_lens: vec![POSITIONS; SEQUENCES],
        advantages: (0..SEQUENCES).map(|_| 2.0 * rng.uniform() - 1.0).collect(),
    }
}

fn bench_loss(name: &str, data: &Data, config: &GrpoConfig, with_ref: bool, on_policy: bool) {
    let batch = TokenBatch {
        logp: &data.logp,
        logp_old: if on_policy {
            &data.logp
        } else {
            &data.logp_old
        },
        logp_ref: with_ref.then_some(&data.logp_ref[..]),
        mask: &data.mask,
        seq_lens: &data.seq_lens,
        advantages: &data.advantages,
    };
    let mut coef = vec![0.0f32; data.logp.len()];
    let time = harness::median_time(
        || policy_loss(config, black_box(&batch), &mut coef).map(|s| s.loss),
        15,
        Duration::from_millis(50),
    );
    let ns = time.as_secs_f64() * 1e9 / data.logp.len() as f64;
    harness::report(
        name,
        ns,
        "ns/token",
        "<= 5 ns/token",
        ns <= TARGET_NS_PER_TOKEN,
    );
}

fn main() {
    let data = data();
    let unmasked = data.mask.iter().filter(|&&m| m).count();
    println!(
        "batch: {SEQUENCES} sequences x {POSITIONS} positions, {:.1}% unmasked",
        100.0 * unmasked as f64 / data.mask.len() as f64
    );
    let exps: Vec<f32> = data
        .logp
        .iter()
        .zip(&data.logp_old)
        .map(|(a, b)| a - b)
        .collect();
    let mut sink = vec![0.0f32; exps.len()];
    let time = harness::median_time(
        || {
            for (s, &x) in sink.iter_mut().zip(black_box(&exps)) {
                *s = libm::expf(x);
            }
        },
        15,
        Duration::from_millis(50),
    );
    println!(
        "libm::expf alone: {:.2} ns/call",
        time.as_secs_f64() * 1e9 / exps.len() as f64
    );
    harness::header();
    let defaults = GrpoConfig::default();
    bench_loss(
        "coefficients, SAGE defaults",
        &data,
        &defaults,
        false,
        false,
    );
    bench_loss(
        "coefficients, SAGE defaults, on-policy",
        &data,
        &defaults,
        false,
        true,
    );
    let full = GrpoConfig {
        clip_eps_high: 0.28,
        dual_clip: Some(3.0),
        kl_coef: 0.01,
        aggregation: LossAggregation::TokenMean,
        ..GrpoConfig::default()
    };
    bench_loss(
        "coefficients, clip-higher, dual clip, k3 KL",
        &data,
        &full,
        true,
        false,
    );

    // 256 chains x 8 rollouts x 2 positions.
    let mut rng = Rng(7);
    let rewards: Vec<f32> = (0..256 * 8 * 2).map(|_| 2.0 * rng.uniform()).collect();
    let mut out = vec![0.0f32; rewards.len()];
    for normalize in [false, true] {
        let time = harness::median_time(
            || chain_advantages(black_box(&rewards), 8, 2, normalize, 1e-6, &mut out),
            15,
            Duration::from_millis(20),
        );
        let ns = time.as_secs_f64() * 1e9 / rewards.len() as f64;
        let name = if normalize {
            "advantages, G = 8, K = 2, std-normalised"
        } else {
            "advantages, G = 8, K = 2"
        };
        harness::report(name, ns, "ns/reward", "<= 5 ns/reward", ns <= 5.0);
    }
}
