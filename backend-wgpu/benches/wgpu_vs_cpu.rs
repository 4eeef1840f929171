//! The wgpu backend beside the CPU backend, in one process: GEMM throughput on 512^3
//! and 1024^3 squares, and training throughput (forward, backward, gradient norm and
//! AdamW) of the "tiny" model (V 4096, D 256, I 768, 6 layers, 8 heads, 2 kv heads,
//! tied) on a batch of 2 sequences of 128 tokens. Each figure is the median of a few
//! timed runs; every wgpu run ends with a read, so it includes the wait for the GPU.
//!
//! Run: `cargo bench -p sage-backend-wgpu --bench wgpu_vs_cpu [-- gemm|training]` (the
//! optional word runs one part only).

use std::time::Instant;

use sage_backend_cpu::CpuBackend;
use sage_backend_wgpu::WgpuBackend;
use sage_transformer::{AdamWStep, Kernels, MatmulShape, ModelConfig, Tensor, Transformer};

/// Timed runs per figure; the median is reported.
const RUNS: usize = 5;

/// Sequences and tokens per sequence of the training batch.
const BATCH: (usize, usize) = (2, 128);

/// The median of `RUNS` calls of `f`, each returning the seconds it measured.
fn median(mut f: impl FnMut() -> f64) -> f64 {
    let mut times: Vec<f64> = (0..RUNS).map(|_| f()).collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

/// A tensor of `len` deterministic values in [-0.5, 0.5).
fn filled<K: Kernels>(k: &mut K, len: usize, seed: usize) -> Tensor {
    let data: Vec<f32> = (0..len)
        .map(|i| ((i * 7919 + seed) % 1999) as f32 / 1999.0 - 0.5)
        .collect();
    let tensor = Tensor::whole(k.alloc(len).expect("alloc"), len);
    k.write(tensor, &data).expect("write");
    tensor
}

/// GFLOP/s of `c = a · b` on an `n^3` square: `reps` products then a one-element read.
fn gemm<K: Kernels>(k: &mut K, n: usize, reps: usize) -> f64 {
    let shape = MatmulShape {
        m: n,
        n,
        k: n,
        trans_a: false,
        trans_b: false,
        accumulate: false,
    };
    let (a, b, c) = (
        filled(k, n * n, 1),
        filled(k, n * n, 2),
        filled(k, n * n, 3),
    );
    let mut run = |reps: usize| {
        let start = Instant::now();
        for _ in 0..reps {
            k.matmul(c, a, b, shape).expect("matmul");
        }
        k.read(c.slice(0, 1), &mut [0.0]).expect("read");
        start.elapsed().as_secs_f64() / reps as f64
    };
    run(1);
    let seconds = median(|| run(reps));
    for t in [a, b, c] {
        k.free(t.buffer).expect("free");
    }
    2.0 * (n * n * n) as f64 / seconds / 1e9
}

/// Tokens per second of training steps of the tiny model on a 2 x 128 batch.
fn training<K: Kernels>(k: &mut K) -> f64 {
    let config = ModelConfig::tiny();
    let mut model = Transformer::new(k, config.clone()).expect("model");
    let total = model.params().len;
    let data: Vec<f32> = (0..total)
        .map(|i| ((i * 7919) % 1999) as f32 / 1999.0 * 0.04 - 0.02)
        .collect();
    k.write(model.params(), &data).expect("params");
    let layout = model.layout().clone();
    let norms = layout
        .layers
        .iter()
        .flat_map(|l| [l.input_norm, l.post_attention_norm])
        .chain([layout.final_norm]);
    for slot in norms {
        let t = model.params().slice(slot.offset, slot.len);
        k.fill(t, 1.0).expect("norms");
    }
    let (m, v) = (
        Tensor::whole(k.alloc(total).expect("m"), total),
        Tensor::whole(k.alloc(total).expect("v"), total),
    );
    let (sequences, length) = BATCH;
    let n = sequences * length;
    let tokens: Vec<u32> = (0..n)
        .map(|i| ((i * 31 + 7) % config.vocab_size) as u32)
        .collect();
    let targets: Vec<u32> = (0..n)
        .map(|i| ((i * 17 + 3) % config.vocab_size) as u32)
        .collect();
    let starts: Vec<u32> = (0..=sequences).map(|s| (s * length) as u32).collect();
    let weights = vec![-1.0 / n as f32; n];
    let mut step_number = 0;
    let mut step = || {
        step_number += 1;
        let start = Instant::now();
        model.zero_grads(k).expect("zero");
        model
            .forward(k, &tokens, &targets, &starts)
            .expect("forward");
        model.backward(k, &weights).expect("backward");
        let norm = k.sum_squares(model.grads()).expect("norm").sqrt();
        let hyper = AdamWStep {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            step: step_number,
        };
        k.adamw(model.params(), model.grads(), m, v, hyper)
            .expect("adamw");
        assert!(norm.is_finite());
        start.elapsed().as_secs_f64()
    };
    step();
    n as f64 / median(step)
}

fn main() {
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runs = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    let mut gpu = match WgpuBackend::new() {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no wgpu adapter, nothing to compare: {e}");
            return;
        }
    };
    let mut cpu = CpuBackend::new();
    println!("wgpu adapter: {}", gpu.description());
    println!(
        "CPU threads: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!();
    println!("| benchmark                                 |        cpu |       wgpu |");
    println!("|-------------------------------------------|------------|------------|");
    let gemms = if runs("gemm") {
        &[(512, 4), (1024, 1)][..]
    } else {
        &[]
    };
    for &(n, reps) in gemms {
        let (c, g) = (gemm(&mut cpu, n, reps), gemm(&mut gpu, n, reps));
        let label = format!("GEMM {n}^3 (GFLOP/s)");
        println!("| {label:<41} | {c:>10.2} | {g:>10.2} |");
    }
    if runs("training") {
        let submissions = gpu.submissions();
        let (c, g) = (training(&mut cpu), training(&mut gpu));
        println!("| training tiny, 2 x 128 tokens (tokens/s)  | {c:>10.1} | {g:>10.1} |");
        println!();
        println!(
            "wgpu submissions during the training runs: {} over {} steps",
            gpu.submissions() - submissions,
            RUNS + 1
        );
    }
}
