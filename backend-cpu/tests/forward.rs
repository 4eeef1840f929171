//! Forward kernels against naive references written differently, in f64: a triple loop
//! for GEMM, complex multiplication for RoPE, the full softmax matrix per sequence for
//! attention, explicit log-softmax over whole logits rows for the output head. Unless a
//! test says otherwise the tolerance is 1e-5 relative (`common::assert_close`), and for
//! sums that may cancel (GEMM, the head's gradients) 1e-5 of the sum of the terms'
//! absolute values (`common::assert_close_to_magnitude`): f32 kernels with sums of at
//! most a few thousand terms stay within a few ulp of f64 by either measure.

// The references are explicit index loops on purpose: written unlike the kernels.
#![allow(clippy::needless_range_loop)]

mod common;

use common::{assert_close, assert_close_to_magnitude, download, upload, upload_indices, Rng};
use sage_backend_cpu::CpuBackend;
use sage_transformer::{AdamWStep, AttentionShape, Kernels, MatmulShape, Tensor};

const TOLERANCE: f64 = 1e-5;

fn f64s(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&x| f64::from(x)).collect()
}

/// One `matmul` against a triple loop in f64 (with the magnitude of each sum).
fn check_matmul(shape: MatmulShape, seed: u64) {
    let MatmulShape {
        m,
        n,
        k,
        trans_a,
        trans_b,
        accumulate,
    } = shape;
    let mut rng = Rng::new(seed);
    let backend = &mut CpuBackend::new();
    let (a_host, b_host, c_host) = (
        rng.vec(m * k, 1.0),
        rng.vec(k * n, 1.0),
        rng.vec(m * n, 1.0),
    );
    let (a, b, c) = (
        upload(backend, &a_host),
        upload(backend, &b_host),
        upload(backend, &c_host),
    );
    backend.matmul(c, a, b, shape).unwrap();
    let a_at = |i: usize, p: usize| {
        if trans_a {
            a_host[p * m + i]
        } else {
            a_host[i * k + p]
        }
    };
    let b_at = |p: usize, j: usize| {
        if trans_b {
            b_host[j * k + p]
        } else {
            b_host[p * n + j]
        }
    };
    let (mut want, mut magnitude) = (vec![0.0f64; m * n], vec![0.0f64; m * n]);
    for i in 0..m {
        for j in 0..n {
            let start = if accumulate {
                f64::from(c_host[i * n + j])
            } else {
                0.0
            };
            let terms = (0..k).map(|p| f64::from(a_at(i, p)) * f64::from(b_at(p, j)));
            want[i * n + j] = start + terms.clone().sum::<f64>();
            magnitude[i * n + j] = start.abs() + terms.map(f64::abs).sum::<f64>();
        }
    }
    let name = format!("matmul {m}x{n}x{k} ta {trans_a} tb {trans_b} acc {accumulate}");
    assert_close_to_magnitude(&name, &download(backend, c), &want, &magnitude, TOLERANCE);
}

#[test]
fn matmul_matches_triple_loop() {
    // Up to 8 rows, a·b^T skips packing (odd sizes cover its edges); 300 x 200 x 64 is
    // split across threads.
    for (m, n, k) in [
        (1, 13, 37),
        (5, 13, 37),
        (8, 64, 40),
        (37, 29, 23),
        (300, 200, 64),
    ] {
        for flags in 0..8u64 {
            let (trans_a, trans_b, accumulate) = (flags & 4 != 0, flags & 2 != 0, flags & 1 != 0);
            check_matmul(
                MatmulShape {
                    m,
                    n,
                    k,
                    trans_a,
                    trans_b,
                    accumulate,
                },
                m as u64 * 8 + flags,
            );
        }
    }
}

/// Row counts for the row kernels: a few rows (run on the calling thread) and enough
/// rows of the test's width to be shared among rayon tasks.
fn row_counts(width: usize) -> [usize; 2] {
    [5, 3 * (1 << 14) / width + 7]
}

