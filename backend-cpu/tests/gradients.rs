//! Finite-difference checks of every backward kernel: for fresh random inputs and a
//! random linear functional L = sum(r * out), the analytic gradient from the backward
//! kernel matches central differences of the forward kernel (tolerances in
//! `common::check_gradient`). Gradients documented as "(+=)" are checked on buffers
//! prefilled with random values, those "overwritten" on buffers prefilled with garbage.

mod common;

use common::{check_gradient, download, functional, upload, upload_indices, Rng};
use sage_backend_cpu::CpuBackend;
use sage_transformer::{AttentionShape, Kernels, MatmulShape, Tensor};

/// The gradient accumulated into a `(+=)` buffer that started as `prefill`.
fn accumulated(backend: &mut CpuBackend, grad: Tensor, prefill: &[f32]) -> Vec<f32> {
    download(backend, grad)
        .iter()
        .zip(prefill)
        .map(|(g, p)| g - p)
        .collect()
}

#[test]
fn embedding_gradient() {
    let (vocab, dim) = (7, 5);
    let mut rng = Rng::new(11);
    let backend = &mut CpuBackend::new();
    let table_host = rng.vec(vocab * dim, 1.0);
    let tokens_host = [3, 0, 6, 3, 3, 1, 6, 2, 5];
    let n = tokens_host.len();
    let r = rng.vec(n * dim, 1.0);
    let table = upload(backend, &table_host);
    let tokens = upload_indices(backend, &tokens_host);
    let out = upload(backend, &vec![0.0; n * dim]);
    let r_t = upload(backend, &r);
    let prefill = rng.vec(vocab * dim, 1.0);
    let dtable = upload(backend, &prefill);
    backend
        .embedding_backward(dtable, r_t, tokens, dim)
        .unwrap();
    let grad = accumulated(backend, dtable, &prefill);
    check_gradient("dtable", &table_host, &grad, |probe| {
        backend.write(table, probe).unwrap();
        backend.embedding_forward(out, table, tokens, dim).unwrap();
        functional(&r, &download(backend, out))
    });
}

#[test]
fn rmsnorm_gradient() {
    let (rows, dim, eps) = (4, 12, 1e-5);
    let mut rng = Rng::new(12);
    let backend = &mut CpuBackend::new();
    let x_host = rng.vec(rows * dim, 1.0);
    let w_host: Vec<f32> = rng.vec(dim, 0.5).iter().map(|w| 1.0 + w).collect();
    let r = rng.vec(rows * dim, 1.0);
    let (x, weight) = (upload(backend, &x_host), upload(backend, &w_host));
    let out = upload(backend, &vec![0.0; rows * dim]);
    let rstd = upload(backend, &vec![0.0; rows]);
    backend
        .rmsnorm_forward(out, rstd, x, weight, dim, eps)
        .unwrap();
    let (dx_prefill, dw_prefill) = (rng.vec(rows * dim, 1.0), rng.vec(dim, 1.0));
    let (dx, dweight) = (upload(backend, &dx_prefill), upload(backend, &dw_prefill));
    let r_t = upload(backend, &r);
    backend
        .rmsnorm_backward(dx, dweight, r_t, x, weight, rstd, dim)
        .unwrap();
    let (dx_host, dw_host) = (
        accumulated(backend, dx, &dx_prefill),
        accumulated(backend, dweight, &dw_prefill),
    );
    let mut loss = |x_now: &[f32], w_now: &[f32]| {
        backend.write(x, x_now).unwrap();
        backend.write(weight, w_now).unwrap();
        backend
            .rmsnorm_forward(out, rstd, x, weight, dim, eps)
            .unwrap();
        functional(&r, &download(backend, out))
    };
    check_gradient("dx", &x_host, &dx_host, |probe| loss(probe, &w_host));
    check_gradient("dweight", &w_host, &dw_host, |probe| loss(&x_host, probe));
}

