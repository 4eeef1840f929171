//! Parity of any `Kernels` backend with the CPU backend (the oracle), written once and
//! instantiated per backend by [`backend_parity_tests!`](crate::backend_parity_tests):
//! every kernel on fresh random inputs (never zeros), a whole-model forward and
//! backward pass on a small config, a decoding run, and ten training steps whose losses
//! must match.
//!
//! Tolerances compare the largest absolute difference with the largest magnitude of
//! the CPU result ([`assert_close`]): per-element relative error is meaningless where
//! sums cancel to near zero. Both backends compute in f32 but sum in different orders
//! (tiled GEMM, tree reductions, online softmax), so agreement is expected to about
//! 1e-6 for short sums, growing with the sum's length; each test states its bound.

use sage_backend_cpu::CpuBackend;
use sage_transformer::{
    AdamWStep, AttentionShape, CachedRows, Indices, Kernels, KvCache, LoraConfig, MatmulShape,
    ModelConfig, ProjectedRows, Projection, Tensor, Transformer,
};

/// Instantiates every parity test for the backend that `$make` builds: an expression
/// of type `Option<K>` where `K: Kernels`, `None` meaning the backend is unavailable
/// (the expression has already said why; the test then returns).
#[macro_export]
macro_rules! backend_parity_tests {
    ($make:expr) => {
        $crate::backend_parity_tests!(@tests $make;
            elementwise_ops, sum_squares, embedding, rmsnorm, matmul_all_layouts,
            matmul_shared_input, bias, rope, attention_training, attention_decoding,
            rope_append_kv,
            attention_cached_rows,
            kv_cache_buffers, swiglu,
            output_head,
            token_choice, adamw, errors_are_returned, freed_buffers_come_back_zeroed,
            model_forward_backward, lora_forward_backward, decoding_matches_cpu,
            continued_prefill_matches_cpu,
            ten_training_steps);
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::backend_parity::$name(|| $make)
            }
        )*
    };
}

/// A seeded xorshift generator for test inputs.
pub struct Rng(u64);

impl Rng {
    /// A generator from a nonzero seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-scale, scale), never exactly zero.
    pub fn value(&mut self, scale: f32) -> f32 {
        let unit = ((self.next_u64() >> 40) as f32 + 0.5) / (1u64 << 24) as f32;
        (2.0 * unit - 1.0) * scale
    }

    /// `len` values uniform in [-scale, scale).
    pub fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.value(scale)).collect()
    }

    /// `len` integers uniform in [0, below).
    pub fn ints(&mut self, len: usize, below: usize) -> Vec<u32> {
        (0..len)
            .map(|_| (self.next_u64() % below as u64) as u32)
            .collect()
    }
}

/// Fails unless max |got - want| <= tol * max |want| (and `got` has no NaN).
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-30);
    let (mut worst, mut at) = (0.0f32, 0);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let diff = (g - w).abs();
        assert!(!diff.is_nan(), "{what}[{i}]: got {g}, want {w}");
        if diff > worst {
            (worst, at) = (diff, i);
        }
    }
    assert!(
        worst <= tol * scale,
        "{what}: max error {worst} at [{at}] (got {}, want {}) exceeds {tol} x max |want| {scale}",
        got[at],
        want[at]
    );
}

/// The CPU oracle and the backend under test, holding the same tensors.
pub struct Both<K> {
    /// The oracle.
    pub cpu: CpuBackend,
    /// The backend under test.
    pub other: K,
}

/// Runs `$body` with `$k` bound to each backend in turn and `$i` to its index into
/// the `[cpu, other]` handle pairs, failing the test on an error.
macro_rules! on_both {
    ($both:expr, |$k:ident, $i:ident| $body:expr) => {{
        {
            let $k = &mut $both.cpu;
            let $i = 0;
            $body.expect("cpu backend");
        }
        {
            let $k = &mut $both.other;
            let $i = 1;
            $body.expect("backend under test");
        }
    }};
}

impl<K: Kernels> Both<K> {
    /// Both backends, or `None` when `make` finds none to test.
    pub fn new(make: impl FnOnce() -> Option<K>) -> Option<Both<K>> {
        Some(Both {
            cpu: CpuBackend::new(),
            other: make()?,
        })
    }

    /// A tensor holding `data` in each backend.
    pub fn upload(&mut self, data: &[f32]) -> [Tensor; 2] {
        [upload(&mut self.cpu, data), upload(&mut self.other, data)]
    }

    /// `rng.vec(len, scale)` in each backend.
    pub fn random(&mut self, rng: &mut Rng, len: usize, scale: f32) -> [Tensor; 2] {
        let data = rng.vec(len, scale);
        self.upload(&data)
    }

    /// An index range holding `data` in each backend.
    pub fn upload_indices(&mut self, data: &[u32]) -> [Indices; 2] {
        [
            upload_indices(&mut self.cpu, data),
            upload_indices(&mut self.other, data),
        ]
    }

    /// The contents of a tensor pair: (cpu, other).
    pub fn download(&mut self, t: [Tensor; 2]) -> (Vec<f32>, Vec<f32>) {
        (
            download(&mut self.cpu, t[0]),
            download(&mut self.other, t[1]),
        )
    }

    /// Fails unless the pair agrees within `tol` (see [`assert_close`]).
    pub fn check(&mut self, what: &str, t: [Tensor; 2], tol: f32) {
        let (want, got) = self.download(t);
        assert_close(what, &got, &want, tol);
    }
}

/// Allocates one buffer holding `data`.
pub fn upload<K: Kernels>(k: &mut K, data: &[f32]) -> Tensor {
    let tensor = Tensor::whole(k.alloc(data.len()).expect("alloc"), data.len());
    k.write(tensor, data).expect("write");
    tensor
}

/// Allocates one index buffer holding `data`.
pub fn upload_indices<K: Kernels>(k: &mut K, data: &[u32]) -> Indices {
    let indices = Indices::whole(k.alloc_indices(data.len()).expect("alloc"), data.len());
    k.write_indices(indices, data).expect("write");
    indices
}

/// The contents of `tensor`.
pub fn download<K: Kernels>(k: &mut K, tensor: Tensor) -> Vec<f32> {
    let mut out = vec![0.0; tensor.len];
    k.read(tensor, &mut out).expect("read");
    out
}

/// fill, copy, += and scale (on sub-ranges, so offsets are exercised) are exact in
/// f32 on any backend: tolerance 0.
pub fn elementwise_ops<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(1);
    let x = b.random(&mut rng, 1000, 2.0);
    let y = b.random(&mut rng, 1000, 2.0);
    let part = |t: [Tensor; 2], start, len| t.map(|t| t.slice(start, len));
    on_both!(b, |k, i| k
        .add_assign(part(x, 3, 500)[i], part(y, 400, 500)[i]));
    on_both!(b, |k, i| k.scale(part(x, 100, 777)[i], -1.7));
    on_both!(b, |k, i| k.copy(part(y, 0, 300)[i], part(x, 600, 300)[i]));
    on_both!(b, |k, i| k.fill(part(y, 950, 37)[i], 0.25));
    b.check("x", x, 0.0);
    b.check("y", y, 0.0);
}

