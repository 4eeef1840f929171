//! Throughput of the transformer on the CPU backend: a training step (forward,
//! backward, AdamW) and batched greedy decoding with a KV cache, on the benchmark
//! configs of issue 3, and the 2048^3 f32 GEMM. Prints one JSON object per measurement, so that
//! `scripts/bench_vs_pytorch.py` can set it beside PyTorch; peak memory is the
//! process's high-water mark, so run one measurement per process for it to mean
//! anything.
//!
//! Run: `cargo run --release -p sage-examples --example transformer_bench -- train tiny`
//! (`train|decode`, `tiny|small`; optional `--steps N`), or `-- gemm` (GFLOP/s).

use std::error::Error;
use std::time::Instant;

use sage_backend_cpu::CpuBackend;
use sage_core::transformer::{
    AdamWStep, Kernels, KvCache, MatmulShape, ModelConfig, Tensor, Transformer,
};

/// The "small" benchmark model of issue 3: V 32000, D 768, I 2048, 12 layers, 12 heads,
/// 4 kv heads, tied embeddings.
fn small() -> ModelConfig {
    ModelConfig {
        vocab_size: 32_000,
        hidden_size: 768,
        intermediate_size: 2048,
        num_hidden_layers: 12,
        num_attention_heads: 12,
        num_key_value_heads: 4,
        ..ModelConfig::tiny()
    }
}

/// Deterministic pseudo-random values in [-scale, scale).
fn noise(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tokens(len: usize, vocab: usize, seed: u64) -> Vec<u32> {
    noise(len, seed, 1.0)
        .iter()
        .map(|x| ((x + 1.0) * 0.5 * vocab as f32) as u32 % vocab as u32)
        .collect()
}

/// A model with small random weights and unit norm weights.
fn random_model(k: &mut CpuBackend, config: ModelConfig) -> Result<Transformer, Box<dyn Error>> {
    let model = Transformer::new(k, config)?;
    let mut params = noise(model.params().len, 1, 0.02);
    let layout = model.layout();
    let norms = layout
        .layers
        .iter()
        .flat_map(|l| [l.input_norm, l.post_attention_norm])
        .chain([layout.final_norm]);
    for slot in norms {
        params[slot.offset..slot.offset + slot.len].fill(1.0);
    }
    k.write(model.params(), &params)?;
    Ok(model)
}

/// The process's peak resident memory in MiB (Linux), 0 when unknown.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Training: batch x seq tokens, forward + backward + AdamW, `steps` timed steps after
/// one warm-up step. Returns tokens per second.
fn train(
    config: ModelConfig,
    batch: usize,
    seq: usize,
    steps: usize,
) -> Result<f64, Box<dyn Error>> {
    let mut k = CpuBackend::new();
    let vocab = config.vocab_size;
    let mut model = random_model(&mut k, config)?;
    let n = batch * seq;
    let input = tokens(n, vocab, 2);
    let targets = tokens(n, vocab, 3);
    let starts: Vec<u32> = (0..=batch).map(|b| (b * seq) as u32).collect();
    let weights = vec![-1.0 / n as f32; n];
    let total = model.params().len;
    let m = Tensor::whole(k.alloc(total)?, total);
    let v = Tensor::whole(k.alloc(total)?, total);
    let mut step = |k: &mut CpuBackend, i: u32| -> Result<(), Box<dyn Error>> {
        model.zero_grads(k)?;
        model.forward(k, &input, &targets, &starts)?;
        model.backward(k, &weights)?;
        let hyper = AdamWStep {
            learning_rate: 1e-4,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            step: i,
        };
        k.adamw(model.params(), model.grads(), m, v, hyper)?;
        Ok(())
    };
    step(&mut k, 1)?;
    let start = Instant::now();
    for i in 0..steps {
        step(&mut k, i as u32 + 2)?;
    }
    Ok((n * steps) as f64 / start.elapsed().as_secs_f64())
}

/// Greedy decoding of `batch` sequences: a `prompt`-token prefill, then `new_tokens`
/// decoding steps. Returns generated tokens per second (prefill included in the time).
fn decode(
    config: ModelConfig,
    batch: usize,
    prompt: usize,
    new_tokens: usize,
) -> Result<f64, Box<dyn Error>> {
    let mut k = CpuBackend::new();
    let vocab = config.vocab_size;
    let mut model = random_model(&mut k, config)?;
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|b| tokens(prompt, vocab, 10 + b as u64))
        .collect();
    let prompt_refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let argmax = |row: &[f32]| {
        row.iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |best, (i, &x)| {
                if x > best.1 {
                    (i, x)
                } else {
                    best
                }
            })
            .0 as u32
    };
    let start = Instant::now();
    let mut cache = KvCache::new(&mut k, &model, batch, prompt + new_tokens)?;
    let mut logits = model.prefill(&mut k, &mut cache, &prompt_refs)?;
    for _ in 1..new_tokens {
        let next: Vec<u32> = logits.chunks(vocab).map(argmax).collect();
        logits = model.decode_step(&mut k, &mut cache, &next)?;
    }
    Ok((batch * new_tokens) as f64 / start.elapsed().as_secs_f64())
}

/// c[n, n] = a[n, n] · b[n, n]^T (a linear layer's layout), median of 5 runs after a
/// warm-up. Returns GFLOP/s.
fn gemm(n: usize) -> Result<f64, Box<dyn Error>> {
    let mut k = CpuBackend::new();
    let mut operand = |seed| -> Result<Tensor, Box<dyn Error>> {
        let t = Tensor::whole(k.alloc(n * n)?, n * n);
        k.write(t, &noise(n * n, seed, 1.0))?;
        Ok(t)
    };
    let (a, b, c) = (operand(1)?, operand(2)?, operand(3)?);
    let shape = MatmulShape {
        m: n,
        n,
        k: n,
        trans_a: false,
        trans_b: true,
        accumulate: false,
    };
    k.matmul(c, a, b, shape)?;
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        k.matmul(c, a, b, shape)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(2.0 * (n * n * n) as f64 / times[2] / 1e9)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map(String::as_str).unwrap_or("train");
    if what == "gemm" {
        let gflops = gemm(2048)?;
        println!("{{\"side\":\"sage-cpu\",\"what\":\"gemm\",\"config\":\"2048^3\",\"threads\":{},\"gflops\":{gflops:.1}}}", rayon::current_num_threads());
        return Ok(());
    }
    let name = args.get(1).map(String::as_str).unwrap_or("tiny");
    let steps = match args.iter().position(|a| a == "--steps") {
        Some(i) => args.get(i + 1).ok_or("--steps needs a number")?.parse()?,
        None => 3,
    };
    let (config, batch, seq) = match name {
        "tiny" => (ModelConfig::tiny(), 8, 512),
        "small" => (small(), 4, 256),
        other => return Err(format!("unknown config `{other}` (tiny, small)").into()),
    };
    let threads = rayon::current_num_threads();
    let (tokens_per_s, shape) = match what {
        "train" => (train(config, batch, seq, steps)?, format!("{batch}x{seq}")),
        "decode" => (
            decode(config, 8, 256, 128)?,
            "8 seqs, 256 prompt, 128 new".to_owned(),
        ),
        other => return Err(format!("unknown measurement `{other}` (train, decode)").into()),
    };
    println!(
        "{{\"side\":\"sage-cpu\",\"what\":\"{what}\",\"config\":\"{name}\",\"shape\":\"{shape}\",\"threads\":{threads},\"tokens_per_s\":{tokens_per_s:.1},\"peak_rss_mib\":{:.1}}}",
        peak_rss_mib()
    );
    Ok(())
}
