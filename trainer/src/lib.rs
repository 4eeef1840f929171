//! # sage-trainer
//!
//! Everything that turns a model and a world into a trained skill-library agent:
//! tokenizer, policy over the transformer, rollout engine, SFT, SAGE reinforcement
//! learning, evaluation, checkpoints, and the `sage` command-line interface.
//!
//! Status: the training pipeline arrives with issues 5 and 6. What is here now is the
//! backend selection by cargo feature, which the CLI reports.

pub mod optim;
pub mod sampling;
pub mod tokenizer;
pub mod weights;

/// The compute backends compiled into this build, by cargo feature (`cpu` is the
/// default; `cuda` and `wgpu` are opt-in).
pub fn compiled_backends() -> Vec<&'static str> {
    let mut backends = Vec::new();
    if cfg!(feature = "cpu") {
        backends.push("cpu");
    }
    if cfg!(feature = "cuda") {
        backends.push("cuda");
    }
    if cfg!(feature = "wgpu") {
        backends.push("wgpu");
    }
    backends
}
