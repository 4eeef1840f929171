//! The backend parity tests for the CUDA backend against the CPU oracle, in f32. Without
//! a CUDA driver or GPU each test says so and returns; with `SAGE_REQUIRE_CUDA=1` a
//! missing device fails the test instead (the GPU benchmark script sets it).

use std::io::Write;
use std::sync::Once;

use sage_backend_cuda::CudaBackend;

/// Says once per process which device the tests run on, or why they are skipped.
static REPORT: Once = Once::new();

fn report(line: String) {
    REPORT.call_once(|| say(&line));
}

/// Writes `line` to the process's stderr past the test harness's output capture,
/// through a duplicate of the stderr handle, so a skip is seen even when tests pass.
fn say(line: &str) {
    #[cfg(unix)]
    let handle = std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned();
    #[cfg(windows)]
    let handle = std::os::windows::io::AsHandle::as_handle(&std::io::stderr()).try_clone_to_owned();
    #[cfg(any(unix, windows))]
    if let Ok(handle) = handle {
        let _ = writeln!(std::fs::File::from(handle), "{line}");
        return;
    }
    eprintln!("{line}");
}

/// The CUDA backend, or `None` (after saying why) when it cannot start and
/// `SAGE_REQUIRE_CUDA` is not `1`.
fn cuda_backend() -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(backend) => {
            report(format!(
                "cuda parity tests run on: {}",
                backend.description()
            ));
            Some(backend)
        }
        Err(e) if std::env::var("SAGE_REQUIRE_CUDA").as_deref() == Ok("1") => {
            panic!("SAGE_REQUIRE_CUDA=1 but the CUDA backend cannot start: {e}")
        }
        Err(e) => {
            report(format!(
                "SKIPPED: cuda parity tests, no CUDA device ({e}); \
                 set SAGE_REQUIRE_CUDA=1 to make this a failure"
            ));
            None
        }
    }
}

sage_e2e::backend_parity_tests!(cuda_backend());

/// The tiny model fits any device; a model of 2^40 parameters fits none, and the error
/// says why; heads wider than the kernels hold are refused.
#[test]
fn check_model_names_the_limit() {
    let Some(backend) = cuda_backend() else {
        return;
    };
    let tiny = sage_transformer::ModelConfig::tiny();
    backend.check_model(&tiny).expect("the tiny model fits");
    let huge = sage_transformer::ModelConfig {
        vocab_size: 1 << 24,
        hidden_size: 1 << 16,
        num_attention_heads: 512,
        num_key_value_heads: 512,
        ..tiny.clone()
    };
    let message = backend
        .check_model(&huge)
        .expect_err("too large")
        .to_string();
    assert!(message.contains("memory"), "{message}");
    let wide = sage_transformer::ModelConfig {
        hidden_size: 512,
        num_attention_heads: 2,
        num_key_value_heads: 2,
        ..tiny
    };
    let message = backend
        .check_model(&wide)
        .expect_err("heads of 256")
        .to_string();
    assert!(message.contains("128"), "{message}");
}

/// The backend can move to another thread, as the trainer's backends must.
#[test]
fn the_backend_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<CudaBackend>();
}

/// The bf16 GEMM mode agrees with the CPU's f32 GEMM to bf16's precision (8 bits of
/// mantissa per operand, sums of 150 products in f32): 2e-2 of the largest value, with
/// the operands cast to bf16 copies first and with cuBLAS rounding them itself.
#[test]
fn bf16_matmul_is_close_to_f32() {
    use sage_backend_cuda::{Bf16Inputs, Precision};
    use sage_e2e::backend_parity::{assert_close, Both, Rng};
    use sage_transformer::{Kernels, MatmulShape};

    for inputs in [Bf16Inputs::Copies, Bf16Inputs::Converted] {
        let Some(mut b) = Both::new(|| {
            cuda_backend()?;
            let mut backend = CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend");
            backend.set_bf16_inputs(inputs);
            Some(backend)
        }) else {
            return;
        };
        let mut rng = Rng::new(21);
        let (m, n, k) = (130, 70, 150);
        for layout in 0..4 {
            let shape = MatmulShape {
                m,
                n,
                k,
                trans_a: layout & 1 != 0,
                trans_b: layout & 2 != 0,
                accumulate: false,
            };
            let a = b.random(&mut rng, m * k, 1.0);
            let bm = b.random(&mut rng, k * n, 1.0);
            let c = b.random(&mut rng, m * n, 1.0);
            b.cpu.matmul(c[0], a[0], bm[0], shape).expect("cpu");
            b.other
                .matmul(c[1], a[1], bm[1], shape)
                .expect("bf16 matmul");
            let (want, got) = b.download(c);
            assert_close(
                &format!("bf16 matmul ({inputs:?}) {shape:?}"),
                &got,
                &want,
                2e-2,
            );
        }
    }
}

