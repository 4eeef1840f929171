//! `learning`: the RL path learns. The real transformer, rollout, reward, advantages,
//! GRPO loss and AdamW step: on a one-turn task whose reward depends on what a random
//! model writes, the rewarded behaviour's sampled rate must rise above its update-off
//! control (the identical loop with no optimizer step, same seeds, so the same random
//! streams) and fall below it when the advantages' sign is flipped; on the tiny world
//! from a short SFT model, sampled task success must rise above its control.
//!
//! Every run here is deterministic (CPU backend, fixed seeds); the margins were chosen
//! from runs over several model and RL seeds (see each test) so that a working update
//! clears them with room to spare, while a broken one (no step, a wrong sign, advantages
//! landing on the wrong tokens, weights not reaching the sampler) cannot.

use std::convert::Infallible;

use sage_backend_cpu::CpuBackend;
use sage_core::env::{Environment, Evaluation, Reset, StepResult};
use sage_core::reward::{RewardConfig, RewardKind};
use sage_core::{Skill, Task, TaskChain};
use sage_trainer::chat::ChatTemplate;
use sage_trainer::init::init_params;
use sage_trainer::optim::{AdamWConfig, LrSchedule};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::probe::{probe_rl, probe_rl_config, probe_sft, ProbeConfig};
use sage_trainer::rl::{
    chain_rewards, rollout_chains, update_policy, NotApplied, RlConfig, RlStepStats, UpdateOptions,
};
use sage_trainer::rollout::RolloutConfig;
use sage_trainer::tokenizer::{Tokenizer, TrainConfig};
use sage_transformer::{ModelConfig, Transformer};

/// The rewarded behaviour: the answer opens with a lowercase ASCII letter. Under a
/// random model about a quarter of the vocabulary does (byte tokens and merges of the
/// tokenizer's corpus), so most groups of 8 hold both outcomes.
fn rewarded(text: &str) -> bool {
    text.trim_start()
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase())
}

/// A one-turn world: any answer ends the episode (as if it had code, so no no-code
/// penalty), and the task passes when the answer is [`rewarded`].
#[derive(Default)]
struct PickEnv {
    answer: String,
}

impl Environment for PickEnv {
    type Error = Infallible;

    fn reset(&mut self, _task: &Task, _library: &[Skill]) -> Result<Reset, Infallible> {
        self.answer.clear();
        Ok(Reset::default())
    }

    fn step(&mut self, agent_text: &str) -> Result<StepResult, Infallible> {
        self.answer = agent_text.to_owned();
        Ok(StepResult {
            done: true,
            had_code: true,
            ..StepResult::default()
        })
    }

    fn evaluate(&mut self) -> Result<Evaluation, Infallible> {
        let passed = rewarded(&self.answer);
        Ok(Evaluation {
            score: if passed { 1.0 } else { 0.0 },
            passed,
        })
    }
}

/// The instructions of the one-turn task, one chain (K = 1) each.
const PROMPTS: [&str; 4] = [
    "Say one word.",
    "Name a colour.",
    "Pick a number or a letter.",
    "Answer briefly.",
];

fn chains() -> Vec<TaskChain> {
    PROMPTS
        .iter()
        .enumerate()
        .map(|(i, instruction)| TaskChain {
            scenario_id: format!("pick/{i}"),
            tasks: vec![Task {
                id: format!("pick/{i}/t1"),
                scenario_id: format!("pick/{i}"),
                instruction: (*instruction).to_owned(),
            }],
        })
        .collect()
}

/// A 300-token byte-level BPE over a little English and punctuation.
fn tokenizer() -> Tokenizer {
    let mut texts: Vec<String> = PROMPTS.iter().map(|p| (*p).to_owned()).collect();
    texts.push("You answer in one short line, then stop.".to_owned());
    for i in 0..40 {
        texts.push(format!(
            "Item {i}: the red fox, 42 apples; GREEN trees! (blue) {} #{i} -> ok?",
            i * 7
        ));
    }
    let config = TrainConfig {
        vocab_size: 300,
        ..TrainConfig::default()
    };
    Tokenizer::train(texts, &config).unwrap()
}

