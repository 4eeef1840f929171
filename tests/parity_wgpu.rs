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
            report(format!(
                "wgpu parity tests run on: {}",
                backend.description()
            ));
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
    let tiny = sage_core::transformer::ModelConfig::tiny();
    backend.check_model(&tiny).expect("the tiny model fits");
    let huge = sage_core::transformer::ModelConfig {
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
    use sage_core::transformer::{AdamWStep, Kernels, Tensor, Transformer};
    use sage_e2e::backend_parity::{random_params, small_config, Rng};

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
