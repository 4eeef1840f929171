//! The experiment's tables: every arm's evaluation per split, every RL arm's gains over
//! its control and its SFT start, the paper's claim (SAGE against GRPO without skills
//! and against the outcome-only reward), as mean and spread over seeds, and the
//! templates where the arms part; and all of them together as `sage experiment` prints
//! them.

use super::{ArmControl, ArmRun};
use crate::eval::{wilson_interval, EvalMetrics, TemplateMetrics};
use crate::experiment::Arm;

/// Mean and population standard deviation (the spread over seeds of every table here).
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, variance.sqrt())
}

/// The seeds `runs` hold, as the table's header says them: "3 seeds" for seeds 0 to 2,
/// and the seeds themselves otherwise ("1 seed (4)", "2 seeds (0, 3)"), since a run of
/// some seeds (`--only-seed`) tables those alone.
fn seeds_label(runs: &[ArmRun]) -> String {
    let seeds = seeds_of(runs.iter());
    let count = match seeds.len() {
        1 => "1 seed".to_owned(),
        n => format!("{n} seeds"),
    };
    if seeds.iter().copied().eq(0..seeds.len() as u64) {
        return count;
    }
    format!("{count} ({})", seed_list(&seeds))
}

/// The distinct seeds of `runs`, in order.
fn seeds_of<'a>(runs: impl Iterator<Item = &'a ArmRun>) -> Vec<u64> {
    let mut seeds: Vec<u64> = runs.map(|r| r.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    seeds
}

/// Seeds as a table says them: "0, 2, 3".
fn seed_list(seeds: &[u64]) -> String {
    let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
    list.join(", ")
}

/// The table of SAGE.md: per split and arm, the mean ± spread over seeds of TGC, SGC,
/// steps, tokens, skill usage, success skill usage and skill writing, and beside TGC and
/// SGC the 95% Wilson interval of their seed mean over the tasks (scenarios) of one
/// evaluation: the uncertainty that comes from which tasks were drawn, which the spread
/// over seeds does not show (a greedy arm without RL has no spread at all).
pub fn experiment_table(runs: &[ArmRun], arms: &[Arm]) -> String {
    let mut splits: Vec<&str> = Vec::new();
    for run in runs {
        for m in &run.metrics {
            if !splits.contains(&m.split.as_str()) {
                splits.push(&m.split);
            }
        }
    }
    let seeds = seeds_label(runs);
    let mut out = format!(
        "{:<12} {:<18} {:>5} {:>13} {:>14} {:>13} {:>14} {:>11} {:>13} {:>13} {:>13} {:>13}   (mean ± std over {seeds}; 95% CI over tasks)\n",
        "split", "arm", "tasks", "TGC %", "TGC 95% CI", "SGC %", "SGC 95% CI", "steps", "tokens", "usage %", "succ.use %", "write %"
    );
    for split in splits {
        for arm in arms {
            let rows: Vec<&EvalMetrics> = runs
                .iter()
                .filter(|r| r.arm == arm.name())
                .flat_map(|r| r.metrics.iter().filter(|m| m.split == split))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let cell = |f: &dyn Fn(&EvalMetrics) -> f64, width: usize, decimals: usize| {
                let values: Vec<f64> = rows.iter().map(|m| f(m)).collect();
                let (mean, std) = mean_std(&values);
                format!(
                    "{:>width$}",
                    format!("{mean:.decimals$} ± {std:.decimals$}")
                )
            };
            let interval = |rate: &dyn Fn(&EvalMetrics) -> f64,
                            count: &dyn Fn(&EvalMetrics) -> usize| {
                let rates: Vec<f64> = rows.iter().map(|m| rate(m)).collect();
                let counts: Vec<f64> = rows.iter().map(|m| count(m) as f64).collect();
                let (mean, _) = mean_std(&rates);
                let (trials, _) = mean_std(&counts);
                let ci = wilson_interval(mean / 100.0, trials.round() as usize);
                format!("{:>14}", format!("[{:.1}, {:.1}]", ci.low, ci.high))
            };
            out.push_str(&format!(
                "{:<12} {:<18} {:>5} {} {} {} {} {} {} {} {} {}\n",
                split,
                arm.name(),
                rows[0].tasks,
                cell(&|m| m.tgc, 13, 1),
                interval(&|m| m.tgc, &|m| m.tasks),
                cell(&|m| m.sgc, 13, 1),
                interval(&|m| m.sgc, &|m| m.scenarios),
                cell(&|m| m.avg_steps, 11, 2),
                cell(&|m| m.avg_tokens, 13, 0),
                cell(&|m| m.skill_usage, 13, 1),
                cell(&|m| m.success_skill_usage, 13, 1),
                cell(&|m| m.skill_writing, 13, 1),
            ));
        }
    }
    out
}

/// The gains of every RL arm, mean ± spread over seeds: its sampled success, reward and
/// first-task skill writing (in points) over the last third of its steps minus its
/// update-off control's, and its greedy
/// TGC and SGC on `split` minus its SFT start's under the same seed. A cell without its
/// baseline (no control, no SFT-start run) reads `-`.
pub fn gain_table(runs: &[ArmRun], arms: &[Arm], split: &str) -> String {
    let mut out = format!(
        "{:<18} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16}   (RL arm minus its baseline, mean ± std over seeds)\n",
        "arm",
        "success % (ctl)",
        "success gain",
        "reward gain",
        "writing gain",
        format!("{split} TGC gain"),
        format!("{split} SGC gain"),
    );
    let metric = |run: &ArmRun, f: fn(&EvalMetrics) -> f64| {
        run.metrics.iter().find(|m| m.split == split).map(f)
    };
    let cell = |values: &[f64], decimals: usize| {
        if values.is_empty() {
            return format!("{:>16}", "-");
        }
        let (mean, std) = mean_std(values);
        format!("{:>16}", format!("{mean:+.decimals$} ± {std:.decimals$}"))
    };
    for &arm in arms.iter().filter(|a| a.trains()) {
        let arm_runs: Vec<&ArmRun> = runs.iter().filter(|r| r.arm == arm.name()).collect();
        if arm_runs.is_empty() {
            continue;
        }
        let controls: Vec<ArmControl> = arm_runs.iter().filter_map(|r| r.control).collect();
        let success: Vec<f64> = controls.iter().map(|c| 100.0 * c.success.gain()).collect();
        let reward: Vec<f64> = controls.iter().map(|c| c.reward.gain()).collect();
        let writing: Vec<f64> = controls
            .iter()
            .map(|c| 100.0 * c.skill_writing.gain())
            .collect();
        let control_success: Vec<f64> =
            controls.iter().map(|c| 100.0 * c.success.control).collect();
        let versus_start = |f: fn(&EvalMetrics) -> f64| -> Vec<f64> {
            arm_runs
                .iter()
                .filter_map(|run| {
                    let start = runs
                        .iter()
                        .find(|r| r.arm == arm.sft_start().name() && r.seed == run.seed)?;
                    Some(metric(run, f)? - metric(start, f)?)
                })
                .collect()
        };
        let (mean_control, _) = mean_std(&control_success);
        let control_cell = if control_success.is_empty() {
            format!("{:>16}", "-")
        } else {
            format!("{mean_control:>16.1}")
        };
        out.push_str(&format!(
            "{:<18} {} {} {} {} {} {}\n",
            arm.name(),
            control_cell,
            cell(&success, 1),
            cell(&reward, 3),
            cell(&writing, 1),
            cell(&versus_start(|m| m.tgc), 1),
            cell(&versus_start(|m| m.sgc), 1),
        ));
    }
    out
}

/// The pairs the paper's claim compares, arm against baseline: SAGE and its chain
/// variants against GRPO without skills (the paper's headline), and SAGE against the
/// outcome-only reward (its reward's own share).
const CLAIM_PAIRS: [(Arm, Arm); 4] = [
    (Arm::Sage, Arm::GrpoNoSkills),
    (Arm::SageK3, Arm::GrpoNoSkills),
    (Arm::SageKl, Arm::GrpoNoSkills),
    (Arm::Sage, Arm::OutcomeOnly),
];

/// The paper's claim in this run's terms: for each pair of `CLAIM_PAIRS` whose arms
/// both ran, on `split`, the arm's SGC and TGC minus the baseline's under the same seed
/// (mean ± spread over the seeds both ran, and the SGC difference's paired standard
/// error), and its mean tokens and steps per task as a share of the baseline's over
/// those seeds. Empty when no pair ran. With
/// `sft_shared` (one SFT model per mode for every seed), a row against GRPO without
/// skills, whose arms start from two different SFT models, is followed by a note that
/// its ± leaves out how much a second SFT run moves each start.
pub fn claim_table(runs: &[ArmRun], arms: &[Arm], split: &str, sft_shared: bool) -> String {
    let metric = |arm: Arm, seed: u64| {
        runs.iter()
            .find(|r| r.arm == arm.name() && r.seed == seed)?
            .metrics
            .iter()
            .find(|m| m.split == split)
    };
    let mut rows = String::new();
    let mut across_starts = false;
    for (arm, baseline) in CLAIM_PAIRS {
        if !arms.contains(&arm) || !arms.contains(&baseline) {
            continue;
        }
        let pairs: Vec<(&EvalMetrics, &EvalMetrics)> = runs
            .iter()
            .filter(|r| r.arm == arm.name())
            .filter_map(|r| Some((metric(arm, r.seed)?, metric(baseline, r.seed)?)))
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let differences = |f: fn(&EvalMetrics) -> f64| -> Vec<f64> {
            pairs.iter().map(|(a, b)| f(a) - f(b)).collect()
        };
        let difference = |f: fn(&EvalMetrics) -> f64| {
            let (mean, std) = mean_std(&differences(f));
            format!("{:>16}", format!("{mean:+.1} ± {std:.1}"))
        };
        // The standard error of the mean paired difference (sample spread over sqrt(n)),
        // which says whether the mean is told apart from 0; none from one seed.
        // (The population spread over sqrt(n - 1) is the sample spread over sqrt(n).)
        let standard_error = |f: fn(&EvalMetrics) -> f64| {
            let values = differences(f);
            if values.len() < 2 {
                return format!("{:>9}", "-");
            }
            let (_, std) = mean_std(&values);
            format!("{:>9.2}", std / (values.len() as f64 - 1.0).sqrt())
        };
        let ratio = |f: fn(&EvalMetrics) -> f64| {
            let (of_arm, of_baseline) = pairs
                .iter()
                .fold((0.0, 0.0), |(x, y), (a, b)| (x + f(a), y + f(b)));
            if of_baseline > 0.0 {
                format!("{:>13}", format!("{:.2}x", of_arm / of_baseline))
            } else {
                format!("{:>13}", "-")
            }
        };
        rows.push_str(&format!(
            "{:<40} {:>5} {} {} {} {} {}\n",
            format!("{} vs {}", arm.name(), baseline.name()),
            pairs.len(),
            difference(|m| m.sgc),
            standard_error(|m| m.sgc),
            difference(|m| m.tgc),
            ratio(|m| m.avg_tokens),
            ratio(|m| m.avg_steps),
        ));
        across_starts |= baseline == Arm::GrpoNoSkills;
    }
    if rows.is_empty() {
        return rows;
    }
    if sft_shared && across_starts {
        rows.push_str(
            "(against grpo-no-skills: two SFT models, each trained once for every seed, so the \
             ± leaves out a second SFT run's spread; [experiment] sft_per_seed = true puts it in)\n",
        );
    }
    format!(
        "{:<40} {:>5} {:>16} {:>9} {:>16} {:>13} {:>13}   ({split}; the paper, SAGE vs GRPO: +8.9 SGC, 0.41x tokens, 0.74x steps)\n{rows}",
        "claim",
        "seeds",
        "SGC diff",
        "SGC s.e.",
        "TGC diff",
        "tokens",
        "steps",
    )
}

/// Where the arms part on `split`, template by template: for each template whose mean
/// TGC over seeds is not the same in every arm that ran, one row per arm with its mean
/// TGC, SGC and share of tasks that copied every value of the instruction; then how
/// many templates the arms solve alike. Empty when fewer than two arms ran.
pub fn template_table(runs: &[ArmRun], arms: &[Arm], split: &str) -> String {
    let mut templates: Vec<&str> = Vec::new();
    for run in runs {
        for m in run.metrics.iter().filter(|m| m.split == split) {
            for t in &m.templates {
                if !templates.contains(&t.template.as_str()) {
                    templates.push(&t.template);
                }
            }
        }
    }
    let ran: Vec<Arm> = arms
        .iter()
        .copied()
        .filter(|arm| runs.iter().any(|r| r.arm == arm.name()))
        .collect();
    if ran.len() < 2 || templates.is_empty() {
        return String::new();
    }
    // Mean (TGC, SGC, copied) of `arm` on `template` over the seeds that evaluated it.
    let means = |arm: Arm, template: &str| -> Option<[f64; 3]> {
        let rows: Vec<&TemplateMetrics> = runs
            .iter()
            .filter(|r| r.arm == arm.name())
            .flat_map(|r| r.metrics.iter().filter(|m| m.split == split))
            .flat_map(|m| m.templates.iter().filter(|t| t.template == template))
            .collect();
        let mean = |f: fn(&TemplateMetrics) -> f64| {
            mean_std(&rows.iter().map(|t| f(t)).collect::<Vec<_>>()).0
        };
        (!rows.is_empty()).then(|| [mean(|t| t.tgc), mean(|t| t.sgc), mean(|t| t.values_copied)])
    };
    let mut out = format!(
        "{:<40} {:<18} {:>7} {:>7} {:>9}   ({split}: templates where the arms part; mean over seeds)\n",
        "template", "arm", "TGC %", "SGC %", "copied %"
    );
    let mut alike = 0;
    for template in &templates {
        let rows: Vec<(Arm, [f64; 3])> = ran
            .iter()
            .filter_map(|&arm| Some((arm, means(arm, template)?)))
            .collect();
        let tgc = rows.iter().map(|(_, m)| m[0]);
        let spread = tgc.clone().fold(f64::MIN, f64::max) - tgc.fold(f64::MAX, f64::min);
        if spread < 1e-9 {
            alike += 1;
            continue;
        }
        for (i, (arm, [tgc, sgc, copied])) in rows.iter().enumerate() {
            let name = if i == 0 { *template } else { "" };
            out.push_str(&format!(
                "{name:<40} {:<18} {tgc:>7.1} {sgc:>7.1} {copied:>9.0}\n",
                arm.name()
            ));
        }
    }
    out.push_str(&format!(
        "{alike} of {} templates have the same TGC in every arm\n",
        templates.len()
    ));
    out
}

/// The tables `sage experiment` prints at its end, from `runs` of `arms`: every arm's
/// evaluation, the gains over the controls and starts, and the claim on `iid` (with the
/// note on shared SFT models when `sft_shared`). The second string adds the template
/// table, as `experiment.md` holds it.
pub fn experiment_tables(runs: &[ArmRun], arms: &[Arm], sft_shared: bool) -> (String, String) {
    let printed = format!(
        "{}{}\n{}\n{}",
        experiment_table(runs, arms),
        uneven_seeds(runs, arms),
        gain_table(runs, arms, "iid"),
        claim_table(runs, arms, "iid", sft_shared)
    );
    let with_templates = format!("{printed}\n{}", template_table(runs, arms, "iid"));
    (printed, with_templates)
}

/// A line naming each arm's seeds when the arms did not all run the same seeds (rows
/// put together from several runs), since the table's header counts the seeds of every
/// row; empty when they did.
fn uneven_seeds(runs: &[ArmRun], arms: &[Arm]) -> String {
    let per_arm: Vec<(&Arm, Vec<u64>)> = arms
        .iter()
        .map(|arm| (arm, seeds_of(runs.iter().filter(|r| r.arm == arm.name()))))
        .filter(|(_, seeds)| !seeds.is_empty())
        .collect();
    if per_arm.windows(2).all(|pair| pair[0].1 == pair[1].1) {
        return String::new();
    }
    let listed: Vec<String> = per_arm
        .iter()
        .map(|(arm, seeds)| format!("{} {}", arm.name(), seed_list(seeds)))
        .collect();
    format!("(the arms ran different seeds: {})\n", listed.join("; "))
}
