//! The checks every Hugging Face golden family shares (`goldens/qwen2_tiny/`,
//! `goldens/llama_tiny/`): tiny random models made and run by PyTorch + transformers
//! (`scripts/qwen2_goldens.py`, `scripts/llama_goldens.py`), loaded through
//! `sage_trainer::weights` into the `sage-transformer` model on the CPU backend.
//!
//! Two variants per family: `untied` (f32 weights in three shards with an index) and
//! `tied` (tied embeddings, one bf16 file, goldens computed from the bf16-rounded
//! weights). For each: logits at every position (through both prefill and KV-cache
//! decoding), the per-token log-probs and the loss, every parameter gradient of the
//! loss, and the losses around 5 AdamW steps. Then save/load round trips of the loaded
//! model.
//!
//! Tolerances. Both sides compute in f32; only the order of summation differs (GEMM
//! blocking, softmax and norm reductions), worth a few f32 ulps per operation.
//! - logits, log-probs, loss: |ours - torch| <= 1e-4 * max(1, |torch|). Logits here
//!   are O(1..10); f32 rounding through 2 layers stays near 1e-6.
//! - gradients: max |ours - torch| <= 1e-3 * max |torch| over each tensor. Relative to
//!   the tensor's scale rather than per element, because an element near zero is
//!   a difference of large terms and carries their absolute rounding error.
//! - AdamW losses: 1e-4 relative, like the loss, though the first update moves each
//!   parameter by about lr * sign(gradient), so a gradient differing by rounding
//!   alone in the sign of a near-zero element shifts a parameter by up to 2 lr.
//! - Observed (x86-64, this CPU backend): about 2e-6 for logits, 1e-6 for gradients,
//!   1e-7 for the losses, so the bounds leave a margin of 50x or more. A 1% error in
//!   one norm weight fails every check; a rotary base off by 1% fails the logits and
//!   the gradients (tested).
//!

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sage_backend_cpu::CpuBackend;
use sage_trainer::weights::{
    load_model, read_safetensors, save_model, Dtype, HostTensor, SaveOptions,
};
use sage_transformer::{AdamWStep, Kernels, KvCache, Transformer};
use serde_json::Value;

pub const LOGIT_TOLERANCE: f64 = 1e-4;
pub const GRAD_TOLERANCE: f64 = 1e-3;
pub const ADAMW_LOSS_TOLERANCE: f64 = 1e-4;
/// The two models of each family: untied f32 shards, tied bf16.
pub const VARIANTS: [&str; 2] = ["untied", "tied"];

/// `goldens/FAMILY/VARIANT`, e.g. `goldens/qwen2_tiny/untied`.
pub fn golden_dir(family: &str, variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("goldens")
        .join(family)
        .join(variant)
}

/// What PyTorch recorded for one model.
pub struct Goldens {
    sequences: Vec<Vec<u32>>,
    loss: f64,
    adamw: Value,
    adamw_losses: Vec<f64>,
    tensors: BTreeMap<String, HostTensor>,
}

impl Goldens {
    pub fn load(family: &str, variant: &str) -> Goldens {
        let dir = golden_dir(family, variant);
        let text = std::fs::read_to_string(dir.join("goldens.json")).unwrap();
        let summary: Value = serde_json::from_str(&text).unwrap();
        let numbers = |v: &Value| -> Vec<f64> {
            let list = v.as_array().unwrap().iter();
            list.map(|x| x.as_f64().unwrap()).collect()
        };
        Goldens {
            sequences: summary["sequences"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| numbers(s).into_iter().map(|t| t as u32).collect())
                .collect(),
            loss: summary["loss"].as_f64().unwrap(),
            adamw: summary["adamw"].clone(),
            adamw_losses: numbers(&summary["adamw_losses"]),
            tensors: read_safetensors(&dir.join("goldens.safetensors")).unwrap(),
        }
    }

    /// Logits of sequence `s`, [len, vocab].
    fn logits(&self, s: usize) -> &HostTensor {
        &self.tensors[&format!("logits.{s}")]
    }

