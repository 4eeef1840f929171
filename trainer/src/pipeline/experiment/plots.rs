//! The experiment's charts: per RL step, for every RL arm of seed 0 and its control.

use std::path::Path;

use crate::experiment::Arm;
use crate::metrics::{read_series, LineChart};
use crate::pipeline::{failed, write_chart, PipelineError, Reporter};

/// A chart of one column of the arms' RL metrics against the step.
struct ArmChart<'a> {
    column: &'a str,
    title: &'a str,
    y_label: &'a str,
    file: &'a str,
}

/// Plots the experiment's charts: the first task's mean reward
/// (`plots/experiment_reward.png`) and its skill writing
/// (`plots/experiment_skill_writing.png`) per RL step, for every RL arm of seed 0 and
/// its control.
pub(super) fn plot_rewards(
    dir: &Path,
    arms: &[Arm],
    reporter: &mut dyn Reporter,
) -> Result<(), PipelineError> {
    let charts = [
        ArmChart {
            column: "reward_mean_1",
            title: "mean reward of the chain's first task, seed 0",
            y_label: "reward",
            file: "experiment_reward.png",
        },
        ArmChart {
            column: "skill_writing_1",
            title: "share of first tasks that wrote a skill, seed 0",
            y_label: "skill writing",
            file: "experiment_skill_writing.png",
        },
    ];
    for chart in charts {
        let mut series = Vec::new();
        for arm in arms.iter().filter(|a| a.trains()) {
            for run in [arm.name().to_owned(), format!("{}-control", arm.name())] {
                let log = dir
                    .join("seed-0")
                    .join(&run)
                    .join("metrics")
                    .join("rl.jsonl");
                if !log.is_file() {
                    continue;
                }
                let mut found =
                    read_series(&log, "step", &[chart.column]).map_err(failed("plot"))?;
                for s in &mut found {
                    s.name = run.clone();
                }
                series.extend(found);
            }
        }
        if series.is_empty() {
            continue;
        }
        let line_chart = LineChart {
            title: chart.title,
            x_label: "RL step",
            y_label: chart.y_label,
            series: &series,
            width: 1200,
            height: 520,
        };
        let path = dir.join("plots").join(chart.file);
        write_chart(&path, &line_chart, chart.title, reporter)?;
    }
    Ok(())
}
