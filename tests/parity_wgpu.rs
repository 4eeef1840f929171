//! The backend parity tests for the wgpu backend against the CPU oracle, on whatever
//! adapter wgpu finds (Mesa's lavapipe in CI). Without an adapter each test says so and
//! returns; with `SAGE_REQUIRE_WGPU=1` a missing adapter fails the test instead.

use std::io::Write;
use std::sync::Once;

use sage_backend_wgpu::WgpuBackend;

/// Says once per process which adapter the tests run on, or why they are skipped.
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

/// The wgpu backend, or `None` (after saying why) when no adapter exists and
/// `SAGE_REQUIRE_WGPU` is not `1`.
fn wgpu_backend() -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(backend) => {
            let description = backend.description();
            assert!(description.starts_with(&backend.adapter_info().name));
            report(format!("wgpu parity tests run on: {description}"));
            Some(backend)
        }
        Err(e) if std::env::var("SAGE_REQUIRE_WGPU").as_deref() == Ok("1") => {
            panic!("SAGE_REQUIRE_WGPU=1 but the wgpu backend cannot start: {e}")
        }
        Err(e) => {
            report(format!(
                "SKIPPED: wgpu parity tests, no adapter ({e}); \
                 set SAGE_REQUIRE_WGPU=1 to make this a failure"
            ));
            None
        }
    }
}

sage_e2e::backend_parity_tests!(wgpu_backend());

/// The tiny benchmark model fits any adapter; a model whose embedding table alone is
/// 64 GiB fits none, and the error names the limit.
#[test]
fn check_model_names_the_limit() {
    let Some(backend) = wgpu_backend() else {
        return;
    };
    let tiny = sage_transformer::ModelConfig::tiny();
    backend.check_model(&tiny).expect("the tiny model fits");
    let huge = sage_transformer::ModelConfig {
        vocab_size: 1 << 22,
        hidden_size: 4096,
        num_attention_heads: 32,
        num_key_value_heads: 8,
        ..tiny
    };
    let message = backend
        .check_model(&huge)
        .expect_err("too large")
        .to_string();
    assert!(message.contains("max_"), "{message}");
}

/// A training step (zero grads, forward, backward, gradient norm, AdamW) submits at
/// most 3 command buffers: the forward's read of the log-probs and the norm's read.
#[test]
fn a_training_step_submits_few_command_buffers() {
    use sage_e2e::backend_parity::{random_params, small_config, Rng};
    use sage_transformer::{AdamWStep, Kernels, Tensor, Transformer};

    let Some(mut k) = wgpu_backend() else { return };
    let mut rng = Rng::new(19);
    let mut model = Transformer::new(&mut k, small_config(true)).expect("model");
    let params = random_params(&model, &mut rng);
    k.write(model.params(), &params).expect("write");
    let total = model.params().len;
    let m = Tensor::whole(k.alloc(total).expect("alloc"), total);
    let v = Tensor::whole(k.alloc(total).expect("alloc"), total);
    let tokens = rng.ints(24, 53);
    let weights = vec![-1.0 / 24.0; 24];
    let mut step = |k: &mut WgpuBackend, step: u32| {
        model.zero_grads(k).expect("zero");
        model
            .forward(k, &tokens, &tokens, &[0, 24])
            .expect("forward");
        model.backward(k, &weights).expect("backward");
        k.sum_squares(model.grads()).expect("norm");
        let hyper = AdamWStep {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            step,
        };
        k.adamw(model.params(), model.grads(), m, v, hyper)
            .expect("adamw");
    };
    step(&mut k, 1);
    let before = k.submissions();
    for s in 2..=4 {
        step(&mut k, s);
    }
    let per_step = (k.submissions() - before) as f64 / 3.0;
    assert!(per_step <= 3.0, "{per_step} submissions per step");
}

/// The backend can move to another thread, as the trainer's backends must.
#[test]
fn the_backend_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<WgpuBackend>();
}

