//! `rollout`: how the rollout engine asks the policy for each turn: every episode's
//! turn is capped by its own chat's room (not a batch-mate's) and cut-off turns are
//! counted, and every turn draws from a random stream keyed by its request and turn,
//! whatever the generation batches are (or the chunks, with fewer environments than
//! episodes); an environment's own failure ends its episode and no other.

use std::collections::HashMap;

use sage_core::env::{EpisodeEnd, Reset, StepResult};
use sage_core::policy::{Generation, Policy, SamplingParams, StopReason, UpdateStats};
use sage_core::{Environment, Evaluation, Skill, Task};
use sage_envs::tiny::{tiny_scenarios, TinyEnv};
use sage_trainer::chat::ChatTemplate;
use sage_trainer::rollout::{run_episodes, EpisodeRequest, RolloutConfig};
use sage_trainer::tokenizer::{Tokenizer, TrainConfig};

/// A generation-only policy that writes one filler token up to each prompt's limit and
/// records, per prompt (by its tokens), the stream key it was given, and how many
/// prompts it had been given each time it was told the chats had ended.
struct FillerPolicy {
    filler: u32,
    keys: HashMap<Vec<u32>, u64>,
    ended_after: Vec<usize>,
}

impl Policy for FillerPolicy {
    type Error = std::io::Error;

    fn generate(
        &mut self,
        prompts: &[&[u32]],
        params: &SamplingParams,
    ) -> Result<Vec<Generation>, std::io::Error> {
        assert_eq!(params.stream_keys.len(), prompts.len());
        assert_eq!(params.max_new_tokens_each.len(), prompts.len());
        Ok(prompts
            .iter()
            .zip(&params.stream_keys)
            .zip(&params.max_new_tokens_each)
            .map(|((prompt, &key), &limit)| {
                self.keys.insert(prompt.to_vec(), key);
                let n = limit.min(params.max_new_tokens) as usize;
                Generation {
                    tokens: vec![self.filler; n],
                    logprobs: vec![-1.0; n],
                    stop: StopReason::Length,
                }
            })
            .collect())
    }

    fn log_probs(&mut self, _: &[&[u32]]) -> Result<Vec<Vec<f32>>, std::io::Error> {
        Err(std::io::Error::other("generation only"))
    }

    fn accumulate_gradient(&mut self, _: &[&[u32]], _: &[&[f32]]) -> Result<f32, std::io::Error> {
        Err(std::io::Error::other("generation only"))
    }

    fn optimizer_step(&mut self) -> Result<UpdateStats, std::io::Error> {
        Err(std::io::Error::other("generation only"))
    }

    fn chats_ended(&mut self) -> Result<(), std::io::Error> {
        self.ended_after.push(self.keys.len());
        Ok(())
    }
}

fn tasks() -> Vec<Task> {
    tiny_scenarios(0..1)
        .into_iter()
        .flat_map(|s| s.tasks)
        .take(2)
        .collect()
}

