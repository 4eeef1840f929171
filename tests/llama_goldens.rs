//! Parity with tiny random `LlamaForCausalLM` models made and run by PyTorch +
//! transformers (`scripts/llama_goldens.py`, which says how to regenerate
//! `goldens/llama_tiny/`): no bias anywhere, a rotary base of 500,000 and RMSNorm
//! epsilon 1e-5, untied (f32 shards, as TinyLlama) and tied (bf16, as SmolLM). The
//! checks and their tolerances are in `hf_goldens/`, shared with the Qwen2 goldens;
//! a re-saved model is written as Llama again.
//!
//! Set `LLAMA_GOLDENS_SAVE_TO=DIR` to also keep the re-saved models in DIR (for
//! `scripts/llama_goldens.py --check-load DIR/untied-f32`).

mod hf_goldens;

const FAMILY: &str = "llama_tiny";

#[test]
fn logits_loss_gradients_and_adamw_match_pytorch() {
    hf_goldens::check_logits_loss_gradients_and_adamw(FAMILY);
}

#[test]
fn slightly_broken_models_fail_the_tolerances() {
    hf_goldens::check_slightly_broken_models_fail(FAMILY);
}

#[test]
fn golden_models_round_trip_through_f32_and_bf16_as_llama() {
    hf_goldens::check_round_trip_through_f32_and_bf16(FAMILY, "LLAMA_GOLDENS_SAVE_TO");
}