/// Sums of squares of 5, 4096 + 1 and 300 000 elements (one, two and two levels of
/// blocks). The CPU sums in f64, the tree in f32: relative error ~ log2(n) eps, so 1e-5.
pub fn sum_squares<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(2);
    for len in [5, 4097, 300_000] {
        let x = b.random(&mut rng, len, 1.0);
        let want = b.cpu.sum_squares(x[0]).expect("cpu");
        let got = b.other.sum_squares(x[1]).expect("backend");
        assert_close(&format!("sum_squares of {len}"), &[got], &[want], 1e-5);
    }
}

/// The gather is exact (tolerance 0). The backward adds each repeated token's rows in
/// position order on both backends, also exact.
pub fn embedding<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(3);
    let (vocab, dim, n) = (29, 300, 70);
    // Few distinct ids, so tokens repeat.
    let ids = rng.ints(n, 11);
    let tokens = b.upload_indices(&ids.iter().map(|&t| t * 2 + 1).collect::<Vec<_>>());
    let table = b.random(&mut rng, vocab * dim, 1.0);
    let out = b.random(&mut rng, n * dim, 1.0);
    on_both!(b, |k, i| k
        .embedding_forward(out[i], table[i], tokens[i], dim));
    b.check("embedding out", out, 0.0);
    let dout = b.random(&mut rng, n * dim, 1.0);
    on_both!(b, |k, i| k
        .embedding_backward(table[i], dout[i], tokens[i], dim));
    b.check("embedding dtable", table, 0.0);
}

/// RMSNorm of rows of 37 and 300 (over one workgroup's width). Sums of a few hundred
/// products in a different order: 1e-5 of the largest value.
pub fn rmsnorm<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(4);
    for (rows, dim) in [(9, 37), (70, 300)] {
        let x = b.random(&mut rng, rows * dim, 2.0);
        let w: Vec<f32> = rng.vec(dim, 0.3).iter().map(|v| 1.0 + v).collect();
        let weight = b.upload(&w);
        let out = b.random(&mut rng, rows * dim, 1.0);
        let rstd = b.random(&mut rng, rows, 1.0);
        on_both!(b, |k, i| k
            .rmsnorm_forward(out[i], rstd[i], x[i], weight[i], dim, 1e-6));
        b.check("rmsnorm out", out, 1e-5);
        b.check("rmsnorm rstd", rstd, 1e-5);
        let dout = b.random(&mut rng, rows * dim, 1.0);
        let dx = b.random(&mut rng, rows * dim, 1.0);
        let dweight = b.random(&mut rng, dim, 1.0);
        on_both!(b, |k, i| k.rmsnorm_backward(
            dx[i], dweight[i], dout[i], x[i], weight[i], rstd[i], dim
        ));
        b.check("rmsnorm dx", dx, 1e-5);
        b.check("rmsnorm dweight", dweight, 1e-5);
    }
}

/// Every combination of transposes and accumulation, on shapes that are not
/// multiples of the tiles (and one over several tiles each way). Sums of up to 150
/// products of unit-sized values in another order: 1e-5 of the largest value.
pub fn matmul_all_layouts<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(5);
    for (m, n, k_dim) in [(1, 1, 1), (7, 5, 3), (67, 45, 33), (130, 70, 150)] {
        for layout in 0..8 {
            let shape = MatmulShape {
                m,
                n,
                k: k_dim,
                trans_a: layout & 1 != 0,
                trans_b: layout & 2 != 0,
                accumulate: layout & 4 != 0,
            };
            let a = b.random(&mut rng, m * k_dim, 1.0);
            let bm = b.random(&mut rng, k_dim * n, 1.0);
            let c = b.random(&mut rng, m * n, 1.0);
            on_both!(b, |k, i| k.matmul(c[i], a[i], bm[i], shape));
            b.check(&format!("matmul {shape:?}"), c, 1e-5);
        }
    }
}

/// Products of one input (`matmul_shared_input`: one strided batched GEMM on the CUDA
/// backend where the weights and outputs lie equally spaced, one GEMM each otherwise),
/// in every layout: two and three products whose weights and outputs are equal slices
/// of one buffer with a gap between them (spaced as a layer's k and v weights with
/// their biases between), and two whose weights are not equally spaced. 1e-5 of the
/// largest value, as `matmul`.
pub fn matmul_shared_input<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(25);
    let (m, n, k_dim, gap) = (37, 24, 19, 5);
    for layout in 0..8 {
        let shape = MatmulShape {
            m,
            n,
            k: k_dim,
            trans_a: layout & 1 != 0,
            trans_b: layout & 2 != 0,
            accumulate: layout & 4 != 0,
        };
        let a = b.random(&mut rng, m * k_dim, 1.0);
        for (count, weight_starts) in [
            (2, vec![0, k_dim * n + gap]),
            (3, vec![0, k_dim * n + gap, 2 * (k_dim * n + gap)]),
            (2, vec![0, k_dim * n + 2 * gap]),
        ] {
            let weights = b.random(&mut rng, 3 * (k_dim * n + 2 * gap), 1.0);
            let outputs = b.random(&mut rng, count * (m * n + gap), 1.0);
            let at = |i: usize| {
                let bm: Vec<Tensor> = (weight_starts.iter())
                    .map(|&start| weights[i].slice(start, k_dim * n))
                    .collect();
                let c: Vec<Tensor> = (0..count)
                    .map(|j| outputs[i].slice(j * (m * n + gap), m * n))
                    .collect();
                (c, bm)
            };
            on_both!(b, |kernels, i| {
                let (c, bm) = at(i);
                kernels.matmul_shared_input(&c, a[i], &bm, shape)
            });
            let what = format!("matmul_shared_input {shape:?}, weights at {weight_starts:?}");
            b.check(&what, outputs, 1e-5);
        }
    }
    // Refused, naming the problem: fewer weights than outputs, two outputs overlapping.
    let shape = MatmulShape {
        m,
        n,
        k: k_dim,
        trans_a: false,
        trans_b: true,
        accumulate: false,
    };
    let a = b.random(&mut rng, m * k_dim, 1.0)[1];
    let w = b.random(&mut rng, k_dim * n, 1.0)[1];
    let c = b.random(&mut rng, 2 * m * n, 1.0)[1];
    let halves = [c.slice(0, m * n), c.slice(m * n, m * n)];
    let overlapping = [c.slice(0, m * n), c.slice(1, m * n)];
    for (outputs, weights, why) in [
        (
            &halves[..],
            &[w][..],
            "2 outputs `c` but 1 second operands `b`",
        ),
        (&overlapping[..], &[w, w][..], "tensors overlap"),
    ] {
        let call = b.other.matmul_shared_input(outputs, a, weights, shape);
        let refused = call.expect_err(why).to_string();
        assert!(refused.contains(why), "{refused}");
    }
}

