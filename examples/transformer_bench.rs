//! Throughput of the transformer: a training step (forward, backward, AdamW) and batched
//! greedy decoding with a KV cache, on the benchmark configs of issue 3 (CPU) and a
//! Qwen2.5-0.5B-shaped config (issue 8, CUDA), and the 2048^3 f32 GEMM. Prints one JSON
//! object per measurement, so that `scripts/bench_vs_pytorch.py` (CPU) and
//! `scripts/bench_cuda.sh` (GPU) can set it beside PyTorch; peak memory is the process's
//! host high-water mark, so run one measurement per process for it to mean anything.
//!
//! Run: `cargo run --release -p sage-examples --example transformer_bench -- train tiny`
//! (`train|decode|continue|groups|choose`, `tiny|small|smollm2|qwen0.5b`; optional `--steps N`,
//! `--batch B --seq S` for training and `--lora R` to train rank-R adapters on every
//! projection instead of every weight, `--seqs B --prompt P --new T` for decoding (for
//! `continue`: B sequences holding P tokens prefill T more, timed against a whole prefill
//! of P + T in the same process; for `groups`: a GRPO step's first turn, B prompts in
//! groups of `--group G` identical ones opening with `--system S` common tokens, generated
//! with held caches, which prefill the shared prefixes once, against without; for
//! `choose`: token choices a second over `--seqs` rows of the vocabulary's logits at
//! `--temperature T`, 1 by default), with
//! `--prefill-tokens N` the most prompt tokens the prefill runs at once and `--weights
//! frozen|trainable` the model's weights frozen for inference, as `sage eval` loads them (the default), or
//! trainable), or `-- gemm` (GFLOP/s). On the CPU, `--precision f32|bf16` (f32 by
//! default; bf16: the products of more than 32 rows multiply bf16-rounded operands). With
//! `--features cuda`, `--backend cuda` runs on GPU 0 (`--precision f32|bf16`, bf16 by
//! default there: bf16 GEMM operands, f32 everything else; `--bf16-inputs
//! copies|casts|converted`: bf16 copies of the operands, written by the kernels that make
//! them where they can (the default), or all made by cast kernels, or none, cuBLAS
//! rounding the f32 operands itself; `--step-graphs on|off`: decoding steps replayed from CUDA
//! graphs, on by default in bf16, or run as ordinary launches; `--dkv-tile 16|32`: the
//! queries per tile of the dk/dv attention kernel for heads of at most 64; `--rope-append
//! fused|separate`: a decoding step's biases, rotations and cache append as one kernel
//! (the default) or as the separate calls; `--batched-gemms on|off`: a layer's k/v and
//! gate/up projections as one strided batched GEMM each where the weights allow (the
//! default) or one GEMM each).
#![forbid(unsafe_code)]

use std::error::Error;
use std::time::Instant;

use sage_backend_cpu::{CpuBackend, Precision as CpuPrecision};
use sage_transformer::{
    AdamWStep, AdapterLayout, Kernels, KvCache, LoraConfig, MatmulShape, ModelConfig, Projection,
    Tensor, Transformer, DEFAULT_PREFILL_TOKENS,
};

/// A backend's error, as the benchmark's.
type BenchResult<T> = Result<T, Box<dyn Error>>;

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

/// Qwen2.5-0.5B's shape: V 151936, D 896, I 4864, 24 layers, 14 heads of 64, 2 kv
/// heads, tied embeddings, q/k/v bias, theta 1e6.
fn qwen05() -> ModelConfig {
    ModelConfig {
        vocab_size: 151_936,
        hidden_size: 896,
        intermediate_size: 4864,
        num_hidden_layers: 24,
        num_attention_heads: 14,
        num_key_value_heads: 2,
        rope_theta: 1_000_000.0,
        max_position_embeddings: 32_768,
        ..ModelConfig::tiny()
    }
}