#[test]
fn bias_and_elementwise_match_reference() {
    let mut rng = Rng::new(3);
    let backend = &mut CpuBackend::new();
    let width = 7;
    for rows in row_counts(width) {
        let (x_host, bias_host) = (rng.vec(rows * width, 1.0), rng.vec(width, 1.0));
        let (x, bias) = (upload(backend, &x_host), upload(backend, &bias_host));
        backend.add_bias(x, bias).unwrap();
        let want: Vec<f64> = (0..rows * width)
            .map(|i| f64::from(x_host[i]) + f64::from(bias_host[i % width]))
            .collect();
        assert_close("add_bias", &download(backend, x), &want, TOLERANCE);
    }

    // A buffer of 3 x 50000 elements, used through slices (more than one rayon chunk).
    let len = 50_000;
    let host = rng.vec(3 * len, 1.0);
    let all = upload(backend, &host);
    let (first, second, third) = (
        all.slice(0, len),
        all.slice(len, len),
        all.slice(2 * len, len),
    );
    backend.add_assign(first, second).unwrap();
    let want: Vec<f64> = (0..len)
        .map(|i| f64::from(host[i]) + f64::from(host[len + i]))
        .collect();
    assert_close("add_assign", &download(backend, first), &want, TOLERANCE);
    backend.scale(second, -0.5).unwrap();
    let want: Vec<f64> = host[len..2 * len]
        .iter()
        .map(|&x| -0.5 * f64::from(x))
        .collect();
    assert_close("scale", &download(backend, second), &want, TOLERANCE);
    let want_squares: f64 = host[2 * len..]
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum();
    let squares = backend.sum_squares(third).unwrap();
    assert!(
        (f64::from(squares) - want_squares).abs() <= 1e-6 * want_squares,
        "sum_squares {squares} vs {want_squares}"
    );
    backend.copy(first, third).unwrap();
    assert_eq!(download(backend, first), host[2 * len..].to_vec());
    backend.fill(third, 2.5).unwrap();
    assert!(download(backend, third).iter().all(|&x| x == 2.5));
    assert_eq!(
        download(backend, second.slice(0, 3)),
        vec![-0.5 * host[len], -0.5 * host[len + 1], -0.5 * host[len + 2]]
    );
}

#[test]
fn embedding_gathers_rows() {
    let mut rng = Rng::new(4);
    let backend = &mut CpuBackend::new();
    let (vocab, dim) = (11, 6);
    let table_host = rng.vec(vocab * dim, 1.0);
    let table = upload(backend, &table_host);
    for count in row_counts(dim) {
        let tokens_host = rng.ints(count, vocab as u32);
        let tokens = upload_indices(backend, &tokens_host);
        let out = upload(backend, &vec![0.0; tokens_host.len() * dim]);
        backend.embedding_forward(out, table, tokens, dim).unwrap();
        let want: Vec<f32> = tokens_host
            .iter()
            .flat_map(|&t| table_host[t as usize * dim..(t as usize + 1) * dim].to_vec())
            .collect();
        assert_eq!(download(backend, out), want);
    }
}

#[test]
fn rmsnorm_matches_reference() {
    let mut rng = Rng::new(5);
    let backend = &mut CpuBackend::new();
    let (dim, eps) = (40, 1e-6f32);
    for rows in row_counts(dim) {
        check_rmsnorm(backend, &mut rng, rows, dim, eps);
    }
}

fn check_rmsnorm(backend: &mut CpuBackend, rng: &mut Rng, rows: usize, dim: usize, eps: f32) {
    let (x_host, w_host) = (rng.vec(rows * dim, 2.0), rng.vec(dim, 1.0));
    let (x, weight) = (upload(backend, &x_host), upload(backend, &w_host));
    let (out, rstd) = (
        upload(backend, &vec![0.0; rows * dim]),
        upload(backend, &vec![0.0; rows]),
    );
    backend
        .rmsnorm_forward(out, rstd, x, weight, dim, eps)
        .unwrap();
    let mut want_out = vec![0.0; rows * dim];
    let mut want_rstd = vec![0.0; rows];
    for n in 0..rows {
        let row = &x_host[n * dim..(n + 1) * dim];
        let mean_square = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / dim as f64;
        want_rstd[n] = 1.0 / (mean_square + f64::from(eps)).sqrt();
        for d in 0..dim {
            want_out[n * dim + d] = f64::from(row[d]) * want_rstd[n] * f64::from(w_host[d]);
        }
    }
    assert_close("rmsnorm out", &download(backend, out), &want_out, TOLERANCE);
    assert_close(
        "rmsnorm rstd",
        &download(backend, rstd),
        &want_rstd,
        TOLERANCE,
    );
}

