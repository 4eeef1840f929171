//! `sage generate`: watch a checkpoint work. It plays one scenario of the built-in
//! world task by task, as evaluation does (the skills each task saves are given to the
//! next, same-scenario retrieval), printing every turn: the agent's message, what the
//! sandbox answered, and each task's outcome; or, with `--prompt`, prints its answer to
//! one message under the world's system prompt. Greedy by default, sampled with
//! `--temperature`.

use std::path::PathBuf;
use std::sync::Arc;

use sage_core::policy::{Policy, SamplingParams};
use sage_core::Skill;
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::prompt::Prompt;
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};
use sage_trainer::chat::ChatTemplate;
use sage_trainer::config::RunConfig;
use sage_trainer::pipeline::{failed, PipelineError};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::rollout::{run_episodes, EpisodeRequest, RolloutEpisode};
use sage_trainer::tokenizer::Tokenizer;
use sage_trainer::weights::load_frozen_model;
use sage_transformer::Kernels;

use super::commands::chosen_or_latest;

/// What `sage generate` plays.
pub(super) struct GenerateSources {
    /// The checkpoint or model directory (default: the run's latest SFT checkpoint).
    pub checkpoint: Option<PathBuf>,
    /// The split the scenario comes from.
    pub split: Split,
    /// Which of the split's scenarios, in catalog order.
    pub scenario: usize,
    /// A message to answer instead of playing a scenario.
    pub prompt: Option<String>,
    /// Sampling temperature (0: greedy).
    pub temperature: f32,
    /// Seed of the sampling.
    pub seed: u64,
}

/// `sage generate`.
pub(super) fn generate<K: Kernels>(
    mut k: K,
    config: &RunConfig,
    sources: &GenerateSources,
) -> Result<(), PipelineError> {
    let dir = chosen_or_latest(config, sources.checkpoint.as_deref(), "generate", |dir| {
        format!("no checkpoint in {}: pass --checkpoint DIR", dir.display())
    })?;
    let tokenizer = Tokenizer::from_dir(&dir).map_err(failed("generate"))?;
    let model = load_frozen_model(&mut k, &dir).map_err(failed("generate"))?;
    let mut policy = TransformerPolicy::inference(k, model)
        .with_max_batch_tokens(config.run.max_batch_tokens)
        .with_held_tokens(config.run.held_kv_tokens);
    let rollout = {
        let mut rollout = config.eval.rollout.clone();
        rollout.temperature = sources.temperature;
        rollout
    };
    let template = ChatTemplate::new(&tokenizer)
        .map_err(failed("generate"))?
        .with_max_len(rollout.max_episode_tokens);
    let prompt = Prompt {
        mode: config.eval.prompt,
        rules: config.data.prompt_rules,
    };
    if let Some(message) = &sources.prompt {
        let chat = template
            .start(&prompt.system(&[]), message)
            .map_err(failed("generate"))?;
        let special = template.special_tokens();
        let params = SamplingParams {
            temperature: sources.temperature,
            max_new_tokens: rollout.max_new_tokens,
            stop_tokens: vec![special.im_end, special.end_of_text],
            seed: sources.seed,
            ..SamplingParams::default()
        };
        let generation = policy
            .generate(&[chat.tokens()], &params)
            .map_err(failed("generate"))?;
        let mut tokens = generation
            .into_iter()
            .next()
            .map_or_else(Vec::new, |g| g.tokens);
        if tokens
            .last()
            .is_some_and(|&t| t == special.im_end || t == special.end_of_text)
        {
            tokens.pop();
        }
        let answer = tokenizer.decode(&tokens).map_err(failed("generate"))?;
        println!(
            "{} ({}), {} tokens:",
            dir.display(),
            decoding(sources.temperature),
            tokens.len()
        );
        match answer.trim_end() {
            "" => println!("(an empty answer)"),
            text => println!("{text}"),
        }
        return Ok(());
    }
    let catalog_config = CatalogConfig {
        iid_seeds: config.eval.iid_seeds,
        ..CatalogConfig::default()
    };
    let catalog = Arc::new(
        Catalog::build_splits(&catalog_config, &[sources.split]).map_err(failed("generate"))?,
    );
    let scenarios = catalog.split(sources.split);
    let scenario = scenarios.get(sources.scenario).ok_or_else(|| {
        PipelineError::new(
            "generate",
            format!(
                "{} has {} scenarios: --scenario takes 0 to {}",
                sources.split.name(),
                scenarios.len(),
                scenarios.len().saturating_sub(1)
            ),
        )
    })?;
    let env_config = EnvConfig {
        max_turns: rollout.max_turns.max(1),
        ..EnvConfig::default()
    };
    println!(
        "{} with {}, scenario {} of {} ({} tasks)",
        dir.display(),
        decoding(sources.temperature),
        scenario.scenario.id,
        sources.split.name(),
        scenario.tasks.len()
    );
    let mut library: Vec<Skill> = Vec::new();
    for (index, task) in scenario.tasks.iter().enumerate() {
        let mut env =
            WorldEnv::new(catalog.clone(), env_config.clone()).map_err(failed("generate"))?;
        let request = EpisodeRequest {
            task: &task.task,
            library: &library,
        };
        let episodes = run_episodes(
            &mut policy,
            std::slice::from_mut(&mut env),
            &template,
            &|skills: &[Skill]| prompt.system(skills),
            &[request],
            &rollout,
            sources.seed ^ index as u64,
        )
        .map_err(failed("generate"))?;
        for episode in &episodes {
            print_episode(index, episode);
            for skill in episode.episode.saved_skills() {
                library.retain(|known| known.name != skill.name);
                library.push(skill.clone());
            }
        }
    }
    Ok(())
}

/// How `temperature` decodes, in words.
fn decoding(temperature: f32) -> String {
    if temperature > 0.0 {
        format!("sampling at temperature {temperature}")
    } else {
        "greedy decoding".to_owned()
    }
}

/// Prints one task's episode: instruction, every turn, the outcome.
fn print_episode(index: usize, episode: &RolloutEpisode) {
    let record = &episode.episode;
    println!(
        "\n=== task {} ({}): {}",
        index + 1,
        record.task.id,
        record.task.instruction
    );
    if !record.library.is_empty() {
        println!("library: {}", record.library.join(", "));
    }
    for (turn, step) in record.turns.iter().enumerate() {
        println!(
            "\n--- agent, turn {} ({} tokens)",
            turn + 1,
            step.generated_tokens
        );
        println!("{}", step.agent_text.trim_end());
        println!("--- sandbox");
        println!("{}", step.result.observation.trim_end());
    }
    let evaluation = &record.evaluation;
    println!(
        "\n=== {}: {:?} after {} turns, {} tokens",
        if evaluation.passed {
            "passed"
        } else {
            "failed"
        },
        record.end,
        record.steps(),
        record.generated_tokens()
    );
}
