//! The promises inference makes to a backend, checked with the CPU backend underneath a
//! wrapper that holds the model to them:
//! - `Kernels::repeated_step`, which lets the CUDA backend trace a decoding step before
//!   it replays a graph: the step may run more than once, and a run changes nothing but
//!   what its kernels write. A backend that runs every repeated step twice must decode
//!   exactly what the CPU backend decodes alone.
//! - `Kernels::alloc_kv_cache`, which lets the CUDA backend hold a cache in bf16: a cache
//!   buffer is only copied into (from an ordinary buffer or another cache), appended to
//!   and attended to.
//! - `Kernels::alloc_frozen`, which lets the CUDA backend hold a frozen model's weights
//!   in bf16 alone: they are written from the host, then only read by the forward
//!   kernels that take weights.
//!
//! For the last two, a backend that hands out handles no other call can resolve must
//! run exactly as the CPU backend alone.

use sage_backend_cpu::{CpuBackend, CpuError};
use sage_e2e::backend_parity::Rng;
use sage_transformer::contract::{
    AdamWScalars, AttentionSizes, CacheSizes, ChoiceSizes, DecodeSizes, EmbeddingSizes, HeadDims,
    RopeSizes, Rows,
};
use sage_transformer::device::{
    rope_append_kv_by_parts, AttentionGrads, AttentionSaved, HeadOperands,
};
use sage_transformer::sampling::argmax;
use sage_transformer::{
    BufferId, Device, IndexBufferId, Indices, InputError, KvCache, MatmulShape, ModelConfig,
    ModelError, ProjectedRows, Tensor, Transformer,
};

/// Set in the ids of the cache buffers [`Strict`] hands out: the CPU backend knows no
/// such buffer, so any call but the three a cache allows fails on them.
const CACHE_TAG: u32 = 1 << 30;
/// Set likewise in the ids of the frozen weight buffers it hands out.
const FROZEN_TAG: u32 = 1 << 29;

/// The CPU backend, holding inference to its promises: each repeated step runs twice
/// (when `twice`), counted; KV-cache buffers, counted, get tagged ids (when
/// `tag_caches`) that only `copy` into them (from an ordinary buffer or another cache),
/// `kv_cache_append`, `attention_decode` and `free` resolve; frozen weight buffers,
/// counted, get tagged ids (when `tag_frozen`) that only `write`, the forward kernels
/// that read weights and `free` resolve. It also
/// counts the addition kernels (`add_assign`, `add_bias`), the biased rotations
/// (`add_bias_rope_forward`) and the decoding rotations with cache appends
/// (`rope_append_kv`) it is asked for, and the copies from a buffer into the same buffer,
/// and keeps the outputs and second operands of every `matmul_shared_input`.
#[derive(Default)]
struct Strict {
    cpu: CpuBackend,
    twice: bool,
    tag_caches: bool,
    tag_frozen: bool,
    steps: usize,
    caches: usize,
    copies_within_a_buffer: usize,
    frozen: usize,
    additions: usize,
    biased_rotations: usize,
    rotations_appended: usize,
    shared_inputs: Vec<(Vec<Tensor>, Vec<Tensor>)>,
}

/// `t` with `tag` cleared from its buffer's id.
fn without(tag: u32, t: Tensor) -> Tensor {
    Tensor {
        buffer: BufferId(t.buffer.0 & !tag),
        ..t
    }
}

/// `t` as a cache kernel resolves it.
fn cache(t: Tensor) -> Tensor {
    without(CACHE_TAG, t)
}

/// `t` as a kernel that reads weights resolves it.
fn weights(t: Tensor) -> Tensor {
    without(FROZEN_TAG, t)
}

/// Forwards Device methods to the CPU backend.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(fn $name(&mut self, $($arg: $ty),*) -> Result<$out, CpuError> {
            Device::$name(&mut self.cpu, $($arg),*)
        })*
    };
}

impl Device for Strict {
    type Error = CpuError;