/// The bf16 mode's training attention (tensor cores, `flash.cu`) agrees with the CPU's
/// f32 attention to bf16's precision: inputs, probabilities and score gradients rounded
/// to 8 bits of mantissa, f32 accumulation; 1e-2 of the largest value (the emulated run
/// of these kernels, `emulated_kernels`, measures 2-7e-3). Sequences of 150, 1, 37 and 9
/// cross the 64-row blocks and every tile at lengths that are not multiples of them; 4
/// query heads on 2 key/value heads, of width 64 (Qwen2.5-0.5B's: the kernels for heads
/// of at most 64, with dk/dv over tiles of 16 and of 32 queries) and 96 (the kernels
/// for heads of up to 128).
#[test]
fn bf16_attention_is_close_to_f32() {
    use sage_backend_cuda::{DkvTile, Precision};
    use sage_e2e::backend_parity::{Both, Rng};
    use sage_transformer::{AttentionShape, Kernels};

    fn forward_backward<K: Kernels>(
        kernels: &mut K,
        [out, lse, dq, dk, dv]: [sage_transformer::Tensor; 5],
        [q, k, v, dout]: [sage_transformer::Tensor; 4],
        seq_starts: &[u32],
        shape: AttentionShape,
    ) -> Result<(), K::Error> {
        kernels.attention_forward(out, lse, q, k, v, seq_starts, shape)?;
        kernels.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, seq_starts, shape)
    }
    for (head_dim, tile) in [
        (64, DkvTile::Queries16),
        (64, DkvTile::Queries32),
        (96, DkvTile::Queries16),
    ] {
        let Some(mut b) = Both::new(|| {
            cuda_backend()?;
            let mut backend = CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend");
            backend.set_dkv_tile(tile);
            Some(backend)
        }) else {
            return;
        };
        let mut rng = Rng::new(34);
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim,
        };
        let seq_starts = [0, 150, 151, 188, 197];
        let n = 197;
        let (qw, kvw) = (4 * head_dim, 2 * head_dim);
        let q = b.random(&mut rng, n * qw, 1.5);
        let k = b.random(&mut rng, n * kvw, 1.5);
        let v = b.random(&mut rng, n * kvw, 1.0);
        let dout = b.random(&mut rng, n * qw, 1.0);
        let [out, lse, dq] = [n * qw, n * 4, n * qw].map(|len| b.random(&mut rng, len, 1.0));
        let [dk, dv] = [n * kvw; 2].map(|len| b.random(&mut rng, len, 1.0));
        let outputs = |i: usize| [out[i], lse[i], dq[i], dk[i], dv[i]];
        let inputs = |i: usize| [q[i], k[i], v[i], dout[i]];
        forward_backward(&mut b.cpu, outputs(0), inputs(0), &seq_starts, shape).expect("cpu");
        forward_backward(&mut b.other, outputs(1), inputs(1), &seq_starts, shape)
            .expect("bf16 attention");
        for (name, t) in [
            ("out", out),
            ("lse", lse),
            ("dq", dq),
            ("dk", dk),
            ("dv", dv),
        ] {
            b.check(
                &format!("bf16 attention {name}, hd {head_dim}, {tile:?}"),
                t,
                1e-2,
            );
        }
    }
}