/// Bias add (exact) and the bias gradient over 150 rows (three row blocks): column
/// sums of 150 values in another order, 1e-5.
pub fn bias<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(6);
    let (rows, width) = (150, 300);
    let out = b.random(&mut rng, rows * width, 1.0);
    let bias = b.random(&mut rng, width, 1.0);
    on_both!(b, |k, i| k.add_bias(out[i], bias[i]));
    b.check("add_bias", out, 0.0);
    on_both!(b, |k, i| k.bias_backward(bias[i], out[i]));
    b.check("bias_backward", bias, 1e-5);
}

/// Rotations at positions up to 3000 (angles in the thousands of radians), forward
/// then backward, then the forward with a bias added first (`add_bias_rope_forward`, one
/// pass on the CUDA backend; the same sums on every backend). The angles are the same f32 products on both backends; sine and
/// cosine agree to a few ulp, so 1e-5 of the largest value.
pub fn rope<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(7);
    let (rows, heads, hd) = (40, 3, 16);
    let mut pos = rng.ints(rows, 3000);
    pos[0] = 0;
    let positions = b.upload_indices(&pos);
    let x = b.random(&mut rng, rows * heads * hd, 1.0);
    on_both!(b, |k, i| k.rope_forward(
        x[i],
        positions[i],
        heads,
        hd,
        10_000.0
    ));
    b.check("rope forward", x, 1e-5);
    let dx = b.random(&mut rng, rows * heads * hd, 1.0);
    on_both!(b, |k, i| k.rope_backward(
        dx[i],
        positions[i],
        heads,
        hd,
        1e6
    ));
    b.check("rope backward", dx, 1e-5);
    let y = b.random(&mut rng, rows * heads * hd, 1.0);
    let bias = b.random(&mut rng, heads * hd, 1.0);
    on_both!(b, |k, i| k.add_bias_rope_forward(
        y[i],
        bias[i],
        positions[i],
        heads,
        hd,
        10_000.0
    ));
    b.check("add_bias_rope_forward", y, 1e-5);
}

/// Causal GQA attention over packed sequences of 70, 1 and 9 tokens (the first crosses
/// the 64-key block), forward and backward. Online versus two-pass softmax and sums
/// over up to 70 keys: 1e-5 for outputs, 1e-4 for gradients (two chained sums).
pub fn attention_training<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(8);
    let shape = AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
    };
    let seq_starts = [0, 70, 71, 80];
    let n = 80;
    let (qw, kvw) = (4 * 8, 2 * 8);
    let q = b.random(&mut rng, n * qw, 1.5);
    let k = b.random(&mut rng, n * kvw, 1.5);
    let v = b.random(&mut rng, n * kvw, 1.0);
    let out = b.random(&mut rng, n * qw, 1.0);
    let lse = b.random(&mut rng, n * 4, 1.0);
    on_both!(b, |kk, i| kk.attention_forward(
        out[i],
        lse[i],
        q[i],
        k[i],
        v[i],
        &seq_starts,
        shape
    ));
    b.check("attention out", out, 1e-5);
    b.check("attention lse", lse, 1e-5);
    let dout = b.random(&mut rng, n * qw, 1.0);
    let dq = b.random(&mut rng, n * qw, 1.0);
    let dk = b.random(&mut rng, n * kvw, 1.0);
    let dv = b.random(&mut rng, n * kvw, 1.0);
    on_both!(b, |kk, i| kk.attention_backward(
        dq[i],
        dk[i],
        dv[i],
        dout[i],
        q[i],
        k[i],
        v[i],
        out[i],
        lse[i],
        &seq_starts,
        shape
    ));
    b.check("attention dq", dq, 1e-4);
    b.check("attention dk", dk, 1e-4);
    b.check("attention dv", dv, 1e-4);
}

/// Token choice on the backend against the host's rule (`sampling::choose`), greedy and
/// sampled, on 6 rows of 1,000 and 5,003 logits: the same tokens, the log-probabilities
/// to 1e-5 of their size (sums of thousands of terms in f32 against f64). The uniform
/// numbers are exact in f32. Row 1 holds two equal maxima, row 5 a NaN (token -1, NaN).
/// Bad arguments are refused: a uniform number of 1, a negative temperature, a missing
/// uniform number when sampling, logits that are not whole rows.
pub fn token_choice<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut k) = make() else { return };
    let mut rng = Rng::new(29);
    let rows = 6;
    for (vocab, temperature) in [(1000, 0.0), (1000, 1.0), (5003, 0.7)] {
        let (logits, uniforms) = choice_inputs(&mut rng, rows, vocab);
        let on_device = upload(&mut k, &logits);
        let choices = upload(&mut k, &vec![0.0; 2 * rows]);
        k.choose_tokens(choices, on_device, &uniforms, temperature)
            .expect("choose_tokens");
        let got = download(&mut k, choices);
        check_choices(&got, &logits, vocab, temperature, &uniforms);
        if temperature == 0.0 {
            assert_eq!(got[2], 3.0, "the lower of two equal maxima");
        }
    }
    let logits = upload(&mut k, &rng.vec(2 * 10, 1.0));
    let choices = upload(&mut k, &[0.0; 4]);
    assert!(k.choose_tokens(choices, logits, &[0.5, 1.0], 1.0).is_err());
    assert!(k.choose_tokens(choices, logits, &[0.5, 0.5], -1.0).is_err());
    assert!(k.choose_tokens(choices, logits, &[0.5], 1.0).is_err());
    let ragged = upload(&mut k, &rng.vec(21, 1.0));
    assert!(k.choose_tokens(choices, ragged, &[], 0.0).is_err());
    k.choose_tokens(choices, logits, &[], 0.0)
        .expect("greedy needs no uniform numbers");
}

/// Token-choice inputs: `rows` (at least 6) rows of `vocab` logits uniform in [-4, 4),
/// row 1 with two equal maxima (ids 3 and 7), row 5 holding a NaN; and one uniform number
/// per row in [0, 1), exact in f32.
pub fn choice_inputs(rng: &mut Rng, rows: usize, vocab: usize) -> (Vec<f32>, Vec<f64>) {
    let mut logits = rng.vec(rows * vocab, 4.0);
    logits[vocab + 3] = 9.0;
    logits[vocab + 7] = 9.0;
    logits[5 * vocab + 2] = f32::NAN;
    let uniforms = (0..rows).map(|_| f64::from(rng.value(0.5) + 0.5)).collect();
    (logits, uniforms)
}