    forward! {
        alloc(len: usize) -> BufferId;
        alloc_indices(len: usize) -> IndexBufferId;
        free_indices(buffer: IndexBufferId) -> ();
        write_indices(dst: Indices, src: &[u32]) -> ();
        read(src: Tensor, dst: &mut [f32]) -> ();
        fill(dst: Tensor, value: f32) -> ();
        scale(dst: Tensor, factor: f32) -> ();
        sum_squares(src: Tensor) -> f32;
        embedding_backward(dtable: Tensor, dout: Tensor, tokens: Indices, sizes: EmbeddingSizes) -> ();
        rmsnorm_backward(dx: Tensor, dweight: Tensor, dout: Tensor, x: Tensor, weight: Tensor, rstd: Tensor, rows: Rows) -> ();
        bias_backward(dbias: Tensor, dout: Tensor, rows: Rows) -> ();
        rope_forward(x: Tensor, positions: Indices, sizes: RopeSizes, theta: f32) -> ();
        rope_backward(dx: Tensor, positions: Indices, sizes: RopeSizes, theta: f32) -> ();
        attention_forward(out: Tensor, lse: Tensor, q: Tensor, k: Tensor, v: Tensor, seq_starts: &[u32], sizes: AttentionSizes) -> ();
        attention_backward(grads: AttentionGrads, saved: AttentionSaved, seq_starts: &[u32], sizes: AttentionSizes) -> ();
        swiglu_forward(out: Tensor, gate: Tensor, up: Tensor) -> ();
        swiglu_backward(dgate: Tensor, dup: Tensor, dout: Tensor, gate: Tensor, up: Tensor) -> ();
        logprob_backward(dhidden: Tensor, dlm_head: Option<Tensor>, weights: Tensor, lse: Tensor, head: HeadOperands, dims: HeadDims) -> ();
        choose_tokens(choices: Tensor, logits: Tensor, uniforms: &[f64], sizes: ChoiceSizes) -> ();
        adamw(params: Tensor, grads: Tensor, m: Tensor, v: Tensor, scalars: AdamWScalars) -> ();
    }

    fn alloc_kv_cache(&mut self, len: usize) -> Result<BufferId, CpuError> {
        self.caches += 1;
        let buffer = self.cpu.alloc(len)?;
        let tag = if self.tag_caches { CACHE_TAG } else { 0 };
        Ok(BufferId(buffer.0 | tag))
    }

    fn alloc_frozen(&mut self, len: usize) -> Result<BufferId, CpuError> {
        self.frozen += 1;
        let buffer = self.cpu.alloc(len)?;
        let tag = if self.tag_frozen { FROZEN_TAG } else { 0 };
        Ok(BufferId(buffer.0 | tag))
    }

