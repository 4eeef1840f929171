//! The scripted expert: solves every template's tasks through the real [`WorldEnv`]
//! (its turns run in the sandbox against the world, and are evaluated like anyone
//! else's), writing agent turns in SAGE's skill format, as SFT data in place of a
//! frontier model.
//!
//! - [`ExpertMode::Skills`]: the first task of a scenario reads the docs it needs,
//!   defines the template's parameterised, typed, documented skill (it logs in itself),
//!   calls it, and completes the task; later tasks find that skill in the library they
//!   are given (the skills earlier tasks saved) and call it instead of rewriting it.
//! - [`ExpertMode::Direct`]: every task reads the docs and writes the same work as plain
//!   top-level code without functions (the no-skill baseline).
//! - [`ExpertMode::Mixed`]: each scenario is solved one way or the other (skill style
//!   for a share [`ExpertConfig::skill_share`] of them), always under the skill prompt
//!   with its library listing, and a share [`ExpertConfig::rewrite_share`] of the later
//!   tasks of skill-style scenarios ignore the listed skill and write the work again as
//!   plain code. A policy trained on it has to choose whether to write a skill and
//!   whether to reuse one: the start from which a reward can teach it to.
//!
//! Variety ([`Style`], `style.rs`): names, docstrings, login code, docs lookups,
//! thoughts, and an occasional deliberate mistake fixed in the next turn. The code
//! itself comes from `code.rs`; the trajectories export as chat JSON lines
//! (`export.rs`); [`Metrics`] sums up runs (`metrics.rs`).

mod code;
mod export;
mod metrics;
mod style;

use std::collections::BTreeSet;
use std::fmt;

use crate::environment::{EnvError, WorldEnv};
use crate::names::Named;
use crate::prompt::{observation_message, task_message, Prompt, PromptMode};
use crate::scenarios::{BuiltScenario, Report, TaskKind};
use sage_core::skill::parse_response;
use sage_core::{Environment, Evaluation, Skill};

pub use export::{ChatMessage, TrajectoryRecord};
pub use metrics::Metrics;
pub use style::{Mistake, Style};

use style::{hash_text, StyleRng};

/// Which kind of code the expert writes; named `skills`, `direct` or `mixed` in
/// settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExpertMode {
    /// Skills: define, call, save, reuse.
    Skills,
    /// Direct API calls, no functions.
    Direct,
    /// Some scenarios in skill style, the others (and some reusing tasks) in plain
    /// code, all under the skill prompt.
    Mixed,
}

impl Named for ExpertMode {
    const WHAT: &'static str = "expert mode";
    const ALL: &'static [ExpertMode] = &[ExpertMode::Skills, ExpertMode::Direct, ExpertMode::Mixed];
    fn name(self) -> &'static str {
        ExpertMode::name(self)
    }
}

crate::impl_named_text!(ExpertMode);

impl ExpertMode {
    /// `skills`, `direct` or `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            ExpertMode::Skills => "skills",
            ExpertMode::Direct => "direct",
            ExpertMode::Mixed => "mixed",
        }
    }

    /// The system prompt's mode.
    pub fn prompt_mode(self) -> PromptMode {
        match self {
            ExpertMode::Skills | ExpertMode::Mixed => PromptMode::Skills,
            ExpertMode::Direct => PromptMode::Direct,
        }
    }
}