/// Fails unless `choices[rows, 2]` hold, for each row of `logits`, the token the host's
/// rule (`sampling::choose`) picks and its log-probability to 1e-5 of its size, or
/// (-1, NaN) for a row it picks nothing from. Returns whether some row's token is not
/// that row's maximum (a draw, not the greedy choice).
pub fn check_choices(
    choices: &[f32],
    logits: &[f32],
    vocab: usize,
    temperature: f32,
    uniforms: &[f64],
) -> bool {
    use sage_transformer::sampling;

    let mut off_the_maximum = false;
    for (b, row) in logits.chunks_exact(vocab).enumerate() {
        let (token, logprob) = (choices[2 * b], choices[2 * b + 1]);
        let what = format!("vocab {vocab}, temperature {temperature}, row {b}");
        match sampling::choose(row, temperature, uniforms[b]) {
            None => assert!(
                token == -1.0 && logprob.is_nan(),
                "{what}: ({token}, {logprob})"
            ),
            Some(want) => {
                assert_eq!(token, want.token as f32, "{what}");
                let bound = 1e-5 * want.logprob.abs().max(1.0);
                assert!(
                    (logprob - want.logprob).abs() <= bound,
                    "{what}: {logprob} vs {}",
                    want.logprob
                );
                off_the_maximum |= want.token as usize != sampling::argmax(row);
            }
        }
    }
    off_the_maximum
}

/// Appending rows to KV caches (exact) and one decoding step over caches filled to
/// different lengths, one longer than a key block: 1e-5.
pub fn attention_decoding<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(9);
    let shape = AttentionShape {
        heads: 6,
        kv_heads: 3,
        head_dim: 10,
    };
    let (batch, capacity, kvw, qw) = (3, 80, 30, 60);
    let k_cache = b.random(&mut rng, batch * capacity * kvw, 1.0);
    let v_cache = b.random(&mut rng, batch * capacity * kvw, 1.0);
    let k_new = b.random(&mut rng, batch * kvw, 1.0);
    let v_new = b.random(&mut rng, batch * kvw, 1.0);
    let filled = [0, 70, 79];
    on_both!(b, |k, i| k.kv_cache_append(
        k_cache[i], v_cache[i], k_new[i], v_new[i], &filled, capacity, kvw
    ));
    b.check("k_cache", k_cache, 0.0);
    b.check("v_cache", v_cache, 0.0);
    let q = b.random(&mut rng, batch * qw, 1.5);
    let out = b.random(&mut rng, batch * qw, 1.0);
    let lengths = [1, 71, 80];
    on_both!(b, |k, i| k.attention_decode(
        out[i], q[i], k_cache[i], v_cache[i], &lengths, capacity, shape
    ));
    b.check("attention_decode out", out, 1e-5);
}

/// A decoding step's biases, rotations and cache append (`rope_append_kv`: one kernel
/// on the CUDA backend, the separate calls elsewhere), with the three biases and with
/// none, into caches filled to 0, 70 and 79 of 80 rows, at positions up to 3000: 1e-5 of
/// the largest value, as for `rope` (the same f32 angles, sine and cosine within a few
/// ulp; the bias sums and the untouched cache rows exact).
pub fn rope_append_kv<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(23);
    let shape = AttentionShape {
        heads: 6,
        kv_heads: 3,
        head_dim: 10,
    };
    let (batch, capacity, kvw, qw) = (3, 80, 30, 60);
    let filled = [0, 70, 79];
    let positions = b.upload_indices(&rng.ints(batch, 3000));
    for with_biases in [true, false] {
        let caches = [(); 2].map(|_| b.random(&mut rng, batch * capacity * kvw, 1.0));
        let [q, k, v] = [qw, kvw, kvw].map(|width| b.random(&mut rng, batch * width, 1.0));
        let mut biases = [None; 3];
        if with_biases {
            for (bias, width) in biases.iter_mut().zip([qw, kvw, kvw]) {
                *bias = Some(b.random(&mut rng, width, 0.5));
            }
        }
        on_both!(b, |kernels, i| kernels.rope_append_kv(
            ProjectedRows {
                q: q[i],
                k: k[i],
                v: v[i],
                biases: biases.map(|bias| bias.map(|pair| pair[i])),
            },
            positions[i],
            caches[0][i],
            caches[1][i],
            &filled,
            capacity,
            shape,
            1e6
        ));
        let what = if with_biases {
            "with biases"
        } else {
            "without"
        };
        b.check(&format!("rope_append_kv q, {what}"), q, 1e-5);
        b.check(&format!("rope_append_kv k cache, {what}"), caches[0], 1e-5);
        b.check(&format!("rope_append_kv v cache, {what}"), caches[1], 1e-5);
    }
    // Refused, naming the problem: a full cache, a short bias, k written over v.
    let caches = [(); 2].map(|_| b.random(&mut rng, batch * capacity * kvw, 1.0)[1]);
    let [q, k, v] = [qw, kvw, kvw].map(|width| b.random(&mut rng, batch * width, 1.0)[1]);
    let short_bias = b.random(&mut rng, qw - 1, 1.0)[1];
    let rows = ProjectedRows {
        q,
        k,
        v,
        biases: [None; 3],
    };
    let cases = [
        (rows, [0, 80, 1], "the cache of sequence 1 is full"),
        (
            ProjectedRows {
                biases: [Some(short_bias), None, None],
                ..rows
            },
            filled,
            "`q_bias` has 59 elements, expected 60",
        ),
        (ProjectedRows { v: k, ..rows }, filled, "tensors overlap"),
    ];
    for (rows, lengths, why) in cases {
        let call = b.other.rope_append_kv(
            rows,
            positions[1],
            caches[0],
            caches[1],
            &lengths,
            capacity,
            shape,
            1e6,
        );
        let refused = call.expect_err(why).to_string();
        assert!(refused.contains(why), "{refused}");
    }
}

/// Query rows against KV caches (`attention_cached`), several rows reading one
/// sequence, in no order, each to its own number of rows, against the CPU's decoding
/// attention of each row alone (its sequence's caches as a batch of one): the rows of
/// a continued prefill, and the CPU's own kernel for them against its decoding one.
/// To 1e-5 of the largest magnitude: f32 sums over at most 80 keys, in GEMM order on
/// one side and in dot products on the other.
pub fn attention_cached_rows<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(19);
    let shape = AttentionShape {
        heads: 6,
        kv_heads: 3,
        head_dim: 10,
    };
    let (batch, capacity, kvw, qw) = (3, 80, 30, 60);
    let k_cache = b.random(&mut rng, batch * capacity * kvw, 1.0);
    let v_cache = b.random(&mut rng, batch * capacity * kvw, 1.0);
    let sequences = [2, 0, 2, 2, 1, 0, 2, 1, 1, 2];
    let attended = [5, 1, 6, 80, 33, 2, 7, 34, 40, 79];
    let rows = sequences.len();
    let q = b.random(&mut rng, rows * qw, 1.5);
    let out = b.random(&mut rng, rows * qw, 1.0);
    b.other
        .attention_cached(
            out[1], q[1], k_cache[1], v_cache[1], &sequences, &attended, capacity, shape,
        )
        .expect("attention_cached");
    let span = capacity * kvw;
    for (r, (&sequence, &length)) in sequences.iter().zip(&attended).enumerate() {
        let [k_seq, v_seq] =
            [k_cache[0], v_cache[0]].map(|c| c.slice(sequence as usize * span, span));
        b.cpu
            .attention_decode(
                out[0].slice(r * qw, qw),
                q[0].slice(r * qw, qw),
                k_seq,
                v_seq,
                &[length],
                capacity,
                shape,
            )
            .expect("cpu decode");
    }
    b.check("attention_cached out", out, 1e-5);
    let bad = b.other.attention_cached(
        out[1],
        q[1],
        k_cache[1],
        v_cache[1],
        &[0, 3],
        &[1, 1],
        capacity,
        shape,
    );
    assert!(bad.is_err(), "a row reading sequence 3 of 3 is refused");
}