    fn free(&mut self, buffer: BufferId) -> Result<(), CpuError> {
        Device::free(
            &mut self.cpu,
            BufferId(buffer.0 & !(CACHE_TAG | FROZEN_TAG)),
        )
    }

    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), CpuError> {
        Device::write(&mut self.cpu, weights(dst), src)
    }

    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), CpuError> {
        self.copies_within_a_buffer += usize::from(dst.buffer == src.buffer);
        // Into a cache from an ordinary buffer or from a cache.
        let src = if dst.buffer.0 & CACHE_TAG != 0 {
            cache(src)
        } else {
            src
        };
        Device::copy(&mut self.cpu, cache(dst), src)
    }

    fn kv_cache_append(
        &mut self,
        caches: [Tensor; 2],
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        sizes: CacheSizes,
    ) -> Result<(), CpuError> {
        let caches = caches.map(cache);
        Device::kv_cache_append(&mut self.cpu, caches, k, v, lengths, sizes)
    }

    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
    ) -> Result<(), CpuError> {
        let caches = caches.map(cache);
        Device::attention_decode(&mut self.cpu, out, q, caches, lengths, sizes)
    }

    fn embedding_forward(
        &mut self,
        out: Tensor,
        table: Tensor,
        tokens: Indices,
        sizes: EmbeddingSizes,
    ) -> Result<(), CpuError> {
        Device::embedding_forward(&mut self.cpu, out, weights(table), tokens, sizes)
    }

    fn rmsnorm_forward(
        &mut self,
        out: Tensor,
        rstd: Tensor,
        x: Tensor,
        weight: Tensor,
        rows: Rows,
        eps: f32,
    ) -> Result<(), CpuError> {
        Device::rmsnorm_forward(&mut self.cpu, out, rstd, x, weights(weight), rows, eps)
    }

    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), CpuError> {
        Device::matmul(&mut self.cpu, c, weights(a), weights(b), shape)
    }

    fn matmul_shared_input(
        &mut self,
        c: &[Tensor],
        a: Tensor,
        b: &[Tensor],
        shape: MatmulShape,
    ) -> Result<(), CpuError> {
        self.shared_inputs.push((c.to_vec(), b.to_vec()));
        for (&c, &b) in c.iter().zip(b) {
            Device::matmul(self, c, a, b, shape)?;
        }
        Ok(())
    }

    fn rope_append_kv(
        &mut self,
        rows: ProjectedRows,
        positions: Indices,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
        theta: f32,
    ) -> Result<(), CpuError> {
        self.rotations_appended += 1;
        rope_append_kv_by_parts(self, rows, (positions, theta), caches, lengths, sizes)
    }

    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), CpuError> {
        self.additions += 1;
        Device::add_assign(&mut self.cpu, dst, src)
    }

    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), CpuError> {
        self.additions += 1;
        Device::add_bias(&mut self.cpu, out, weights(bias))
    }

    fn add_bias_rope_forward(
        &mut self,
        x: Tensor,
        bias: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), CpuError> {
        self.biased_rotations += 1;
        let bias = weights(bias);
        Device::add_bias_rope_forward(&mut self.cpu, x, bias, positions, sizes, theta)
    }

    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), CpuError> {
        let head = HeadOperands {
            lm_head: weights(head.lm_head),
            ..head
        };
        Device::logprob_forward(&mut self.cpu, logp, lse, head, dims)
    }

    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dims: HeadDims,
    ) -> Result<(), CpuError> {
        Device::logits(&mut self.cpu, out, hidden, weights(lm_head), dims)
    }

    fn repeated_step<E>(
        &mut self,
        step: &mut dyn FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<Result<(), E>, CpuError> {
        self.steps += 1;
        if self.twice {
            if let Err(e) = step(self) {
                return Ok(Err(e));
            }
        }
        Ok(step(self))
    }
}

/// The tiny model with fixed random weights, trainable or frozen for inference.
fn tiny_model<K: Device>(k: &mut K, frozen: bool) -> Transformer {
    let config = ModelConfig::tiny();
    let model = if frozen {
        Transformer::new_frozen(k, config)
    } else {
        Transformer::new(k, config)
    }
    .unwrap();
    let params = Rng::new(0x5eed).vec(model.params().len, 0.1);
    sage_transformer::Kernels::write(k, model.params(), &params).unwrap();
    model
}

/// Greedy decoding of `steps` tokens after two prompts by [`tiny_model`]: every step's
/// logits, and the cache lengths at the end. With `first_finishes_at`, the first
/// sequence finishes before that step and the second goes on alone, moved down in the
/// cache ([`Transformer::retain_sequences`]).
fn decode<K: Device>(
    k: &mut K,
    steps: usize,
    frozen: bool,
    first_finishes_at: Option<usize>,
) -> (Vec<Vec<f32>>, Vec<u32>) {
    let mut model = tiny_model(k, frozen);
    let vocab = model.config().vocab_size;
    let mut cache = KvCache::new(k, &model, 2, 16).unwrap();
    let prompts: [&[u32]; 2] = [&[3, 17, 5, 40], &[9, 1]];
    let mut logits = model.prefill(k, &mut cache, &prompts).unwrap();
    let mut all = vec![logits.clone()];
    for step in 0..steps {
        if first_finishes_at == Some(step) {
            cache = model.retain_sequences(k, cache, &[false, true]).unwrap();
            logits.drain(..vocab);
        }
        let next: Vec<u32> = logits
            .chunks_exact(vocab)
            .map(|row| argmax(row) as u32)
            .collect();
        logits = model.decode_step(k, &mut cache, &next).unwrap();
        all.push(logits.clone());
    }
    (all, cache.lengths().to_vec())
}

