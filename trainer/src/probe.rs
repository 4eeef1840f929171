//! A small, fast RL problem for learning tests and for diagnosing the update: the tiny
//! world (`sage_envs::tiny`), a tiny transformer trained on its expert's answers, and
//! RL on the same tasks against the update-off control. A run takes seconds on a CPU,
//! so a setting can be tried on many seeds. It shows the demo's RL pattern at a
//! hundredth of the cost: success hinges on a few copied tokens, the update moves the
//! failed answers far more than the successful ones, and from a near-deterministic SFT
//! start its gains are small and noisy (`docs/rl.md`).
//!
//! The SFT data can mix in a share of answers that call the submit API wrongly (they
//! fail on every task), so that the SFT policy's choice between solving and guessing is
//! open: a whole-answer choice that decides success, which RL should learn.

use sage_core::reward::RewardKind;
use sage_core::{Skill, Task, TaskChain};
use sage_envs::tiny::{tiny_scenarios, TinyEnv};
use sage_transformer::{Kernels, ModelConfig, Transformer};

use crate::chat::ChatTemplate;
use crate::init::init_params;
use crate::optim::{AdamWConfig, LrSchedule};
use crate::policy::TransformerPolicy;
use crate::rl::{RlConfig, RlState, RlStepStats, RlTrainer};
use crate::rollout::RolloutConfig;
use crate::sft::{SftConfig, SftData, SftState, SftTrainer};
use crate::tokenizer::{Tokenizer, TrainConfig};

/// The system prompt of every probe chat (RL runs chains of one task, so the library
/// is always empty).
pub const PROBE_SYSTEM: &str = "Skills: (empty)";

/// The guessing answer: its submit call misnames the argument, so the task fails.
pub const GUESS: &str = "I guess.\n\n```python\napis.tiny.submit(answr=-1)\n```";

/// How the probe's SFT model is made.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeConfig {
    /// Seeds of the tiny world's scenarios (5 operations x 3 tasks each): the tasks of
    /// both SFT and RL.
    pub scenario_seeds: u64,
    /// SFT passes over the data; about 16 give a policy that copies the list's name
    /// right some of the time, 24 most of the time.
    pub sft_epochs: u64,
    /// Guessing answers added to the SFT data, per expert answer (0: none; 1: one per
    /// task).
    pub guess_share: f32,
    /// Seed of the model's initial weights and of the SFT batch order.
    pub model_seed: u64,
    /// Width of the model (2 layers, 4 heads).
    pub hidden_size: usize,
    /// Input and output embeddings shared.
    pub tied_embeddings: bool,
}

impl Default for ProbeConfig {
    fn default() -> ProbeConfig {
        ProbeConfig {
            scenario_seeds: 12,
            sft_epochs: 16,
            guess_share: 0.0,
            model_seed: 1,
            hidden_size: 64,
            tied_embeddings: true,
        }
    }
}

/// The probe's tasks.
pub fn probe_tasks(config: &ProbeConfig) -> Vec<Task> {
    tiny_scenarios(0..config.scenario_seeds)
        .into_iter()
        .flat_map(|s| s.tasks)
        .collect()
}