/// KV-cache buffers (`alloc_kv_cache`) as decoding uses them, with caches the backend
/// holds in f32: see [`kv_cache_rounded`].
pub fn kv_cache_buffers<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    kv_cache_rounded(make, |x| x);
}

/// KV-cache buffers (`alloc_kv_cache`) used as decoding uses them: prompt rows copied in
/// from ordinary buffers (a prefill), one row appended per sequence (a decoding step),
/// then attention over caches filled to 2, 71 and 301 rows (past one split of 256 rows)
/// for 7 query heads per key/value head at width 64 and for 18 heads on one at width
/// 16 (a group wider than the split kernel holds), then over two of the sequences copied
/// from cache to cache into a smaller cache, and over one moved down within its own
/// cache. The backend under test may hold a cache's elements at lower precision:
/// `round` maps a value to the one it holds (the identity for an f32 cache), and the
/// CPU attends over the rounded values. 1e-5: the same numbers and f32 arithmetic, sums
/// in another order.
pub fn kv_cache_rounded<K: Kernels>(make: impl FnOnce() -> Option<K>, round: fn(f32) -> f32) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(31);
    let (batch, capacity) = (3, 320);
    let prompt_rows = [1usize, 70, 300];
    for shape in [
        AttentionShape {
            heads: 14,
            kv_heads: 2,
            head_dim: 64,
        },
        AttentionShape {
            heads: 18,
            kv_heads: 1,
            head_dim: 16,
        },
    ] {
        let kvw = shape.kv_heads * shape.head_dim;
        let caches = [(); 2].map(|_| {
            let len = batch * capacity * kvw;
            let cpu = b.cpu.alloc_kv_cache(len).expect("cpu cache");
            let other = b.other.alloc_kv_cache(len).expect("cache");
            [Tensor::whole(cpu, len), Tensor::whole(other, len)]
        });
        let rounded = |data: &[f32]| data.iter().map(|&x| round(x)).collect::<Vec<f32>>();
        // The CPU gets the rounded rows, the backend under test the rows themselves.
        let pair = |b: &mut Both<K>, data: &[f32]| {
            [
                upload(&mut b.cpu, &rounded(data)),
                upload(&mut b.other, data),
            ]
        };
        for (seq, &rows) in prompt_rows.iter().enumerate() {
            for cache in caches {
                let fresh = pair(&mut b, &rng.vec(rows * kvw, 1.0));
                let at = seq * capacity * kvw;
                on_both!(b, |k, i| k.copy(cache[i].slice(at, rows * kvw), fresh[i]));
            }
        }
        let k_new = pair(&mut b, &rng.vec(batch * kvw, 1.0));
        let v_new = pair(&mut b, &rng.vec(batch * kvw, 1.0));
        let filled = prompt_rows.map(|r| r as u32);
        let [k_cache, v_cache] = caches;
        on_both!(b, |k, i| k.kv_cache_append(
            k_cache[i], v_cache[i], k_new[i], v_new[i], &filled, capacity, kvw
        ));
        let q = b.random(&mut rng, batch * shape.heads * shape.head_dim, 1.5);
        let out = b.random(&mut rng, batch * shape.heads * shape.head_dim, 1.0);
        let lengths = filled.map(|l| l + 1);
        on_both!(b, |k, i| k.attention_decode(
            out[i], q[i], k_cache[i], v_cache[i], &lengths, capacity, shape
        ));
        b.check(
            &format!("attention_decode over KV-cache buffers, {shape:?}"),
            out,
            1e-5,
        );
        // Sequences 2 and 0 copied from cache to cache into a smaller one, as
        // `Transformer::gather_sequences` does for a generation from held caches.
        let kept = [2usize, 0];
        let smaller = [(); 2].map(|_| {
            let len = kept.len() * capacity * kvw;
            let cpu = b.cpu.alloc_kv_cache(len).expect("cpu cache");
            let other = b.other.alloc_kv_cache(len).expect("cache");
            [Tensor::whole(cpu, len), Tensor::whole(other, len)]
        });
        for (row, &seq) in kept.iter().enumerate() {
            let rows = lengths[seq] as usize * kvw;
            for (from, to) in caches.iter().zip(&smaller) {
                let (at, to_at) = (seq * capacity * kvw, row * capacity * kvw);
                on_both!(b, |k, i| k
                    .copy(to[i].slice(to_at, rows), from[i].slice(at, rows)));
            }
        }
        let q = b.random(&mut rng, kept.len() * shape.heads * shape.head_dim, 1.5);
        let out = b.random(&mut rng, kept.len() * shape.heads * shape.head_dim, 1.0);
        let kept_lengths = kept.map(|seq| lengths[seq]);
        let [k_smaller, v_smaller] = smaller;
        on_both!(b, |k, i| k.attention_decode(
            out[i],
            q[i],
            k_smaller[i],
            v_smaller[i],
            &kept_lengths,
            capacity,
            shape
        ));
        b.check(
            &format!("attention_decode over a cache copied from a cache, {shape:?}"),
            out,
            1e-5,
        );
        // Sequence 2 moved down to row 0 within its own cache, as
        // `Transformer::retain_sequences` keeps it when sequences 0 and 1 finish.
        let rows = lengths[2] as usize * kvw;
        for cache in caches {
            on_both!(b, |k, i| k.copy(
                cache[i].slice(0, rows),
                cache[i].slice(2 * capacity * kvw, rows)
            ));
        }
        let q = b.random(&mut rng, shape.heads * shape.head_dim, 1.5);
        let out = b.random(&mut rng, shape.heads * shape.head_dim, 1.0);
        let [k_first, v_first] = caches.map(|cache| cache.map(|t| t.slice(0, capacity * kvw)));
        on_both!(b, |k, i| k.attention_decode(
            out[i],
            q[i],
            k_first[i],
            v_first[i],
            &[lengths[2]],
            capacity,
            shape
        ));
        b.check(
            &format!("attention_decode over a sequence moved down in its cache, {shape:?}"),
            out,
            1e-5,
        );
    }
}

/// SwiGLU forward and backward: elementwise with exp, whose GPU implementations may
/// differ from the CPU's by a few ulp: 1e-5.
pub fn swiglu<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(10);
    let len = 3000;
    let gate = b.random(&mut rng, len, 6.0);
    let up = b.random(&mut rng, len, 2.0);
    let out = b.random(&mut rng, len, 1.0);
    on_both!(b, |k, i| k.swiglu_forward(out[i], gate[i], up[i]));
    b.check("swiglu out", out, 1e-5);
    let dout = b.random(&mut rng, len, 1.0);
    let dgate = b.random(&mut rng, len, 1.0);
    let dup = b.random(&mut rng, len, 1.0);
    on_both!(b, |k, i| k
        .swiglu_backward(dgate[i], dup[i], dout[i], gate[i], up[i]));
    b.check("swiglu dgate", dgate, 1e-5);
    b.check("swiglu dup", dup, 1e-5);
}