#[test]
fn a_decoding_step_run_twice_decodes_what_one_run_does() {
    let steps = 6;
    let once = decode(&mut CpuBackend::new(), steps, false, None);
    let mut twice = Strict {
        twice: true,
        ..Strict::default()
    };
    let again = decode(&mut twice, steps, false, None);
    assert_eq!(
        twice.steps, steps,
        "each decoding step is one repeated step"
    );
    assert_eq!(again.1, vec![4 + steps as u32, 2 + steps as u32]);
    assert_eq!(again.1, once.1, "the lengths advance once per step");
    assert_eq!(again.0, once.0, "the same logits, to the bit");
}

/// When a sequence finishes, `retain_sequences` moves the others down within the
/// cache's own buffer, with copies from cache to cache, which `alloc_kv_cache` allows
/// (the CUDA backend's bf16 mode refused them until 2026-11-28, and every evaluation
/// with a finished sequence failed there): decoding on runs as on the CPU alone, to the
/// bit, and the kept sequence's logits are those it had beside the finished one.
#[test]
fn a_cache_made_smaller_keeps_its_sequences_in_its_own_buffer() {
    let plain = decode(&mut CpuBackend::new(), 6, false, Some(3));
    let mut strict = Strict {
        tag_caches: true,
        ..Strict::default()
    };
    assert_eq!(decode(&mut strict, 6, false, Some(3)), plain);
    assert_eq!(strict.caches, 1, "no second cache");
    let layers = ModelConfig::tiny().num_hidden_layers;
    assert_eq!(
        strict.copies_within_a_buffer,
        2 * layers,
        "the kept sequence's keys and values moved once in every layer"
    );
    assert_eq!(
        plain.1,
        vec![2 + 6],
        "one sequence kept, six tokens decoded"
    );
    let (both, _) = decode(&mut CpuBackend::new(), 6, false, None);
    let vocab = ModelConfig::tiny().vocab_size;
    for (step, (kept, beside)) in plain.0.iter().zip(&both).enumerate().skip(4) {
        assert_eq!(kept[..], beside[vocab..], "step {step}");
    }
}

