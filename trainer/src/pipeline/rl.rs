//! The RL stage's loop, written once for every caller (`sage train` with its
//! checkpoints, the experiment's arms and their controls, the examples): each step's
//! rollouts and update, its metrics row, a progress line, then the caller's hook; a
//! requested stop ends the run after the hook has seen its last step.

use sage_transformer::Kernels;

use super::{failed, PipelineError, Reporter};
use crate::chat::ChatTemplate;
use crate::interrupt;
use crate::metrics::MetricsLog;
use crate::policy::TransformerPolicy;
use crate::rl::{RlStepStats, RlTrainer, WorldRl};

/// Called after every RL step (once its metrics row is written) with the policy, the
/// step's statistics, the trainer (whose state a checkpoint saves) and whether the step
/// is the run's last: its final step, or the one a requested stop
/// ([`interrupt`](crate::interrupt)) ends it at.
pub type RlHook<'a, K> = dyn FnMut(&mut TransformerPolicy<K>, &RlStepStats, &RlTrainer, bool) -> Result<(), PipelineError>
    + 'a;

/// What an RL run trains on, and what its progress lines are called.
#[derive(Clone, Copy)]
pub struct RlInputs<'a> {
    /// The training chains and their environments.
    pub world: &'a WorldRl,
    /// The chat template of the policy's tokenizer, limited to the episodes' length.
    pub template: &'a ChatTemplate<'a>,
    /// The first word of each progress line (`rl`, or an experiment arm's name).
    pub label: &'a str,
}

/// Runs `trainer` to its last step on `policy` (with `reference`, the frozen policy of
/// a KL term): every step's statistics go to `metrics` and, as one line, to `reporter`,
/// then to `on_step`.
pub fn run_rl<K: Kernels>(
    policy: &mut TransformerPolicy<K>,
    mut reference: Option<&mut TransformerPolicy<K>>,
    trainer: &mut RlTrainer,
    inputs: RlInputs<'_>,
    metrics: &mut MetricsLog,
    reporter: &mut dyn Reporter,
    on_step: &mut RlHook<'_, K>,
) -> Result<(), PipelineError> {
    let steps = trainer.config().steps;
    while !trainer.finished() {
        let stats = inputs
            .world
            .step(trainer, policy, reference.as_deref_mut(), inputs.template)
            .map_err(failed("rl"))?;
        stats.log_to(metrics).map_err(failed("metrics"))?;
        reporter.info(&step_line(inputs.label, &stats, steps));
        reporter.rl_step(inputs.label, stats.step, steps);
        let stopping = interrupt::stop_requested();
        on_step(policy, &stats, trainer, stopping || trainer.finished())?;
        if stopping && !trainer.finished() {
            return Err(PipelineError::new(
                "rl",
                format!("stopped on request after step {}", stats.step),
            ));
        }
    }
    Ok(())
}

/// One line of progress.
fn step_line(label: &str, stats: &RlStepStats, steps: u64) -> String {
    let list = |values: &[f32], scale: f32| {
        values
            .iter()
            .map(|v| format!("{:.2}", v * scale))
            .collect::<Vec<_>>()
            .join("/")
    };
    // With dynamic sampling the update trains on other chains than the step rolled out.
    let trained = if stats.chains_trained == stats.chains_rolled_out {
        String::new()
    } else {
        format!(
            ", trained on {} of {} chains",
            stats.chains_trained, stats.chains_rolled_out
        )
    };
    format!(
        "{label} step {}/{steps}: reward {}, success % {}, skill use {:.0}%, {:.0} \
         tokens/episode, uninformative chains {:.0}%{trained}, grad norm {:.3}{}",
        stats.step,
        list(&stats.reward_mean, 1.0),
        list(&stats.success, 100.0),
        100.0 * stats.skill_usage,
        stats.generated_tokens,
        100.0 * stats.uninformative_chains,
        stats.update.grad_norm,
        stats
            .update
            .not_applied
            .as_ref()
            .map_or(String::new(), |why| format!(" (not applied: {why})"))
    )
}