/// The expert's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpertConfig {
    /// Skills or direct code.
    pub mode: ExpertMode,
    /// Seed of the style choices; different variants give different wordings of the same
    /// scenario (as the paper ran its expert at several temperatures).
    pub variant: u64,
    /// Probability that a scenario's first attempt holds a deliberate mistake.
    pub mistake_rate: f64,
    /// Whether a task that writes new code first reads the docs of the APIs it calls
    /// (an agent that knows the APIs skips that turn: shorter trajectories, which the
    /// CPU demo trains on).
    pub read_docs: bool,
    /// Whether scenarios differ in style (skill names, docstrings, login code, result
    /// variables, thought wordings); without, every scenario of a template is solved
    /// the same canonical way and only the task's values change (far less for a small
    /// model to learn; mistakes are still drawn).
    pub varied_style: bool,
    /// Whether the system prompt spells out the rules ([`Prompt::rules`]).
    pub prompt_rules: bool,
    /// [`ExpertMode::Mixed`]: the share of scenarios solved in skill style, in [0, 1].
    pub skill_share: f64,
    /// [`ExpertMode::Mixed`]: the share of the later tasks of skill-style scenarios that
    /// write plain code although their library lists the skill, in [0, 1].
    pub rewrite_share: f64,
    /// Whether a task that reuses a skill first binds the task's values to the skill's
    /// parameter names, a line each (`since = "2025-04-28"`), and then calls the skill
    /// with the names, as the task that wrote it does; off, the call passes the values
    /// as literals (`total_paid_for_since("Gym class", "2025-04-28")`).
    pub bound_reuse: bool,
}

impl ExpertConfig {
    /// The default settings for `mode`: variant 0, mistakes in 20% of scenarios, docs
    /// read before new code, varied style, the full prompt, reuse calls with literal
    /// values; in mixed mode half the scenarios in skill style and a quarter of their
    /// later tasks rewritten.
    pub fn new(mode: ExpertMode) -> ExpertConfig {
        ExpertConfig {
            mode,
            variant: 0,
            mistake_rate: 0.2,
            read_docs: true,
            varied_style: true,
            prompt_rules: true,
            skill_share: 0.5,
            rewrite_share: 0.25,
            bound_reuse: false,
        }
    }
}

/// How one task is solved: the style of its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskStyle {
    /// Define and call the template's skill, or reuse it.
    Skill,
    /// Plain top-level code.
    Direct,
}

/// A uniform draw in [0, 1) fixed by `key`.
fn unit_draw(key: u64) -> f64 {
    (StyleRng(key).next() >> 11) as f64 / (1u64 << 53) as f64
}

/// Why the expert could not finish a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpertError {
    /// The environment failed.
    Env(EnvError),
    /// A turn went differently than planned (its code failed, or a planned mistake did
    /// not fail): a bug in a template's solution.
    Unexpected {
        /// The task.
        task_id: String,
        /// The agent's text.
        turn: String,
        /// What came back.
        observation: String,
    },
}

impl fmt::Display for ExpertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpertError::Env(e) => write!(f, "environment error: {e}"),
            ExpertError::Unexpected { task_id, turn, observation } => write!(
                f,
                "unexpected outcome in {task_id}\n--- turn ---\n{turn}\n--- observation ---\n{observation}"
            ),
        }
    }
}

impl std::error::Error for ExpertError {}

impl From<EnvError> for ExpertError {
    fn from(e: EnvError) -> ExpertError {
        ExpertError::Env(e)
    }
}

/// One task as the expert solved it.
#[derive(Clone, Debug)]
pub struct TaskRun {
    /// The task's id.
    pub task_id: String,
    /// The chat: system, task, then agent turns and observations.
    pub messages: Vec<ChatMessage>,
    /// Agent turns taken.
    pub steps: usize,
    /// The evaluation.
    pub evaluation: Evaluation,
    /// Every check, for diagnosis.
    pub report: Report,
    /// Names of the library skills the task was given.
    pub library: Vec<String>,
    /// Library skills the task's code ran.
    pub used: Vec<String>,
    /// Skills the task saved (last definition of each name).
    pub saved: Vec<Skill>,
    /// The APIs its code calls, as `app.api`.
    pub apis: BTreeSet<String>,
}