/// The fused output head (log-probs and their weighted backward, some weights zero)
/// and full logits, with V = 300 over more than one reduction width. Log-sum-exps
/// over 300 logits and GEMMs over 40 rows: 1e-5, and 1e-4 for the gradients.
pub fn output_head<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(11);
    let (rows, dim, vocab) = (40, 24, 300);
    let hidden = b.random(&mut rng, rows * dim, 1.0);
    let lm_head = b.random(&mut rng, vocab * dim, 1.0);
    let targets = b.upload_indices(&rng.ints(rows, vocab));
    let logp = b.random(&mut rng, rows, 1.0);
    let lse = b.random(&mut rng, rows, 1.0);
    on_both!(b, |k, i| k.logprob_forward(
        logp[i], lse[i], hidden[i], lm_head[i], targets[i]
    ));
    b.check("logp", logp, 1e-5);
    b.check("lse", lse, 1e-5);
    let mut w = rng.vec(rows, 1.0);
    for x in w.iter_mut().step_by(3) {
        *x = 0.0;
    }
    let weights = b.upload(&w);
    let dhidden = b.random(&mut rng, rows * dim, 1.0);
    let dlm_head = b.random(&mut rng, vocab * dim, 1.0);
    on_both!(b, |k, i| k.logprob_backward(
        dhidden[i],
        Some(dlm_head[i]),
        weights[i],
        hidden[i],
        lm_head[i],
        targets[i],
        lse[i]
    ));
    b.check("dhidden", dhidden, 1e-4);
    b.check("dlm_head", dlm_head, 1e-4);
    let logits = b.random(&mut rng, 3 * vocab, 1.0);
    let three = hidden.map(|t| t.slice(dim, 3 * dim));
    on_both!(b, |k, i| k.logits(logits[i], three[i], lm_head[i], dim));
    b.check("logits", logits, 1e-5);
}

/// Three AdamW steps with weight decay: the same f32 formula per element, but sqrt
/// and division may round differently on a GPU: 1e-5.
pub fn adamw<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let mut rng = Rng::new(12);
    let len = 5000;
    let params = b.random(&mut rng, len, 1.0);
    let m = b.random(&mut rng, len, 0.1);
    let v: Vec<f32> = rng.vec(len, 0.01).iter().map(|x| x.abs()).collect();
    let v = b.upload(&v);
    for step in 1..=3 {
        let grads = b.random(&mut rng, len, 1.0);
        let hyper = AdamWStep {
            learning_rate: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            step,
        };
        on_both!(b, |k, i| k.adamw(params[i], grads[i], m[i], v[i], hyper));
    }
    b.check("params", params, 1e-5);
    b.check("m", m, 1e-5);
    b.check("v", v, 1e-5);
}

/// Bad handles, ranges, shapes and overlaps come back as errors, not panics.
pub fn errors_are_returned<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let k = &mut b.other;
    let t = upload(k, &[1.0, 2.0, 3.0, 4.0]);
    assert!(
        k.read(t.slice(2, 3), &mut [0.0; 3]).is_err(),
        "out of range"
    );
    assert!(k.write(t, &[1.0]).is_err(), "length mismatch");
    assert!(
        k.add_assign(t.slice(0, 2), t.slice(1, 2)).is_err(),
        "overlap"
    );
    let shape = MatmulShape {
        m: 2,
        n: 2,
        k: 3,
        trans_a: false,
        trans_b: false,
        accumulate: false,
    };
    let c = upload(k, &[0.0; 4]);
    assert!(k.matmul(c, t, t, shape).is_err(), "matmul shape");
    let seq = [0, 3];
    let attn = AttentionShape {
        heads: 3,
        kv_heads: 2,
        head_dim: 2,
    };
    assert!(
        k.attention_forward(c, c, t, t, t, &seq, attn).is_err(),
        "bad heads"
    );
    k.free(t.buffer).expect("free");
    assert!(k.fill(t, 0.0).is_err(), "freed buffer");
    assert!(k.free(t.buffer).is_err(), "double free");
}

/// A buffer allocated after another of the same size was freed (which a backend may
/// recycle) is zero-filled, as `alloc` promises; so is an index buffer.
pub fn freed_buffers_come_back_zeroed<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let k = &mut b.other;
    for round in 0..3 {
        let t = upload(k, &vec![1.5; 1000]);
        let i = upload_indices(k, &[7; 300]);
        k.free(t.buffer).expect("free");
        k.free_indices(i.buffer).expect("free");
        let again = Tensor::whole(k.alloc(1000).expect("alloc"), 1000);
        assert!(
            download(k, again).iter().all(|&x| x == 0.0),
            "round {round}: a new buffer is not zero"
        );
        let indices = k.alloc_indices(300).expect("alloc");
        let probe = upload(k, &[0.5; 300]);
        let rows = Tensor::whole(k.alloc(300).expect("alloc"), 300);
        // Every id 0 gathers row 0 of a one-row table: the result is the probe row's
        // first element everywhere only if every id is 0.
        k.embedding_forward(rows, probe.slice(0, 1), Indices::whole(indices, 300), 1)
            .expect("gather");
        assert!(
            download(k, rows).iter().all(|&x| x == 0.5),
            "round {round}: a new index buffer is not zero"
        );
    }
}

/// A small model: V 53, D 48, I 80, 2 layers, 4 heads of 12, 2 kv heads.
pub fn small_config(tied: bool) -> ModelConfig {
    ModelConfig {
        vocab_size: 53,
        hidden_size: 48,
        intermediate_size: 80,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 128,
        tie_word_embeddings: tied,
        qkv_bias: true,
    }
}

/// Random parameters: weights ~ U(-0.3, 0.3), norm weights ~ 1 + U(-0.2, 0.2).
pub fn random_params(model: &Transformer, rng: &mut Rng) -> Vec<f32> {
    let mut params = rng.vec(model.params().len, 0.3);
    let layout = model.layout();
    let norms = layout
        .layers
        .iter()
        .flat_map(|l| [l.input_norm, l.post_attention_norm])
        .chain([layout.final_norm]);
    for slot in norms {
        for p in &mut params[slot.offset..slot.offset + slot.len] {
            *p = 1.0 + 0.6 * *p;
        }
    }
    params
}

/// The same random model in both backends.
fn models<K: Kernels>(b: &mut Both<K>, config: ModelConfig, seed: u64) -> [Transformer; 2] {
    let mut rng = Rng::new(seed);
    let cpu = Transformer::new(&mut b.cpu, config.clone()).expect("cpu model");
    let other = Transformer::new(&mut b.other, config).expect("model");
    let params = random_params(&cpu, &mut rng);
    b.cpu.write(cpu.params(), &params).expect("cpu write");
    b.other.write(other.params(), &params).expect("write");
    [cpu, other]
}

