//! The task layer of the built-in world: scenario templates, the scenarios of 3 similar
//! tasks they yield, the splits, and state-based evaluation.
//!
//! - [`Template`]: one kind of task. It picks a task's parameters from a generated world
//!   ([`Picker`]), words the instruction, carries a reference solution written in Rust
//!   against the world's APIs ([`Reference`]) that defines what "done" means, and the
//!   parameterised skill the scripted expert writes ([`Solution`]). Templates live one
//!   file per app family (`tunes.rs`, `coinpay.rs`, ..., `cross.rs` for tasks that span
//!   apps); [`templates`] lists them all.
//! - `build.rs`: a template plus a seed gives a [`BuiltScenario`] of 3 tasks that share
//!   one generated world, each with its parameters and its [`Expected`] outcome (the
//!   reference's diff and answer).
//! - `splits.rs`: [`Split`], which templates and seeds each split holds, the stable ids
//!   (`train/<template>/<seed>` and `.../t1`), and the [`Catalog`] of built scenarios.
//! - `eval.rs`: [`evaluate`], the checks of one task against the world's diff and the
//!   answer given to `complete_task`, and the normalised comparisons behind them.
//! - `pick.rs` ([`Picker`], the seeded choices of parameters), `reference.rs`
//!   ([`Reference`], a world with the user logged in everywhere).
//!
//! Nothing here runs agent code: the [`environment`](crate::environment) module does.

mod build;
mod coinpay;
mod copying;
mod cross;
mod eval;
mod files;
mod mail;
mod notes;
mod phone;
mod pick;
mod reference;
mod shop;
mod splitbill;
mod splits;
mod todo;
mod tunes;

use std::fmt;

use serde_json::{Map, Value};

use crate::sandbox::ApiError;

pub use build::{BuiltScenario, BuiltTask, Expected, TASKS_PER_SCENARIO};
pub use eval::{answer_matches, evaluate, text_matches, values_match, Check, Report};
pub use pick::Picker;
pub use reference::Reference;
pub use splits::{Catalog, CatalogConfig, Split, TaskRef, SEEDS_PER_SPLIT};

/// A task's parameters: what its instruction names (people, months, titles, ...), as
/// JSON. The keys a [`Solution`] lists are its skill's arguments.
pub type Params = Map<String, Value>;

/// What a task asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// A question answered through `apis.supervisor.complete_task(answer=...)`; the
    /// world must not change.
    Question,
    /// Changes to the world, then `complete_task()` without an answer.
    Action,
}

impl TaskKind {
    /// `question` or `action`.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Question => "question",
            TaskKind::Action => "action",
        }
    }
}

/// One parameter of a template's skill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkillParam {
    /// The parameter's name; also the key of its value in the task's [`Params`].
    pub name: &'static str,
    /// Its type annotation (`str`, `int`, `float`, `list`).
    pub ty: &'static str,
    /// What it means, for the docstring.
    pub doc: &'static str,
}

/// The parameterised function that solves every task of a template: what the expert
/// writes as a skill, or inlines in its no-skill mode.
#[derive(Clone, Copy, Debug)]
pub struct Solution {
    /// Names the function may have (the expert picks one per scenario).
    pub names: &'static [&'static str],
    /// First lines of the docstring the expert chooses from.
    pub summaries: &'static [&'static str],
    /// The parameters, in order.
    pub params: &'static [SkillParam],
    /// The return type and what the value means.
    pub returns: (&'static str, &'static str),
    /// The APIs whose documentation the expert looks up first, as `(app, api)`.
    pub docs: &'static [(&'static str, &'static str)],
    /// The function's body, indented by 4 spaces, ending in one `return` line (the only
    /// one). It runs after the login lines the expert writes for the template's apps,
    /// which leave the access token of app `x` in the variable `x_token`. Each
    /// template's body is the Starlark file `scenarios/skills/NAME.star`.
    pub body: &'static str,
}

/// One kind of task. A template and a seed give a scenario of 3 tasks with the same
/// structure and different parameters.
#[derive(Clone, Copy, Debug)]
pub struct Template {
    /// Stable name, part of scenario and task ids.
    pub name: &'static str,
    /// The apps its tasks need, besides `supervisor` and `api_docs`.
    pub apps: &'static [&'static str],
    /// Question or action.
    pub kind: TaskKind,
    /// Picks one task's parameters from the world, or `None` when this draw found
    /// nothing suitable (the builder draws again).
    pub pick: fn(&mut Picker<'_>) -> Option<Params>,
    /// The instruction shown to the agent.
    pub instruction: fn(&Params) -> String,
    /// Solves the task with the world's APIs from Rust; returns the answer (`null` for
    /// actions). Its changes and answer are what evaluation expects.
    pub reference: fn(&mut Reference, &Params) -> Result<Value, ApiError>,
    /// The skill the expert writes.
    pub solution: Solution,
}

impl Template {
    /// The skill's arguments for a task: the values of [`Solution::params`] in order.
    pub fn arguments(&self, params: &Params) -> Vec<Value> {
        self.solution
            .params
            .iter()
            .map(|p| params.get(p.name).cloned().unwrap_or(Value::Null))
            .collect()
    }
}

/// Every template, in a fixed order.
pub fn templates() -> Vec<&'static Template> {
    [
        tunes::TEMPLATES,
        coinpay::TEMPLATES,
        mail::TEMPLATES,
        phone::TEMPLATES,
        notes::TEMPLATES,
        todo::TEMPLATES,
        shop::TEMPLATES,
        files::TEMPLATES,
        splitbill::TEMPLATES,
        cross::TEMPLATES,
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The template named `name`.
pub fn template(name: &str) -> Option<&'static Template> {
    templates().into_iter().find(|t| t.name == name)
}

/// Why a scenario could not be built or found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScenarioError {
    /// No template has this name.
    UnknownTemplate(String),
    /// The id is not `<split>/<template>/<seed>[/t<k>]`, or names no task of the
    /// catalog.
    BadId(String),
    /// The template found no suitable parameters for one of the tasks in this world.
    NoTask {
        /// The template.
        template: &'static str,
        /// The seed.
        seed: u64,
        /// Index of the task (0-based).
        index: usize,
    },
    /// A split's seeds (offset plus count) run past the seeds it owns.
    SeedRange {
        /// The split.
        split: &'static str,
        /// The seeds asked for.
        seeds: std::ops::Range<u64>,
    },
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScenarioError::UnknownTemplate(name) => write!(f, "no template named {name:?}"),
            ScenarioError::BadId(id) => {
                write!(f, "{id:?} is not a scenario or task id of the catalog")
            }
            ScenarioError::NoTask {
                template,
                seed,
                index,
            } => write!(
                f,
                "template {template} found no parameters for task {} with seed {seed}",
                index + 1
            ),
            ScenarioError::SeedRange { split, seeds } => write!(
                f,
                "split {split}: seeds {}..{} run past its {owned} seeds (seed offset plus seed \
                 count must be at most {owned})",
                seeds.start,
                seeds.end,
                owned = splits::SEEDS_PER_SPLIT
            ),
        }
    }
}

impl std::error::Error for ScenarioError {}
