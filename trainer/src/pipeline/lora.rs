//! A run's LoRA adapters: put on its model at the start (`[sft.lora]`, `[rl.lora]`), and
//! a resumed run's checked against its settings.

use sage_transformer::{Kernels, LoraConfig, Transformer};

use super::{PipelineError, Reporter};
use crate::lora::{apply_lora, LoraSettings};

/// Puts the adapters of `settings` (the `[section]` of the config) on `model`, seeded by
/// `seed`, and reports how much of the model trains; nothing at rank 0.
pub fn start_lora<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    settings: &LoraSettings,
    section: &str,
    seed: u64,
    reporter: &mut dyn Reporter,
) -> Result<(), PipelineError> {
    let applied = apply_lora(k, model, settings, seed)
        .map_err(|why| PipelineError::new("lora", format!("[{section}]: {why}")))?;
    if applied {
        let trained = model.trainable().0.len;
        let total = model.params().len;
        reporter.info(&format!(
            "LoRA ([{section}]): {}; {trained} trained parameters, {:.2}% of the model's {total}",
            describe(model.lora_config()),
            100.0 * trained as f64 / total.max(1) as f64
        ));
    }
    Ok(())
}

/// Fails unless the adapters a resumed `model` came back with are those `settings` ask
/// for (none at rank 0), naming both.
pub fn check_resumed_lora(
    model: &Transformer,
    settings: &LoraSettings,
    section: &str,
) -> Result<(), PipelineError> {
    let wanted = settings
        .config()
        .map_err(|why| PipelineError::new("lora", format!("[{section}]: {why}")))?;
    if model.lora_config() == wanted.as_ref() {
        return Ok(());
    }
    Err(PipelineError::new(
        "resume",
        format!(
            "the checkpoint trains {} but [{section}] asks for {}: resume with the settings \
             the run started with",
            describe(model.lora_config()),
            describe(wanted.as_ref())
        ),
    ))
}

/// "rank 8, alpha 16 on q_proj, v_proj", or "every weight (no adapters)".
fn describe(config: Option<&LoraConfig>) -> String {
    match config {
        None => "every weight (no adapters)".to_owned(),
        Some(c) => {
            let targets: Vec<&str> = c.targets.iter().map(|p| p.name()).collect();
            format!(
                "adapters of rank {}, alpha {} on {}",
                c.rank,
                c.alpha,
                targets.join(", ")
            )
        }
    }
}
