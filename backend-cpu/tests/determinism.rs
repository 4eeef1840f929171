//! Bit-identical results whatever the thread count: every kernel with a reduction runs
//! on rayon pools of 1 and 3 threads, twice each, and all outputs must be equal.

mod common;

use common::{download, on_threads, upload, upload_indices, Rng};
use sage_backend_cpu::CpuBackend;
use sage_transformer::{AttentionShape, Kernels, MatmulShape};

/// The outputs of a batch of reduction-heavy kernels on fixed random inputs.
fn run_kernels() -> Vec<Vec<f32>> {
    let mut rng = Rng::new(21);
    let backend = &mut CpuBackend::new();
    let mut outputs = Vec::new();

    // Attention over packed sequences (several tiles), forward and backward.
    let shape = AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
    };
    let seq_starts = [0u32, 150, 151, 300];
    let n = 300;
    let q = upload(backend, &rng.vec(n * 64, 1.0));
    let (k, v) = (
        upload(backend, &rng.vec(n * 32, 1.0)),
        upload(backend, &rng.vec(n * 32, 1.0)),
    );
    let (out, lse) = (
        upload(backend, &vec![0.0; n * 64]),
        upload(backend, &vec![0.0; n * 4]),
    );
    backend
        .attention_forward(out, lse, q, k, v, &seq_starts, shape)
        .unwrap();
    let dout = upload(backend, &rng.vec(n * 64, 1.0));
    let dq = upload(backend, &vec![0.0; n * 64]);
    let (dk, dv) = (
        upload(backend, &vec![0.0; n * 32]),
        upload(backend, &vec![0.0; n * 32]),
    );
    backend
        .attention_backward(dq, dk, dv, dout, q, k, v, out, lse, &seq_starts, shape)
        .unwrap();
    outputs.extend([out, lse, dq, dk, dv].map(|t| download(backend, t)));

    // Decoding attention of 5 sequences: on one thread a task per sequence (5 >= 2 x 1),
    // on three a task per key/value head of a sequence (5 < 2 x 3).
    let (batch, capacity) = (5, 40);
    let lengths = [40u32, 1, 17, 33, 8];
    let k_cache = upload(backend, &rng.vec(batch * capacity * 32, 1.0));
    let v_cache = upload(backend, &rng.vec(batch * capacity * 32, 1.0));
    let q_step = upload(backend, &rng.vec(batch * 64, 1.0));
    let decoded = upload(backend, &vec![0.0; batch * 64]);
    backend
        .attention_decode(decoded, q_step, k_cache, v_cache, &lengths, capacity, shape)
        .unwrap();
    outputs.push(download(backend, decoded));

    // The output head across chunks (300 x 70000 logits, two chunks of rows), and the
    // embedding scatter of many repeated tokens into the same table.
    let (rows, dim, vocab) = (300, 8, 70_000);
    let hidden = upload(backend, &rng.vec(rows * dim, 1.0));
    let table = upload(backend, &rng.vec(vocab * dim, 1.0));
    let targets = upload_indices(backend, &rng.ints(rows, vocab as u32));
    let weights = upload(backend, &rng.vec(rows, 1.0));
    let (logp, head_lse) = (
        upload(backend, &vec![0.0; rows]),
        upload(backend, &vec![0.0; rows]),
    );
    backend
        .logprob_forward(logp, head_lse, hidden, table, targets)
        .unwrap();
    let (dhidden, dtable) = (
        upload(backend, &vec![0.0; rows * dim]),
        upload(backend, &vec![0.0; vocab * dim]),
    );
    backend
        .logprob_backward(
            dhidden,
            Some(dtable),
            weights,
            hidden,
            table,
            targets,
            head_lse,
        )
        .unwrap();
    let tokens = upload_indices(backend, &rng.ints(rows, 5));
    backend
        .embedding_backward(dtable, dhidden, tokens, dim)
        .unwrap();
    outputs.extend([logp, head_lse, dhidden, dtable].map(|t| download(backend, t)));

    // Column sums over many rows, a GEMM split across threads, the global norm.
    let (rows, width) = (1000, 48);
    let x = upload(backend, &rng.vec(rows * width, 1.0));
    let weight = upload(backend, &rng.vec(width, 1.0));
    let (normed, rstd) = (
        upload(backend, &vec![0.0; rows * width]),
        upload(backend, &vec![0.0; rows]),
    );
    backend
        .rmsnorm_forward(normed, rstd, x, weight, width, 1e-6)
        .unwrap();
    let (dx, dweight) = (
        upload(backend, &vec![0.0; rows * width]),
        upload(backend, &vec![0.0; width]),
    );
    backend
        .rmsnorm_backward(dx, dweight, normed, x, weight, rstd, width)
        .unwrap();
    let dbias = upload(backend, &vec![0.0; width]);
    backend.bias_backward(dbias, x).unwrap();
    let product = upload(backend, &vec![0.0; width * width]);
    let shape = MatmulShape {
        m: width,
        n: width,
        k: rows,
        trans_a: true,
        trans_b: false,
        accumulate: false,
    };
    backend.matmul(product, x, normed, shape).unwrap();
    let norm = backend.sum_squares(x).unwrap();
    outputs.extend([normed, rstd, dx, dweight, dbias, product].map(|t| download(backend, t)));
    outputs.push(vec![norm]);

    // Products split into blocks differently by thread count: 130 rows (packed), and
    // 1, 8 and 32 rows times a transposed weight (unpacked, split along columns).
    for (m, n, k) in [
        (130, 200, 96),
        (1, 1500, 256),
        (8, 1500, 256),
        (32, 700, 100),
    ] {
        let (a, w) = (
            upload(backend, &rng.vec(m * k, 1.0)),
            upload(backend, &rng.vec(n * k, 1.0)),
        );
        let c = upload(backend, &vec![0.0; m * n]);
        let shape = MatmulShape {
            m,
            n,
            k,
            trans_a: false,
            trans_b: true,
            accumulate: false,
        };
        backend.matmul(c, a, w, shape).unwrap();
        outputs.push(download(backend, c));
    }
    outputs
}

#[test]
fn results_do_not_depend_on_threads() {
    let on = |threads: usize| on_threads(threads, run_kernels);
    let reference = on(1);
    for threads in [1, 3, 3] {
        let again = on(threads);
        for (i, (want, got)) in reference.iter().zip(&again).enumerate() {
            let same = want
                .iter()
                .zip(got)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "output {i} differs on {threads} threads");
        }
    }
}