/// Sequences kept in place twice (four, then three, then two, the buffer keeping its
/// room for four) decode and continue from their caches (`prefill_rest`) as they do
/// beside the sequences that finished, to the bit: each move puts a sequence's rows
/// where every later kernel looks for them, and overwrites none that is still kept.
#[test]
fn sequences_kept_in_place_twice_decode_and_continue_as_beside_the_others() {
    let k = &mut CpuBackend::new();
    let mut model = tiny_model(k, false);
    let vocab = model.config().vocab_size;
    let prompts: [&[u32]; 4] = [&[3, 17, 5, 40], &[9, 1], &[7, 7, 2], &[11, 4, 6, 6, 1]];
    // The token sequence `seq` is fed at decoding step `step`, whatever its logits say.
    let fed = |seq: usize, step: usize| ((7 * step + 13 * seq + 1) % vocab) as u32;
    let rows = |logits: &[f32], seqs: &[usize]| -> Vec<(usize, Vec<f32>)> {
        logits
            .chunks_exact(vocab)
            .zip(seqs)
            .map(|(row, &seq)| (seq, row.to_vec()))
            .collect()
    };
    let extra = [5u32, 6, 2];
    // Runs 5 decoding steps and then a continued prefill of `extra`, keeping after step
    // s only the sequences `kept_after(s)` names; every logit row, by sequence.
    let run = |k: &mut CpuBackend,
               model: &mut Transformer,
               kept_after: &dyn Fn(usize) -> Option<Vec<bool>>| {
        let mut cache = KvCache::new(k, model, 4, 32).unwrap();
        let mut seqs: Vec<usize> = (0..4).collect();
        let mut histories: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
        let mut out = rows(&model.prefill(k, &mut cache, &prompts).unwrap(), &seqs);
        for step in 0..5 {
            if let Some(keep) = kept_after(step) {
                cache = model.retain_sequences(k, cache, &keep).unwrap();
                seqs = seqs
                    .iter()
                    .zip(&keep)
                    .filter(|(_, &kept)| kept)
                    .map(|(&s, _)| s)
                    .collect();
            }
            let tokens: Vec<u32> = seqs.iter().map(|&seq| fed(seq, step)).collect();
            for (&seq, &token) in seqs.iter().zip(&tokens) {
                histories[seq].push(token);
            }
            out.extend(rows(
                &model.decode_step(k, &mut cache, &tokens).unwrap(),
                &seqs,
            ));
        }
        let continued: Vec<Vec<u32>> = seqs
            .iter()
            .map(|&seq| [&histories[seq][..], &extra].concat())
            .collect();
        let continued: Vec<&[u32]> = continued.iter().map(Vec::as_slice).collect();
        out.extend(rows(
            &model.prefill_rest(k, &mut cache, &continued).unwrap(),
            &seqs,
        ));
        assert_eq!(cache.batch(), seqs.len());
        cache.free(k).unwrap();
        out
    };
    let beside = run(k, &mut model, &|_| None);
    let kept = run(k, &mut model, &|step| match step {
        2 => Some(vec![true, false, true, true]),
        3 => Some(vec![false, true, true]),
        _ => None,
    });
    // Sequences 2 and 3 ran to the end in both; compare their rows stage by stage.
    for seq in [2, 3] {
        let ours: Vec<&Vec<f32>> = kept
            .iter()
            .filter(|(s, _)| *s == seq)
            .map(|(_, r)| r)
            .collect();
        let theirs: Vec<&Vec<f32>> = beside
            .iter()
            .filter(|(s, _)| *s == seq)
            .map(|(_, r)| r)
            .collect();
        assert_eq!(ours.len(), 7, "prefill, five steps and the continuation");
        assert_eq!(ours, theirs, "sequence {seq}");
    }
}

/// The trainer's batched generation of a frozen model, with sequences that stop apart
/// (so that its cache is made smaller on the way, as an evaluation's is), greedy and
/// sampled: with every cache and weight handle held to what `alloc_kv_cache` and
/// `alloc_frozen` allow, the same tokens and log-probabilities as on the CPU alone. The
/// CUDA backend's bf16 mode refuses any other use, and on 2026-11-28 an H200 evaluation
/// failed on one (the cache-to-cache copy, allowed since).
#[test]
fn generation_with_sequences_stopping_apart_keeps_to_the_buffers_rules() {
    use sage_core::policy::SamplingParams;
    use sage_trainer::sampling::generate;

    let prompts: [&[u32]; 5] = [&[3, 17, 5, 40], &[9, 1], &[7], &[2, 2, 8], &[11, 4]];
    for temperature in [0.0, 1.0] {
        let params = SamplingParams {
            temperature,
            max_new_tokens: 9,
            max_new_tokens_each: vec![1, 9, 2, 6, 3],
            seed: 5,
            ..SamplingParams::default()
        };
        let run = |k: &mut Strict| {
            let mut model = tiny_model(k, true);
            generate(k, &mut model, &prompts, &params).unwrap()
        };
        let plain = run(&mut Strict::default());
        let mut strict = Strict {
            tag_caches: true,
            tag_frozen: true,
            ..Strict::default()
        };
        assert_eq!(run(&mut strict), plain, "temperature {temperature}");
        assert_eq!(
            strict.caches, 1,
            "temperature {temperature}: no second cache"
        );
        assert!(
            strict.copies_within_a_buffer > 0,
            "the cache was made smaller in place"
        );
        let lengths: Vec<usize> = plain.iter().map(|g| g.tokens.len()).collect();
        assert_eq!(
            lengths,
            [1, 9, 2, 6, 3],
            "each sequence stopped at its limit"
        );
    }
}

