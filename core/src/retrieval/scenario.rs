//! Same-scenario retrieval: the skills written by other tasks of the task's scenario.

use alloc::vec::Vec;

use super::Hit;
use crate::env::Task;
use crate::skill::SkillLibrary;

/// The first `k` skills of `library`, in its insertion order, whose origin scenario is
/// `task`'s and whose origin task is not `task` itself; each scores 1.
pub fn same_scenario<L: SkillLibrary + ?Sized>(library: &L, task: &Task, k: usize) -> Vec<Hit> {
    library
        .skills()
        .iter()
        .filter(|skill| {
            skill.origin.scenario_id == task.scenario_id && skill.origin.task_id != task.id
        })
        .take(k)
        .map(|skill| Hit {
            name: skill.name.clone(),
            score: 1.0,
        })
        .collect()
}