#[test]
fn matmul_gradient_all_transposes() {
    let (m, n, k) = (5, 4, 6);
    for (trans_a, trans_b) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut rng = Rng::new(13 + 2 * trans_a as u64 + trans_b as u64);
        let backend = &mut CpuBackend::new();
        let (a_host, b_host, r) = (
            rng.vec(m * k, 1.0),
            rng.vec(k * n, 1.0),
            rng.vec(m * n, 1.0),
        );
        let (a, b, dc) = (
            upload(backend, &a_host),
            upload(backend, &b_host),
            upload(backend, &r),
        );
        let c = upload(backend, &vec![0.0; m * n]);
        let shape = MatmulShape {
            m,
            n,
            k,
            trans_a,
            trans_b,
            accumulate: false,
        };
        let (da_prefill, db_prefill) = (rng.vec(m * k, 1.0), rng.vec(k * n, 1.0));
        let (da, db) = (upload(backend, &da_prefill), upload(backend, &db_prefill));
        // op(a) = a: da[m, k] += dc · op(b)^T; op(a) = a^T: da[k, m] += op(b) · dc^T.
        let da_shape = if trans_a {
            MatmulShape {
                m: k,
                n: m,
                k: n,
                trans_a: trans_b,
                trans_b: true,
                accumulate: true,
            }
        } else {
            MatmulShape {
                m,
                n: k,
                k: n,
                trans_a: false,
                trans_b: !trans_b,
                accumulate: true,
            }
        };
        if trans_a {
            backend.matmul(da, b, dc, da_shape).unwrap();
        } else {
            backend.matmul(da, dc, b, da_shape).unwrap();
        }
        // op(b) = b: db[k, n] += op(a)^T · dc; op(b) = b^T: db[n, k] += dc^T · op(a).
        let db_shape = if trans_b {
            MatmulShape {
                m: n,
                n: k,
                k: m,
                trans_a: true,
                trans_b: trans_a,
                accumulate: true,
            }
        } else {
            MatmulShape {
                m: k,
                n,
                k: m,
                trans_a: !trans_a,
                trans_b: false,
                accumulate: true,
            }
        };
        if trans_b {
            backend.matmul(db, dc, a, db_shape).unwrap();
        } else {
            backend.matmul(db, a, dc, db_shape).unwrap();
        }
        let (da_host, db_host) = (
            accumulated(backend, da, &da_prefill),
            accumulated(backend, db, &db_prefill),
        );
        let mut loss = |a_now: &[f32], b_now: &[f32]| {
            backend.write(a, a_now).unwrap();
            backend.write(b, b_now).unwrap();
            backend.matmul(c, a, b, shape).unwrap();
            functional(&r, &download(backend, c))
        };
        let label = format!("trans_a {trans_a} trans_b {trans_b}");
        check_gradient(&format!("da ({label})"), &a_host, &da_host, |probe| {
            loss(probe, &b_host)
        });
        check_gradient(&format!("db ({label})"), &b_host, &db_host, |probe| {
            loss(&a_host, probe)
        });
    }
}

#[test]
fn bias_gradient() {
    let (rows, width) = (6, 5);
    let mut rng = Rng::new(14);
    let backend = &mut CpuBackend::new();
    let (x_host, bias_host, r) = (
        rng.vec(rows * width, 1.0),
        rng.vec(width, 1.0),
        rng.vec(rows * width, 1.0),
    );
    let (out, bias, r_t) = (
        upload(backend, &x_host),
        upload(backend, &bias_host),
        upload(backend, &r),
    );
    let prefill = rng.vec(width, 1.0);
    let dbias = upload(backend, &prefill);
    backend.bias_backward(dbias, r_t).unwrap();
    let grad = accumulated(backend, dbias, &prefill);
    check_gradient("dbias", &bias_host, &grad, |probe| {
        backend.write(out, &x_host).unwrap();
        backend.write(bias, probe).unwrap();
        backend.add_bias(out, bias).unwrap();
        functional(&r, &download(backend, out))
    });
}

