//! Time of each non-GEMM kernel of the CPU backend at the shapes of one layer of the
//! "tiny" model on one batch (8 sequences x 512 tokens: N 4096, D 256, I 768, 8 heads,
//! 2 kv heads of 32, V 4096), and of the fused output head. Median of a few runs.
//!
//! Run: `cargo bench -p sage-backend-cpu --bench kernels [-- NAME_FILTER]`

use std::time::Instant;

use sage_backend_cpu::CpuBackend;
use sage_transformer::{AdamWStep, AttentionShape, Kernels, Tensor};

const N: usize = 4096;
const D: usize = 256;
const I: usize = 768;
const V: usize = 4096;
const SEQ: usize = 512;
const SHAPE: AttentionShape = AttentionShape {
    heads: 8,
    kv_heads: 2,
    head_dim: 32,
};

/// Kernel timings, limited to names containing the command line's filter.
struct Table {
    filter: String,
    rows: Vec<(&'static str, f64)>,
}

impl Table {
    /// Times `run` as `name` unless the filter excludes it.
    fn time(&mut self, name: &'static str, run: impl FnMut()) {
        if name.contains(&self.filter) {
            self.rows.push((name, median_ms(run)));
        }
    }
}

/// Median milliseconds of `run` over 5 timed calls after one warm-up.
fn median_ms(mut run: impl FnMut()) -> f64 {
    run();
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[2]
}

/// A buffer of `len` small deterministic values.
fn tensor(backend: &mut CpuBackend, len: usize, seed: usize) -> Tensor {
    let data: Vec<f32> = (0..len)
        .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 2003.0 - 0.5)
        .collect();
    let tensor = Tensor::whole(backend.alloc(len).expect("alloc"), len);
    backend.write(tensor, &data).expect("write");
    tensor
}

fn main() {
    let b = &mut CpuBackend::new();
    let (q_width, kv_width) = (D, 2 * 32);
    let seq_starts: Vec<u32> = (0..=N / SEQ).map(|s| (s * SEQ) as u32).collect();
    let positions: Vec<u32> = (0..N).map(|n| (n % SEQ) as u32).collect();
    let tokens: Vec<u32> = (0..N).map(|n| ((n * 31) % V) as u32).collect();
    let index = |b: &mut CpuBackend, data: &[u32]| {
        let indices = sage_transformer::Indices::whole(
            b.alloc_indices(data.len()).expect("alloc"),
            data.len(),
        );
        b.write_indices(indices, data).expect("write");
        indices
    };
    let (positions, tokens) = (index(b, &positions), index(b, &tokens));
    let (x, dx, out) = (
        tensor(b, N * D, 1),
        tensor(b, N * D, 2),
        tensor(b, N * D, 3),
    );
    let (weight, dweight, rstd) = (tensor(b, D, 4), tensor(b, D, 5), tensor(b, N, 6));
    let (q, k, v) = (
        tensor(b, N * q_width, 7),
        tensor(b, N * kv_width, 8),
        tensor(b, N * kv_width, 9),
    );
    let (attn, lse) = (tensor(b, N * q_width, 10), tensor(b, N * 8, 11));
    let (dq, dk, dv) = (
        tensor(b, N * q_width, 12),
        tensor(b, N * kv_width, 13),
        tensor(b, N * kv_width, 14),
    );
    let (gate, up, act) = (
        tensor(b, N * I, 15),
        tensor(b, N * I, 16),
        tensor(b, N * I, 17),
    );
    let (dgate, dup) = (tensor(b, N * I, 18), tensor(b, N * I, 19));
    let (table_w, dtable) = (tensor(b, V * D, 20), tensor(b, V * D, 21));
    let (logp, head_lse, weights) = (tensor(b, N, 22), tensor(b, N, 23), tensor(b, N, 24));
    let params = 7_000_000;
    let (p, g, m, second) = (
        tensor(b, params, 25),
        tensor(b, params, 26),
        tensor(b, params, 27),
        tensor(b, params, 28),
    );
    b.fill(second, 0.01).expect("fill");
    let adam = AdamWStep {
        learning_rate: 1e-3,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 3,
    };

    let mut table = Table {
        filter: std::env::args()
            .nth(1)
            .filter(|a| !a.starts_with('-'))
            .unwrap_or_default(),
        rows: Vec::new(),
    };
    let t = &mut table;
    t.time("embedding_forward", || {
        b.embedding_forward(x, table_w, tokens, D).expect("k")
    });
    t.time("embedding_backward", || {
        b.embedding_backward(dtable, dx, tokens, D).expect("k")
    });
    t.time("rmsnorm_forward", || {
        b.rmsnorm_forward(out, rstd, x, weight, D, 1e-6).expect("k")
    });
    t.time("rmsnorm_backward", || {
        b.rmsnorm_backward(dx, dweight, out, x, weight, rstd, D)
            .expect("k")
    });
    t.time("add_bias [N, D]", || b.add_bias(q, weight).expect("k"));
    t.time("bias_backward [N, D]", || {
        b.bias_backward(dweight, q).expect("k")
    });
    t.time("rope_forward q", || {
        b.rope_forward(q, positions, 8, 32, 1e4).expect("k")
    });
    t.time("rope_backward q", || {
        b.rope_backward(q, positions, 8, 32, 1e4).expect("k")
    });
    t.time("attention_forward", || {
        b.attention_forward(attn, lse, q, k, v, &seq_starts, SHAPE)
            .expect("k")
    });
    t.time("attention_backward", || {
        b.attention_backward(dq, dk, dv, x, q, k, v, attn, lse, &seq_starts, SHAPE)
            .expect("k")
    });
    t.time("swiglu_forward", || {
        b.swiglu_forward(act, gate, up).expect("k")
    });
    t.time("swiglu_backward", || {
        b.swiglu_backward(dgate, dup, act, gate, up).expect("k")
    });
    b.fill(weights, 1.0).expect("fill");
    t.time("logprob_forward", || {
        b.logprob_forward(logp, head_lse, x, table_w, tokens)
            .expect("k")
    });
    t.time("logprob_backward", || {
        b.logprob_backward(dx, Some(dtable), weights, x, table_w, tokens, head_lse)
            .expect("k")
    });
    t.time("adamw (7M params)", || {
        b.adamw(p, g, m, second, adam).expect("k")
    });
    t.time("sum_squares (7M)", || {
        b.sum_squares(g).expect("k");
    });

    println!("threads: {}", rayon::current_num_threads());
    println!("{:<24} {:>10}", "kernel (tiny, one layer)", "ms");
    for (name, ms) in table.rows {
        println!("{name:<24} {ms:>10.2}");
    }
}