    /// The packed next-token batch of all sequences: inputs, targets, sequence starts.
    fn batch(&self) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let (mut tokens, mut targets, mut starts) = (Vec::new(), Vec::new(), vec![0]);
        for seq in &self.sequences {
            tokens.extend_from_slice(&seq[..seq.len() - 1]);
            targets.extend_from_slice(&seq[1..]);
            starts.push(tokens.len() as u32);
        }
        (tokens, targets, starts)
    }

    fn adamw_step(&self, step: u32) -> AdamWStep {
        let f = |key: &str| self.adamw[key].as_f64().unwrap() as f32;
        AdamWStep {
            learning_rate: f("lr"),
            beta1: self.adamw["betas"][0].as_f64().unwrap() as f32,
            beta2: self.adamw["betas"][1].as_f64().unwrap() as f32,
            eps: f("eps"),
            weight_decay: f("weight_decay"),
            step,
        }
    }
}

/// Largest |ours - theirs| / max(1, |theirs|).
fn max_relative_error(ours: &[f32], theirs: &[f32]) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    ours.iter()
        .zip(theirs)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs() / f64::from(b).abs().max(1.0))
        .fold(0.0, f64::max)
}

/// Largest |ours - theirs| over the largest |theirs|.
fn max_error_over_scale(ours: &[f32], theirs: &[f32]) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    let scale = theirs
        .iter()
        .map(|&b| f64::from(b).abs())
        .fold(0.0, f64::max);
    let worst = ours
        .iter()
        .zip(theirs)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs())
        .fold(0.0, f64::max);
    worst / scale.max(f64::MIN_POSITIVE)
}

fn relative(ours: f64, theirs: f64) -> f64 {
    (ours - theirs).abs() / theirs.abs().max(1.0)
}

/// The observed errors of one model against the goldens.
#[derive(Debug)]
pub struct Errors {
    /// Logits of every position, by KV-cache decoding after a one-token prefill.
    pub decode_logits: f64,
    /// Logits of every position, as the last row of a prefill of each prefix.
    pub prefill_logits: f64,
    /// Per-token log-probs of the training forward pass.
    pub logprobs: f64,
    pub loss: f64,
    /// The worst tensor's gradient error, and its name.
    pub grads: (f64, String),
    pub adamw_losses: f64,
}

impl Errors {
    pub fn within_tolerances(&self) -> bool {
        self.decode_logits <= LOGIT_TOLERANCE
            && self.prefill_logits <= LOGIT_TOLERANCE
            && self.logprobs <= LOGIT_TOLERANCE
            && self.loss <= LOGIT_TOLERANCE
            && self.grads.0 <= GRAD_TOLERANCE
            && self.adamw_losses <= ADAMW_LOSS_TOLERANCE
    }
}

fn logit_errors(k: &mut CpuBackend, model: &mut Transformer, goldens: &Goldens) -> (f64, f64) {
    let (mut decode, mut prefill) = (0.0f64, 0.0f64);
    for (s, seq) in goldens.sequences.iter().enumerate() {
        let golden = goldens.logits(s);
        let vocab = golden.shape[1];
        let row = |i: usize| &golden.data[i * vocab..(i + 1) * vocab];
        let mut cache = KvCache::new(k, model, 1, seq.len()).unwrap();
        let first = model.prefill(k, &mut cache, &[&seq[..1]]).unwrap();
        decode = decode.max(max_relative_error(&first, row(0)));
        for (i, &token) in seq.iter().enumerate().skip(1) {
            let logits = model.decode_step(k, &mut cache, &[token]).unwrap();
            decode = decode.max(max_relative_error(&logits, row(i)));
        }
        for i in 0..seq.len() {
            let logits = model.prefill(k, &mut cache, &[&seq[..=i]]).unwrap();
            prefill = prefill.max(max_relative_error(&logits, row(i)));
        }
        cache.free(k).unwrap();
    }
    (decode, prefill)
}

/// log-softmax of the golden logits at each next token, in f64, in batch order.
fn golden_logprobs(goldens: &Goldens) -> Vec<f32> {
    let mut out = Vec::new();
    for (s, seq) in goldens.sequences.iter().enumerate() {
        let golden = goldens.logits(s);
        let vocab = golden.shape[1];
        for (i, &target) in seq[1..].iter().enumerate() {
            let row = &golden.data[i * vocab..(i + 1) * vocab];
            let max = row.iter().map(|&x| f64::from(x)).fold(f64::MIN, f64::max);
            let sum: f64 = row.iter().map(|&x| (f64::from(x) - max).exp()).sum();
            out.push((f64::from(row[target as usize]) - max - sum.ln()) as f32);
        }
    }
    out
}