/// Trains the probe's tokenizer and its SFT model on backend `k`; the returned policy
/// has a fresh AdamW of `rl_optimizer` (zero moments, as RL starts). Also returns the
/// last SFT batch's loss.
pub fn probe_sft<K: Kernels>(
    mut k: K,
    config: &ProbeConfig,
    rl_optimizer: AdamWConfig,
) -> Result<(Tokenizer, TransformerPolicy<K>, f32), String> {
    let tasks = probe_tasks(config);
    let mut chats: Vec<[String; 2]> = Vec::new();
    for task in &tasks {
        let answer = TinyEnv::expert_response(task, &[])
            .ok_or_else(|| format!("{} is not a tiny task", task.id))?;
        chats.push([task.instruction.clone(), answer]);
    }
    let guesses = (tasks.len() as f32 * config.guess_share).round() as usize;
    for task in tasks.iter().cycle().take(guesses) {
        chats.push([task.instruction.clone(), GUESS.to_owned()]);
    }
    let texts = chats
        .iter()
        .flat_map(|c| c.iter().cloned())
        .chain([PROBE_SYSTEM.to_owned()]);
    let tokenizer = Tokenizer::train(
        texts.collect::<Vec<_>>(),
        &TrainConfig {
            vocab_size: 600,
            ..TrainConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let template = ChatTemplate::new(&tokenizer).map_err(|e| e.to_string())?;
    let jsonl: String = chats
        .iter()
        .map(|[user, assistant]| {
            let chat = serde_json::json!([
                {"role": "system", "content": PROBE_SYSTEM},
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ]);
            format!("{chat}\n")
        })
        .collect();
    let data =
        SftData::parse(&jsonl, &template).map_err(|(line, e)| format!("line {line}: {e}"))?;
    let model_config = ModelConfig {
        vocab_size: tokenizer.vocab_size(),
        hidden_size: config.hidden_size,
        intermediate_size: 2 * config.hidden_size,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 512,
        tie_word_embeddings: config.tied_embeddings,
        qkv_bias: true,
    };
    let model = Transformer::new(&mut k, model_config).map_err(|e| e.to_string())?;
    init_params(&mut k, &model, config.model_seed).map_err(|e| e.to_string())?;
    let sft_optimizer = AdamWConfig {
        schedule: LrSchedule::Constant { lr: 3e-3 },
        weight_decay: 0.0,
        ..AdamWConfig::default()
    };
    let mut policy =
        TransformerPolicy::trainable(k, model, sft_optimizer).map_err(|e| e.to_string())?;
    let sft = SftConfig {
        epochs: config.sft_epochs,
        batch_tokens: 1024,
        seed: config.model_seed,
        ..SftConfig::default()
    };
    let mut trainer = SftTrainer::new(sft, &data, SftState::default());
    let mut last_loss = f32::NAN;
    while let Some(step) = trainer
        .next_step(&mut policy, &data)
        .map_err(|e| e.to_string())?
    {
        last_loss = step.loss;
    }
    policy
        .reset_optimizer(rl_optimizer)
        .map_err(|e| e.to_string())?;
    Ok((tokenizer, policy, last_loss))
}

/// The probe's RL settings: chains of one task, 4 chains x 8 rollouts per step, the
/// outcome reward, one turn of at most 160 new tokens.
pub fn probe_rl_config(steps: u64, seed: u64) -> RlConfig {
    let mut config = RlConfig {
        chain_len: 1,
        rollouts: 8,
        chains_per_step: 4,
        steps,
        seed,
        ..RlConfig::default()
    };
    config.reward.kind = RewardKind::OutcomeOnly;
    config.rollout = RolloutConfig {
        max_turns: 1,
        max_new_tokens: 160,
        max_episode_tokens: 512,
        ..RolloutConfig::default()
    };
    config
}

/// Runs `rl` on the probe's tasks from `policy` (with `reference` for a KL term) and
/// returns every step's statistics.
pub fn probe_rl<K: Kernels>(
    policy: &mut TransformerPolicy<K>,
    mut reference: Option<&mut TransformerPolicy<K>>,
    tokenizer: &Tokenizer,
    config: &ProbeConfig,
    rl: RlConfig,
) -> Result<Vec<RlStepStats>, String> {
    let chains: Vec<TaskChain> = probe_tasks(config)
        .into_iter()
        .map(|task| TaskChain {
            scenario_id: task.scenario_id.clone(),
            tasks: vec![task],
        })
        .collect();
    let template = ChatTemplate::new(tokenizer).map_err(|e| e.to_string())?;
    let mut trainer = RlTrainer::new(rl, chains, RlState::default()).map_err(|e| e.to_string())?;
    let mut steps = Vec::new();
    while !trainer.finished() {
        let stats = trainer
            .step(
                policy,
                reference.as_deref_mut(),
                &|| Ok(TinyEnv::new(1)),
                &template,
                &|_: &[Skill]| PROBE_SYSTEM.to_owned(),
            )
            .map_err(|e| e.to_string())?;
        steps.push(stats);
    }
    Ok(steps)
}
