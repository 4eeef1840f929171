//! GEMM throughput of the CPU backend's `matmul` on a 2048^3 square, the shapes of
//! the "tiny" model (N = 8 x 512 tokens, D 256, I 768, V 4096), training and batched
//! decoding of 8 sequences, and SmolLM2's training shapes (8,192 tokens, D 576, I 1536),
//! in f32 and in the bf16 precision, side by side. Each figure is the median over
//! batches of the time of one multiplication.
//!
//! Run: `cargo bench -p sage-backend-cpu --bench gemm [-- WORD]`; with a word, only the
//! cases whose label contains it (`-- square`).

use std::time::Instant;

use sage_backend_cpu::{CpuBackend, Precision};
use sage_transformer::{Kernels, MatmulShape, Tensor};

/// Batches timed per shape; the median is reported.
const BATCHES: usize = 7;

/// Target duration of one batch, in seconds.
const BATCH_SECONDS: f64 = 0.25;

/// One benchmarked product: a label and its shape.
struct Case {
    label: &'static str,
    shape: MatmulShape,
}

fn case(label: &'static str, m: usize, n: usize, k: usize, trans_a: bool, trans_b: bool) -> Case {
    Case {
        label,
        shape: MatmulShape {
            m,
            n,
            k,
            trans_a,
            trans_b,
            accumulate: false,
        },
    }
}

/// Median seconds of one `matmul` of `shape`.
fn time(backend: &mut CpuBackend, shape: MatmulShape) -> f64 {
    let MatmulShape { m, n, k, .. } = shape;
    let fill = |backend: &mut CpuBackend, len: usize, seed: usize| {
        let data: Vec<f32> = (0..len)
            .map(|i| ((i * 7919 + seed) % 1999) as f32 / 1999.0 - 0.5)
            .collect();
        let tensor = Tensor::whole(backend.alloc(len).expect("alloc"), len);
        backend.write(tensor, &data).expect("write");
        tensor
    };
    let (a, b, c) = (
        fill(backend, m * k, 1),
        fill(backend, k * n, 2),
        fill(backend, m * n, 3),
    );
    let mut run = |reps: usize| {
        let start = Instant::now();
        for _ in 0..reps {
            backend.matmul(c, a, b, shape).expect("matmul");
        }
        start.elapsed().as_secs_f64() / reps as f64
    };
    let once = run(1);
    let reps = ((BATCH_SECONDS / once) as usize).max(1);
    let mut times: Vec<f64> = (0..BATCHES).map(|_| run(reps)).collect();
    times.sort_by(f64::total_cmp);
    for tensor in [a, b, c] {
        backend.free(tensor.buffer).expect("free");
    }
    times[BATCHES / 2]
}

fn main() {
    let cases = [
        case("square 2048^3", 2048, 2048, 2048, false, false),
        case("tiny q/gate/up: x·W^T", 4096, 768, 256, false, true),
        case("tiny down: h·W^T", 4096, 256, 768, false, true),
        case("tiny logits: x·E^T", 4096, 4096, 256, false, true),
        case("tiny logits chunk", 1024, 4096, 256, false, true),
        case("tiny dX = dY·W", 4096, 256, 768, false, false),
        case("tiny dW = dY^T·X", 768, 256, 4096, true, false),
        case("decode B=8: x·W^T", 8, 768, 256, false, true),
        case("decode B=8 logits", 8, 4096, 256, false, true),
        case("smollm2 gate/up: x·W^T", 8192, 1536, 576, false, true),
        case("smollm2 down: h·W^T", 8192, 576, 1536, false, true),
        case("smollm2 dX = dY·W", 8192, 576, 1536, false, false),
        case("smollm2 dW = dY^T·X", 1536, 576, 8192, true, false),
    ];
    let only: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    let mut f32_backend = CpuBackend::new();
    let mut bf16_backend = CpuBackend::with_precision(Precision::Bf16);
    println!("threads: {}", rayon::current_num_threads());
    println!(
        "{:<24} {:>18} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "case", "m x n x k (a,b)", "f32 ms", "GFLOP/s", "bf16 ms", "GFLOP/s", "bf16/f32"
    );
    let wanted = |case: &Case| {
        only.as_ref()
            .is_none_or(|word| case.label.contains(word.as_str()))
    };
    for Case { label, shape } in cases.into_iter().filter(wanted) {
        let seconds = time(&mut f32_backend, shape);
        let bf16_seconds = time(&mut bf16_backend, shape);
        let flops = 2.0 * (shape.m * shape.n * shape.k) as f64;
        let dims = format!(
            "{}x{}x{} ({},{})",
            shape.m,
            shape.n,
            shape.k,
            if shape.trans_a { "T" } else { "N" },
            if shape.trans_b { "T" } else { "N" }
        );
        println!(
            "{label:<24} {dims:>18} {:>10.3} {:>10.1} {:>10.3} {:>10.1} {:>8.2}x",
            seconds * 1e3,
            flops / seconds / 1e9,
            bf16_seconds * 1e3,
            flops / bf16_seconds / 1e9,
            seconds / bf16_seconds
        );
    }
}
