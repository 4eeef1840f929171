//! The evaluation stage: every configured split and retrieval mode of the built-in
//! world or of a remote environment, the table, and the JSON report.

use std::path::Path;
use std::sync::Arc;

use sage_core::Policy;
use sage_envs::scenarios::{Catalog, CatalogConfig};

use super::{failed, PipelineError, Reporter};
use crate::chat::ChatTemplate;
use crate::environments::RemoteEnvs;
use crate::eval::{
    evaluate_scenarios, evaluate_split, metrics_table, EvalConfig, EvalMetrics, EvalRun,
    EvalScenario, TaskOutcome,
};
use crate::files::write_atomic;

/// One split under one retrieval mode: its metrics and its tasks.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EvalReport {
    /// The metrics.
    pub metrics: EvalMetrics,
    /// Every task's outcome.
    pub tasks: Vec<TaskOutcome>,
}

/// Where an evaluation's episodes run.
enum Source<'a> {
    /// The built-in world's scenarios of the evaluated splits.
    Builtin(Arc<Catalog>),
    /// A remote environment's servers.
    Remote(&'a RemoteEnvs),
}

/// Evaluates `policy` on every split and retrieval mode of `eval` in the built-in world,
/// or in `remote`'s servers when given (the system prompt with the world's rules when
/// `prompt_rules`), prints the table through `reporter`, and writes `out` as JSON when
/// given.
#[allow(clippy::too_many_arguments)]
pub fn run_eval<P: Policy>(
    policy: &mut P,
    eval: &EvalConfig,
    prompt_rules: bool,
    template: &ChatTemplate<'_>,
    remote: Option<&RemoteEnvs>,
    out: Option<&Path>,
    reporter: &mut dyn Reporter,
) -> Result<Vec<EvalReport>, PipelineError> {
    reporter.stage("evaluation");
    let (splits, modes) = (&eval.splits, &eval.modes);
    let source = match remote {
        Some(remote) => Source::Remote(remote),
        None => {
            let catalog_config = CatalogConfig {
                iid_seeds: eval.iid_seeds,
                ..CatalogConfig::default()
            };
            let catalog = Catalog::build_splits(&catalog_config, splits).map_err(failed("eval"))?;
            Source::Builtin(Arc::new(catalog))
        }
    };
    let template = template
        .clone()
        .with_max_len(eval.rollout.max_episode_tokens);
    let mut reports = Vec::new();
    for &split in splits {
        let listed = match source {
            Source::Remote(remote) => {
                let listed = remote.list(split.name()).map_err(failed("eval"))?;
                listed
                    .into_iter()
                    .map(|s| EvalScenario {
                        scenario: s.scenario,
                        template: s.template,
                        built: None,
                    })
                    .collect()
            }
            Source::Builtin(_) => Vec::new(),
        };
        for &mode in modes {
            let mode_name = mode.to_string();
            let on_wave =
                &mut |wave, waves| reporter.eval_wave(split.name(), &mode_name, wave, waves);
            let (metrics, tasks) = match &source {
                Source::Builtin(catalog) => evaluate_split(
                    policy,
                    catalog,
                    &template,
                    split,
                    mode,
                    eval,
                    prompt_rules,
                    on_wave,
                ),
                Source::Remote(remote) => {
                    let run = EvalRun {
                        split: split.name(),
                        mode,
                        config: eval,
                        prompt_rules,
                    };
                    let envs = remote.factory(eval.rollout.max_turns.max(1), eval.seed);
                    evaluate_scenarios(policy, &listed, &envs, &template, &run, on_wave)
                }
            }
            .map_err(failed("eval"))?;
            if metrics.environment_errors > 0 {
                reporter.info(&format!(
                    "{} {mode_name}: {} of {} tasks failed in their environment (see \
                     environment_error in the report)",
                    split.name(),
                    metrics.environment_errors,
                    metrics.tasks
                ));
            }
            reports.push(EvalReport { metrics, tasks });
        }
    }
    let rows: Vec<EvalMetrics> = reports.iter().map(|r| r.metrics.clone()).collect();
    reporter.result(&metrics_table(&rows));
    if let Some(out) = out {
        let json = serde_json::to_string_pretty(&reports).map_err(failed("eval"))?;
        write_atomic(out, json.as_bytes())
            .map_err(|e| PipelineError::new("eval", format!("{}: {e}", out.display())))?;
        reporter.info(&format!("evaluation written to {}", out.display()));
    }
    Ok(reports)
}