/// How a run treats its updates.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Update {
    /// The GRPO update as it is.
    Applied,
    /// The same with every reward negated, so every advantage changes sign.
    Flipped,
    /// The update-off control.
    Off,
}

/// The rewarded rate per step (over `PROMPTS.len() x ROLLOUTS` one-token answers) of
/// `steps` RL steps from a random model of seed `model_seed`, sampling under `rl_seed`.
fn pick_run(update: Update, model_seed: u64, rl_seed: u64, steps: u64) -> Vec<f32> {
    const ROLLOUTS: usize = 8;
    let tokenizer = tokenizer();
    let template = ChatTemplate::new(&tokenizer).unwrap();
    let config = ModelConfig {
        vocab_size: tokenizer.vocab_size(),
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 256,
        tie_word_embeddings: true,
        qkv_bias: true,
    };
    let mut kernels = CpuBackend::new();
    let model = Transformer::new(&mut kernels, config).unwrap();
    init_params(&mut kernels, &model, model_seed).unwrap();
    let optimizer = AdamWConfig {
        schedule: LrSchedule::Constant { lr: 1e-2 },
        weight_decay: 0.0,
        ..AdamWConfig::default()
    };
    let mut policy = TransformerPolicy::trainable(kernels, model, optimizer).unwrap();
    let rollout = RolloutConfig {
        max_turns: 1,
        max_new_tokens: 1,
        max_episode_tokens: 256,
        ..RolloutConfig::default()
    };
    let reward = RewardConfig {
        kind: RewardKind::OutcomeOnly,
        ..RewardConfig::default()
    };
    let grpo = RlConfig::default().grpo;
    let chains = chains();
    let mut envs: Vec<PickEnv> = (0..chains.len() * ROLLOUTS)
        .map(|_| PickEnv::default())
        .collect();
    let system = |_: &[Skill]| "You answer in one short line, then stop.".to_owned();
    let mut rates = Vec::new();
    for step in 0..steps {
        let rollouts = rollout_chains(
            &mut policy,
            &mut envs,
            &template,
            &system,
            &chains,
            ROLLOUTS,
            &rollout,
            rl_seed.wrapping_mul(1_000_003).wrapping_add(step),
        )
        .unwrap();
        let passed = rollouts
            .iter()
            .filter(|r| r.episodes[0].episode.evaluation.passed)
            .count();
        rates.push(passed as f32 / rollouts.len() as f32);
        let mut rewards = chain_rewards(&rollouts, &reward).unwrap();
        if update == Update::Flipped {
            rewards.iter_mut().for_each(|r| *r = -*r);
        }
        let options = UpdateOptions {
            apply: update != Update::Off,
            ..UpdateOptions::default()
        };
        let report = update_policy(
            &mut policy,
            None,
            &rollouts,
            &rewards,
            ROLLOUTS,
            &grpo,
            options,
        )
        .unwrap();
        let expected = match update {
            Update::Off => Some(NotApplied::Control),
            // A step whose groups all agree has nothing to learn from.
            _ if report.not_applied == Some(NotApplied::NoSignal) => Some(NotApplied::NoSignal),
            _ => None,
        };
        assert_eq!(report.not_applied, expected, "step {step}: {report:?}");
    }
    rates
}

/// Mean of the last `n` values.
fn tail_mean(values: &[f32], n: usize) -> f32 {
    let tail = &values[values.len().saturating_sub(n)..];
    tail.iter().sum::<f32>() / tail.len().max(1) as f32
}

