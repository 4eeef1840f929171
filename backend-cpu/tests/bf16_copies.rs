//! bf16 copies of weights in the bf16 precision, which the products of a few rows (a
//! decoding step's projections and logits) read in place of the f32 values. A frozen
//! buffer keeps one from the start; a trainable one gets one when a skinny product
//! reads the same tensor a second time with no write to the buffer in between, and a
//! write puts it out of use. Checked against a float64 product of the same weights
//! rounded by another implementation (`half`), to 1e-5 of the terms' magnitude (f32
//! sums of at most a few hundred terms), where the unrounded weights' product is
//! farther than that somewhere (so the copy was read); against the f32 backend to the
//! bit where no copy may be read; and the same bits on 1 and 3 threads. Also: products
//! of more rows (which round while packing) are unchanged by a copy, a frozen copy
//! follows every host write, and no kernel may write a frozen buffer.

mod common;

use common::{assert_close_to_magnitude, download, on_threads, upload, Rng};
use sage_backend_cpu::{CpuBackend, Precision};
use sage_transformer::{Kernels, MatmulShape, Tensor};

/// Tolerance against float64, as a fraction of the terms' magnitude.
const TOLERANCE: f64 = 1e-5;

/// `values` rounded to bf16 (to nearest even) by the `half` crate, as f32.
fn rounded(values: &[f32]) -> Vec<f32> {
    values
        .iter()
        .map(|&x| half::bf16::from_f32(x).to_f32())
        .collect()
}

/// Allocates a frozen buffer holding `data`, written in two parts (so the copy must
/// follow writes at an offset).
fn upload_frozen(backend: &mut CpuBackend, data: &[f32]) -> Tensor {
    let buffer = backend.alloc_frozen(data.len()).unwrap();
    let whole = Tensor::whole(buffer, data.len());
    let half = data.len() / 2;
    let (first, second) = data.split_at(half);
    backend.write(whole.slice(0, half), first).unwrap();
    backend
        .write(whole.slice(half, second.len()), second)
        .unwrap();
    whole
}

/// The shape of `a[m, k] · w[n, k]^T`.
fn shape_of((m, n, k): (usize, usize, usize)) -> MatmulShape {
    MatmulShape {
        m,
        n,
        k,
        trans_a: false,
        trans_b: true,
        accumulate: false,
    }
}

/// c[m, n] = a[m, k] · w[n, k]^T on `backend`, `w` frozen or not.
fn product(
    backend: &mut CpuBackend,
    a: &[f32],
    w: &[f32],
    (m, n, k): (usize, usize, usize),
    frozen: bool,
) -> Vec<f32> {
    let a = upload(backend, a);
    let w = if frozen {
        upload_frozen(backend, w)
    } else {
        upload(backend, w)
    };
    let c = upload(backend, &vec![0.0; m * n]);
    backend.matmul(c, a, w, shape_of((m, n, k))).unwrap();
    download(backend, c)
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|x| x.to_bits()).collect()
}

/// c[m, n] = a[m, k] · w[n, k]^T in f64, with each element's sum of the terms'
/// magnitudes.
fn reference(a: &[f32], w: &[f32], (m, n, k): (usize, usize, usize)) -> (Vec<f64>, Vec<f64>) {
    let (mut want, mut magnitude) = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        for j in 0..n {
            let terms = (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(w[j * k + p]));
            want[i * n + j] = terms.clone().sum();
            magnitude[i * n + j] = terms.map(f64::abs).sum();
        }
    }
    (want, magnitude)
}

/// Fails unless `got` is within [`TOLERANCE`] of the product of the rounded weights,
/// and farther than that from the product of the weights as given somewhere.
fn check_rounded(name: &str, got: &[f32], a: &[f32], w: &[f32], shape: (usize, usize, usize)) {
    let (want, magnitude) = reference(a, &rounded(w), shape);
    assert_close_to_magnitude(name, got, &want, &magnitude, TOLERANCE);
    let (unrounded, _) = reference(a, w, shape);
    let farther = got
        .iter()
        .zip(&unrounded)
        .zip(&magnitude)
        .any(|((&g, &u), &size)| (f64::from(g) - u).abs() > TOLERANCE * size);
    assert!(farther, "{name}: the f32 weights were read, not the copy");
}

/// Up to 32 rows (the skinny products), at widths that split across threads (n = 200
/// and 300 halve at multiples of 64), even depths (read as lanes of two) with and
/// without a vector tail, and an odd one (widened a tile at a time).
#[test]
fn decoding_products_read_the_rounded_weights() {
    let mut rng = Rng::new(0xbf16);
    for (m, n, k) in [(1, 200, 64), (2, 300, 72), (5, 37, 17), (32, 130, 96)] {
        let (a, w) = (rng.vec(m * k, 1.0), rng.vec(n * k, 1.0));
        let run = || {
            let backend = &mut CpuBackend::with_precision(Precision::Bf16);
            product(backend, &a, &w, (m, n, k), true)
        };
        let (one, three) = (on_threads(1, run), on_threads(3, run));
        assert_eq!(bits(&one), bits(&three), "{m}x{n}x{k}: depends on threads");
        check_rounded(&format!("{m}x{n}x{k}"), &one, &a, &w, (m, n, k));
    }
}