fn mean_nll(logp: &[f32]) -> f64 {
    -logp.iter().map(|&x| f64::from(x)).sum::<f64>() / logp.len() as f64
}

/// Forward and backward of the mean NLL; returns the log-probs, fills the gradients.
fn loss_and_grads(k: &mut CpuBackend, model: &mut Transformer, goldens: &Goldens) -> Vec<f32> {
    let (tokens, targets, starts) = goldens.batch();
    model.zero_grads(k).unwrap();
    let logp = model.forward(k, &tokens, &targets, &starts).unwrap();
    let n = logp.len();
    model.backward(k, &vec![-1.0 / n as f32; n]).unwrap();
    logp
}

fn grad_error(k: &mut CpuBackend, model: &Transformer, goldens: &Goldens) -> (f64, String) {
    let mut grads = vec![0.0; model.grads().len];
    k.read(model.grads(), &mut grads).unwrap();
    let mut worst = (0.0, String::new());
    for (name, slot) in model.layout().named() {
        let golden = &goldens.tensors[&format!("grad.{name}")];
        let ours = &grads[slot.offset..slot.offset + slot.len];
        let error = max_error_over_scale(ours, &golden.data);
        if error >= worst.0 {
            worst = (error, name);
        }
    }
    worst
}

fn adamw_loss_error(k: &mut CpuBackend, model: &mut Transformer, goldens: &Goldens) -> f64 {
    let total = model.params().len;
    let whole = |buffer| sage_transformer::Tensor::whole(buffer, total);
    let (m, v) = (k.alloc(total).unwrap(), k.alloc(total).unwrap());
    let mut losses = Vec::new();
    let steps = goldens.adamw["steps"].as_u64().unwrap() as u32;
    for step in 1..=steps {
        losses.push(mean_nll(&loss_and_grads(k, model, goldens)));
        let hyper = goldens.adamw_step(step);
        k.adamw(model.params(), model.grads(), whole(m), whole(v), hyper)
            .unwrap();
    }
    losses.push(mean_nll(&loss_and_grads(k, model, goldens)));
    k.free(m).unwrap();
    k.free(v).unwrap();
    assert_eq!(losses.len(), goldens.adamw_losses.len());
    losses
        .iter()
        .zip(&goldens.adamw_losses)
        .map(|(&a, &b)| relative(a, b))
        .fold(0.0, f64::max)
}

/// Every comparison for `model` (which the AdamW steps change).
pub fn compare(k: &mut CpuBackend, model: &mut Transformer, goldens: &Goldens) -> Errors {
    let (decode_logits, prefill_logits) = logit_errors(k, model, goldens);
    let logp = loss_and_grads(k, model, goldens);
    Errors {
        decode_logits,
        prefill_logits,
        logprobs: max_relative_error(&logp, &golden_logprobs(goldens)),
        loss: relative(mean_nll(&logp), goldens.loss),
        grads: grad_error(k, model, goldens),
        adamw_losses: adamw_loss_error(k, model, goldens),
    }
}

/// Loads each variant of `family` and compares it with what PyTorch computed.
pub fn check_logits_loss_gradients_and_adamw(family: &str) {
    for variant in VARIANTS {
        let goldens = Goldens::load(family, variant);
        let mut k = CpuBackend::new();
        let mut model = load_model(&mut k, &golden_dir(family, variant)).unwrap();
        let errors = compare(&mut k, &mut model, &goldens);
        eprintln!("{family}/{variant}: {errors:?}");
        assert!(
            errors.within_tolerances(),
            "{family}/{variant}: {errors:?} exceeds the tolerances"
        );
    }
}

/// Adds `delta` times itself to every element of parameter `name` (an error of
/// `delta` relative).
fn perturb(k: &mut CpuBackend, model: &Transformer, name: &str, delta: f32) {
    let slot = model
        .layout()
        .named()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, slot)| slot)
        .unwrap();
    let tensor = model.params().slice(slot.offset, slot.len);
    let mut values = vec![0.0; slot.len];
    k.read(tensor, &mut values).unwrap();
    values.iter_mut().for_each(|v| *v *= 1.0 + delta);
    k.write(tensor, &values).unwrap();
}

