//! Misuse is reported as a `CpuError`, never a panic: unknown and freed handles,
//! ranges outside their buffer, written tensors overlapping another operand, and
//! arguments that do not describe the operation. Disjoint ranges of one buffer work.

mod common;

use common::{download, upload, upload_indices};
use sage_backend_cpu::{CpuBackend, CpuError};
use sage_transformer::{
    AdamWStep, AttentionShape, BufferId, ContractError, IndexBufferId, Indices, Kernels,
    MatmulShape, Tensor,
};

const GQA: AttentionShape = AttentionShape {
    heads: 4,
    kv_heads: 2,
    head_dim: 2,
};

#[test]
fn unknown_and_freed_handles_are_errors() {
    let backend = &mut CpuBackend::new();
    let never = Tensor::whole(BufferId(7), 1);
    assert_eq!(
        backend.fill(never, 1.0),
        Err(CpuError::Contract(ContractError::UnknownBuffer(7)))
    );
    let tensor = upload(backend, &[1.0, 2.0]);
    backend.free(tensor.buffer).unwrap();
    assert_eq!(
        backend.fill(tensor, 1.0),
        Err(CpuError::Contract(ContractError::UnknownBuffer(
            tensor.buffer.0
        )))
    );
    assert_eq!(
        backend.free(tensor.buffer),
        Err(CpuError::Contract(ContractError::UnknownBuffer(
            tensor.buffer.0
        )))
    );
    // A freed id is never handed out again.
    let next = backend.alloc(2).unwrap();
    assert_ne!(next, tensor.buffer);
    assert_eq!(
        backend.sum_squares(tensor),
        Err(CpuError::Contract(ContractError::UnknownBuffer(
            tensor.buffer.0
        )))
    );

    let indices = upload_indices(backend, &[1, 2]);
    backend.free_indices(indices.buffer).unwrap();
    let err = backend.write_indices(indices, &[0, 0]).unwrap_err();
    assert_eq!(
        err,
        CpuError::Contract(ContractError::UnknownIndexBuffer(indices.buffer.0))
    );
    assert!(backend.free_indices(IndexBufferId(99)).is_err());
    let table = upload(backend, &[0.0; 4]);
    let out = upload(backend, &[0.0; 4]);
    let err = backend
        .embedding_forward(out, table, indices, 2)
        .unwrap_err();
    assert_eq!(
        err,
        CpuError::Contract(ContractError::UnknownIndexBuffer(indices.buffer.0))
    );
}

#[test]
fn ranges_outside_their_buffer_are_errors() {
    let backend = &mut CpuBackend::new();
    let tensor = upload(backend, &[1.0; 10]);
    let past_end = tensor.slice(8, 3);
    assert!(matches!(
        backend.scale(past_end, 2.0),
        Err(CpuError::Contract(ContractError::OutOfRange {
            len: 3,
            offset: 8,
            buffer_len: 10,
            ..
        }))
    ));
    let overflowing = Tensor {
        buffer: tensor.buffer,
        offset: usize::MAX,
        len: 2,
    };
    assert!(matches!(
        backend.fill(overflowing, 0.0),
        Err(CpuError::Contract(ContractError::OutOfRange { .. }))
    ));
    let mut host = [0.0; 3];
    assert!(matches!(
        backend.read(past_end, &mut host),
        Err(CpuError::Contract(ContractError::OutOfRange { .. }))
    ));
    let indices = upload_indices(backend, &[0; 4]);
    let bad = Indices {
        buffer: indices.buffer,
        offset: 2,
        len: 3,
    };
    assert!(matches!(
        backend.write_indices(bad, &[0; 3]),
        Err(CpuError::Contract(ContractError::OutOfRange {
            kind: "u32",
            ..
        }))
    ));
    // Nothing was written by the failed calls.
    assert_eq!(download(backend, tensor), vec![1.0; 10]);
}