/// The bf16 mode keeps a weight's bf16 copy between GEMMs and must cast it again after
/// the weight changes, however it changes: a host write, a kernel (`scale`), AdamW.
/// Each GEMM is compared with the CPU's f32 GEMM after the same change (bf16 bound as
/// in `bf16_matmul_is_close_to_f32`); a stale copy would give the previous product.
#[test]
fn bf16_kept_copies_follow_their_weights() {
    use sage_backend_cuda::Precision;
    use sage_e2e::backend_parity::{assert_close, Both, Rng};
    use sage_transformer::{AdamWStep, Kernels, MatmulShape};

    let Some(mut b) = Both::new(|| {
        cuda_backend()?;
        Some(CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend"))
    }) else {
        return;
    };
    let mut rng = Rng::new(44);
    let (m, n, k) = (33, 48, 64);
    let shape = MatmulShape {
        m,
        n,
        k,
        trans_a: false,
        trans_b: true,
        accumulate: false,
    };
    let x = b.random(&mut rng, m * k, 1.0);
    let w = b.random(&mut rng, n * k, 1.0);
    let c = b.random(&mut rng, m * n, 1.0);
    let product = |b: &mut Both<CudaBackend>, what: &str| {
        b.cpu.matmul(c[0], x[0], w[0], shape).expect("cpu");
        b.other
            .matmul(c[1], x[1], w[1], shape)
            .expect("bf16 matmul");
        let (want, got) = b.download(c);
        assert_close(what, &got, &want, 2e-2);
    };
    product(&mut b, "first use");
    product(&mut b, "second use (the copy is kept)");
    assert!(b.other.kept_bf16_bytes() > 0, "the weight's copy is kept");
    let fresh = rng.vec(n * k, 1.0);
    b.cpu.write(w[0], &fresh).expect("cpu");
    b.other.write(w[1], &fresh).expect("write");
    product(&mut b, "after a host write");
    b.cpu.scale(w[0], -0.5).expect("cpu");
    b.other.scale(w[1], -0.5).expect("scale");
    product(&mut b, "after a kernel scaled the weight");
    let grads = b.random(&mut rng, n * k, 1.0);
    let moments = [b.upload(&vec![0.0; n * k]), b.upload(&vec![0.0; n * k])];
    let step = AdamWStep {
        learning_rate: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        step: 1,
    };
    b.cpu
        .adamw(w[0], grads[0], moments[0][0], moments[1][0], step)
        .expect("cpu");
    b.other
        .adamw(w[1], grads[1], moments[0][1], moments[1][1], step)
        .expect("adamw");
    product(&mut b, "after an AdamW step");
}

/// The bf16 mode's split-KV decoding attention (f32 arithmetic) agrees with the CPU to
/// 1e-5 against caches filled to 1, 300 and 600 rows (one to three splits of 256), for
/// 7 query heads per key/value head at width 64, as in `emulated_kernels`.
#[test]
fn split_kv_decoding_matches_the_cpu() {
    use sage_backend_cuda::Precision;
    use sage_e2e::backend_parity::{Both, Rng};
    use sage_transformer::{AttentionShape, Kernels};

    let Some(mut b) = Both::new(|| {
        cuda_backend()?;
        Some(CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend"))
    }) else {
        return;
    };
    let mut rng = Rng::new(52);
    let shape = AttentionShape {
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
    };
    let (batch, capacity, qw, kvw) = (3, 600, 14 * 64, 2 * 64);
    let k_cache = b.random(&mut rng, batch * capacity * kvw, 1.0);
    let v_cache = b.random(&mut rng, batch * capacity * kvw, 1.0);
    let q = b.random(&mut rng, batch * qw, 1.5);
    let out = b.random(&mut rng, batch * qw, 1.0);
    let lengths = [1, 300, 600];
    b.cpu
        .attention_decode(
            out[0], q[0], k_cache[0], v_cache[0], &lengths, capacity, shape,
        )
        .expect("cpu");
    b.other
        .attention_decode(
            out[1], q[1], k_cache[1], v_cache[1], &lengths, capacity, shape,
        )
        .expect("split-KV decode");
    b.check("split-KV attention_decode out", out, 1e-5);
}

/// The bf16 mode's KV cache holds bf16 keys and values: rows copied in and appended
/// are rounded to bf16 (to nearest even, as `half` rounds), and attention over them
/// agrees with the CPU's over the rounded values to 1e-5 (the parity body
/// `kv_cache_rounded`). Every other kernel refuses the cache with an error naming it.
#[test]
fn bf16_kv_cache_holds_bf16() {
    use sage_backend_cuda::Precision;
    use sage_transformer::{Kernels, Tensor};

    let bf16 = || {
        cuda_backend()?;
        Some(CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend"))
    };
    sage_e2e::backend_parity::kv_cache_rounded(bf16, |x| half::bf16::from_f32(x).to_f32());
    let Some(mut k) = bf16() else {
        return;
    };
    let cache = Tensor::whole(k.alloc_kv_cache(64).expect("cache"), 64);
    let refused = k
        .read(cache, &mut [0.0; 64])
        .expect_err("an f32 read of a bf16 cache");
    assert!(
        refused.to_string().contains("KV cache held in bf16"),
        "{refused}"
    );
    let refused = k.fill(cache, 1.0).expect_err("an f32 fill of a bf16 cache");
    assert!(
        refused.to_string().contains("KV cache held in bf16"),
        "{refused}"
    );
}

/// A frozen model in the bf16 mode (`Transformer::new_frozen`: bf16 weights alone)
/// scores and decodes what a trainable model does whose f32 weights were rounded to bf16
/// first: the GEMMs multiply the same bf16 weights (one as held, the other through its
/// kept copy) and the embedding, norm weights and biases widen to the same f32 values,
/// so the arithmetic is the same; 1e-5 of the largest logit allows cuBLAS another
/// algorithm. Reading the frozen weights back is refused, naming them.
#[test]
fn frozen_bf16_weights_run_as_rounded_trainable_weights() {
    use sage_backend_cuda::Precision;
    use sage_e2e::backend_parity::{assert_close, Rng};
    use sage_transformer::sampling::argmax;
    use sage_transformer::{Kernels, KvCache, ModelConfig, Transformer};

    if cuda_backend().is_none() {
        return;
    }
    let config = ModelConfig::tiny();
    let prompts: [&[u32]; 3] = [&[5, 9, 300, 41, 7], &[11, 2], &[400, 3, 3, 18]];
    let steps = 12;
    let mut fed: Vec<Vec<u32>> = Vec::new();
    let mut run = |frozen: bool| {
        let mut k = CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend");
        let mut model = match frozen {
            true => Transformer::new_frozen(&mut k, config.clone()),
            false => Transformer::new(&mut k, config.clone()),
        }
        .expect("model");
        let mut params = Rng::new(0xf202).vec(model.params().len, 0.1);
        if !frozen {
            for p in &mut params {
                *p = half::bf16::from_f32(*p).to_f32();
            }
        }
        k.write(model.params(), &params).expect("params");
        let mut outputs = vec![model
            .forward(
                &mut k,
                &[5, 9, 300, 41, 7, 11],
                &[9, 300, 41, 7, 2, 2],
                &[0, 5, 6],
            )
            .expect("forward")];
        let mut cache = KvCache::new(&mut k, &model, prompts.len(), 32).expect("cache");
        let mut logits = model
            .prefill(&mut k, &mut cache, &prompts)
            .expect("prefill");
        for step in 0..steps {
            if fed.len() == step {
                let next = logits
                    .chunks_exact(config.vocab_size)
                    .map(|r| argmax(r) as u32);
                fed.push(next.collect());
            }
            outputs.push(logits);
            logits = model
                .decode_step(&mut k, &mut cache, &fed[step])
                .expect("step");
        }
        if frozen {
            let refused = k.read(model.params().slice(0, 4), &mut [0.0; 4]);
            let why = refused
                .expect_err("a read of frozen bf16 weights")
                .to_string();
            assert!(why.contains("frozen weights in bf16"), "{why}");
        }
        outputs
    };
    let rounded = run(false);
    let frozen = run(true);
    for (i, (got, want)) in frozen.iter().zip(&rounded).enumerate() {
        let what = if i == 0 {
            "log-probabilities".to_owned()
        } else {
            format!("logits {i}")
        };
        assert_close(&what, got, want, 1e-5);
    }
}

/// Token choice on the device (`choose.cu`, the bf16 mode's fast path; the f32 mode
/// picks on the host) against the host's rule: the parity body `token_choice`.
#[test]
fn token_choice_on_the_device() {
    use sage_backend_cuda::Precision;
    sage_e2e::backend_parity::token_choice(|| {
        cuda_backend()?;
        Some(CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend"))
    });
}

/// Decoding steps replayed from CUDA graphs (the bf16 mode's default, `record` in the
/// backend) give the logits of the same steps run as ordinary launches, step by step,
/// over 270 steps of 4 sequences of the tiny model: across the 256-row boundary where
/// the split-KV attention takes a second split (a new graph). The graphs hold the very
/// kernels and GEMMs the eager steps queue, on the same addresses, so the only
/// difference allowed is cuBLAS picking another algorithm inside a capture: 1e-5
/// relative to the largest logit, f32 accumulation over widths of at most 768.
#[test]
fn decoding_steps_replayed_from_graphs_match_eager_steps() {
    use sage_backend_cuda::Precision;
    use sage_e2e::backend_parity::Rng;
    use sage_transformer::sampling::argmax;
    use sage_transformer::{Kernels, KvCache, ModelConfig, Transformer};

    if cuda_backend().is_none() {
        return;
    }
    let config = ModelConfig::tiny();
    let prompts: Vec<Vec<u32>> = (0..4u32)
        .map(|b| (0..5 + 3 * b).map(|i| (i * 37 + b * 11) % 300).collect())
        .collect();
    let steps = 270;
    // Each run decodes the same tokens: the eager run's greedy picks.
    let mut fed: Vec<Vec<u32>> = Vec::new();
    let run = |graphs: bool, fed: &mut Vec<Vec<u32>>| {
        let mut k = CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend");
        k.set_step_graphs(graphs);
        let mut model = Transformer::new(&mut k, config.clone()).expect("model");
        let params = Rng::new(0x9e37_79b9).vec(model.params().len, 0.1);
        k.write(model.params(), &params).expect("params");
        let mut cache = KvCache::new(&mut k, &model, prompts.len(), 320).expect("cache");
        let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
        let mut logits = model.prefill(&mut k, &mut cache, &refs).expect("prefill");
        let mut all = Vec::new();
        for step in 0..steps {
            if fed.len() == step {
                fed.push(
                    logits
                        .chunks_exact(config.vocab_size)
                        .map(|row| argmax(row) as u32)
                        .collect(),
                );
            }
            logits = model
                .decode_step(&mut k, &mut cache, &fed[step])
                .expect("step");
            all.push(logits.clone());
        }
        (all, k.step_graph_stats())
    };
    let (eager, eager_stats) = run(false, &mut fed);
    let (replayed, stats) = run(true, &mut fed);
    assert_eq!(eager_stats.replayed, 0);
    assert_eq!(eager_stats.eager, steps as u64);
    say(&format!("decoding step graphs: {stats:?}"));
    assert!(
        stats.captured >= 2 && stats.replayed >= steps as u64 - 10,
        "graphs were not replayed: {stats:?}"
    );
    let mut worst = 0.0f32;
    for (step, (a, b)) in eager.iter().zip(&replayed).enumerate() {
        let scale = a.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
        for (x, y) in a.iter().zip(b) {
            let error = (x - y).abs() / scale;
            worst = worst.max(error);
            assert!(error < 1e-5, "step {step}: eager {x}, graph {y}");
        }
    }
    say(&format!(
        "decoding step graphs: largest relative difference {worst:e}"
    ));
}

/// A decoding step's biases, rotations and cache append in one kernel, and the k/v and
/// gate/up projections as one batched GEMM each (the defaults), decode the logits of
/// the separate kernels and GEMMs (`CudaBackend::set_fused_rope_append(false)`,
/// `set_batched_gemms(false)`), each alone and both together, in the bf16 mode (bf16
/// caches) with trainable f32 weights and with frozen bf16 ones (f32 and bf16 biases: the
/// tiny model has Qwen2's q, k and v biases; the batched GEMMs run on the frozen
/// weights), over 40 steps of 4 sequences. The one kernel makes the same sums, rotation
/// and rounding as the separate ones; a batched GEMM may take another cuBLAS algorithm,
/// so 1e-5 of the largest logit, where a wrong index, bias or stride would differ by far
/// more. The f32 mode's batched GEMM is the parity body `matmul_shared_input`.
#[test]
fn decoding_with_fused_kernels_and_batched_gemms_matches_the_separate_ones() {
    use sage_backend_cuda::Precision;
    use sage_e2e::backend_parity::{assert_close, Rng};
    use sage_transformer::sampling::argmax;
    use sage_transformer::{Kernels, KvCache, ModelConfig, Transformer};

    if cuda_backend().is_none() {
        return;
    }
    let config = ModelConfig::tiny();
    assert!(config.qkv_bias, "the tiny model has q, k and v biases");
    let prompts: Vec<Vec<u32>> = (0..4u32)
        .map(|b| (0..3 + 4 * b).map(|i| (i * 53 + b * 7) % 300).collect())
        .collect();
    let steps = 40;
    for frozen in [false, true] {
        let mut fed: Vec<Vec<u32>> = Vec::new();
        let mut run = |fused: bool, batched: bool| {
            let mut k = CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend");
            k.set_fused_rope_append(fused);
            k.set_batched_gemms(batched);
            let mut model = match frozen {
                true => Transformer::new_frozen(&mut k, config.clone()),
                false => Transformer::new(&mut k, config.clone()),
            }
            .expect("model");
            let params = Rng::new(0x51ab).vec(model.params().len, 0.1);
            k.write(model.params(), &params).expect("params");
            let mut cache = KvCache::new(&mut k, &model, prompts.len(), 64).expect("cache");
            let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            let mut logits = model.prefill(&mut k, &mut cache, &refs).expect("prefill");
            let mut all = Vec::new();
            for step in 0..steps {
                if fed.len() == step {
                    let rows = logits.chunks_exact(config.vocab_size);
                    fed.push(rows.map(|row| argmax(row) as u32).collect());
                }
                logits = model
                    .decode_step(&mut k, &mut cache, &fed[step])
                    .expect("step");
                all.push(logits.clone());
            }
            all
        };
        let separate = run(false, false);
        for (fused, batched) in [(true, false), (false, true), (true, true)] {
            let got = run(fused, batched);
            for (step, (got, want)) in got.iter().zip(&separate).enumerate() {
                let what =
                    format!("frozen {frozen}, fused {fused}, batched {batched}, step {step}");
                assert_close(&what, got, want, 1e-5);
            }
        }
    }
}

/// The bf16 mode's kernels that make GEMM inputs (RMSNorm forward and backward, SwiGLU
/// forward and backward, attention's output in training and decoding, RoPE, the head's
/// logit gradient) write their bf16 copies as they go (`Bf16Inputs::Copies`,
/// the default); `Bf16Inputs::Casts` makes every copy with a cast kernel instead. Both
/// round to nearest even, so three training steps (new tokens each, an AdamW step
/// between) and a prefill with decoding steps give the same log-probabilities, gradients
/// and logits; 1e-5 of the largest value allows cuBLAS another algorithm on copies at
/// other addresses. A copy left stale (the previous layer's or step's) would differ by
/// far more. With the kernels' copies more is kept (the decoding activations too), a
/// training step casts fewer operands (what is left: the weights after AdamW, the value
/// gradient), and a decoding step, once its copies exist, casts none (the weights are
/// current, every activation a GEMM reads is made by a kernel that writes its copy).
#[test]
fn copies_written_by_kernels_equal_cast_copies() {
    use sage_backend_cuda::{Bf16Inputs, Precision};
    use sage_e2e::backend_parity::{assert_close, Rng};
    use sage_transformer::sampling::argmax;
    use sage_transformer::{AdamWStep, Kernels, KvCache, ModelConfig, Tensor, Transformer};

    if cuda_backend().is_none() {
        return;
    }
    let config = ModelConfig::tiny();
    let mut fed: Vec<Vec<u32>> = Vec::new();
    let mut run = |inputs: Bf16Inputs| {
        let mut k = CudaBackend::with_precision(Precision::Bf16).expect("bf16 backend");
        k.set_bf16_inputs(inputs);
        // Every decoding step queued kernel by kernel, so that its casts are counted.
        k.set_step_graphs(false);
        let mut model = Transformer::new(&mut k, config.clone()).expect("model");
        let params = Rng::new(0xc0_9e5).vec(model.params().len, 0.1);
        k.write(model.params(), &params).expect("params");
        let moments = [0; 2].map(|_| {
            let t = k.alloc(model.params().len).expect("moments");
            Tensor::whole(t, model.params().len)
        });
        let mut tokens = Rng::new(0x70c);
        let mut outputs = Vec::new();
        let mut casts = [0u64; 2];
        for step in 1..=3 {
            let before = k.operand_casts();
            let batch: Vec<u32> = tokens.ints(40, config.vocab_size);
            let (inputs, targets) = (&batch[..39], &batch[1..]);
            model.zero_grads(&mut k).expect("zero");
            outputs.push(
                model
                    .forward(&mut k, inputs, targets, &[0, 17, 30, 39])
                    .expect("forward"),
            );
            model
                .backward(&mut k, &[-1.0 / 39.0; 39])
                .expect("backward");
            let mut grads = vec![0.0f32; model.grads().len];
            k.read(model.grads(), &mut grads).expect("grads");
            outputs.push(grads);
            let hyper = AdamWStep {
                learning_rate: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
                step,
            };
            let (params, grads) = (model.params(), model.grads());
            k.adamw(params, grads, moments[0], moments[1], hyper)
                .expect("adamw");
            casts[0] = k.operand_casts() - before;
        }
        let prompts: [&[u32]; 2] = [&[5, 9, 300, 41, 7], &[11, 2, 8]];
        let mut cache = KvCache::new(&mut k, &model, prompts.len(), 24).expect("cache");
        let mut logits = model
            .prefill(&mut k, &mut cache, &prompts)
            .expect("prefill");
        for step in 0..8 {
            if step == 4 {
                casts[1] = k.operand_casts();
            }
            if fed.len() == step {
                fed.push(
                    logits
                        .chunks_exact(config.vocab_size)
                        .map(|r| argmax(r) as u32)
                        .collect(),
                );
            }
            outputs.push(logits);
            logits = model
                .decode_step(&mut k, &mut cache, &fed[step])
                .expect("step");
        }
        casts[1] = k.operand_casts() - casts[1];
        (outputs, k.kept_bf16_bytes(), casts)
    };
    let (cast, cast_kept, cast_casts) = run(Bf16Inputs::Casts);
    let (written, written_kept, written_casts) = run(Bf16Inputs::Copies);
    for (i, (got, want)) in written.iter().zip(&cast).enumerate() {
        assert_close(&format!("output {i}"), got, want, 1e-5);
    }
    say(&format!(
        "bf16 copies kept: {written_kept} bytes with the kernels' copies, {cast_kept} with casts"
    ));
    assert!(written_kept > cast_kept, "{written_kept} <= {cast_kept}");
    say(&format!(
        "operands cast in the third training step and the last four decoding steps: \
         {written_casts:?} with the kernels' copies, {cast_casts:?} with casts"
    ));
    assert!(
        written_casts[0] < cast_casts[0],
        "{written_casts:?} {cast_casts:?}"
    );
    assert_eq!(written_casts[1], 0, "a decoding step cast an operand");
    assert!(cast_casts[1] > 0, "{cast_casts:?}");
}
