//! The rollout engine: multi-turn episodes of a [`Policy`] against any
//! [`Environment`], many at once.
//!
//! Each episode has its own environment. Every turn, the episodes still running are
//! generated together (in batches under a token budget), each agent turn is appended
//! to its [`ChatEpisode`] token-exactly, its decoded text is executed by the
//! environment, and the observation is appended as the next message. An episode ends
//! when the environment says so, when it reaches the turn limit, or when its chat
//! cannot hold another turn; then it is evaluated.
//!
//! An environment's own failure (a server that went away, a timeout) ends that episode
//! as [`EpisodeEnd::EnvironmentFailed`] with the error kept beside it; the other
//! episodes go on. Given fewer environments than episodes (a pool of servers), the
//! episodes run in chunks of as many as there are environments, each chunk reusing
//! them; every episode samples from the same random stream however it is chunked.

use std::fmt;

use serde::{Deserialize, Serialize};

use sage_core::env::{DroppedSkill, Episode, EpisodeEnd, StepResult, Turn};
use sage_core::policy::{Policy, SamplingParams, StopReason};
use sage_core::Evaluation;
use sage_core::{Environment, Skill, Task};

use crate::chat::{ChatEpisode, ChatError, ChatTemplate};

/// Settings of a rollout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutConfig {
    /// Agent turns an episode may take.
    pub max_turns: u32,
    /// New tokens per agent turn.
    pub max_new_tokens: u32,
    /// Tokens an episode's chat may hold (prompt, turns and observations).
    pub max_episode_tokens: usize,
    /// Sampling temperature (0: greedy).
    pub temperature: f32,
    /// Top-k filter (0: off).
    pub top_k: u32,
    /// Top-p filter (1: off).
    pub top_p: f32,
    /// Token budget of one generation batch (prompts plus new tokens).
    pub batch_tokens: usize,
}

impl Default for RolloutConfig {
    fn default() -> RolloutConfig {
        RolloutConfig {
            max_turns: 8,
            max_new_tokens: 512,
            max_episode_tokens: 4096,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            batch_tokens: 65_536,
        }
    }
}

/// A policy's or an environment's own error, kept whole as the source of the error
/// that reports it.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a rollout failed (the agent's mistakes never fail it: they end its episode).
#[derive(Debug)]
pub enum RolloutError {
    /// The policy failed.
    Policy(Cause),
    /// An environment failed.
    Environment(Cause),
    /// A chat could not be started (the prompt is over the episode limit, or does not
    /// tokenise).
    Chat(ChatError),
    /// Fewer environments than episodes.
    Environments {
        /// Episodes asked for.
        episodes: usize,
        /// Environments given.
        environments: usize,
    },
}

impl fmt::Display for RolloutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RolloutError::Policy(e) => write!(f, "policy: {e}"),
            RolloutError::Environment(e) => write!(f, "environment: {e}"),
            RolloutError::Chat(e) => write!(f, "chat: {e}"),
            RolloutError::Environments {
                episodes,
                environments,
            } => write!(
                f,
                "{episodes} episodes need as many environments, got {environments}"
            ),
        }
    }
}

impl std::error::Error for RolloutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RolloutError::Policy(e) | RolloutError::Environment(e) => Some(e.as_ref()),
            RolloutError::Chat(e) => Some(e),
            RolloutError::Environments { .. } => None,
        }
    }
}

/// Makes the environments a rollout runs in, one per episode, at most
/// [`capacity`](EnvFactory::capacity) at once. Any closure returning an environment is
/// one (with no limit).
pub trait EnvFactory {
    /// The environments it makes.
    type Env: Environment;

    /// A fresh environment.
    fn make(&self) -> Result<Self::Env, <Self::Env as Environment>::Error>;

    /// How many environments may exist at once (a pool of servers); `None`: any number.
    fn capacity(&self) -> Option<usize> {
        None
    }

    /// Environments for `episodes` episodes: as many, or the capacity if that is fewer.
    fn make_for(
        &self,
        episodes: usize,
    ) -> Result<Vec<Self::Env>, <Self::Env as Environment>::Error> {
        let count = self.capacity().map_or(episodes, |c| episodes.min(c.max(1)));
        (0..count).map(|_| self.make()).collect()
    }
}

impl<E: Environment, F: Fn() -> Result<E, E::Error> + ?Sized> EnvFactory for F {
    type Env = E;

    fn make(&self) -> Result<E, E::Error> {
        self()
    }
}

/// One episode to run: the task and the library skills it is given.
#[derive(Clone, Copy, Debug)]
pub struct EpisodeRequest<'a> {
    /// The task.
    pub task: &'a Task,
    /// The skills loaded into the interpreter and shown in the system prompt.
    pub library: &'a [Skill],
}