/// The tolerances catch small faults: a norm weight 1% off, a rotary base 1% off.
pub fn check_slightly_broken_models_fail(family: &str) {
    let goldens = Goldens::load(family, "untied");
    let dir = golden_dir(family, "untied");
    let mut k = CpuBackend::new();

    let mut model = load_model(&mut k, &dir).unwrap();
    perturb(
        &mut k,
        &model,
        "model.layers.1.post_attention_layernorm.weight",
        0.01,
    );
    let errors = compare(&mut k, &mut model, &goldens);
    eprintln!("{family}: norm weight off by 1%: {errors:?}");
    assert!(errors.decode_logits > LOGIT_TOLERANCE && errors.prefill_logits > LOGIT_TOLERANCE);
    assert!(errors.loss > LOGIT_TOLERANCE && errors.grads.0 > GRAD_TOLERANCE);
    assert!(errors.adamw_losses > ADAMW_LOSS_TOLERANCE);

    let mut config = model.config().clone();
    config.rope_theta *= 1.01;
    let mut model = Transformer::new(&mut k, config).unwrap();
    let reference = load_model(&mut k, &dir).unwrap();
    k.copy(model.params(), reference.params()).unwrap();
    let errors = compare(&mut k, &mut model, &goldens);
    eprintln!("{family}: rope theta off by 1%: {errors:?}");
    // The logits catch it in both families (Qwen2 at base 1e4: 2.6e-3, Llama at 5e5:
    // 1e-3, against the bound of 1e-4). The gradients catch it only at the smaller
    // base: at 5e5 a 1% change hardly moves the slow frequencies over 12 positions.
    assert!(errors.decode_logits > LOGIT_TOLERANCE && errors.prefill_logits > LOGIT_TOLERANCE);
}

fn params(k: &mut CpuBackend, model: &Transformer) -> Vec<f32> {
    let mut values = vec![0.0; model.params().len];
    k.read(model.params(), &mut values).unwrap();
    values
}

/// Saves each variant of `family` as f32, bf16 and f32 shards and loads it back: the
/// same config, the same parameters (bf16 within its rounding), and a `config.json`
/// of the same architecture as the one transformers wrote. With the environment
/// variable `keep_in` set to a directory, the saved models stay there (for the
/// generator's `--check-load`).
pub fn check_round_trip_through_f32_and_bf16(family: &str, keep_in: &str) {
    let keep = std::env::var_os(keep_in).map(PathBuf::from);
    let scratch =
        std::env::temp_dir().join(format!("sage-{family}-goldens-{}", std::process::id()));
    let root = keep.as_ref().unwrap_or(&scratch);
    let layouts = [
        ("f32", Dtype::F32, None),
        ("bf16", Dtype::BF16, None),
        ("f32-sharded", Dtype::F32, Some(40_000)),
    ];
    let architecture = |dir: &Path| -> Value {
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let config: Value = serde_json::from_str(&text).unwrap();
        serde_json::json!([config["model_type"], config["architectures"]])
    };
    for variant in VARIANTS {
        let mut k = CpuBackend::new();
        let golden = golden_dir(family, variant);
        let model = load_model(&mut k, &golden).unwrap();
        let original = params(&mut k, &model);
        for (suffix, dtype, max_shard_bytes) in layouts {
            let name = format!("{variant}-{suffix}");
            let dir = root.join(&name);
            let options = SaveOptions {
                dtype,
                max_shard_bytes,
            };
            save_model(&mut k, &model, &dir, &options).unwrap();
            assert_eq!(architecture(&dir), architecture(&golden), "{name}");
            let loaded = load_model(&mut k, &dir).unwrap();
            assert_eq!(loaded.config(), model.config());
            let reloaded = params(&mut k, &loaded);
            for (a, b) in original.iter().zip(&reloaded) {
                // f32 is bit-exact; bf16 keeps 8 significant bits: rounding to nearest
                // is off by at most half a unit in the 8th bit, 2^-8 relative.
                match dtype {
                    Dtype::F32 => assert_eq!(a.to_bits(), b.to_bits(), "{name}"),
                    _ => assert!((a - b).abs() <= a.abs() / 256.0, "{name}: {a} -> {b}"),
                }
            }
            if variant == "tied" {
                // The tied goldens are bf16 on disk: even bf16 round-trips exactly.
                assert_eq!(reloaded, original, "{name}");
            }
        }
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