/// Prefill and decoding steps, with logits read back and with tokens chosen on the
/// backend, touch a cache only in the ways `alloc_kv_cache` allows: with handles no other
/// call resolves they run as on the CPU alone, to the bit.
#[test]
fn decoding_only_copies_into_appends_to_and_attends_to_its_caches() {
    let steps = 6;
    let plain = decode(&mut CpuBackend::new(), steps, false, None);
    let mut strict = Strict {
        tag_caches: true,
        ..Strict::default()
    };
    assert_eq!(decode(&mut strict, steps, false, None), plain);
    assert_eq!(strict.caches, 1, "the cache came from `alloc_kv_cache`");
    let choose = |k: &mut Strict| {
        let mut model = tiny_model(k, false);
        let mut cache = KvCache::new(k, &model, 2, 16).unwrap();
        let prompts: [&[u32]; 2] = [&[3, 17, 5, 40], &[9, 1]];
        let mut chosen = vec![model
            .prefill_choosing(k, &mut cache, &prompts, 1.0, &[0.3, 0.8])
            .unwrap()];
        for step in 0..steps {
            let next: Vec<u32> = chosen[step].iter().map(|c| c.unwrap().token).collect();
            let picked = model
                .decode_step_choosing(k, &mut cache, &next, 1.0, &[0.6, 0.1])
                .unwrap();
            chosen.push(picked);
        }
        cache.free(k).unwrap();
        model.free(k).unwrap();
        chosen
    };
    let sampled = choose(&mut Strict::default());
    assert_eq!(choose(&mut strict), sampled, "the same sampled tokens");
}

/// A frozen model (`Transformer::new_frozen`) has its weights written from the host and
/// read only by the forward kernels that take weights: with handles no other call
/// resolves, it prefills, decodes and scores tokens as a trainable model does on the CPU
/// alone, to the bit; and it refuses a backward pass, an optimizer's gradient slab and
/// adapters by name.
#[test]
fn a_frozen_model_only_has_its_weights_written_and_read_by_forward_kernels() {
    let steps = 6;
    let plain = decode(&mut CpuBackend::new(), steps, false, None);
    let mut strict = Strict {
        tag_caches: true,
        tag_frozen: true,
        ..Strict::default()
    };
    assert_eq!(decode(&mut strict, steps, true, None), plain);
    assert_eq!(strict.frozen, 1, "the weights came from `alloc_frozen`");
    let tokens = [3, 17, 5, 40, 9, 1];
    let targets = [17, 5, 40, 2, 1, 7];
    let starts = [0, 4, 6];
    let scored = |k: &mut Strict, frozen: bool| {
        let mut model = tiny_model(k, frozen);
        let logp = model.forward(k, &tokens, &targets, &starts).unwrap();
        (model, logp)
    };
    let (_, want) = scored(&mut Strict::default(), false);
    let (mut model, got) = scored(&mut strict, true);
    assert_eq!(got, want, "the same log-probabilities");
    assert!(model.is_frozen());
    let refused = |result: Result<(), ModelError<CpuError>>| {
        assert!(
            matches!(result, Err(ModelError::Input(InputError::Frozen))),
            "{result:?}"
        );
    };
    refused(model.backward(&mut strict, &[1.0; 6]));
    refused(model.hold_grads(&mut strict));
    let lora = sage_transformer::LoraConfig {
        rank: 2,
        alpha: 4.0,
        targets: sage_transformer::Projection::ALL.to_vec(),
    };
    let initial = vec![0.0; sage_transformer::AdapterLayout::new(model.layout(), &lora).total];
    refused(model.enable_lora(&mut strict, lora, &initial));
}

