//! Parity with a reference nobody here wrote: tiny random `Qwen2ForCausalLM` models
//! made and run by PyTorch + transformers (`scripts/qwen2_goldens.py`, which says how
//! to regenerate `goldens/qwen2_tiny/`). The checks and their tolerances are in
//! `hf_goldens/`, shared with the Llama goldens.
//!
//! Set `QWEN2_GOLDENS_SAVE_TO=DIR` to also keep the re-saved models in DIR (for
//! `scripts/qwen2_goldens.py --check-load DIR/untied-f32`).

mod hf_goldens;

const FAMILY: &str = "qwen2_tiny";

#[test]
fn logits_loss_gradients_and_adamw_match_pytorch() {
    hf_goldens::check_logits_loss_gradients_and_adamw(FAMILY);
}

#[test]
fn slightly_broken_models_fail_the_tolerances() {
    hf_goldens::check_slightly_broken_models_fail(FAMILY);
}

#[test]
fn golden_models_round_trip_through_f32_and_bf16() {
    hf_goldens::check_round_trip_through_f32_and_bf16(FAMILY, "QWEN2_GOLDENS_SAVE_TO");
}