#[test]
fn rope_gradient() {
    let (rows, heads, head_dim, theta) = (5, 3, 8, 10_000.0);
    let mut rng = Rng::new(15);
    let backend = &mut CpuBackend::new();
    let (x_host, r) = (
        rng.vec(rows * heads * head_dim, 1.0),
        rng.vec(rows * heads * head_dim, 1.0),
    );
    let positions = upload_indices(backend, &rng.ints(rows, 1000));
    let (x, dx) = (upload(backend, &x_host), upload(backend, &r));
    backend
        .rope_backward(dx, positions, heads, head_dim, theta)
        .unwrap();
    let grad = download(backend, dx);
    check_gradient("dx", &x_host, &grad, |probe| {
        backend.write(x, probe).unwrap();
        backend
            .rope_forward(x, positions, heads, head_dim, theta)
            .unwrap();
        functional(&r, &download(backend, x))
    });
}

#[test]
fn attention_gradient_gqa_packed() {
    let shape = AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
    };
    // Four sequences of different lengths; 70 spans two query tiles.
    let seq_starts = [0u32, 3, 4, 74, 80];
    let n = 80;
    let (q_width, kv_width) = (4 * 8, 2 * 8);
    let mut rng = Rng::new(16);
    let backend = &mut CpuBackend::new();
    let (q_host, k_host, v_host) = (
        rng.vec(n * q_width, 1.0),
        rng.vec(n * kv_width, 1.0),
        rng.vec(n * kv_width, 1.0),
    );
    let r = rng.vec(n * q_width, 1.0);
    let (q, k, v) = (
        upload(backend, &q_host),
        upload(backend, &k_host),
        upload(backend, &v_host),
    );
    let out = upload(backend, &vec![0.0; n * q_width]);
    let lse = upload(backend, &vec![0.0; n * 4]);
    backend
        .attention_forward(out, lse, q, k, v, &seq_starts, shape)
        .unwrap();
    let garbage = |rng: &mut Rng, len| rng.vec(len, 1e3);
    let dq = upload(backend, &garbage(&mut rng, n * q_width));
    let dk = upload(backend, &garbage(&mut rng, n * kv_width));
    let dv = upload(backend, &garbage(&mut rng, n * kv_width));
    let dout = upload(backend, &r);
    backend
        .attention_backward(dq, dk, dv, dout, q, k, v, out, lse, &seq_starts, shape)
        .unwrap();
    let (dq_host, dk_host, dv_host) = (
        download(backend, dq),
        download(backend, dk),
        download(backend, dv),
    );
    let mut loss = |q_now: &[f32], k_now: &[f32], v_now: &[f32]| {
        backend.write(q, q_now).unwrap();
        backend.write(k, k_now).unwrap();
        backend.write(v, v_now).unwrap();
        backend
            .attention_forward(out, lse, q, k, v, &seq_starts, shape)
            .unwrap();
        functional(&r, &download(backend, out))
    };
    check_gradient("dq", &q_host, &dq_host, |probe| {
        loss(probe, &k_host, &v_host)
    });
    check_gradient("dk", &k_host, &dk_host, |probe| {
        loss(&q_host, probe, &v_host)
    });
    check_gradient("dv", &v_host, &dv_host, |probe| {
        loss(&q_host, &k_host, probe)
    });
}

#[test]
fn swiglu_gradient() {
    let len = 40;
    let mut rng = Rng::new(17);
    let backend = &mut CpuBackend::new();
    let (gate_host, up_host, r) = (rng.vec(len, 3.0), rng.vec(len, 2.0), rng.vec(len, 1.0));
    let (gate, up, dout) = (
        upload(backend, &gate_host),
        upload(backend, &up_host),
        upload(backend, &r),
    );
    let out = upload(backend, &vec![0.0; len]);
    let (dgate, dup) = (
        upload(backend, &rng.vec(len, 1e3)),
        upload(backend, &rng.vec(len, 1e3)),
    );
    backend.swiglu_backward(dgate, dup, dout, gate, up).unwrap();
    let (dgate_host, dup_host) = (download(backend, dgate), download(backend, dup));
    let mut loss = |gate_now: &[f32], up_now: &[f32]| {
        backend.write(gate, gate_now).unwrap();
        backend.write(up, up_now).unwrap();
        backend.swiglu_forward(out, gate, up).unwrap();
        functional(&r, &download(backend, out))
    };
    check_gradient("dgate", &gate_host, &dgate_host, |probe| {
        loss(probe, &up_host)
    });
    check_gradient("dup", &up_host, &dup_host, |probe| loss(&gate_host, probe));
}