#[test]
fn rope_matches_complex_rotation() {
    let mut rng = Rng::new(6);
    let backend = &mut CpuBackend::new();
    let (heads, head_dim) = (3, 16);
    for rows in row_counts(heads * head_dim) {
        check_rope(backend, &mut rng, rows, heads, head_dim);
    }
}

fn check_rope(backend: &mut CpuBackend, rng: &mut Rng, rows: usize, heads: usize, head_dim: usize) {
    let theta = 1_000_000.0f32;
    let width = heads * head_dim;
    let x_host = rng.vec(rows * width, 1.0);
    let positions_host = rng.ints(rows, 2048);
    let x = upload(backend, &x_host);
    let positions = upload_indices(backend, &positions_host);
    backend
        .rope_forward(x, positions, heads, head_dim, theta)
        .unwrap();
    // (x_i + i x_{i+hd/2}) * e^{i angle}; the angle is rounded to f32 as Hugging Face
    // computes it (f32 inv_freq times the f32 position), the rotation is in f64.
    let half = head_dim / 2;
    let mut want = vec![0.0f64; rows * width];
    for n in 0..rows {
        for h in 0..heads {
            for i in 0..half {
                let inv_freq = 1.0 / theta.powf((2 * i) as f32 / head_dim as f32);
                let angle = f64::from(positions_host[n] as f32 * inv_freq);
                let (re, im) = (angle.cos(), angle.sin());
                let at = n * width + h * head_dim + i;
                let (a, b) = (f64::from(x_host[at]), f64::from(x_host[at + half]));
                want[at] = a * re - b * im;
                want[at + half] = a * im + b * re;
            }
        }
    }
    assert_close("rope", &download(backend, x), &want, TOLERANCE);
    backend
        .rope_backward(x, positions, heads, head_dim, theta)
        .unwrap();
    assert_close(
        "rope then inverse",
        &download(backend, x),
        &f64s(&x_host),
        TOLERANCE,
    );
}

/// out[N, H*hd] and lse[N, H] of causal GQA attention, per sequence, through the full
/// [T, T] probability matrix in f64.
fn reference_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seq_starts: &[u32],
    shape: AttentionShape,
) -> (Vec<f64>, Vec<f64>) {
    let AttentionShape {
        heads,
        kv_heads,
        head_dim,
    } = shape;
    let (qw, kw) = (heads * head_dim, kv_heads * head_dim);
    let n = *seq_starts.last().unwrap() as usize;
    let (mut out, mut lse) = (vec![0.0; n * qw], vec![0.0; n * heads]);
    let scale = 1.0 / (head_dim as f64).sqrt();
    for w in seq_starts.windows(2) {
        let (s0, len) = (w[0] as usize, (w[1] - w[0]) as usize);
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            let mut scores = vec![vec![f64::NEG_INFINITY; len]; len];
            for i in 0..len {
                for j in 0..=i {
                    scores[i][j] = (0..head_dim)
                        .map(|d| {
                            f64::from(q[(s0 + i) * qw + h * head_dim + d])
                                * f64::from(k[(s0 + j) * kw + g * head_dim + d])
                        })
                        .sum::<f64>()
                        * scale;
                }
            }
            for i in 0..len {
                let max = scores[i].iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = scores[i].iter().map(|s| (s - max).exp()).sum();
                lse[(s0 + i) * heads + h] = max + total.ln();
                for d in 0..head_dim {
                    out[(s0 + i) * qw + h * head_dim + d] = (0..=i)
                        .map(|j| {
                            (scores[i][j] - max).exp() / total
                                * f64::from(v[(s0 + j) * kw + g * head_dim + d])
                        })
                        .sum();
                }
            }
        }
    }
    (out, lse)
}