#[test]
fn written_tensors_overlapping_other_operands_are_errors() {
    let backend = &mut CpuBackend::new();
    let all = upload(backend, &[1.0; 16]);
    let (a, b) = (all.slice(0, 8), all.slice(4, 8));
    assert_eq!(
        backend.copy(b, a),
        Err(CpuError::Contract(ContractError::Overlap(b, a)))
    );
    assert!(matches!(
        backend.add_assign(a, a),
        Err(CpuError::Contract(ContractError::Overlap(..)))
    ));
    let shape = MatmulShape {
        m: 2,
        n: 2,
        k: 2,
        trans_a: false,
        trans_b: false,
        accumulate: false,
    };
    assert!(matches!(
        backend.matmul(all.slice(0, 4), all.slice(2, 4), all.slice(8, 4), shape),
        Err(CpuError::Contract(ContractError::Overlap(..)))
    ));
    // Two outputs of one call overlapping each other.
    let (out, rstd) = (all.slice(0, 4), all.slice(3, 2));
    let (x, w) = (upload(backend, &[1.0; 4]), upload(backend, &[1.0; 2]));
    assert!(matches!(
        backend.rmsnorm_forward(out, rstd, x, w, 2, 1e-6),
        Err(CpuError::Contract(ContractError::Overlap(..)))
    ));
    assert_eq!(download(backend, all), vec![1.0; 16]);
}

#[test]
fn disjoint_ranges_of_one_buffer_work() {
    let backend = &mut CpuBackend::new();
    // a [2, 2] at 0, b [2, 2] at 4, c [2, 2] at 8, all in one buffer; a is read twice.
    let all = upload(
        backend,
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 0.0, 0.0, 0.0, 0.0],
    );
    let (a, b, c) = (all.slice(0, 4), all.slice(4, 4), all.slice(8, 4));
    let shape = MatmulShape {
        m: 2,
        n: 2,
        k: 2,
        trans_a: false,
        trans_b: true,
        accumulate: false,
    };
    backend.matmul(c, a, a, shape).unwrap();
    assert_eq!(download(backend, c), vec![5.0, 11.0, 11.0, 25.0]);
    backend.add_assign(b, a).unwrap();
    assert_eq!(download(backend, b), vec![6.0, 8.0, 10.0, 12.0]);
    // Overlapping reads are fine: b[0..4] with its own tail.
    let shape = MatmulShape {
        m: 1,
        n: 1,
        k: 2,
        trans_a: false,
        trans_b: false,
        accumulate: false,
    };
    let out = upload(backend, &[0.0]);
    let err = backend.matmul(out, all.slice(4, 2), all.slice(5, 2), shape);
    assert!(err.is_ok());
    assert_eq!(download(backend, out), vec![6.0 * 8.0 + 8.0 * 10.0]);
}

#[test]
fn arguments_that_do_not_fit_are_errors() {
    let backend = &mut CpuBackend::new();
    let four = upload(backend, &[0.5; 4]);
    let six = upload(backend, &[0.5; 6]);
    let five = upload(backend, &[0.5; 5]);
    let other_four = upload(backend, &[0.5; 4]);
    assert!(matches!(
        backend.write(four, &[0.0; 3]),
        Err(CpuError::Contract(ContractError::Shape(_)))
    ));
    assert!(matches!(
        backend.copy(four, six),
        Err(CpuError::Contract(ContractError::Shape(_)))
    ));
    let shape = MatmulShape {
        m: 2,
        n: 2,
        k: 2,
        trans_a: false,
        trans_b: false,
        accumulate: false,
    };
    assert!(matches!(
        backend.matmul(other_four, six, four, shape),
        Err(CpuError::Contract(ContractError::Shape(_)))
    ));

    let tokens = upload_indices(backend, &[0, 2]);
    let (table, out) = (upload(backend, &[0.0; 4]), upload(backend, &[0.0; 4]));
    let err = backend
        .embedding_forward(out, table, tokens, 2)
        .unwrap_err();
    assert_eq!(
        err,
        CpuError::TokenOutOfRange {
            op: "embedding_forward",
            token: 2,
            vocab: 2
        }
    );
    assert!(matches!(
        backend.embedding_forward(out, table, tokens, 0),
        Err(CpuError::Contract(ContractError::Shape(_)))
    ));
    let (logp, lse) = (upload(backend, &[0.0; 2]), upload(backend, &[0.0; 2]));
    let targets = upload_indices(backend, &[1, 5]);
    assert!(matches!(
        backend.logprob_forward(logp, lse, four, six, targets),
        Err(CpuError::TokenOutOfRange { token: 5, .. })
    ));

    let positions = upload_indices(backend, &[0, 1]);
    assert!(matches!(
        backend.rope_forward(six, positions, 1, 3, 1e4),
        Err(CpuError::Contract(ContractError::BadArgument(_)))
    ));
    let step = AdamWStep {
        learning_rate: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        step: 0,
    };
    let (g, m, v) = (
        upload(backend, &[0.0; 4]),
        upload(backend, &[0.0; 4]),
        upload(backend, &[0.0; 4]),
    );
    assert!(matches!(
        backend.adamw(four, g, m, v, step),
        Err(CpuError::Contract(ContractError::BadArgument(_)))
    ));
    assert!(matches!(
        backend.logits(five, four, six, 2),
        Err(CpuError::Contract(ContractError::Shape(_)))
    ));
}

