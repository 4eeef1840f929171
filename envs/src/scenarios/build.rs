//! Building a scenario: a template and a seed give 3 tasks that share the world of the
//! seed, each with distinct parameters, its instruction, and its [`Expected`] outcome,
//! which the template's reference solution produces on a copy of that world.

use std::sync::Arc;

use serde_json::Value;

use super::pick::Picker;
use super::reference::Reference;
use super::{Params, ScenarioError, TaskKind, Template};
use crate::world::{DbDiff, World};
use sage_core::{Scenario, Task};

/// Tasks per scenario (the paper's 3).
pub const TASKS_PER_SCENARIO: usize = 3;

/// Draws a template may make for one task before the scenario is given up.
const MAX_DRAWS: usize = 200;

/// What a correct agent leaves behind: the changes to the world and the answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// The changes the reference solution made.
    pub diff: DbDiff,
    /// Its answer (`null` for actions).
    pub answer: Value,
}

/// One task of a built scenario.
#[derive(Clone, Debug)]
pub struct BuiltTask {
    /// The task as agents see it.
    pub task: Task,
    /// Its parameters.
    pub params: Params,
    /// What a correct agent leaves behind.
    pub expected: Expected,
}

/// A scenario with everything needed to run and evaluate its tasks.
#[derive(Clone, Debug)]
pub struct BuiltScenario {
    /// The scenario as agents see it.
    pub scenario: Scenario,
    /// Its template.
    pub template: &'static Template,
    /// The seed (also the seed of its world).
    pub seed: u64,
    /// The world every task of the scenario starts from.
    pub world: Arc<World>,
    /// The tasks, in order.
    pub tasks: Vec<BuiltTask>,
}

impl BuiltScenario {
    /// Builds the scenario `id` of `template` with `seed` in `world` (the world of the
    /// seed). Task ids are `<id>/t1`, `<id>/t2`, ...
    pub fn build(
        id: &str,
        split: &str,
        template: &'static Template,
        seed: u64,
        world: Arc<World>,
    ) -> Result<BuiltScenario, ScenarioError> {
        let mut picker = Picker::new(world.db(), template.name, seed);
        let mut tasks: Vec<BuiltTask> = Vec::with_capacity(TASKS_PER_SCENARIO);
        for index in 0..TASKS_PER_SCENARIO {
            let found = (0..MAX_DRAWS).find_map(|_| {
                let params = (template.pick)(&mut picker)?;
                let arguments = template.arguments(&params);
                if tasks
                    .iter()
                    .any(|t| template.arguments(&t.params) == arguments)
                {
                    return None;
                }
                let expected = expected(template, &world, &params)?;
                Some((params, expected))
            });
            let (params, expected) = found.ok_or(ScenarioError::NoTask {
                template: template.name,
                seed,
                index,
            })?;
            tasks.push(BuiltTask {
                task: Task {
                    id: format!("{id}/t{}", index + 1),
                    scenario_id: id.to_owned(),
                    instruction: (template.instruction)(&params),
                },
                params,
                expected,
            });
        }
        Ok(BuiltScenario {
            scenario: Scenario {
                id: id.to_owned(),
                split: split.to_owned(),
                tasks: tasks.iter().map(|t| t.task.clone()).collect(),
            },
            template,
            seed,
            world,
            tasks,
        })
    }

    /// The task with this id.
    pub fn task(&self, task_id: &str) -> Option<&BuiltTask> {
        self.tasks.iter().find(|t| t.task.id == task_id)
    }
}

/// The reference's outcome for `params`, if it solves the task and the task is not
/// trivial (an action changes something, a question has an answer).
fn expected(template: &Template, world: &World, params: &Params) -> Option<Expected> {
    let before = world.snapshot();
    let mut reference = Reference::new(world.clone()).ok()?;
    let answer = (template.reference)(&mut reference, params).ok()?;
    let diff = reference.into_world().diff_since(&before);
    let useful = match template.kind {
        TaskKind::Question => !answer.is_null() && diff.is_empty(),
        TaskKind::Action => answer.is_null() && !diff.is_empty(),
    };
    useful.then_some(Expected { diff, answer })
}