/// More than 32 rows go through the packed kernels, which round both operands as they
/// pack them: a frozen weight gives what an ordinary buffer of the same values gives.
#[test]
fn packed_products_of_frozen_weights_are_unchanged() {
    let mut rng = Rng::new(0x5eed);
    let shape = (40, 96, 64);
    let (a, w) = (rng.vec(40 * 64, 1.0), rng.vec(96 * 64, 1.0));
    let bf16 = || CpuBackend::with_precision(Precision::Bf16);
    let frozen = product(&mut bf16(), &a, &w, shape, true);
    let ordinary = product(&mut bf16(), &a, &w, shape, false);
    assert_eq!(bits(&frozen), bits(&ordinary));
}

/// The output head's logits for a few rows read a frozen head's copy too (a tied head
/// is the frozen embedding table).
#[test]
fn logits_of_a_frozen_head_read_its_rounded_values() {
    let mut rng = Rng::new(12);
    let (rows, dim, vocab) = (3, 40, 700);
    let (hidden_host, head_host) = (rng.vec(rows * dim, 1.0), rng.vec(vocab * dim, 1.0));
    let backend = &mut CpuBackend::with_precision(Precision::Bf16);
    let hidden = upload(backend, &hidden_host);
    let head = upload_frozen(backend, &head_host);
    let out = upload(backend, &vec![0.0; rows * vocab]);
    backend.logits(out, hidden, head, dim).unwrap();
    let got = download(backend, out);
    check_rounded("logits", &got, &hidden_host, &head_host, (rows, vocab, dim));
}

/// A second write from the host replaces what the copy holds: the product follows the
/// new values.
#[test]
fn the_copy_follows_every_write() {
    let mut rng = Rng::new(7);
    let (n, k) = (70, 24);
    let (a_host, first, second) = (rng.vec(k, 1.0), rng.vec(n * k, 1.0), rng.vec(n * k, 1.0));
    let backend = &mut CpuBackend::with_precision(Precision::Bf16);
    let a = upload(backend, &a_host);
    let w = upload_frozen(backend, &first);
    let rewritten = 10 * k..40 * k;
    backend
        .write(
            w.slice(rewritten.start, rewritten.len()),
            &second[rewritten.clone()],
        )
        .unwrap();
    let c = upload(backend, &vec![0.0; n]);
    backend.matmul(c, a, w, shape_of((1, n, k))).unwrap();
    let mut mixed = first.clone();
    mixed[rewritten.clone()].copy_from_slice(&second[rewritten]);
    check_rounded(
        "rewritten",
        &download(backend, c),
        &a_host,
        &mixed,
        (1, n, k),
    );
}

/// A kernel asked to write into a frozen buffer (which would leave its copy stale) fails
/// with an error naming the buffer and the rule, and the buffer keeps its values.
#[test]
fn no_kernel_writes_a_frozen_buffer() {
    let backend = &mut CpuBackend::with_precision(Precision::Bf16);
    let values = Rng::new(3).vec(48, 1.0);
    let frozen = upload_frozen(backend, &values);
    let other = upload(backend, &[0.5; 48]);
    let refusals = [
        backend.fill(frozen, 0.0).unwrap_err(),
        backend.copy(frozen, other).unwrap_err(),
        backend.add_assign(frozen, other).unwrap_err(),
        backend.scale(frozen.slice(8, 8), 2.0).unwrap_err(),
    ];
    for error in refusals {
        let message = error.to_string();
        let names_it = message.contains(&format!("buffer {}", frozen.buffer.0));
        assert!(names_it && message.contains("frozen"), "{message}");
    }
    assert_eq!(bits(&download(backend, frozen)), bits(&values));
    // Reads are allowed, and the f32 values are kept beside the copy.
    backend.copy(other, frozen).unwrap();
    assert_eq!(bits(&download(backend, other)), bits(&values));
}

/// In f32 a frozen buffer is an ordinary one: no copy, nothing refused.
#[test]
fn frozen_buffers_in_f32_are_ordinary() {
    let mut rng = Rng::new(5);
    let shape = (1, 64, 32);
    let (a, w) = (rng.vec(32, 1.0), rng.vec(64 * 32, 1.0));
    let frozen = product(&mut CpuBackend::new(), &a, &w, shape, true);
    let ordinary = product(&mut CpuBackend::new(), &a, &w, shape, false);
    assert_eq!(bits(&frozen), bits(&ordinary));
    let backend = &mut CpuBackend::new();
    let buffer = upload_frozen(backend, &w);
    backend.fill(buffer, 1.0).unwrap();
}