/// A packed batch of sequences of 20, 9 and 1 tokens with random targets.
fn packed_batch(rng: &mut Rng, vocab: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    (
        rng.ints(30, vocab),
        rng.ints(30, vocab),
        vec![0, 20, 29, 30],
    )
}

/// Sets `values[t]` to 0 wherever `scored[t]` is false.
fn zero_unscored(values: &mut [f32], scored: &[bool]) {
    for (value, _) in values.iter_mut().zip(scored).filter(|(_, &s)| !s) {
        *value = 0.0;
    }
}

/// One forward and backward pass of the small model (tied and untied) on a packed
/// batch: log-probs to 1e-5 and every gradient to 1e-4 of its slab's largest value
/// (the chain through two layers compounds the kernels' rounding differences). Run
/// twice: with the output head on every row, and with the other backend scoring two
/// rows in three (`forward_scored`, weights 0 elsewhere) against the CPU's full pass.
pub fn model_forward_backward<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    for (tied, some_rows) in [(true, false), (false, false), (true, true), (false, true)] {
        let config = small_config(tied);
        let mut rng = Rng::new(13 + tied as u64);
        let [mut cpu, mut other] = models(&mut b, config.clone(), 14);
        let (tokens, targets, starts) = packed_batch(&mut rng, config.vocab_size);
        let scored: Vec<bool> = (0..tokens.len())
            .map(|t| !some_rows || t % 3 != 0)
            .collect();
        let mut weights = rng.vec(tokens.len(), 1.0);
        zero_unscored(&mut weights, &scored);
        let mut want = cpu
            .forward(&mut b.cpu, &tokens, &targets, &starts)
            .expect("cpu");
        let got = other
            .forward_scored(&mut b.other, &tokens, &targets, &starts, &scored)
            .expect("forward");
        zero_unscored(&mut want, &scored);
        assert_close("model logp", &got, &want, 1e-5);
        cpu.backward(&mut b.cpu, &weights).expect("cpu backward");
        other.backward(&mut b.other, &weights).expect("backward");
        let want = download(&mut b.cpu, cpu.grads());
        let got = download(&mut b.other, other.grads());
        for (name, slot) in cpu.layout().named() {
            let range = slot.offset..slot.offset + slot.len;
            assert_close(
                &format!("grad {name} (tied {tied}, some rows {some_rows})"),
                &got[range.clone()],
                &want[range],
                1e-4,
            );
        }
    }
}

/// The small model with rank-3 adapters on q, v, o and down (random A and B): the merged
/// weights to 1e-6 of their largest value, log-probs to 1e-5 and the adapters'
/// gradients to 1e-4 (the model's tolerances above), and the merged weights again after
/// new adapter values (what an optimizer step leads to).
pub fn lora_forward_backward<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    for tied in [true, false] {
        let config = small_config(tied);
        let mut rng = Rng::new(23 + tied as u64);
        let [mut cpu, mut other] = models(&mut b, config.clone(), 24);
        let lora = LoraConfig {
            rank: 3,
            alpha: 6.0,
            targets: vec![
                Projection::Q,
                Projection::V,
                Projection::O,
                Projection::Down,
            ],
        };
        let slab = cpu.layout().total;
        let adapters = rng.vec(
            sage_transformer::AdapterLayout::new(cpu.layout(), &lora).total,
            0.3,
        );
        cpu.enable_lora(&mut b.cpu, lora.clone(), &adapters)
            .expect("cpu lora");
        other
            .enable_lora(&mut b.other, lora, &adapters)
            .expect("lora");
        let want = download(&mut b.cpu, cpu.params());
        assert_eq!(want.len(), slab);
        assert_close(
            "merged weights",
            &download(&mut b.other, other.params()),
            &want,
            1e-6,
        );
        let (tokens, targets, starts) = packed_batch(&mut rng, config.vocab_size);
        let weights = rng.vec(tokens.len(), 1.0);
        let want = cpu
            .forward(&mut b.cpu, &tokens, &targets, &starts)
            .expect("cpu");
        let got = other
            .forward(&mut b.other, &tokens, &targets, &starts)
            .expect("forward");
        assert_close("lora logp", &got, &want, 1e-5);
        cpu.backward(&mut b.cpu, &weights).expect("cpu backward");
        other.backward(&mut b.other, &weights).expect("backward");
        let grads = |b: &mut Both<K>, i: usize| match i {
            0 => download(&mut b.cpu, cpu.adapter_grads().expect("cpu adapters")),
            _ => download(&mut b.other, other.adapter_grads().expect("adapters")),
        };
        let (want, got) = (grads(&mut b, 0), grads(&mut b, 1));
        let layout = cpu.adapter_layout().expect("cpu layout").clone();
        for (name, slot) in layout.named() {
            let range = slot.offset..slot.offset + slot.len;
            assert_close(
                &format!("grad {name} (tied {tied})"),
                &got[range.clone()],
                &want[range],
                1e-4,
            );
        }
        let updated = rng.vec(layout.total, 0.3);
        b.cpu
            .write(cpu.adapter_params().expect("cpu adapters"), &updated)
            .expect("cpu write");
        b.other
            .write(other.adapter_params().expect("adapters"), &updated)
            .expect("write");
        cpu.merge_adapters(&mut b.cpu).expect("cpu merge");
        other.merge_adapters(&mut b.other).expect("merge");
        let want = download(&mut b.cpu, cpu.params());
        assert_close(
            "merged again",
            &download(&mut b.other, other.params()),
            &want,
            1e-6,
        );
    }
}

/// Prefill and five decoding steps of two sequences: the logits of every step to
/// 1e-5 of their largest magnitude; then two steps that pick their tokens on the
/// backend (`decode_step_choosing`), greedy and sampled: the CPU's tokens.
pub fn decoding_matches_cpu<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let config = small_config(false);
    let mut rng = Rng::new(15);
    let [mut cpu, mut other] = models(&mut b, config.clone(), 16);
    let mut cpu_cache = KvCache::new(&mut b.cpu, &cpu, 2, 16).expect("cpu cache");
    let mut cache = KvCache::new(&mut b.other, &other, 2, 16).expect("cache");
    let prompts = [
        rng.ints(5, config.vocab_size),
        rng.ints(2, config.vocab_size),
    ];
    let prompts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let want = cpu
        .prefill(&mut b.cpu, &mut cpu_cache, &prompts)
        .expect("cpu");
    let got = other
        .prefill(&mut b.other, &mut cache, &prompts)
        .expect("prefill");
    assert_close("prefill logits", &got, &want, 1e-5);
    for step in 0..5 {
        let next = rng.ints(2, config.vocab_size);
        let want = cpu
            .decode_step(&mut b.cpu, &mut cpu_cache, &next)
            .expect("cpu");
        let got = other
            .decode_step(&mut b.other, &mut cache, &next)
            .expect("decode");
        assert_close(&format!("decode step {step} logits"), &got, &want, 1e-5);
    }
    // A step that picks its tokens on the backend: greedy, then sampled at fixed
    // uniform numbers; the same tokens, log-probabilities to 1e-5.
    for (temperature, uniforms) in [(0.0, vec![]), (1.0, vec![0.25, 0.75])] {
        let next = rng.ints(2, config.vocab_size);
        let want = cpu
            .decode_step_choosing(&mut b.cpu, &mut cpu_cache, &next, temperature, &uniforms)
            .expect("cpu");
        let got = other
            .decode_step_choosing(&mut b.other, &mut cache, &next, temperature, &uniforms)
            .expect("decode choosing");
        for (got, want) in got.iter().zip(&want) {
            let (got, want) = (got.expect("a choice"), want.expect("a choice"));
            assert_eq!(got.token, want.token, "temperature {temperature}");
            assert!((got.logprob - want.logprob).abs() <= 1e-5 * want.logprob.abs().max(1.0));
        }
    }
}