#[test]
fn attention_matches_full_softmax() {
    let shape = AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
    };
    // Lengths 1, 65, 130, 0 and 7: tiles of 64 rows split the long ones.
    let seq_starts = [0u32, 1, 66, 196, 196, 203];
    let n = 203;
    let mut rng = Rng::new(7);
    let backend = &mut CpuBackend::new();
    let (q_host, k_host, v_host) = (
        rng.vec(n * 64, 1.0),
        rng.vec(n * 32, 1.0),
        rng.vec(n * 32, 1.0),
    );
    let (q, k, v) = (
        upload(backend, &q_host),
        upload(backend, &k_host),
        upload(backend, &v_host),
    );
    let (out, lse) = (
        upload(backend, &vec![0.0; n * 64]),
        upload(backend, &vec![0.0; n * 4]),
    );
    backend
        .attention_forward(out, lse, q, k, v, &seq_starts, shape)
        .unwrap();
    let (want_out, want_lse) = reference_attention(&q_host, &k_host, &v_host, &seq_starts, shape);
    assert_close(
        "attention out",
        &download(backend, out),
        &want_out,
        TOLERANCE,
    );
    assert_close(
        "attention lse",
        &download(backend, lse),
        &want_lse,
        TOLERANCE,
    );
}

#[test]
fn decode_equals_last_row_of_training_attention() {
    let shape = AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
    };
    // The long sequence gives each (sequence, head) enough work for the decode to be
    // shared among rayon tasks.
    let (qw, kw, capacity) = (32, 16, 2110);
    let lengths = [5u32, 2100, 1];
    let seq_starts = [0u32, 5, 2105, 2106];
    let n = 2106;
    let mut rng = Rng::new(8);
    let backend = &mut CpuBackend::new();
    let (q_host, k_host, v_host) = (
        rng.vec(n * qw, 1.0),
        rng.vec(n * kw, 1.0),
        rng.vec(n * kw, 1.0),
    );
    let (q, k, v) = (
        upload(backend, &q_host),
        upload(backend, &k_host),
        upload(backend, &v_host),
    );
    let (out, lse) = (
        upload(backend, &vec![0.0; n * qw]),
        upload(backend, &vec![0.0; n * 4]),
    );
    backend
        .attention_forward(out, lse, q, k, v, &seq_starts, shape)
        .unwrap();
    let training = download(backend, out);

    // Fill each sequence's cache one token at a time, through slices of one cache buffer.
    let batch = lengths.len();
    let k_cache = Tensor::whole(
        backend.alloc(batch * capacity * kw).unwrap(),
        batch * capacity * kw,
    );
    let v_cache = Tensor::whole(
        backend.alloc(batch * capacity * kw).unwrap(),
        batch * capacity * kw,
    );
    for b in 0..batch {
        let (k_seq, v_seq) = (
            k_cache.slice(b * capacity * kw, capacity * kw),
            v_cache.slice(b * capacity * kw, capacity * kw),
        );
        for t in 0..lengths[b] as usize {
            let row = (seq_starts[b] as usize + t) * kw;
            backend
                .kv_cache_append(
                    k_seq,
                    v_seq,
                    k.slice(row, kw),
                    v.slice(row, kw),
                    &[t as u32],
                    capacity,
                    kw,
                )
                .unwrap();
        }
    }
    let last_rows: Vec<usize> = (0..batch).map(|b| seq_starts[b + 1] as usize - 1).collect();
    let q_last: Vec<f32> = last_rows
        .iter()
        .flat_map(|&r| q_host[r * qw..(r + 1) * qw].to_vec())
        .collect();
    let q_last = upload(backend, &q_last);
    let decoded = upload(backend, &vec![0.0; batch * qw]);
    backend
        .attention_decode(decoded, q_last, k_cache, v_cache, &lengths, capacity, shape)
        .unwrap();
    let want: Vec<f64> = last_rows
        .iter()
        .flat_map(|&r| f64s(&training[r * qw..(r + 1) * qw]))
        .collect();
    assert_close(
        "decode vs training",
        &download(backend, decoded),
        &want,
        TOLERANCE,
    );
}