/// A finished episode: its record, its tokens and the sampled log-probs.
#[derive(Clone, Debug)]
pub struct RolloutEpisode {
    /// Turns, outcome and evaluation.
    pub episode: Episode,
    /// The chat's tokens and agent mask.
    pub chat: ChatEpisode,
    /// Log-prob under the sampling policy of each agent token, in chat order.
    pub logprobs: Vec<f32>,
    /// Library skills the environment refused to load.
    pub dropped: Vec<DroppedSkill>,
    /// Agent turns cut off at their new-token limit (no end-of-turn token).
    pub truncated_turns: u32,
    /// The environment's own error that ended the episode
    /// ([`EpisodeEnd::EnvironmentFailed`]).
    pub environment_error: Option<String>,
}

/// An episode in progress.
struct Running {
    task_id: String,
    chat: ChatEpisode,
    turns: Vec<Turn>,
    logprobs: Vec<f32>,
    dropped: Vec<DroppedSkill>,
    library: Vec<String>,
    end: Option<EpisodeEnd>,
    truncated_turns: u32,
    environment_error: Option<String>,
}

impl Running {
    /// Ends the episode on its environment's failure.
    fn fail(&mut self, error: &dyn std::error::Error) {
        tracing::warn!("task {}: the environment failed: {error}", self.task_id);
        self.end = Some(EpisodeEnd::EnvironmentFailed);
        self.environment_error = Some(error.to_string());
    }
}