#[test]
fn logprob_gradient_untied() {
    let (rows, dim, vocab) = (7, 6, 13);
    let mut rng = Rng::new(18);
    let backend = &mut CpuBackend::new();
    let (hidden_host, head_host) = (rng.vec(rows * dim, 1.0), rng.vec(vocab * dim, 1.0));
    let mut weights_host = rng.vec(rows, 1.0);
    weights_host[2] = 0.0;
    weights_host[5] = 0.0;
    let targets = upload_indices(backend, &rng.ints(rows, vocab as u32));
    let (hidden, lm_head, weights) = (
        upload(backend, &hidden_host),
        upload(backend, &head_host),
        upload(backend, &weights_host),
    );
    let (logp, lse) = (
        upload(backend, &vec![0.0; rows]),
        upload(backend, &vec![0.0; rows]),
    );
    backend
        .logprob_forward(logp, lse, hidden, lm_head, targets)
        .unwrap();
    let dhidden = upload(backend, &rng.vec(rows * dim, 1e3));
    let head_prefill = rng.vec(vocab * dim, 1.0);
    let dlm_head = upload(backend, &head_prefill);
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
    let dhidden_host = download(backend, dhidden);
    let dhead_host = accumulated(backend, dlm_head, &head_prefill);
    for row in [2, 5] {
        assert!(dhidden_host[row * dim..(row + 1) * dim]
            .iter()
            .all(|&g| g == 0.0));
    }
    let mut loss = |hidden_now: &[f32], head_now: &[f32]| {
        backend.write(hidden, hidden_now).unwrap();
        backend.write(lm_head, head_now).unwrap();
        backend
            .logprob_forward(logp, lse, hidden, lm_head, targets)
            .unwrap();
        functional(&weights_host, &download(backend, logp))
    };
    check_gradient("dhidden", &hidden_host, &dhidden_host, |probe| {
        loss(probe, &head_host)
    });
    check_gradient("dlm_head", &head_host, &dhead_host, |probe| {
        loss(&hidden_host, probe)
    });
}

#[test]
fn logprob_gradient_tied_through_embedding() {
    // hidden = table[tokens]; L = sum_t w_t logp_t with lm_head = table: the table's
    // gradient is the logprob head's (+=) plus the embedding's scatter (+=).
    let (rows, dim, vocab) = (7, 6, 9);
    let mut rng = Rng::new(19);
    let backend = &mut CpuBackend::new();
    let table_host = rng.vec(vocab * dim, 1.0);
    let tokens = upload_indices(backend, &rng.ints(rows, vocab as u32));
    let targets = upload_indices(backend, &rng.ints(rows, vocab as u32));
    let mut weights_host = rng.vec(rows, 1.0);
    weights_host[0] = 0.0;
    let (table, weights) = (upload(backend, &table_host), upload(backend, &weights_host));
    let hidden = upload(backend, &vec![0.0; rows * dim]);
    let (logp, lse) = (
        upload(backend, &vec![0.0; rows]),
        upload(backend, &vec![0.0; rows]),
    );
    backend
        .embedding_forward(hidden, table, tokens, dim)
        .unwrap();
    backend
        .logprob_forward(logp, lse, hidden, table, targets)
        .unwrap();
    let dhidden = upload(backend, &vec![0.0; rows * dim]);
    let dtable = upload(backend, &vec![0.0; vocab * dim]);
    backend
        .logprob_backward(dhidden, Some(dtable), weights, hidden, table, targets, lse)
        .unwrap();
    backend
        .embedding_backward(dtable, dhidden, tokens, dim)
        .unwrap();
    let grad = download(backend, dtable);
    check_gradient("dtable (tied)", &table_host, &grad, |probe| {
        backend.write(table, probe).unwrap();
        backend
            .embedding_forward(hidden, table, tokens, dim)
            .unwrap();
        backend
            .logprob_forward(logp, lse, hidden, table, targets)
            .unwrap();
        functional(&weights_host, &download(backend, logp))
    });
}