/// A scenario as the expert solved it.
#[derive(Clone, Debug)]
pub struct ScenarioRun {
    /// The scenario's id.
    pub scenario_id: String,
    /// Its split.
    pub split: String,
    /// Its template.
    pub template: &'static str,
    /// The mode.
    pub mode: ExpertMode,
    /// The tasks, in order.
    pub tasks: Vec<TaskRun>,
}

impl ScenarioRun {
    /// Whether every task passed.
    pub fn passed(&self) -> bool {
        self.tasks.iter().all(|t| t.evaluation.passed)
    }

    /// The tasks as exportable records.
    pub fn records(&self) -> Vec<TrajectoryRecord> {
        self.tasks
            .iter()
            .map(|t| TrajectoryRecord::new(self, t))
            .collect()
    }
}

/// The scripted expert.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Expert {
    config: ExpertConfig,
}

impl Expert {
    /// An expert with these settings.
    pub fn new(config: ExpertConfig) -> Expert {
        Expert { config }
    }

    /// Its settings.
    pub fn config(&self) -> &ExpertConfig {
        &self.config
    }

    /// The style the expert uses for `scenario`.
    pub fn style(&self, scenario: &BuiltScenario) -> Style {
        let seed = hash_text(&scenario.scenario.id)
            ^ self.config.variant.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ hash_text(self.config.mode.name());
        let style = Style::draw(scenario.template, seed, self.config.mistake_rate);
        if self.config.varied_style {
            style
        } else {
            style.canonical()
        }
    }

    /// Whether the expert solves `scenario` in skill style: always in skill mode, never
    /// in direct mode, for a share `skill_share` of the scenarios in mixed mode (a draw
    /// fixed by the scenario and the variant).
    pub fn writes_skills(&self, scenario: &BuiltScenario) -> bool {
        match self.config.mode {
            ExpertMode::Skills => true,
            ExpertMode::Direct => false,
            ExpertMode::Mixed => unit_draw(self.scenario_key(scenario)) < self.config.skill_share,
        }
    }

    /// The draws of a scenario in mixed mode are fixed by its id and the variant.
    fn scenario_key(&self, scenario: &BuiltScenario) -> u64 {
        hash_text(&scenario.scenario.id) ^ self.config.variant.wrapping_mul(0xd1b5_4a32_d192_ed03)
    }

    /// The style of task `index` of `scenario`.
    fn task_style(&self, scenario: &BuiltScenario, index: usize) -> TaskStyle {
        if !self.writes_skills(scenario) {
            return TaskStyle::Direct;
        }
        let key =
            self.scenario_key(scenario) ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        if self.config.mode == ExpertMode::Mixed
            && index > 0
            && unit_draw(key) < self.config.rewrite_share
        {
            TaskStyle::Direct
        } else {
            TaskStyle::Skill
        }
    }

    /// Solves every task of `scenario` in order through `env`. In skill and mixed mode
    /// each task is given the skills the earlier tasks saved.
    pub fn solve(
        &self,
        env: &mut WorldEnv,
        scenario: &BuiltScenario,
    ) -> Result<ScenarioRun, ExpertError> {
        let style = self.style(scenario);
        let mut library: Vec<Skill> = Vec::new();
        let mut tasks = Vec::with_capacity(scenario.tasks.len());
        for index in 0..scenario.tasks.len() {
            let task_style = self.task_style(scenario, index);
            let run = self.solve_task(env, scenario, index, &library, &style, task_style)?;
            for skill in &run.saved {
                library.retain(|s| s.name != skill.name);
                library.push(skill.clone());
            }
            tasks.push(run);
        }
        Ok(ScenarioRun {
            scenario_id: scenario.scenario.id.clone(),
            split: scenario.scenario.split.clone(),
            template: scenario.template.name,
            mode: match self.config.mode {
                ExpertMode::Mixed if self.writes_skills(scenario) => ExpertMode::Skills,
                ExpertMode::Mixed => ExpertMode::Direct,
                mode => mode,
            },
            tasks,
        })
    }

