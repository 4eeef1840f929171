//! What an evaluation reports beside its headline rates: 95% Wilson intervals, so two
//! arms can be told apart only where their intervals say so, and the rates of every
//! template, so a gain or a loss can be traced to the kinds of task that carry it.

use serde::{Deserialize, Serialize};

use crate::rollout::RolloutEpisode;

/// The normal quantile of a two-sided 95% interval.
const Z_95: f64 = 1.959_963_984_540_054;

/// A 95% interval of a rate, in percent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The lower bound.
    pub low: f64,
    /// The upper bound.
    pub high: f64,
}

/// The 95% Wilson score interval of a rate of `share` (in [0, 1]) observed over `trials`
/// independent trials, in percent. `share` may be a mean over seeds of rates measured on
/// the same `trials` tasks: the interval then speaks of the sample of tasks, not of the
/// seeds. Unlike the normal approximation it stays inside [0, 100] and is not empty at
/// 0% or 100%. No trials give the whole range.
pub fn wilson_interval(share: f64, trials: usize) -> Interval {
    if trials == 0 {
        return Interval {
            low: 0.0,
            high: 100.0,
        };
    }
    let n = trials as f64;
    let p = share.clamp(0.0, 1.0);
    let z2 = Z_95 * Z_95;
    let denominator = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denominator;
    let half = Z_95 / denominator * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Interval {
        low: 100.0 * (center - half).max(0.0),
        high: 100.0 * (center + half).min(1.0),
    }
}

/// The rates of one template's scenarios in an evaluation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateMetrics {
    /// The template.
    pub template: String,
    /// Its scenarios evaluated.
    pub scenarios: usize,
    /// Its tasks evaluated.
    pub tasks: usize,
    /// % of its tasks that passed.
    pub tgc: f64,
    /// % of its scenarios whose tasks all passed.
    pub sgc: f64,
    /// Generated tokens per task.
    pub avg_tokens: f64,
    /// % of its tasks whose agent text states every value of the instruction.
    pub values_copied: f64,
    /// % of its tasks that called a skill of their library.
    pub skill_usage: f64,
}

/// Per-template rates of finished scenarios: `scenarios[i]` holds the episodes of the
/// scenario of template `templates[i]`, `miscopied` one entry per episode in the order of
/// `scenarios.iter().flatten()` (empty when the task copied every value). Templates come
/// in the order they first appear.
pub fn template_metrics(
    templates: &[&str],
    scenarios: &[Vec<RolloutEpisode>],
    miscopied: &[Vec<String>],
) -> Vec<TemplateMetrics> {
    let mut rows: Vec<(TemplateMetrics, Counts)> = Vec::new();
    let mut task = 0;
    for (&template, episodes) in templates.iter().zip(scenarios) {
        let index = match rows.iter().position(|(row, _)| row.template == template) {
            Some(index) => index,
            None => {
                let row = TemplateMetrics {
                    template: template.to_owned(),
                    ..TemplateMetrics::default()
                };
                rows.push((row, Counts::default()));
                rows.len() - 1
            }
        };
        let counts = &mut rows[index].1;
        counts.scenarios += 1;
        counts.scenarios_passed += usize::from(
            !episodes.is_empty() && episodes.iter().all(|e| e.episode.evaluation.passed),
        );
        for episode in episodes {
            counts.tasks += 1;
            counts.passed += usize::from(episode.episode.evaluation.passed);
            counts.tokens += episode.episode.generated_tokens();
            counts.copied += usize::from(miscopied.get(task).is_none_or(|m| m.is_empty()));
            counts.used += usize::from(!episode.episode.used_skills().is_empty());
            task += 1;
        }
    }
    rows.into_iter()
        .map(|(row, counts)| counts.into_metrics(row.template))
        .collect()
}

/// Counts behind one template's rates.
#[derive(Default)]
struct Counts {
    scenarios: usize,
    scenarios_passed: usize,
    tasks: usize,
    passed: usize,
    tokens: u64,
    copied: usize,
    used: usize,
}

impl Counts {
    fn into_metrics(self, template: String) -> TemplateMetrics {
        let percent = |count: usize, of: usize| 100.0 * count as f64 / of.max(1) as f64;
        TemplateMetrics {
            template,
            scenarios: self.scenarios,
            tasks: self.tasks,
            tgc: percent(self.passed, self.tasks),
            sgc: percent(self.scenarios_passed, self.scenarios),
            avg_tokens: self.tokens as f64 / self.tasks.max(1) as f64,
            values_copied: percent(self.copied, self.tasks),
            skill_usage: percent(self.used, self.tasks),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known values: 8 of 10 gives [49.0, 94.3] (Wilson, z = 1.96); the bounds stay
    /// inside [0, 100] at the extremes, are not empty there, and narrow as trials grow.
    #[test]
    fn wilson_intervals_match_known_values() {
        let close = |a: f64, b: f64| (a - b).abs() < 0.05;
        let eight_of_ten = wilson_interval(0.8, 10);
        assert!(close(eight_of_ten.low, 49.0), "{eight_of_ten:?}");
        assert!(close(eight_of_ten.high, 94.3), "{eight_of_ten:?}");
        let all = wilson_interval(1.0, 60);
        assert!(
            all.high <= 100.0 && all.low > 90.0 && all.low < 100.0,
            "{all:?}"
        );
        let none = wilson_interval(0.0, 60);
        assert!(
            none.low >= 0.0 && none.high > 0.0 && none.high < 10.0,
            "{none:?}"
        );
        let small = wilson_interval(0.5, 60);
        let large = wilson_interval(0.5, 240);
        assert!(large.high - large.low < small.high - small.low);
        assert_eq!(
            wilson_interval(0.5, 0),
            Interval {
                low: 0.0,
                high: 100.0
            }
        );
    }
}
