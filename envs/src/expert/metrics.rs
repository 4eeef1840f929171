//! [`Metrics`]: what the expert achieved over a set of scenarios, in the paper's terms:
//! TGC (tasks whose checks all pass), SGC (scenarios whose tasks all pass), average
//! steps, skill usage, and the APIs its code called.

use std::collections::BTreeSet;

use super::ScenarioRun;

/// Totals over solved scenarios.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Scenarios solved.
    pub scenarios: usize,
    /// Scenarios whose tasks all passed.
    pub scenarios_passed: usize,
    /// Tasks solved.
    pub tasks: usize,
    /// Tasks whose checks all passed.
    pub tasks_passed: usize,
    /// Agent turns over all tasks.
    pub steps: usize,
    /// Tasks that were given a non-empty library.
    pub tasks_with_library: usize,
    /// Of those, tasks that called a library skill.
    pub tasks_using_skills: usize,
    /// Every API the code called, as `app.api`.
    pub apis: BTreeSet<String>,
}

impl Metrics {
    /// Adds one scenario's outcome.
    pub fn add(&mut self, run: &ScenarioRun) {
        self.scenarios += 1;
        self.scenarios_passed += usize::from(run.passed());
        for task in &run.tasks {
            self.tasks += 1;
            self.tasks_passed += usize::from(task.evaluation.passed);
            self.steps += task.steps;
            if !task.library.is_empty() {
                self.tasks_with_library += 1;
                self.tasks_using_skills += usize::from(!task.used.is_empty());
            }
            self.apis.extend(task.apis.iter().cloned());
        }
    }

    /// Task goal completion, in percent.
    pub fn tgc(&self) -> f64 {
        percent(self.tasks_passed, self.tasks)
    }

    /// Scenario goal completion, in percent.
    pub fn sgc(&self) -> f64 {
        percent(self.scenarios_passed, self.scenarios)
    }

    /// Average agent turns per task.
    pub fn average_steps(&self) -> f64 {
        if self.tasks == 0 {
            0.0
        } else {
            self.steps as f64 / self.tasks as f64
        }
    }

    /// Share of tasks with a library that used a skill, in percent.
    pub fn skill_usage(&self) -> f64 {
        percent(self.tasks_using_skills, self.tasks_with_library)
    }
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}