    /// Solves every scenario in turn; returns the runs and their metrics.
    pub fn solve_all<'a>(
        &self,
        env: &mut WorldEnv,
        scenarios: impl IntoIterator<Item = &'a BuiltScenario>,
    ) -> Result<(Vec<ScenarioRun>, Metrics), ExpertError> {
        let mut metrics = Metrics::default();
        let mut runs = Vec::new();
        for scenario in scenarios {
            let run = self.solve(env, scenario)?;
            metrics.add(&run);
            runs.push(run);
        }
        Ok((runs, metrics))
    }

    fn solve_task(
        &self,
        env: &mut WorldEnv,
        scenario: &BuiltScenario,
        index: usize,
        library: &[Skill],
        style: &Style,
        task_style: TaskStyle,
    ) -> Result<TaskRun, ExpertError> {
        let built = &scenario.tasks[index];
        let template = scenario.template;
        let given: &[Skill] = match self.config.mode {
            ExpertMode::Skills | ExpertMode::Mixed => library,
            ExpertMode::Direct => &[],
        };
        let reset = env.reset(&built.task, given)?;
        let loaded: Vec<Skill> = given
            .iter()
            .filter(|s| !reset.dropped.iter().any(|d| d.name == s.name))
            .cloned()
            .collect();
        let mut session = Session {
            env,
            task_id: &built.task.id,
            messages: vec![
                ChatMessage::system(
                    Prompt {
                        mode: self.config.mode.prompt_mode(),
                        rules: self.config.prompt_rules,
                    }
                    .system(&loaded),
                ),
                ChatMessage::user(task_message(&built.task.instruction)),
            ],
            used: Vec::new(),
            saved: Vec::new(),
            apis: BTreeSet::new(),
            steps: 0,
        };
        let mut thoughts =
            StyleRng(style.thoughts ^ (index as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let question = template.kind == TaskKind::Question;
        let name = code::skill_name(template, style);
        let reusable = task_style == TaskStyle::Skill && loaded.iter().any(|s| s.name == name);
        if reusable {
            let thought = format!(
                "{} `{name}` {}",
                thoughts.pick(&[
                    "The library already has",
                    "My skill library contains",
                    "I can reuse"
                ]),
                thoughts.pick(&[
                    "for exactly this kind of task, so I will call it with this task's values.",
                    "which does this in general; I only need to pass this task's values.",
                ])
            );
            let mut call = if self.config.bound_reuse {
                format!(
                    "{}{}",
                    code::values(template, &built.params),
                    code::call_bound(template, style)
                )
            } else {
                code::call(template, style, &built.params)
            };
            if style.reuse_in_one_turn {
                call = format!("{call}\n{}", code::complete(question, style));
            }
            session.run(&code::turn(&thought, &call), false)?;
        } else {
            let apps = format!(
                "{} {}.",
                thoughts.pick(&[
                    "This task needs",
                    "To do this I will use",
                    "The apps involved:"
                ]),
                template.apps.join(" and ")
            );
            let thought = format!(
                "{apps} {}",
                thoughts.pick(&[
                    "First I will read the documentation of the APIs I plan to call.",
                    "Let me look up how their APIs work before writing code.",
                ])
            );
            if self.config.read_docs {
                session.run(
                    &code::turn(&thought, &code::docs_lookup(template, style)),
                    false,
                )?;
            }
            let work = |mistake| match task_style {
                TaskStyle::Skill => format!(
                    "{}\n{}\n\n{}",
                    code::values(template, &built.params),
                    code::skill_source(template, style, mistake),
                    code::call_bound(template, style)
                ),
                TaskStyle::Direct => code::direct(template, style, &built.params, mistake),
            };
            let mut intro = match task_style {
                TaskStyle::Skill => format!(
                    "{} {}",
                    thoughts.pick(&["I'll write a reusable skill", "Let me define a general function", "I will write a skill"]),
                    thoughts.pick(&[
                        "that logs in and does the work for any values, then call it for this task.",
                        "with the task's specifics as parameters, and call it.",
                    ])
                ),
                TaskStyle::Direct => thoughts
                    .pick(&[
                        "Now I'll log in and make the calls for this task.",
                        "I have what I need; here is the code for this task.",
                    ])
                    .to_owned(),
            };
            if !self.config.read_docs {
                intro = format!("{apps} {intro}");
            }
            if index == 0 || task_style == TaskStyle::Direct {
                if let Some(mistake) = style.mistake {
                    session.run(&code::turn(&intro, &work(Some(mistake))), true)?;
                    let fix = match mistake {
                        Mistake::TokenKeyword => "The API rejected `token`: the keyword is `access_token`. I'll fix that and run it again.",
                        Mistake::PageLimit => "page_limit can be at most 20. I'll fix the page size and run it again.",
                    };
                    session.run(&code::turn(fix, &work(None)), false)?;
                } else {
                    session.run(&code::turn(&intro, &work(None)), false)?;
                }
            } else {
                session.run(&code::turn(&intro, &work(None)), false)?;
            }
        }
        if !session.env.is_done() {
            let thought = if question {
                thoughts.pick(&[
                    "That is the answer, so I'll submit it.",
                    "I have the answer; completing the task.",
                ])
            } else {
                thoughts.pick(&[
                    "The changes are made; I'll mark the task complete.",
                    "All done, completing the task.",
                ])
            };
            session.run(
                &code::turn(thought, &code::complete(question, style)),
                false,
            )?;
        }
        let report = session.env.report()?;
        Ok(TaskRun {
            task_id: built.task.id.clone(),
            evaluation: report.evaluation(),
            report,
            library: loaded.iter().map(|s| s.name.clone()).collect(),
            messages: session.messages,
            steps: session.steps,
            used: session.used,
            saved: session.saved,
            apis: session.apis,
        })
    }
}

/// The labels an error observation's last line starts with (see the sandbox's errors).
const ERROR_LABELS: [&str; 5] = [
    "SyntaxError:",
    "Error:",
    "ApiError:",
    "LimitExceeded:",
    "InternalError:",
];

/// Whether an observation reports an error.
fn is_error(observation: &str) -> bool {
    observation
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| ERROR_LABELS.iter().any(|label| l.starts_with(label)))
}

