//! Your own agent in the built-in world, with SAGE's skill library, using only
//! `sage-core` and `sage-envs`: no transformer, no trainer.
//!
//! An agent here is anything that turns a chat into its next message ([`Agent`]). The
//! loop around it is the one SAGE's sequential rollout runs: the tasks of a scenario
//! are solved in order; the skills a task saves (functions that ran without error) go
//! into the library; the next task is given the library's skills of its scenario,
//! already defined in its interpreter, and the sandbox traces which of them it calls.
//!
//! Two agents come with the example:
//! - `replay` (the default): plays back the built-in scripted expert's turns, a
//!   stand-in for a model that needs nothing installed;
//! - `--command CMD`: runs `CMD` through `sh -c` once per turn, writes the chat to its
//!   standard input as a JSON array of `{"role", "content"}` messages, and takes its
//!   standard output as the agent's message. A few lines of Python that forward the
//!   chat to a model server (an OpenAI-compatible endpoint, for instance) make any
//!   hosted model a SAGE agent.
//!
//! Run: `cargo run --release -p sage-examples --example custom_agent -- [--scenarios N]
//! [--split test-normal] [--command CMD]`
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::error::Error;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use sage_core::retrieval::{HashingEmbedder, RetrievalMode, Retriever};
use sage_core::skill::HashSkillLibrary;
use sage_core::{Environment, SkillLibrary};
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::expert::{Expert, ExpertConfig, ExpertMode};
use sage_envs::prompt::{system_prompt, PromptMode, OBSERVATION_PREFIX};
use sage_envs::scenarios::{BuiltScenario, Catalog, CatalogConfig, Split};

/// Skills given to a task.
const SKILLS_PER_TASK: usize = 5;

/// One chat message.
#[derive(Clone, Debug, serde::Serialize)]
struct Message {
    role: &'static str,
    content: String,
}

/// Anything that writes the agent's next message for a chat.
trait Agent {
    /// The next agent message (reasoning and one python code block).
    fn respond(&mut self, task_id: &str, chat: &[Message]) -> Result<String, Box<dyn Error>>;
}

/// Plays back the scripted expert's turns, task by task.
struct ReplayAgent {
    /// The expert's agent turns per task id, in order.
    turns: HashMap<String, Vec<String>>,
}

impl ReplayAgent {
    /// The expert's turns on every task of `scenarios`.
    fn new(
        catalog: &Arc<Catalog>,
        scenarios: &[&Arc<BuiltScenario>],
    ) -> Result<Self, Box<dyn Error>> {
        let expert = Expert::new(ExpertConfig::new(ExpertMode::Skills));
        let mut env = WorldEnv::new(catalog.clone(), EnvConfig::default())?;
        let mut turns = HashMap::new();
        for scenario in scenarios {
            for task in expert.solve(&mut env, scenario)?.tasks {
                let agent_turns = task
                    .messages
                    .iter()
                    .filter(|m| m.role == "assistant")
                    .map(|m| m.content.clone())
                    .collect();
                turns.insert(task.task_id, agent_turns);
            }
        }
        Ok(ReplayAgent { turns })
    }
}

impl Agent for ReplayAgent {
    fn respond(&mut self, task_id: &str, chat: &[Message]) -> Result<String, Box<dyn Error>> {
        let turn = chat.iter().filter(|m| m.role == "assistant").count();
        let script = self
            .turns
            .get(task_id)
            .ok_or_else(|| format!("no expert run of {task_id}"))?;
        Ok(script.get(turn).cloned().unwrap_or_default())
    }
}

/// Asks an external program for every turn.
struct CommandAgent {
    command: String,
}

impl Agent for CommandAgent {
    fn respond(&mut self, _task_id: &str, chat: &[Message]) -> Result<String, Box<dyn Error>> {
        let mut child = Command::new("sh")
            .args(["-c", &self.command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().ok_or("the agent command has no stdin")?;
        stdin.write_all(serde_json::to_string(chat)?.as_bytes())?;
        drop(stdin);
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(
                format!("agent command {:?} failed: {}", self.command, output.status).into(),
            );
        }
        Ok(String::from_utf8(output.stdout)?)
    }
}

/// Command-line options.
struct Options {
    split: Split,
    scenarios: usize,
    command: Option<String>,
}

fn options() -> Result<Options, Box<dyn Error>> {
    let mut options = Options {
        split: Split::TestNormal,
        scenarios: 10,
        command: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--split" => {
                let name = value()?;
                options.split = Split::ALL
                    .into_iter()
                    .find(|s| s.name() == name)
                    .ok_or_else(|| format!("no split {name:?}"))?;
            }
            "--scenarios" => options.scenarios = value()?.parse()?,
            "--command" => options.command = Some(value()?),
            other => return Err(format!("unknown option {other:?}").into()),
        }
    }
    Ok(options)
}