#[test]
fn bad_sequences_and_caches_are_errors() {
    let backend = &mut CpuBackend::new();
    let n = 3;
    let (q, out) = (
        upload(backend, &[0.1; 3 * 8]),
        upload(backend, &[0.0; 3 * 8]),
    );
    let (k, v) = (
        upload(backend, &[0.1; 3 * 4]),
        upload(backend, &[0.1; 3 * 4]),
    );
    let lse = upload(backend, &[0.0; 3 * 4]);
    for seq_starts in [&[][..], &[1, 3], &[0, 2, 1, 3]] {
        let err = backend
            .attention_forward(out, lse, q, k, v, seq_starts, GQA)
            .unwrap_err();
        assert!(
            matches!(err, CpuError::Contract(ContractError::Sequences(_))),
            "{seq_starts:?}: {err}"
        );
    }
    // Ends before the batch does.
    assert!(matches!(
        backend.attention_forward(out, lse, q, k, v, &[0, 2], GQA),
        Err(CpuError::Contract(ContractError::Shape(_)))
    ));
    let odd = AttentionShape {
        heads: 3,
        kv_heads: 2,
        head_dim: 2,
    };
    assert!(matches!(
        backend.attention_forward(out, lse, q, k, v, &[0, n], odd),
        Err(CpuError::Contract(ContractError::Shape(_)))
    ));

    // Caches of 2 sequences x 2 rows x 4.
    let (k_cache, v_cache) = (upload(backend, &[0.0; 16]), upload(backend, &[0.0; 16]));
    let (k_new, v_new) = (upload(backend, &[1.0; 8]), upload(backend, &[1.0; 8]));
    let err = backend
        .kv_cache_append(k_cache, v_cache, k_new, v_new, &[1, 2], 2, 4)
        .unwrap_err();
    assert!(
        matches!(err, CpuError::Contract(ContractError::Sequences(_))),
        "{err}"
    );
    backend
        .kv_cache_append(k_cache, v_cache, k_new, v_new, &[0, 1], 2, 4)
        .unwrap();
    let (q2, out2) = (upload(backend, &[0.1; 16]), upload(backend, &[0.0; 16]));
    for lengths in [[0, 1], [1, 3]] {
        let err = backend
            .attention_decode(out2, q2, k_cache, v_cache, &lengths, 2, GQA)
            .unwrap_err();
        assert!(
            matches!(err, CpuError::Contract(ContractError::Sequences(_))),
            "{lengths:?}: {err}"
        );
    }
    backend
        .attention_decode(out2, q2, k_cache, v_cache, &[1, 2], 2, GQA)
        .unwrap();
}

#[test]
fn errors_say_what_went_wrong() {
    let backend = &mut CpuBackend::new();
    let tensor = upload(backend, &[0.0; 4]);
    let message = backend
        .fill(tensor.slice(2, 5), 0.0)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("[2, 2 + 5)") && message.contains("4 elements"),
        "{message}"
    );
    let message = backend
        .copy(tensor.slice(0, 2), tensor.slice(1, 2))
        .unwrap_err()
        .to_string();
    assert!(message.contains("overlap"), "{message}");
    let error: Box<dyn std::error::Error> =
        Box::new(CpuError::Contract(ContractError::UnknownBuffer(3)));
    assert!(error.to_string().contains("buffer 3"));
}
