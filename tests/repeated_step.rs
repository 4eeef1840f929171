//! The promise of `Kernels::repeated_step` that lets the CUDA backend trace a decoding
//! step before it replays a graph: the step may run more than once, and a run changes
//! nothing but what its kernels write. A backend that runs every repeated step twice
//! (the CPU backend underneath) must decode exactly what the CPU backend decodes alone.

use sage_backend_cpu::{CpuBackend, CpuError};
use sage_e2e::backend_parity::Rng;
use sage_transformer::contract::{
    AdamWScalars, AttentionSizes, CacheSizes, ChoiceSizes, DecodeSizes, EmbeddingSizes, HeadDims,
    RopeSizes, Rows,
};
use sage_transformer::device::{AttentionGrads, AttentionSaved, HeadOperands};
use sage_transformer::sampling::argmax;
use sage_transformer::{
    BufferId, Device, IndexBufferId, Indices, KvCache, MatmulShape, ModelConfig, Tensor,
    Transformer,
};

/// The CPU backend, running each repeated step twice and counting the steps.
struct Twice {
    cpu: CpuBackend,
    steps: usize,
}

/// Forwards Device methods to the CPU backend.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(fn $name(&mut self, $($arg: $ty),*) -> Result<$out, CpuError> {
            Device::$name(&mut self.cpu, $($arg),*)
        })*
    };
}

impl Device for Twice {
    type Error = CpuError;

    forward! {
        alloc(len: usize) -> BufferId;
        alloc_indices(len: usize) -> IndexBufferId;
        free(buffer: BufferId) -> ();
        free_indices(buffer: IndexBufferId) -> ();
        write(dst: Tensor, src: &[f32]) -> ();
        write_indices(dst: Indices, src: &[u32]) -> ();
        read(src: Tensor, dst: &mut [f32]) -> ();
        fill(dst: Tensor, value: f32) -> ();
        copy(dst: Tensor, src: Tensor) -> ();
        add_assign(dst: Tensor, src: Tensor) -> ();
        scale(dst: Tensor, factor: f32) -> ();
        sum_squares(src: Tensor) -> f32;
        embedding_forward(out: Tensor, table: Tensor, tokens: Indices, sizes: EmbeddingSizes) -> ();
        embedding_backward(dtable: Tensor, dout: Tensor, tokens: Indices, sizes: EmbeddingSizes) -> ();
        rmsnorm_forward(out: Tensor, rstd: Tensor, x: Tensor, weight: Tensor, rows: Rows, eps: f32) -> ();
        rmsnorm_backward(dx: Tensor, dweight: Tensor, dout: Tensor, x: Tensor, weight: Tensor, rstd: Tensor, rows: Rows) -> ();
        matmul(c: Tensor, a: Tensor, b: Tensor, shape: MatmulShape) -> ();
        add_bias(out: Tensor, bias: Tensor) -> ();
        bias_backward(dbias: Tensor, dout: Tensor, rows: Rows) -> ();
        rope_forward(x: Tensor, positions: Indices, sizes: RopeSizes, theta: f32) -> ();
        rope_backward(dx: Tensor, positions: Indices, sizes: RopeSizes, theta: f32) -> ();
        attention_forward(out: Tensor, lse: Tensor, q: Tensor, k: Tensor, v: Tensor, seq_starts: &[u32], sizes: AttentionSizes) -> ();
        attention_backward(grads: AttentionGrads, saved: AttentionSaved, seq_starts: &[u32], sizes: AttentionSizes) -> ();
        kv_cache_append(caches: [Tensor; 2], k: Tensor, v: Tensor, lengths: &[u32], sizes: CacheSizes) -> ();
        attention_decode(out: Tensor, q: Tensor, caches: [Tensor; 2], lengths: &[u32], sizes: DecodeSizes) -> ();
        swiglu_forward(out: Tensor, gate: Tensor, up: Tensor) -> ();
        swiglu_backward(dgate: Tensor, dup: Tensor, dout: Tensor, gate: Tensor, up: Tensor) -> ();
        logprob_forward(logp: Tensor, lse: Tensor, head: HeadOperands, dims: HeadDims) -> ();
        logprob_backward(dhidden: Tensor, dlm_head: Option<Tensor>, weights: Tensor, lse: Tensor, head: HeadOperands, dims: HeadDims) -> ();
        logits(out: Tensor, hidden: Tensor, lm_head: Tensor, dims: HeadDims) -> ();
        choose_tokens(choices: Tensor, logits: Tensor, uniforms: &[f64], sizes: ChoiceSizes) -> ();
        adamw(params: Tensor, grads: Tensor, m: Tensor, v: Tensor, scalars: AdamWScalars) -> ();
    }

    fn repeated_step<E>(
        &mut self,
        step: &mut dyn FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<Result<(), E>, CpuError> {
        self.steps += 1;
        if let Err(e) = step(self) {
            return Ok(Err(e));
        }
        Ok(step(self))
    }
}

/// Greedy decoding of `steps` tokens after two prompts by the tiny model with fixed
/// random weights: every step's logits, and the cache lengths at the end.
fn decode<K: Device>(k: &mut K, steps: usize) -> (Vec<Vec<f32>>, Vec<u32>) {
    let config = ModelConfig::tiny();
    let vocab = config.vocab_size;
    let mut model = Transformer::new(k, config).unwrap();
    let params = Rng::new(0x5eed).vec(model.params().len, 0.1);
    sage_transformer::Kernels::write(k, model.params(), &params).unwrap();
    let mut cache = KvCache::new(k, &model, 2, 16).unwrap();
    let prompts: [&[u32]; 2] = [&[3, 17, 5, 40], &[9, 1]];
    let mut logits = model.prefill(k, &mut cache, &prompts).unwrap();
    let mut all = vec![logits.clone()];
    for _ in 0..steps {
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
    let once = decode(&mut CpuBackend::new(), steps);
    let mut twice = Twice {
        cpu: CpuBackend::new(),
        steps: 0,
    };
    let again = decode(&mut twice, steps);
    assert_eq!(
        twice.steps, steps,
        "each decoding step is one repeated step"
    );
    assert_eq!(again.1, vec![4 + steps as u32, 2 + steps as u32]);
    assert_eq!(again.1, once.1, "the lengths advance once per step");
    assert_eq!(again.0, once.0, "the same logits, to the bit");
}