/// What one task came to.
struct TaskResult {
    passed: bool,
    steps: usize,
    given_skills: bool,
    used_skills: bool,
}

/// Solves `task` with `agent`, giving it the library skills of its scenario, then
/// saves the skills it wrote.
fn solve(
    agent: &mut dyn Agent,
    env: &mut WorldEnv,
    library: &mut HashSkillLibrary,
    retriever: &mut Retriever,
    task: &sage_core::Task,
) -> Result<TaskResult, Box<dyn Error>> {
    let hits = retriever.retrieve(library, task)?;
    let given: Vec<_> = hits
        .iter()
        .filter_map(|hit| library.get(&hit.name).cloned())
        .collect();
    let reset = env.reset(task, &given)?;
    let loaded: Vec<_> = given
        .into_iter()
        .filter(|s| reset.dropped.iter().all(|d| d.name != s.name))
        .collect();
    let mut chat = vec![
        Message {
            role: "system",
            content: system_prompt(PromptMode::Skills, &loaded),
        },
        Message {
            role: "user",
            content: task.instruction.clone(),
        },
    ];
    let (mut steps, mut used_skills) = (0, false);
    loop {
        let text = agent.respond(&task.id, &chat)?;
        let result = env.step(&text)?;
        steps += 1;
        used_skills |= !result.used.is_empty();
        for skill in result.saved {
            retriever.add(&skill, &task.instruction)?;
            library.insert(skill)?;
        }
        chat.push(Message {
            role: "assistant",
            content: text,
        });
        if result.done {
            break;
        }
        chat.push(Message {
            role: "user",
            content: format!("{OBSERVATION_PREFIX}{}", result.observation),
        });
    }
    Ok(TaskResult {
        passed: env.evaluate()?.passed,
        steps,
        given_skills: !loaded.is_empty(),
        used_skills,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let options = options()?;
    let catalog = Arc::new(Catalog::build_splits(
        &CatalogConfig::default(),
        &[options.split],
    )?);
    let scenarios: Vec<_> = catalog
        .split(options.split)
        .into_iter()
        .take(options.scenarios)
        .collect();
    let mut agent: Box<dyn Agent> = match &options.command {
        Some(command) => Box::new(CommandAgent {
            command: command.clone(),
        }),
        None => Box::new(ReplayAgent::new(&catalog, &scenarios)?),
    };
    let mut env = WorldEnv::new(catalog.clone(), EnvConfig::default())?;
    let mut library = HashSkillLibrary::new();
    let mut retriever = Retriever::new(
        RetrievalMode::SameScenario,
        SKILLS_PER_TASK,
        HashingEmbedder::default(),
    )?;
    let (mut tasks, mut passed, mut scenarios_passed, mut steps) = (0, 0, 0, 0);
    let (mut with_skills, mut used_skills) = (0, 0);
    for scenario in &scenarios {
        let mut all_passed = true;
        for built in &scenario.tasks {
            let result = solve(
                agent.as_mut(),
                &mut env,
                &mut library,
                &mut retriever,
                &built.task,
            )?;
            tasks += 1;
            passed += usize::from(result.passed);
            all_passed &= result.passed;
            steps += result.steps;
            with_skills += usize::from(result.given_skills);
            used_skills += usize::from(result.given_skills && result.used_skills);
        }
        scenarios_passed += usize::from(all_passed);
    }
    let percent = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    println!(
        "split {} ({} scenarios, {tasks} tasks):",
        options.split.name(),
        scenarios.len()
    );
    println!(
        "  TGC {:.1}%  SGC {:.1}%",
        percent(passed, tasks),
        percent(scenarios_passed, scenarios.len())
    );
    println!("  average steps {:.2}", steps as f64 / tasks.max(1) as f64);
    println!(
        "  skill usage {:.1}% of the {with_skills} tasks given skills; library holds {} skills",
        percent(used_skills, with_skills),
        library.len()
    );
    Ok(())
}