/// c[n] = a[k] · w[n, k]^T, one row, on `backend` (weights already there).
fn row_product(backend: &mut CpuBackend, a: Tensor, w: Tensor, n: usize) -> Vec<f32> {
    let k = a.len;
    let c = upload(backend, &vec![0.0; n]);
    backend.matmul(c, a, w, shape_of((1, n, k))).unwrap();
    download(backend, c)
}

/// A trainable weight is read in f32 until a skinny product reads it a second time,
/// then from its copy; a write by a kernel or by the host puts the copy out of use
/// until the next second read.
#[test]
fn a_trainable_weight_is_copied_at_its_second_read_until_written() {
    let mut rng = Rng::new(21);
    let (n, k) = (130, 48);
    let (a_host, w_host) = (rng.vec(k, 1.0), rng.vec(n * k, 1.0));
    let f32_product = |w: &[f32]| product(&mut CpuBackend::new(), &a_host, w, (1, n, k), false);
    let backend = &mut CpuBackend::with_precision(Precision::Bf16);
    let a = upload(backend, &a_host);
    let w = upload(backend, &w_host);
    // The first read since the weight was written multiplies its f32 values; the
    // second, the copy of them.
    let reads = |backend: &mut CpuBackend, what: &str, values: &[f32]| {
        let first = row_product(backend, a, w, n);
        assert_eq!(
            bits(&first),
            bits(&f32_product(values)),
            "{what}: first read"
        );
        let second = row_product(backend, a, w, n);
        check_rounded(
            &format!("{what}: second read"),
            &second,
            &a_host,
            values,
            (1, n, k),
        );
    };
    reads(backend, "uploaded", &w_host);
    // A kernel writes the weight (as the optimizer does).
    backend.scale(w, 2.0).unwrap();
    let doubled: Vec<f32> = w_host.iter().map(|x| 2.0 * x).collect();
    reads(backend, "after a kernel's write", &doubled);
    // The host writes part of it.
    let mut rewritten = doubled.clone();
    rewritten[..k].copy_from_slice(&a_host);
    backend.write(w.slice(0, k), &a_host).unwrap();
    reads(backend, "after the host's write", &rewritten);
}

/// A training step's small forward reads each weight once before the optimizer writes
/// them: no copy is made, and every product is the f32 one to the bit; a second read
/// of one tensor copies the buffer even after other tensors of it were read.
#[test]
fn weights_read_once_between_writes_stay_f32() {
    let mut rng = Rng::new(22);
    let (n, k) = (64, 40);
    let (a_host, w_host) = (rng.vec(k, 1.0), rng.vec(2 * n * k, 1.0));
    let backend = &mut CpuBackend::with_precision(Precision::Bf16);
    let a = upload(backend, &a_host);
    let slab = upload(backend, &w_host);
    let halves = [slab.slice(0, n * k), slab.slice(n * k, n * k)];
    let mut values = w_host.clone();
    for step in 0..3 {
        for (h, &half) in halves.iter().enumerate() {
            let got = row_product(backend, a, half, n);
            let weights = &values[h * n * k..(h + 1) * n * k];
            let want = product(&mut CpuBackend::new(), &a_host, weights, (1, n, k), false);
            assert_eq!(bits(&got), bits(&want), "step {step}, half {h}");
        }
        backend.scale(slab, 0.5).unwrap();
        values.iter_mut().for_each(|x| *x *= 0.5);
    }
    row_product(backend, a, halves[1], n);
    let got = row_product(backend, a, halves[0], n);
    let want = product(
        &mut CpuBackend::new(),
        &a_host,
        &values[..n * k],
        (1, n, k),
        false,
    );
    assert_eq!(bits(&got), bits(&want), "a first read of this step");
    let got = row_product(backend, a, halves[1], n);
    check_rounded("a second read", &got, &a_host, &values[n * k..], (1, n, k));
}

/// In f32 no trainable weight is copied, however often it is read.
#[test]
fn f32_reads_no_copy_of_a_trainable_weight() {
    let mut rng = Rng::new(23);
    let (n, k) = (64, 32);
    let (a_host, w_host) = (rng.vec(k, 1.0), rng.vec(n * k, 1.0));
    let backend = &mut CpuBackend::new();
    let (a, w) = (upload(backend, &a_host), upload(backend, &w_host));
    let first = row_product(backend, a, w, n);
    for _ in 0..3 {
        assert_eq!(bits(&row_product(backend, a, w, n)), bits(&first));
    }
}