/// A decoding step adds each block's output to the residual stream inside the GEMM that
/// makes it, and each query and key bias inside its rotation: per layer of a model with
/// q/k/v biases, the value bias is its one addition kernel, where a forward pass kept
/// for training also launches the two residual additions and adds the query and key
/// biases by themselves (four kernels per layer that the CUDA backend's decoding graphs
/// no longer hold). A prefill adds the same way.
#[test]
fn a_decoding_step_launches_one_addition_per_layer() {
    let mut strict = Strict::default();
    let mut model = tiny_model(&mut strict, false);
    let config = model.config().clone();
    assert!(config.qkv_bias, "the tiny model has q/k/v biases");
    let layers = config.num_hidden_layers;
    let mut cache = KvCache::new(&mut strict, &model, 2, 16).unwrap();
    let prompts: [&[u32]; 2] = [&[3, 17, 5, 40], &[9, 1]];
    model.prefill(&mut strict, &mut cache, &prompts).unwrap();
    let prefill = (strict.additions, strict.biased_rotations);
    assert_eq!(
        prefill,
        (layers, 2 * layers),
        "the prefill's additions and biased rotations"
    );
    model.decode_step(&mut strict, &mut cache, &[7, 8]).unwrap();
    let step = (
        strict.additions - prefill.0,
        strict.biased_rotations - prefill.1,
    );
    assert_eq!(
        step,
        (layers, 2 * layers),
        "a decoding step's additions and biased rotations"
    );

    let (tokens, targets) = ([3u32, 17, 5, 40], [17u32, 5, 40, 2]);
    let before = (strict.additions, strict.biased_rotations);
    model
        .forward(&mut strict, &tokens, &targets, &[0, 4])
        .unwrap();
    let forward = (
        strict.additions - before.0,
        strict.biased_rotations - before.1,
    );
    assert_eq!(
        forward,
        (3 * layers, 2 * layers),
        "a training forward pass keeps its sums"
    );
}

/// A decoding step hands the backend what lets it launch less (the CUDA backend's
/// one-pass rotation and append, and its batched GEMMs): one `rope_append_kv` per
/// layer (the prefill none: its keys and values are copied into the caches), and two
/// `matmul_shared_input` per layer (k and v, gate and up) whose outputs and weights each
/// lie in one buffer, in order and apart, so equally spaced for the pair: with
/// trainable weights and frozen ones, in the prefill, the step and a training forward
/// pass.
#[test]
fn a_decoding_step_hands_over_one_rotation_and_two_spaced_products_per_layer() {
    fn spaced(tensors: &[Tensor]) -> bool {
        tensors.windows(2).all(|pair| {
            pair[0].buffer == pair[1].buffer && pair[0].offset + pair[0].len <= pair[1].offset
        })
    }
    for frozen in [false, true] {
        let mut strict = Strict {
            tag_frozen: frozen,
            ..Strict::default()
        };
        let mut model = tiny_model(&mut strict, frozen);
        let layers = model.config().num_hidden_layers;
        let mut cache = KvCache::new(&mut strict, &model, 2, 16).unwrap();
        let prompts: [&[u32]; 2] = [&[3, 17, 5, 40], &[9, 1]];
        model.prefill(&mut strict, &mut cache, &prompts).unwrap();
        assert_eq!(strict.rotations_appended, 0, "frozen {frozen}: the prefill");
        assert_eq!(
            strict.shared_inputs.len(),
            2 * layers,
            "frozen {frozen}: the prefill"
        );
        model.decode_step(&mut strict, &mut cache, &[7, 8]).unwrap();
        assert_eq!(strict.rotations_appended, layers, "frozen {frozen}: a step");
        assert_eq!(
            strict.shared_inputs.len(),
            4 * layers,
            "frozen {frozen}: a step"
        );
        if !frozen {
            model
                .forward(&mut strict, &[3, 17, 5, 40], &[17, 5, 40, 2], &[0, 4])
                .unwrap();
            assert_eq!(
                strict.shared_inputs.len(),
                6 * layers,
                "a training forward pass"
            );
        }
        for (outputs, weights) in &strict.shared_inputs {
            assert_eq!((outputs.len(), weights.len()), (2, 2));
            assert!(spaced(outputs), "frozen {frozen}: outputs {outputs:?}");
            assert!(spaced(weights), "frozen {frozen}: weights {weights:?}");
        }
    }
}
