//! The evaluation stage: every configured split and retrieval mode of the built-in
//! world, the table, and the JSON report.

use std::path::Path;
use std::sync::Arc;

use sage_core::Policy;
use sage_envs::scenarios::{Catalog, CatalogConfig};

use super::{failed, PipelineError, Reporter};
use crate::chat::ChatTemplate;
use crate::eval::{evaluate_split, metrics_table, EvalConfig, EvalMetrics, TaskOutcome};
use crate::files::write_atomic;

/// One split under one retrieval mode: its metrics and its tasks.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EvalReport {
    /// The metrics.
    pub metrics: EvalMetrics,
    /// Every task's outcome.
    pub tasks: Vec<TaskOutcome>,
}

/// Evaluates `policy` on every split and retrieval mode of `eval` in the built-in world
/// (the system prompt with the world's rules when `prompt_rules`), prints the table
/// through `reporter`, and writes `out` as JSON when given.
pub fn run_eval<P: Policy>(
    policy: &mut P,
    eval: &EvalConfig,
    prompt_rules: bool,
    template: &ChatTemplate<'_>,
    out: Option<&Path>,
    reporter: &mut dyn Reporter,
) -> Result<Vec<EvalReport>, PipelineError> {
    reporter.stage("evaluation");
    let (splits, modes) = (&eval.splits, &eval.modes);
    let catalog_config = CatalogConfig {
        iid_seeds: eval.iid_seeds,
        ..CatalogConfig::default()
    };
    let catalog = Arc::new(Catalog::build_splits(&catalog_config, splits).map_err(failed("eval"))?);
    let template = template
        .clone()
        .with_max_len(eval.rollout.max_episode_tokens);
    let mut reports = Vec::new();
    for &split in splits {
        for &mode in modes {
            let mode_name = mode.to_string();
            let (metrics, tasks) = evaluate_split(
                policy,
                &catalog,
                &template,
                split,
                mode,
                eval,
                prompt_rules,
                &mut |wave, waves| reporter.eval_wave(split.name(), &mode_name, wave, waves),
            )
            .map_err(failed("eval"))?;
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