fn tokenizer(tasks: &[Task]) -> Tokenizer {
    let mut texts: Vec<String> = tasks.iter().map(|t| t.instruction.clone()).collect();
    texts.push("short".to_owned());
    Tokenizer::train(
        texts,
        &TrainConfig {
            vocab_size: 400,
            ..TrainConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn each_turn_is_capped_by_its_own_room_and_cut_off_turns_are_counted() {
    let tasks = tasks();
    let tk = tokenizer(&tasks);
    let template = ChatTemplate::new(&tk).unwrap();
    // A long instruction for the first request only: its chat has little room left.
    let mut tasks = tasks;
    tasks[0].instruction = format!("{} {}", "short ".repeat(120), tasks[0].instruction);
    let system = |_: &[Skill]| "short".to_owned();
    let requests: Vec<EpisodeRequest<'_>> = tasks
        .iter()
        .map(|task| EpisodeRequest { task, library: &[] })
        .collect();
    let short_len = template
        .start("short", &tasks[1].instruction)
        .unwrap()
        .len();
    let long_len = template
        .start("short", &tasks[0].instruction)
        .unwrap()
        .len();
    let config = RolloutConfig {
        max_turns: 1,
        max_new_tokens: 64,
        max_episode_tokens: long_len + 20,
        ..RolloutConfig::default()
    };
    assert!(
        short_len + 64 < config.max_episode_tokens,
        "the short chat has room"
    );
    let mut policy = FillerPolicy {
        filler: tk.encode("short").unwrap()[0],
        keys: HashMap::new(),
        ended_after: Vec::new(),
    };
    let mut envs = vec![TinyEnv::new(1), TinyEnv::new(1)];
    let episodes = run_episodes(
        &mut policy,
        &mut envs,
        &template,
        &system,
        &requests,
        &config,
        5,
    )
    .unwrap();
    let generated: Vec<u32> = episodes
        .iter()
        .map(|e| e.episode.turns[0].generated_tokens)
        .collect();
    // The long chat's turn takes what its own chat holds (its room, less the end
    // token); the short chat's turn is not cut to the long one's room.
    assert_eq!(
        generated[0] as usize,
        config.max_episode_tokens - long_len - 1
    );
    assert_eq!(generated[1], 64);
    assert!(episodes.iter().all(|e| e.truncated_turns == 1));
    // Each request's turn 0 has its own key: request 0 and request 1.
    let mut keys: Vec<u64> = policy.keys.values().copied().collect();
    keys.sort_unstable();
    assert_eq!(keys, [0, 1]);
}

/// Short turns of at most `max_turns`, and a filler policy over `tk`.
fn short_turns(tk: &Tokenizer, max_turns: u32) -> (RolloutConfig, FillerPolicy) {
    let config = RolloutConfig {
        max_turns,
        max_new_tokens: 8,
        ..RolloutConfig::default()
    };
    let policy = FillerPolicy {
        filler: tk.encode("short").unwrap()[0],
        keys: HashMap::new(),
        ended_after: Vec::new(),
    };
    (config, policy)
}

#[test]
fn fewer_environments_than_episodes_run_in_chunks_on_the_requests_own_streams() {
    let tasks = tasks();
    let tk = tokenizer(&tasks);
    let template = ChatTemplate::new(&tk).unwrap();
    let system = |_: &[Skill]| "short".to_owned();
    let requests: Vec<EpisodeRequest<'_>> = tasks
        .iter()
        .map(|task| EpisodeRequest { task, library: &[] })
        .collect();
    let (config, mut policy) = short_turns(&tk, 1);
    // One environment for two episodes: they run one after the other.
    let mut envs = vec![TinyEnv::new(1)];
    let episodes = run_episodes(
        &mut policy,
        &mut envs,
        &template,
        &system,
        &requests,
        &config,
        5,
    )
    .unwrap();
    assert_eq!(episodes.len(), 2);
    for (episode, task) in episodes.iter().zip(&tasks) {
        assert_eq!(episode.episode.task.id, task.id);
        assert_eq!(episode.episode.turns.len(), 1);
    }
    // Each request keeps its own stream (0 and 1), as with one environment each.
    let mut keys: Vec<u64> = policy.keys.values().copied().collect();
    keys.sort_unstable();
    assert_eq!(keys, [0, 1]);
    // The policy hears that the chats ended after each chunk, so it keeps nothing for
    // chats that will not continue.
    assert_eq!(policy.ended_after, [1, 2]);
}

/// The tiny environment, or one whose connection is lost at its first step.
enum MaybeBroken {
    Working(Box<TinyEnv>),
    Broken,
}

impl Environment for MaybeBroken {
    type Error = std::io::Error;

    fn reset(&mut self, task: &Task, library: &[Skill]) -> Result<Reset, std::io::Error> {
        match self {
            MaybeBroken::Working(env) => env.reset(task, library).map_err(std::io::Error::other),
            MaybeBroken::Broken => Ok(Reset::default()),
        }
    }

    fn step(&mut self, text: &str) -> Result<StepResult, std::io::Error> {
        match self {
            MaybeBroken::Working(env) => env.step(text).map_err(std::io::Error::other),
            MaybeBroken::Broken => Err(std::io::Error::other("connection lost")),
        }
    }

    fn evaluate(&mut self) -> Result<Evaluation, std::io::Error> {
        match self {
            MaybeBroken::Working(env) => env.evaluate().map_err(std::io::Error::other),
            MaybeBroken::Broken => panic!("a failed episode is not evaluated"),
        }
    }
}

#[test]
fn an_environment_that_fails_ends_its_own_episode_and_no_other() {
    let tasks = tasks();
    let tk = tokenizer(&tasks);
    let template = ChatTemplate::new(&tk).unwrap();
    let system = |_: &[Skill]| "short".to_owned();
    let requests: Vec<EpisodeRequest<'_>> = tasks
        .iter()
        .map(|task| EpisodeRequest { task, library: &[] })
        .collect();
    let (config, mut policy) = short_turns(&tk, 2);
    let mut envs = vec![
        MaybeBroken::Broken,
        MaybeBroken::Working(Box::new(TinyEnv::new(2))),
    ];
    let episodes = run_episodes(
        &mut policy,
        &mut envs,
        &template,
        &system,
        &requests,
        &config,
        5,
    )
    .expect("an environment's failure does not fail the rollout");
    let broken = &episodes[0];
    assert_eq!(broken.episode.end, EpisodeEnd::EnvironmentFailed);
    assert!(!broken.episode.evaluation.passed);
    assert_eq!(
        broken.episode.turns.len(),
        1,
        "the turn it failed on is kept"
    );
    let error = broken.environment_error.as_deref().unwrap();
    assert!(error.contains("connection lost"), "{error}");
    let working = &episodes[1];
    assert_ne!(working.episode.end, EpisodeEnd::EnvironmentFailed);
    assert!(working.environment_error.is_none());
}