/// One task's episode as the expert drives it.
struct Session<'a> {
    env: &'a mut WorldEnv,
    task_id: &'a str,
    messages: Vec<ChatMessage>,
    used: Vec<String>,
    saved: Vec<Skill>,
    apis: BTreeSet<String>,
    steps: usize,
}

impl Session<'_> {
    /// Runs one agent turn; `expect_error` says whether it is meant to fail (a
    /// deliberate mistake, exported as context with weight 0, not as a target).
    fn run(&mut self, text: &str, expect_error: bool) -> Result<(), ExpertError> {
        let result = self.env.step(text)?;
        self.steps += 1;
        self.messages.push(if expect_error {
            ChatMessage::assistant_context(text.to_owned())
        } else {
            ChatMessage::assistant(text.to_owned())
        });
        self.messages
            .push(ChatMessage::user(observation_message(&result.observation)));
        if is_error(&result.observation) != expect_error {
            return Err(ExpertError::Unexpected {
                task_id: self.task_id.to_owned(),
                turn: text.to_owned(),
                observation: result.observation,
            });
        }
        for call in parse_response(text).analysis.calls {
            if let Some(api) = call.callee.strip_prefix("apis.") {
                self.apis.insert(api.to_owned());
            }
        }
        for name in result.used {
            if !self.used.contains(&name) {
                self.used.push(name);
            }
        }
        for skill in result.saved {
            self.saved.retain(|s| s.name != skill.name);
            self.saved.push(skill);
        }
        Ok(())
    }
}