#[test]
fn swiglu_matches_reference() {
    let mut rng = Rng::new(9);
    let backend = &mut CpuBackend::new();
    let len = 1000;
    let (gate_host, up_host) = (rng.vec(len, 8.0), rng.vec(len, 2.0));
    let (gate, up) = (upload(backend, &gate_host), upload(backend, &up_host));
    let out = upload(backend, &vec![0.0; len]);
    backend.swiglu_forward(out, gate, up).unwrap();
    let want: Vec<f64> = gate_host
        .iter()
        .zip(&up_host)
        .map(|(&g, &u)| {
            let g = f64::from(g);
            g / (1.0 + (-g).exp()) * f64::from(u)
        })
        .collect();
    assert_close("swiglu", &download(backend, out), &want, TOLERANCE);
}

/// logp[N], lse[N], dhidden[N, D] and dlm_head[V, D] of the output head in f64, from
/// whole logits rows, each gradient followed by the magnitude of its summed terms.
fn reference_head(
    hidden: &[f32],
    lm_head: &[f32],
    targets: &[u32],
    weights: &[f32],
    dim: usize,
) -> [Vec<f64>; 6] {
    let (rows, vocab) = (targets.len(), lm_head.len() / dim);
    let (mut logp, mut lse) = (vec![0.0; rows], vec![0.0; rows]);
    let (mut dhidden, mut dlm_head) = (vec![0.0; rows * dim], vec![0.0; vocab * dim]);
    let (mut dhidden_size, mut dlm_head_size) = (vec![0.0; rows * dim], vec![0.0; vocab * dim]);
    for n in 0..rows {
        let h = &hidden[n * dim..(n + 1) * dim];
        let logits: Vec<f64> = (0..vocab)
            .map(|j| {
                (0..dim)
                    .map(|d| f64::from(h[d]) * f64::from(lm_head[j * dim + d]))
                    .sum()
            })
            .collect();
        let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        lse[n] = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
        logp[n] = logits[targets[n] as usize] - lse[n];
        let w = f64::from(weights[n]);
        for j in 0..vocab {
            let onehot = if j == targets[n] as usize { 1.0 } else { 0.0 };
            let dlogit = w * (onehot - (logits[j] - lse[n]).exp());
            for d in 0..dim {
                let (to_hidden, to_head) = (
                    dlogit * f64::from(lm_head[j * dim + d]),
                    dlogit * f64::from(h[d]),
                );
                dhidden[n * dim + d] += to_hidden;
                dhidden_size[n * dim + d] += to_hidden.abs();
                dlm_head[j * dim + d] += to_head;
                dlm_head_size[j * dim + d] += to_head.abs();
            }
        }
    }
    [logp, lse, dhidden, dhidden_size, dlm_head, dlm_head_size]
}

/// Runs the fused head forward and backward and compares with [`reference_head`].
fn check_head(rows: usize, dim: usize, vocab: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let backend = &mut CpuBackend::new();
    let (hidden_host, head_host) = (rng.vec(rows * dim, 1.0), rng.vec(vocab * dim, 1.0));
    let targets_host = rng.ints(rows, vocab as u32);
    let mut weights_host = rng.vec(rows, 1.0);
    weights_host[1] = 0.0;
    let (hidden, lm_head, weights) = (
        upload(backend, &hidden_host),
        upload(backend, &head_host),
        upload(backend, &weights_host),
    );
    let targets = upload_indices(backend, &targets_host);
    let (logp, lse) = (
        upload(backend, &vec![0.0; rows]),
        upload(backend, &vec![0.0; rows]),
    );
    backend
        .logprob_forward(logp, lse, hidden, lm_head, targets)
        .unwrap();
    let (dhidden, dlm_head) = (
        upload(backend, &vec![0.0; rows * dim]),
        upload(backend, &vec![0.0; vocab * dim]),
    );
    backend
        .logprob_backward(
            dhidden,
            Some(dlm_head),
            weights,
            hidden,
            lm_head,
            targets,
            lse,
        )
        .unwrap();
    let [logp_want, lse_want, dhidden_want, dhidden_size, dlm_head_want, dlm_head_size] =
        reference_head(&hidden_host, &head_host, &targets_host, &weights_host, dim);
    let name = |what: &str| format!("{what} (N {rows}, D {dim}, V {vocab})");
    assert_close(
        &name("logp"),
        &download(backend, logp),
        &logp_want,
        TOLERANCE,
    );
    assert_close(&name("lse"), &download(backend, lse), &lse_want, TOLERANCE);
    let dhidden_got = download(backend, dhidden);
    assert_close_to_magnitude(
        &name("dhidden"),
        &dhidden_got,
        &dhidden_want,
        &dhidden_size,
        TOLERANCE,
    );
    let dlm_head_got = download(backend, dlm_head);
    assert_close_to_magnitude(
        &name("dlm_head"),
        &dlm_head_got,
        &dlm_head_want,
        &dlm_head_size,
        TOLERANCE,
    );
}