/// A prefill continued from caches against the CPU's whole prefill of the same
/// prompts: three sequences prefilled and decoded two steps, then gathered into a new
/// cache in another order (one of them cut back to part of its prompt) beside a
/// sequence that holds nothing, and each extended by 1 to 6 tokens. The rows are
/// deliberately not in order of their new tokens (several runs of adjacent rows per
/// position) and the prefill runs in windows of at most 5 tokens, so every branch of
/// the continuation's layout runs. Logits of the continued prefill and of a decoding
/// step after it to 1e-5 of their largest magnitude: both compute in f32 and differ in
/// the order of the attention's sums only.
pub fn continued_prefill_matches_cpu<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let config = small_config(false);
    let vocab = config.vocab_size;
    let mut rng = Rng::new(41);
    let [mut cpu, mut other] = models(&mut b, config, 42);
    let first = [rng.ints(5, vocab), rng.ints(3, vocab), rng.ints(7, vocab)];
    let first_prompts: Vec<&[u32]> = first.iter().map(Vec::as_slice).collect();
    let mut held = KvCache::new(&mut b.other, &other, 3, 12).expect("cache");
    other
        .prefill(&mut b.other, &mut held, &first_prompts)
        .expect("prefill");
    let mut chats = first.clone();
    for _ in 0..2 {
        let next = rng.ints(3, vocab);
        other
            .decode_step(&mut b.other, &mut held, &next)
            .expect("decode");
        for (chat, token) in chats.iter_mut().zip(next) {
            chat.push(token);
        }
    }
    // Rows of the new cache: sequence 2 whole, a fresh one, the first 3 tokens of
    // sequence 0, sequence 1 whole; then each prompt's new tokens.
    let sources: [Option<(usize, u32)>; 4] = [Some((2, 9)), None, Some((0, 3)), Some((1, 5))];
    let extra = [4, 6, 5, 1];
    let prompts: Vec<Vec<u32>> = sources
        .iter()
        .zip(extra)
        .map(|(source, extra)| {
            let mut prompt =
                source.map_or(Vec::new(), |(s, len)| chats[s][..len as usize].to_vec());
            prompt.extend(rng.ints(extra, vocab));
            prompt
        })
        .collect();
    let prompts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let rows: Vec<Option<CachedRows<'_>>> = sources
        .iter()
        .map(|source| {
            source.map(|(sequence, len)| CachedRows {
                cache: &held,
                sequence,
                len,
            })
        })
        .collect();
    let mut cache = other
        .gather_sequences(&mut b.other, &rows, 16)
        .expect("gather");
    held.free(&mut b.other).expect("free");
    assert_eq!(cache.lengths(), &[9, 0, 3, 5]);
    cache.set_prefill_tokens(5);
    let got = other
        .prefill_rest(&mut b.other, &mut cache, &prompts)
        .expect("continued prefill");
    let mut cpu_cache = KvCache::new(&mut b.cpu, &cpu, 4, 16).expect("cpu cache");
    let want = cpu
        .prefill(&mut b.cpu, &mut cpu_cache, &prompts)
        .expect("cpu prefill");
    assert_close("continued prefill logits", &got, &want, 1e-5);
    assert_eq!(cache.lengths(), cpu_cache.lengths());
    let next = rng.ints(4, vocab);
    let want = cpu
        .decode_step(&mut b.cpu, &mut cpu_cache, &next)
        .expect("cpu decode");
    let got = other
        .decode_step(&mut b.other, &mut cache, &next)
        .expect("decode after the continued prefill");
    assert_close("decode step logits after it", &got, &want, 1e-5);
    // A prompt that adds nothing to its cache is refused, naming the sequence.
    let err = other
        .prefill_rest(&mut b.other, &mut cache, &prompts)
        .expect_err("nothing new");
    assert!(err.to_string().contains("sequence 0"), "{err}");
}

/// Ten steps of forward, backward (mean NLL) and AdamW on one batch: the losses of
/// both backends must agree to 1e-4 relative at every step (the parameters drift
/// apart by rounding only), and the loss must fall.
pub fn ten_training_steps<K: Kernels>(make: impl FnOnce() -> Option<K>) {
    let Some(mut b) = Both::new(make) else { return };
    let config = small_config(true);
    let mut rng = Rng::new(17);
    let [mut cpu, mut other] = models(&mut b, config.clone(), 18);
    let (tokens, targets, starts) = packed_batch(&mut rng, config.vocab_size);
    let n = tokens.len();
    let total = cpu.params().len;
    let cm = Tensor::whole(b.cpu.alloc(total).expect("alloc"), total);
    let cv = Tensor::whole(b.cpu.alloc(total).expect("alloc"), total);
    let om = Tensor::whole(b.other.alloc(total).expect("alloc"), total);
    let ov = Tensor::whole(b.other.alloc(total).expect("alloc"), total);
    let nll = |logp: &[f32]| -logp.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
    let weights = vec![-1.0 / n as f32; n];
    let mut losses = Vec::new();
    for step in 1..=10 {
        let hyper = AdamWStep {
            learning_rate: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            step,
        };
        cpu.zero_grads(&mut b.cpu).expect("cpu");
        let want = nll(&cpu
            .forward(&mut b.cpu, &tokens, &targets, &starts)
            .expect("cpu"));
        cpu.backward(&mut b.cpu, &weights).expect("cpu");
        b.cpu
            .adamw(cpu.params(), cpu.grads(), cm, cv, hyper)
            .expect("cpu");
        other.zero_grads(&mut b.other).expect("zero");
        let got = nll(&other
            .forward(&mut b.other, &tokens, &targets, &starts)
            .expect("forward"));
        other.backward(&mut b.other, &weights).expect("backward");
        b.other
            .adamw(other.params(), other.grads(), om, ov, hyper)
            .expect("adamw");
        assert!(
            (got - want).abs() <= 1e-4 * want.abs(),
            "step {step}: loss {got}, cpu {want}"
        );
        losses.push(got);
    }
    assert!(losses[9] < 0.8 * losses[0], "loss did not fall: {losses:?}");
}