/// With bindings capped at 64 KiB, tensors of 100 000 and 300 000 elements are split
/// into pieces by the elementwise kernels, the sum of squares and AdamW, and a head of
/// V = 2000 runs in chunks of 8 rows; results match the CPU as in the parity tests
/// (exact for elementwise, 1e-5 for the sum and AdamW, 1e-5 / 1e-4 for the head). A
/// GEMM operand over the cap is refused with an error naming the limit.
#[test]
fn tensors_over_the_binding_limit_are_split() {
    use sage_e2e::backend_parity::{assert_close, Both, Rng};
    use sage_transformer::{AdamWStep, Kernels, MatmulShape};

    let limit = 64 * 1024;
    let Some(mut b) = Both::new(|| {
        wgpu_backend()?;
        Some(WgpuBackend::with_max_binding(limit).expect("capped backend"))
    }) else {
        return;
    };
    let mut rng = Rng::new(20);
    let len = 100_000;
    let x = b.random(&mut rng, len, 1.0);
    let y = b.random(&mut rng, len, 1.0);
    b.cpu.add_assign(x[0], y[0]).expect("cpu");
    b.other.add_assign(x[1], y[1]).expect("add_assign");
    b.cpu.scale(y[0], 0.5).expect("cpu");
    b.other.scale(y[1], 0.5).expect("scale");
    b.check("x", x, 0.0);
    b.check("y", y, 0.0);

    let big = b.random(&mut rng, 300_000, 1.0);
    let want = b.cpu.sum_squares(big[0]).expect("cpu");
    let got = b.other.sum_squares(big[1]).expect("sum_squares");
    assert_close("sum_squares", &[got], &[want], 1e-5);

    let (m, v) = (b.random(&mut rng, len, 0.1), b.upload(&vec![0.01; len]));
    let hyper = AdamWStep {
        learning_rate: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 1,
    };
    b.cpu.adamw(x[0], y[0], m[0], v[0], hyper).expect("cpu");
    b.other.adamw(x[1], y[1], m[1], v[1], hyper).expect("adamw");
    b.check("adamw params", x, 1e-5);

    let (rows, dim, vocab) = (40, 8, 2000);
    let hidden = b.random(&mut rng, rows * dim, 1.0);
    let lm_head = b.random(&mut rng, vocab * dim, 1.0);
    let targets = b.upload_indices(&rng.ints(rows, vocab));
    let (logp, lse) = (b.random(&mut rng, rows, 1.0), b.random(&mut rng, rows, 1.0));
    b.cpu
        .logprob_forward(logp[0], lse[0], hidden[0], lm_head[0], targets[0])
        .expect("cpu");
    b.other
        .logprob_forward(logp[1], lse[1], hidden[1], lm_head[1], targets[1])
        .expect("logprob_forward");
    b.check("logp", logp, 1e-5);
    let weights = b.random(&mut rng, rows, 1.0);
    let dhidden = b.random(&mut rng, rows * dim, 1.0);
    let dlm_head = b.random(&mut rng, vocab * dim, 1.0);
    b.cpu
        .logprob_backward(
            dhidden[0],
            Some(dlm_head[0]),
            weights[0],
            hidden[0],
            lm_head[0],
            targets[0],
            lse[0],
        )
        .expect("cpu");
    b.other
        .logprob_backward(
            dhidden[1],
            Some(dlm_head[1]),
            weights[1],
            hidden[1],
            lm_head[1],
            targets[1],
            lse[1],
        )
        .expect("logprob_backward");
    b.check("dhidden", dhidden, 1e-4);
    b.check("dlm_head", dlm_head, 1e-4);

    // c[200, 200] is 160 000 bytes, over the 64 KiB cap.
    let shape = MatmulShape {
        m: 200,
        n: 200,
        k: 1,
        trans_a: false,
        trans_b: false,
        accumulate: false,
    };
    let a = b.random(&mut rng, 200, 1.0);
    let c = b.random(&mut rng, 200 * 200, 1.0);
    let message = b
        .other
        .matmul(c[1], a[1], a[1], shape)
        .expect_err("over the cap")
        .to_string();
    assert!(
        message.contains("max_storage_buffer_binding_size"),
        "{message}"
    );
}

/// A write and a read larger than one staging buffer (64 MiB) go in pieces and round
/// trip exactly.
#[test]
fn transfers_over_one_staging_buffer_round_trip() {
    use sage_transformer::{Kernels, Tensor};

    let Some(mut k) = wgpu_backend() else { return };
    let len = (65 << 20) / 4 + 3;
    let data: Vec<f32> = (0..len).map(|i| (i % 1009) as f32 - 500.0).collect();
    let t = Tensor::whole(k.alloc(len).expect("alloc"), len);
    k.write(t, &data).expect("write");
    let mut back = vec![0.0; len];
    k.read(t, &mut back).expect("read");
    assert!(back == data, "the round trip changed the data");
}