#[test]
fn logprob_matches_whole_row_log_softmax() {
    check_head(9, 16, 50, 10);
}

#[test]
fn logprob_matches_reference_across_chunks() {
    // 300 x 70000 logits exceed the 16M-element chunk (239 rows): two chunks of rows.
    check_head(300, 8, 70_000, 11);
}

#[test]
fn logits_match_reference() {
    let mut rng = Rng::new(12);
    let backend = &mut CpuBackend::new();
    let (batch, dim, vocab) = (3, 16, 50);
    let (hidden_host, head_host) = (rng.vec(batch * dim, 1.0), rng.vec(vocab * dim, 1.0));
    let (hidden, lm_head) = (upload(backend, &hidden_host), upload(backend, &head_host));
    let out = upload(backend, &vec![0.0; batch * vocab]);
    backend.logits(out, hidden, lm_head, dim).unwrap();
    let want: Vec<f64> = (0..batch * vocab)
        .map(|i| {
            let (b, j) = (i / vocab, i % vocab);
            (0..dim)
                .map(|d| f64::from(hidden_host[b * dim + d]) * f64::from(head_host[j * dim + d]))
                .sum()
        })
        .collect();
    assert_close("logits", &download(backend, out), &want, TOLERANCE);
}

#[test]
fn adamw_matches_reference() {
    let mut rng = Rng::new(13);
    let backend = &mut CpuBackend::new();
    let len = 20_000;
    let params_host = rng.vec(len, 1.0);
    let (params, grads) = (
        upload(backend, &params_host),
        upload(backend, &vec![0.0; len]),
    );
    let (m, v) = (
        upload(backend, &vec![0.0; len]),
        upload(backend, &vec![0.0; len]),
    );
    let (mut p64, mut m64, mut v64) = (f64s(&params_host), vec![0.0f64; len], vec![0.0f64; len]);
    for step in 1..=3u32 {
        let grads_host = rng.vec(len, 1.0);
        backend.write(grads, &grads_host).unwrap();
        let hyper = AdamWStep {
            learning_rate: 1e-2,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            step,
        };
        backend.adamw(params, grads, m, v, hyper).unwrap();
        // params -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * params)
        let (b1, b2, lr, wd) = (0.9f64, 0.95f64, 1e-2f64, 0.1f64);
        for i in 0..len {
            let g = f64::from(grads_host[i]);
            m64[i] = b1 * m64[i] + (1.0 - b1) * g;
            v64[i] = b2 * v64[i] + (1.0 - b2) * g * g;
            let m_hat = m64[i] / (1.0 - b1.powi(step as i32));
            let v_hat = v64[i] / (1.0 - b2.powi(step as i32));
            p64[i] -= lr * (m_hat / (v_hat.sqrt() + 1e-8) + wd * p64[i]);
        }
    }
    assert_close("adamw params", &download(backend, params), &p64, TOLERANCE);
    assert_close("adamw m", &download(backend, m), &m64, TOLERANCE);
    assert_close("adamw v", &download(backend, v), &v64, TOLERANCE);
}