/// Measured over model seeds 1-4 and RL seeds 0-1 (8 runs of each kind, 30 steps, lr
/// 1e-2): over the last 10 steps the control's rate is 0.16-0.24, the update's 0.95-0.98
/// (at least 0.73 above its control) and the flipped update's 0.025-0.034 (at least
/// 0.125 below; it cannot go under 0). At lr 3e-3 the same runs gained 0.22-0.29, so
/// the margins also catch an update several times too weak.
#[test]
fn the_update_raises_a_rewarded_choice_over_its_control_and_the_flipped_sign_lowers_it() {
    const STEPS: u64 = 30;
    let (model_seed, rl_seed) = (3, 1);
    let control = pick_run(Update::Off, model_seed, rl_seed, STEPS);
    let learned = pick_run(Update::Applied, model_seed, rl_seed, STEPS);
    let flipped = pick_run(Update::Flipped, model_seed, rl_seed, STEPS);
    // Every run's first step samples the same policy with the same streams: the
    // pairing with the control holds.
    assert_eq!(control[0], learned[0]);
    assert_eq!(control[0], flipped[0]);
    let (control, learned, flipped) = (
        tail_mean(&control, 10),
        tail_mean(&learned, 10),
        tail_mean(&flipped, 10),
    );
    assert!(
        learned >= control + 0.5,
        "the update did not raise the rewarded rate: {learned:.3} over the last 10 steps \
         against the control's {control:.3}"
    );
    assert!(
        flipped <= control - 0.08,
        "the flipped update did not lower the rewarded rate: {flipped:.3} over the last 10 \
         steps against the control's {control:.3}"
    );
}

/// The tiny world from a short SFT model (`sage_trainer::probe`) whose data answers every
/// task twice: once solving it, once guessing with a submit call that fails. Its policy
/// solves or guesses, and solving passes only when it also copies the list's name
/// right, so its sampled success starts low. Measured with `rl_probe --epochs 32
/// --guess 1 --seeds 4 --only "lr 1e-3"` (30 steps of 4 chains x 8 rollouts): over the
/// last 10 steps, success against the control's 92.5 / 30.3%, 33.1 / 3.4% and
/// 78.8 / 29.1% for model seeds 1, 3 and 4 (+30 to +62 points); model seed 2's SFT never
/// learned to copy (loss 0.23) and neither arm passes a task. This test runs model seed
/// 1 (+62). An update that does not learn tracks its control within a few points (as
/// the same runs do from a start without guessing answers), so the margin of 25 points
/// fails it, with room below the weakest measured seed.
#[test]
fn the_tiny_world_from_a_short_sft_model_gains_success_over_its_control() {
    const STEPS: u64 = 30;
    let probe = ProbeConfig {
        sft_epochs: 32,
        guess_share: 1.0,
        model_seed: 1,
        ..ProbeConfig::default()
    };
    let optimizer = AdamWConfig {
        schedule: LrSchedule::Constant { lr: 1e-3 },
        weight_decay: 0.0,
        ..AdamWConfig::default()
    };
    let (tokenizer, mut policy, _) =
        probe_sft(CpuBackend::new(), &probe, optimizer.clone()).unwrap();
    let control_config = RlConfig {
        apply_updates: false,
        ..probe_rl_config(STEPS, 1)
    };
    let control = probe_rl(&mut policy, None, &tokenizer, &probe, control_config).unwrap();
    // The control left the policy as SFT made it: the run starts from the same model.
    let learned = probe_rl(
        &mut policy,
        None,
        &tokenizer,
        &probe,
        probe_rl_config(STEPS, 1),
    )
    .unwrap();
    let success =
        |steps: &[RlStepStats]| -> Vec<f32> { steps.iter().map(|s| s.success[0]).collect() };
    let (control, learned) = (success(&control), success(&learned));
    assert_eq!(
        control[0], learned[0],
        "the first step samples the same policy"
    );
    let (control, learned) = (tail_mean(&control, 10), tail_mean(&learned, 10));
    assert!(
        control > 0.1,
        "the SFT start passes almost nothing ({control:.3}): it never learned to copy the \
         list's name, so this start cannot test RL"
    );
    assert!(
        learned >= control + 0.25,
        "RL did not raise the tiny world's success: {learned:.3} over the last 10 steps \
         against the update-off control's {control:.3}"
    );
}