/// Runs one episode per request and returns them in order: `envs[i]` runs request `i`,
/// or, with fewer environments than requests, the requests run in chunks of
/// `envs.len()`. `system_prompt` renders the system message from the skills that
/// loaded. Each agent turn samples from its own random stream, keyed by `seed`, the
/// request's index and the turn, so a run is reproducible on a deterministic backend,
/// and two runs with the same seed (a run and its update-off control) draw the same
/// numbers for the same turn of the same request however the generation batches (and
/// chunks) are formed.
pub fn run_episodes<P: Policy, E: Environment>(
    policy: &mut P,
    envs: &mut [E],
    template: &ChatTemplate<'_>,
    system_prompt: &dyn Fn(&[Skill]) -> String,
    requests: &[EpisodeRequest<'_>],
    config: &RolloutConfig,
    seed: u64,
) -> Result<Vec<RolloutEpisode>, RolloutError> {
    if envs.is_empty() && !requests.is_empty() {
        return Err(RolloutError::Environments {
            episodes: requests.len(),
            environments: 0,
        });
    }
    let template = template.clone().with_max_len(config.max_episode_tokens);
    let mut out = Vec::with_capacity(requests.len());
    for (chunk, chunk_requests) in requests.chunks(envs.len().max(1)).enumerate() {
        let envs = &mut envs[..chunk_requests.len()];
        let first = chunk * envs.len();
        let mut running = Vec::with_capacity(chunk_requests.len());
        for (env, request) in envs.iter_mut().zip(chunk_requests) {
            running.push(start_episode(env, &template, system_prompt, request)?);
        }
        for turn in 0..config.max_turns {
            let active: Vec<usize> = (0..running.len())
                .filter(|&i| running[i].end.is_none())
                .collect();
            if active.is_empty() {
                break;
            }
            for batch in batches(&running, &active, config) {
                let turn = TurnOf { turn, seed, first };
                run_turn(policy, envs, &template, &mut running, &batch, config, turn)?;
            }
        }
        // The chunk's chats have all ended: nothing kept to continue them is needed.
        policy
            .chats_ended()
            .map_err(|e| RolloutError::Policy(Box::new(e)))?;
        for ((env, request), mut episode) in envs.iter_mut().zip(chunk_requests).zip(running) {
            let failed = Evaluation {
                score: 0.0,
                passed: false,
            };
            let evaluation = if episode.end == Some(EpisodeEnd::EnvironmentFailed) {
                failed
            } else {
                env.evaluate().unwrap_or_else(|e| {
                    episode.fail(&e);
                    failed
                })
            };
            out.push(RolloutEpisode {
                episode: Episode {
                    task: request.task.clone(),
                    library: episode.library,
                    turns: episode.turns,
                    end: episode.end.unwrap_or(EpisodeEnd::TurnLimit),
                    evaluation,
                },
                chat: episode.chat,
                logprobs: episode.logprobs,
                dropped: episode.dropped,
                truncated_turns: episode.truncated_turns,
                environment_error: episode.environment_error,
            });
        }
    }
    Ok(out)
}

/// Resets `env` for `request` and starts its chat; an environment that fails to reset
/// gives an episode that has already failed.
fn start_episode<E: Environment>(
    env: &mut E,
    template: &ChatTemplate<'_>,
    system_prompt: &dyn Fn(&[Skill]) -> String,
    request: &EpisodeRequest<'_>,
) -> Result<Running, RolloutError> {
    let reset = env.reset(request.task, request.library);
    let loaded: Vec<Skill> = match &reset {
        Ok(reset) => request
            .library
            .iter()
            .filter(|s| !reset.dropped.iter().any(|d| d.name == s.name))
            .cloned()
            .collect(),
        Err(_) => Vec::new(),
    };
    let chat = template
        .start(&system_prompt(&loaded), &request.task.instruction)
        .map_err(RolloutError::Chat)?;
    let mut running = Running {
        task_id: request.task.id.clone(),
        chat,
        turns: Vec::new(),
        logprobs: Vec::new(),
        dropped: Vec::new(),
        library: loaded.into_iter().map(|s| s.name).collect(),
        end: None,
        truncated_turns: 0,
        environment_error: None,
    };
    match reset {
        Ok(reset) => running.dropped = reset.dropped,
        Err(e) => running.fail(&e),
    }
    Ok(running)
}

/// Splits the active episodes into generation batches under the token budget, longest
/// chats first so that similar lengths share a batch.
fn batches(running: &[Running], active: &[usize], config: &RolloutConfig) -> Vec<Vec<usize>> {
    let mut order = active.to_vec();
    order.sort_by_key(|&i| std::cmp::Reverse(running[i].chat.len()));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut tokens = 0;
    for i in order {
        let cost = running[i].chat.len() + config.max_new_tokens as usize;
        match out.last_mut() {
            Some(batch) if tokens + cost <= config.batch_tokens => {
                batch.push(i);
                tokens += cost;
            }
            _ => {
                out.push(vec![i]);
                tokens = cost;
            }
        }
    }
    out
}

/// The random stream of request `request`'s agent turn `turn`.
fn stream_key(request: usize, turn: u32) -> u64 {
    (u64::from(turn) << 32) ^ request as u64
}

/// Which turn a generation is: the turn, the rollout's seed, and the index of the
/// chunk's first request (so stream keys are the requests' own).
#[derive(Clone, Copy)]
struct TurnOf {
    turn: u32,
    seed: u64,
    first: usize,
}

/// Generates one agent turn for the episodes of `batch`, executes them, and appends
/// what came back. Each episode's turn may take up to `max_new_tokens` new tokens, or
/// what its own chat still has room for; one with no room left ends at the turn limit.
fn run_turn<P: Policy, E: Environment>(
    policy: &mut P,
    envs: &mut [E],
    template: &ChatTemplate<'_>,
    running: &mut [Running],
    batch: &[usize],
    config: &RolloutConfig,
    TurnOf { turn, seed, first }: TurnOf,
) -> Result<(), RolloutError> {
    let mut generating = Vec::with_capacity(batch.len());
    let mut limits = Vec::with_capacity(batch.len());
    for &i in batch {
        let room = template.max_len().saturating_sub(running[i].chat.len() + 1);
        let limit = config
            .max_new_tokens
            .min(u32::try_from(room).unwrap_or(u32::MAX));
        if limit == 0 {
            running[i].end = Some(EpisodeEnd::TurnLimit);
        } else {
            generating.push(i);
            limits.push(limit);
        }
    }
    if generating.is_empty() {
        return Ok(());
    }
    let special = template.special_tokens();
    let params = SamplingParams {
        temperature: config.temperature,
        top_k: config.top_k,
        top_p: config.top_p,
        max_new_tokens: config.max_new_tokens,
        stop_tokens: vec![special.im_end, special.end_of_text],
        seed,
        stream_keys: generating
            .iter()
            .map(|&i| stream_key(first + i, turn))
            .collect(),
        max_new_tokens_each: limits,
    };
    let prompts: Vec<&[u32]> = generating
        .iter()
        .map(|&i| running[i].chat.tokens())
        .collect();
    let generations = policy
        .generate(&prompts, &params)
        .map_err(|e| RolloutError::Policy(Box::new(e)))?;
    for (&i, generation) in generating.iter().zip(generations) {
        let episode = &mut running[i];
        let truncated = generation.stop == StopReason::Length;
        let mut tokens = generation.tokens;
        let mut logprobs = generation.logprobs;
        // <|endoftext|> closes a turn like <|im_end|>: the chat keeps ChatML's end.
        if tokens.last() == Some(&special.end_of_text) {
            tokens.pop();
            logprobs.pop();
        }
        if episode.chat.push_agent(template, &tokens).is_err() {
            episode.end = Some(EpisodeEnd::TurnLimit);
            continue;
        }
        episode.logprobs.extend_from_slice(&logprobs);
        episode.truncated_turns += u32::from(truncated);
        let text = episode
            .chat
            .last_agent_text(template)
            .map_err(RolloutError::Chat)?
            .unwrap_or_default();
        let result = match envs[i].step(&text) {
            Ok(result) => result,
            Err(e) => {
                let observation = format!("the environment failed: {e}");
                episode.fail(&e);
                episode.turns.push(Turn {
                    agent_text: text,
                    generated_tokens: tokens.len() as u32,
                    result: StepResult {
                        observation,
                        done: true,
                        ..StepResult::default()
                    },
                });
                continue;
            }
        };
        let (done, had_code) = (result.done, result.had_code);
        let observation = result.observation.clone();
        episode.turns.push(Turn {
            agent_text: text,
            generated_tokens: tokens.len() as u32,
            result,
        });
        if done {
            episode.end = Some(if had_code {
                EpisodeEnd::Completed
            } else {
                EpisodeEnd::NoCode
            });
        } else if turn + 1 >= config.max_turns
            || episode
                .chat
                .push_observation(template, &observation)
                .is_err()
        {
            episode.end = Some(EpisodeEnd::TurnLimit);
        }
    }
    Ok(())
}