/// SmolLM2-135M's shape (Llama): V 49152, D 576, I 1536, 30 layers, 9 heads of 64, 3 kv
/// heads, tied embeddings, no q/k/v bias, theta 1e5.
fn smollm2() -> ModelConfig {
    ModelConfig {
        vocab_size: 49_152,
        hidden_size: 576,
        intermediate_size: 1536,
        num_hidden_layers: 30,
        num_attention_heads: 9,
        num_key_value_heads: 3,
        rope_theta: 100_000.0,
        max_position_embeddings: 8192,
        qkv_bias: false,
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

/// A model with small random weights and unit norm weights, trainable or frozen for
/// inference.
fn random_model<K: Kernels>(
    k: &mut K,
    config: ModelConfig,
    frozen: bool,
) -> BenchResult<Transformer>
where
    K::Error: Error + 'static,
{
    let model = if frozen {
        Transformer::new_frozen(k, config)?
    } else {
        Transformer::new(k, config)?
    };
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

/// Waits for the backend's queued work: a read returns only once everything before it
/// has run (a GPU backend queues work asynchronously). `probe` is any readable tensor
/// (frozen weights are not).
fn settle<K: Kernels>(k: &mut K, probe: Tensor) -> BenchResult<()>
where
    K::Error: Error + 'static,
{
    k.read(probe.slice(0, 1), &mut [0.0])?;
    Ok(())
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
/// one warm-up step, with `timed` called between them. Returns tokens per second.
fn train<K: Kernels>(k: &mut K, r: &Request, timed: &mut Marker) -> BenchResult<f64>
where
    K::Error: Error + 'static,
{
    let (batch, seq, steps) = (r.batch, r.seq, r.steps);
    let vocab = r.config.vocab_size;
    let mut model = random_model(k, r.config.clone(), false)?;
    if r.lora_rank > 0 {
        // Adapters on every projection, as `[sft.lora]` puts them by default.
        let lora = LoraConfig {
            rank: r.lora_rank,
            alpha: 2.0 * r.lora_rank as f32,
            targets: Projection::ALL.to_vec(),
        };
        let initial = noise(AdapterLayout::new(model.layout(), &lora).total, 4, 0.02);
        model.enable_lora(k, lora, &initial)?;
    }
    let n = batch * seq;
    let input = tokens(n, vocab, 2);
    let targets = tokens(n, vocab, 3);
    let starts: Vec<u32> = (0..=batch).map(|b| (b * seq) as u32).collect();
    let weights = vec![-1.0 / n as f32; n];
    let total = model.trainable().0.len;
    let probe = model.params();
    let m = Tensor::whole(k.alloc(total)?, total);
    let v = Tensor::whole(k.alloc(total)?, total);
    let mut step = |k: &mut K, i: u32| -> BenchResult<()> {
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
        let (params, grads) = model.trainable();
        k.adamw(params, grads, m, v, hyper)?;
        model.merge_adapters(k)?;
        Ok(())
    };
    step(k, 1)?;
    settle(k, probe)?;
    timed()?;
    let start = Instant::now();
    for i in 0..steps {
        step(k, i as u32 + 2)?;
    }
    settle(k, probe)?;
    Ok((n * steps) as f64 / start.elapsed().as_secs_f64())
}

/// Greedy decoding of `batch` sequences: a `prompt`-token prefill, then `new_tokens`
/// decoding steps, each token picked on the backend as the trainer's generation picks
/// it (`decode_step_choosing`: only the choices are copied back, not the logits), with
/// `steps` called between the prefill and the steps. Returns generated tokens per second
/// (prefill included in the time) and the mean milliseconds of a decoding step after the
/// prefill.
fn decode<K: Kernels>(k: &mut K, r: &Request, steps: &mut Marker) -> BenchResult<(f64, f64)>
where
    K::Error: Error + 'static,
{
    let (batch, prompt, new_tokens) = (r.seqs, r.prompt, r.new_tokens);
    let vocab = r.config.vocab_size;
    let mut model = random_model(k, r.config.clone(), r.frozen)?;
    let probe = Tensor::whole(k.alloc(1)?, 1);
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|b| tokens(prompt, vocab, 10 + b as u64))
        .collect();
    let prompt_refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    settle(k, probe)?;
    let start = Instant::now();
    let mut cache = KvCache::new(k, &model, batch, prompt + new_tokens)?;
    cache.set_prefill_tokens(r.prefill_tokens);
    let mut choices = model.prefill_choosing(k, &mut cache, &prompt_refs, 0.0, &[])?;
    steps()?;
    let decoding = Instant::now();
    for _ in 1..new_tokens {
        let next = choices
            .iter()
            .map(|choice| choice.map(|c| c.token))
            .collect::<Option<Vec<u32>>>()
            .ok_or("logits that are not finite")?;
        choices = model.decode_step_choosing(k, &mut cache, &next, 0.0, &[])?;
    }
    // Every step read its choices back, so the steps are finished here.
    let step_ms =
        1e3 * decoding.elapsed().as_secs_f64() / new_tokens.saturating_sub(1).max(1) as f64;
    let tokens_per_s = (batch * new_tokens) as f64 / start.elapsed().as_secs_f64();
    Ok((tokens_per_s, step_ms))
}

/// A prefill continued from caches against a whole one, in the same process: `seqs`
/// sequences whose caches hold their first `prompt` tokens prefill `new` more
/// (`Transformer::prefill_rest_choosing`, the first token picked as generation does),
/// and the same sequences of `prompt + new` tokens prefill whole into a fresh cache.
/// Returns the milliseconds of each (whole, continued); the continued one's caches are
/// filled before its clock starts.
fn continued<K: Kernels>(k: &mut K, r: &Request) -> BenchResult<(f64, f64)>
where
    K::Error: Error + 'static,
{
    let (batch, held, new_tokens) = (r.seqs, r.prompt, r.new_tokens);
    let mut model = random_model(k, r.config.clone(), r.frozen)?;
    let probe = Tensor::whole(k.alloc(1)?, 1);
    let chats: Vec<Vec<u32>> = (0..batch)
        .map(|b| tokens(held + new_tokens, r.config.vocab_size, 10 + b as u64))
        .collect();
    let whole: Vec<&[u32]> = chats.iter().map(Vec::as_slice).collect();
    let heads: Vec<&[u32]> = chats.iter().map(|c| &c[..held]).collect();
    let mut time = |prefilled: Option<&[&[u32]]>| -> BenchResult<f64> {
        let mut cache = KvCache::new(k, &model, batch, held + new_tokens)?;
        cache.set_prefill_tokens(r.prefill_tokens);
        if let Some(heads) = prefilled {
            model.prefill_choosing(k, &mut cache, heads, 0.0, &[])?;
        }
        settle(k, probe)?;
        let start = Instant::now();
        // The choices are read back, so the prefill has finished when this returns.
        model.prefill_rest_choosing(k, &mut cache, &whole, 0.0, &[])?;
        let ms = 1e3 * start.elapsed().as_secs_f64();
        cache.free(k)?;
        Ok(ms)
    };
    let whole_ms = time(None)?;
    let continued_ms = time(Some(&heads))?;
    Ok((whole_ms, continued_ms))
}

/// The first turn of a GRPO step: `r.seqs` prompts of `r.prompt` tokens in groups of
/// `r.group` identical ones (one task's rollouts), every group opening with the same
/// `r.system` tokens, greedily extended by `r.new_tokens`; timed without held caches
/// (every prompt prefilled whole) and with them (the shared prefixes prefilled once).
/// Returns both times in ms and the prompt tokens each ran through the model.
fn shared_groups<K: Kernels>(k: &mut K, r: &Request) -> BenchResult<[f64; 4]>
where
    K::Error: Error + 'static,
{
    use sage_core::policy::SamplingParams;
    use sage_trainer::sampling::{generate_holding, HeldCaches, DEFAULT_HELD_TOKENS};
    let (group, system) = (r.group, r.system);
    if group == 0 || system >= r.prompt {
        return Err("--group must be positive and --system under --prompt".into());
    }
    let mut model = random_model(k, r.config.clone(), r.frozen)?;
    let vocab = r.config.vocab_size;
    let opening = tokens(system, vocab, 3);
    let tasks: Vec<Vec<u32>> = (0..r.seqs.div_ceil(group))
        .map(|t| {
            [
                opening.as_slice(),
                &tokens(r.prompt - system, vocab, 20 + t as u64),
            ]
            .concat()
        })
        .collect();
    let prompts: Vec<&[u32]> = (0..r.seqs).map(|i| tasks[i / group].as_slice()).collect();
    let params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: r.new_tokens as u32,
        ..SamplingParams::default()
    };
    let mut time = |budget: usize| -> BenchResult<(f64, u64)> {
        let mut held = HeldCaches::new(budget);
        let start = Instant::now();
        generate_holding(k, &mut model, &mut held, &prompts, &params)?;
        let ms = 1e3 * start.elapsed().as_secs_f64();
        held.free(k)?;
        let reuse = held.reuse();
        let prefilled = match budget {
            0 => (r.seqs * r.prompt) as u64,
            _ => reuse.prefilled_tokens(),
        };
        Ok((ms, prefilled))
    };
    let (whole_ms, whole_tokens) = time(0)?;
    let (shared_ms, shared_tokens) = time(DEFAULT_HELD_TOKENS)?;
    Ok([
        whole_ms,
        shared_ms,
        whole_tokens as f64,
        shared_tokens as f64,
    ])
}

/// c[n, n] = a[n, n] · b[n, n]^T (a linear layer's layout), median of 5 runs after a
/// warm-up. Returns GFLOP/s.
fn gemm<K: Kernels>(k: &mut K, n: usize) -> BenchResult<f64>
where
    K::Error: Error + 'static,
{
    let mut operand = |seed| -> BenchResult<Tensor> {
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
        settle(k, c)?;
        let start = Instant::now();
        k.matmul(c, a, b, shape)?;
        settle(k, c)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(2.0 * (n * n * n) as f64 / times[2] / 1e9)
}

/// The value after `flag` in `args`, parsed, or `default`.
fn option<T: std::str::FromStr>(args: &[String], flag: &str, default: T) -> BenchResult<T>
where
    T::Err: Error + 'static,
{
    match args.iter().position(|a| a == flag) {
        Some(i) => Ok(args
            .get(i + 1)
            .ok_or_else(|| format!("{flag} needs a value"))?
            .parse()?),
        None => Ok(default),
    }
}

/// Token choices a second: `rows` rows of `vocab` random logits picked on the backend
/// at `temperature` (`Kernels::choose_tokens`, as every decoding step of a rollout or an
/// evaluation picks its tokens); the median of five calls.
fn choose<K: Kernels>(k: &mut K, rows: usize, vocab: usize, temperature: f32) -> BenchResult<f64>
where
    K::Error: Error + 'static,
{
    let logits = Tensor::whole(k.alloc(rows * vocab)?, rows * vocab);
    k.write(logits, &noise(rows * vocab, 7, 8.0))?;
    let choices = Tensor::whole(k.alloc(2 * rows)?, 2 * rows);
    let uniforms: Vec<f64> = (0..rows).map(|b| (b as f64 + 0.5) / rows as f64).collect();
    let mut times = Vec::new();
    for _ in 0..5 {
        settle(k, choices)?;
        let start = Instant::now();
        k.choose_tokens(choices, logits, &uniforms, temperature)?;
        settle(k, choices)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(rows as f64 / times[2])
}

/// What to measure, parsed from the command line.
struct Request {
    what: String,
    name: String,
    config: ModelConfig,
    steps: usize,
    /// Training batch and sequence length.
    batch: usize,
    seq: usize,
    /// Training: the rank of adapters trained instead of every weight (0: none).
    lora_rank: usize,
    /// Decoding: sequences, prompt tokens, new tokens, and the most prompt tokens the
    /// prefill runs through the layers at once.
    seqs: usize,
    prompt: usize,
    new_tokens: usize,
    prefill_tokens: usize,
    /// Groups: identical prompts to a group, and tokens every prompt opens with.
    group: usize,
    system: usize,
    /// Decoding: the model's weights frozen for inference (`Transformer::new_frozen`, as
    /// `sage eval` and `sage generate` load them) rather than trainable.
    frozen: bool,
    /// Token choice: the temperature (0: greedy).
    temperature: f32,
}

/// Called where a measurement's profiled part begins (after training's warm-up step,
/// after decoding's prefill): the CUDA backend starts an attached profiler there.
type Marker<'a> = dyn FnMut() -> BenchResult<()> + 'a;

/// Runs the request on backend `k` and returns the fields of its JSON line (without the
/// braces, so that a backend can add its own); `side` names the backend; `profiled`
/// marks where the part worth profiling begins.
fn measure<K: Kernels>(
    k: &mut K,
    side: &str,
    threads: usize,
    r: Request,
    profiled: &mut Marker,
) -> BenchResult<String>
where
    K::Error: Error + 'static,
{
    if r.what == "gemm" {
        let gflops = gemm(k, 2048)?;
        return Ok(format!("\"side\":\"{side}\",\"what\":\"gemm\",\"config\":\"2048^3\",\"threads\":{threads},\"gflops\":{gflops:.1}"));
    }
    let (tokens_per_s, shape, extra) = match r.what.as_str() {
        "train" => (
            train(k, &r, profiled)?,
            match r.lora_rank {
                0 => format!("{}x{}", r.batch, r.seq),
                rank => format!("{}x{}, LoRA rank {rank}", r.batch, r.seq),
            },
            String::new(),
        ),
        "decode" => {
            let (tokens_per_s, step_ms) = decode(k, &r, profiled)?;
            let shape = format!(
                "{} seqs, {} prompt, {} new, {} weights",
                r.seqs,
                r.prompt,
                r.new_tokens,
                if r.frozen { "frozen" } else { "trainable" }
            );
            (
                tokens_per_s,
                shape,
                format!(",\"decode_step_ms\":{step_ms:.2}"),
            )
        }
        "continue" => {
            let (whole_ms, continued_ms) = continued(k, &r)?;
            let shape = format!("{} seqs, {} held, {} new", r.seqs, r.prompt, r.new_tokens);
            (
                (r.seqs * r.new_tokens) as f64 / (continued_ms / 1e3),
                shape,
                format!(",\"whole_prefill_ms\":{whole_ms:.1},\"continued_prefill_ms\":{continued_ms:.1}"),
            )
        }
        "groups" => {
            let [whole_ms, shared_ms, whole_tokens, shared_tokens] = shared_groups(k, &r)?;
            let shape = format!(
                "{} seqs in groups of {}, {} prompt ({} common to all), {} new",
                r.seqs, r.group, r.prompt, r.system, r.new_tokens
            );
            (
                (r.seqs * r.new_tokens) as f64 / (shared_ms / 1e3),
                shape,
                format!(",\"whole_ms\":{whole_ms:.1},\"shared_ms\":{shared_ms:.1},\"whole_prefilled_tokens\":{whole_tokens},\"shared_prefilled_tokens\":{shared_tokens}"),
            )
        }
        "choose" => (
            choose(k, r.seqs, r.config.vocab_size, r.temperature)?,
            format!(
                "{} rows of {} logits, temperature {}",
                r.seqs, r.config.vocab_size, r.temperature
            ),
            String::new(),
        ),
        other => {
            return Err(format!(
                "unknown measurement `{other}` (train, decode, continue, groups, choose, gemm)"
            )
            .into())
        }
    };
    Ok(format!(
        "\"side\":\"{side}\",\"what\":\"{}\",\"config\":\"{}\",\"shape\":\"{shape}\",\"threads\":{threads},\"tokens_per_s\":{tokens_per_s:.1}{extra},\"peak_rss_mib\":{:.1}",
        r.what,
        r.name,
        peak_rss_mib()
    ))
}

fn main() -> BenchResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().cloned().unwrap_or_else(|| "train".to_owned());
    let name = match args.get(1) {
        Some(n) if !n.starts_with("--") && what != "gemm" => n.clone(),
        _ => "tiny".to_owned(),
    };
    let (config, batch, seq, seqs, prompt, new_tokens) = match name.as_str() {
        "tiny" => (ModelConfig::tiny(), 8, 512, 8, 256, 128),
        "small" => (small(), 4, 256, 8, 256, 128),
        "smollm2" => (smollm2(), 1, 1024, 8, 256, 128),
        "qwen0.5b" => (qwen05(), 8, 1024, 64, 512, 256),
        other => {
            return Err(format!("unknown config `{other}` (tiny, small, smollm2, qwen0.5b)").into())
        }
    };
    let request = Request {
        what,
        name,
        config,
        steps: option(&args, "--steps", 3)?,
        batch: option(&args, "--batch", batch)?,
        seq: option(&args, "--seq", seq)?,
        lora_rank: option(&args, "--lora", 0)?,
        seqs: option(&args, "--seqs", seqs)?,
        prompt: option(&args, "--prompt", prompt)?,
        new_tokens: option(&args, "--new", new_tokens)?,
        prefill_tokens: option(&args, "--prefill-tokens", DEFAULT_PREFILL_TOKENS)?,
        group: option(&args, "--group", 8)?,
        system: option(&args, "--system", 442)?,
        frozen: match option(&args, "--weights", "frozen".to_owned())?.as_str() {
            "frozen" => true,
            "trainable" => false,
            other => return Err(format!("unknown --weights `{other}` (frozen, trainable)").into()),
        },
        temperature: option(&args, "--temperature", 1.0)?,
    };
    let threads = rayon::current_num_threads();
    let backend: String = option(&args, "--backend", "cpu".to_owned())?;
    match backend.as_str() {
        "cpu" => {
            let (precision, side) = match option(&args, "--precision", "f32".to_owned())?.as_str() {
                "f32" => (CpuPrecision::F32, "sage-cpu"),
                "bf16" => (CpuPrecision::Bf16, "sage-cpu-bf16"),
                other => return Err(format!("unknown precision `{other}` (f32, bf16)").into()),
            };
            // On a thread of rayon's pool, as `sage` runs its commands (docs/backends.md).
            let fields = rayon::scope(|_| {
                measure(
                    &mut CpuBackend::with_precision(precision),
                    side,
                    threads,
                    request,
                    &mut || Ok(()),
                )
                .map_err(|e| e.to_string())
            })?;
            println!("{{{fields}}}");
            Ok(())
        }
        "cuda" => cuda(&args, threads, request),
        other => Err(format!("unknown backend `{other}` (cpu, cuda)").into()),
    }
}

/// Runs the request on the CUDA backend (GPU 0).
#[cfg(feature = "cuda")]
fn cuda(args: &[String], threads: usize, request: Request) -> BenchResult<()> {
    use sage_backend_cuda::{Bf16Inputs, CudaBackend, DkvTile, Precision};
    let precision = match option(args, "--precision", "bf16".to_owned())?.as_str() {
        "f32" => Precision::F32,
        "bf16" => Precision::Bf16,
        other => return Err(format!("unknown precision `{other}` (f32, bf16)").into()),
    };
    let inputs = match option(args, "--bf16-inputs", "copies".to_owned())?.as_str() {
        "copies" => Bf16Inputs::Copies,
        "casts" => Bf16Inputs::Casts,
        "converted" => Bf16Inputs::Converted,
        other => {
            let known = "copies, casts, converted";
            return Err(format!("unknown bf16 inputs `{other}` ({known})").into());
        }
    };
    let graphs = match option(args, "--step-graphs", "default".to_owned())?.as_str() {
        "default" => None,
        "on" => Some(true),
        "off" => Some(false),
        other => return Err(format!("unknown --step-graphs `{other}` (on, off)").into()),
    };
    let dkv_tile = match option(args, "--dkv-tile", 16u32)? {
        16 => DkvTile::Queries16,
        32 => DkvTile::Queries32,
        other => return Err(format!("unknown --dkv-tile `{other}` (16, 32)").into()),
    };
    let fused_append = match option(args, "--rope-append", "fused".to_owned())?.as_str() {
        "fused" => true,
        "separate" => false,
        other => return Err(format!("unknown --rope-append `{other}` (fused, separate)").into()),
    };
    let batched = match option(args, "--batched-gemms", "on".to_owned())?.as_str() {
        "on" => true,
        "off" => false,
        other => return Err(format!("unknown --batched-gemms `{other}` (on, off)").into()),
    };
    let mut k = CudaBackend::with_precision(precision)?;
    k.set_bf16_inputs(inputs);
    k.set_dkv_tile(dkv_tile);
    k.set_fused_rope_append(fused_append);
    k.set_batched_gemms(batched);
    if let Some(on) = graphs {
        k.set_step_graphs(on);
    }
    eprintln!("cuda device: {}", k.description());
    let side = match (precision, inputs, graphs, dkv_tile) {
        (Precision::F32, ..) => "sage-cuda-f32",
        _ if !fused_append => "sage-cuda-bf16-separate-append",
        _ if !batched => "sage-cuda-bf16-unbatched",
        (Precision::Bf16, _, Some(false), ..) => "sage-cuda-bf16-no-graphs",
        (Precision::Bf16, _, _, DkvTile::Queries32) => "sage-cuda-bf16-dkv32",
        (Precision::Bf16, Bf16Inputs::Copies, ..) => "sage-cuda-bf16",
        (Precision::Bf16, Bf16Inputs::Casts, ..) => "sage-cuda-bf16-casts",
        (Precision::Bf16, Bf16Inputs::Converted, ..) => "sage-cuda-bf16-converted",
    };
    // The backend is needed both by the measurement and by its profiling mark: the mark
    // gets its own handle to the device's context.
    let profiler = k.profiler();
    let fields = measure(
        &mut k,
        side,
        threads,
        request,
        &mut || Ok(profiler.start()?),
    )?;
    let mib = |bytes: usize| bytes as f64 / (1 << 20) as f64;
    let graphs = k.step_graph_stats();
    println!(
        "{{{fields},\"peak_gpu_mib\":{:.1},\"operand_casts\":{},\"step_graphs\":{{\"captured\":{},\"replayed\":{},\"eager\":{},\"traced\":{},\"tracing_ms\":{:.3}}}}}",
        mib(k.memory_peak()?),
        k.operand_casts(),
        graphs.captured,
        graphs.replayed,
        graphs.eager,
        graphs.traced,
        graphs.tracing.as_secs_f64() * 1e3
    );
    if let Some(reason) = graphs.last_refusal {
        eprintln!("the last decoding step not run from a graph: {reason}");
    }
    eprintln!(
        "device memory in use after the run: {:.0} MiB, of which kept bf16 copies of GEMM \
         operands {:.0} MiB",
        mib(k.memory_in_use()?),
        mib(k.kept_bf16_bytes())
    );
    Ok(())
}

/// Without the `cuda` feature there is no CUDA backend to run.
#[cfg(not(feature = "cuda"))]
fn cuda(_: &[String], _: usize, _: Request) -> BenchResult<()> {
    Err("this build has no CUDA backend: build with `--features cuda`".into())
}
