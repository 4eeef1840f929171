//! `rl`: SAGE's sequential rollout, rewards, advantages and update on the tiny test
//! environment.
//!
//! Most tests drive a [`ChoicePolicy`]: a policy with one learnable softmax over four
//! canned responses per context (library empty or not): define the operation's skill
//! and submit, reuse the skill, submit a wrong answer, answer without code. It is
//! small enough to reason about exactly, yet it goes through the real chat template,
//! the real Starlark sandbox and the real reward, advantage and loss code. The last test
//! runs an RL update of a real (tiny, random) transformer.

use std::collections::HashMap;

use sage_backend_cpu::CpuBackend;
use sage_core::grpo::GrpoConfig;
use sage_core::policy::{Generation, Policy, SamplingParams, StopReason, UpdateStats};
use sage_core::reward::{RewardConfig, RewardKind};
use sage_core::{Skill, Task, TaskChain};
use sage_envs::tiny::{tiny_scenarios, TinyEnv};
use sage_trainer::chat::{ChatTemplate, Role};
use sage_trainer::init::init_params;
use sage_trainer::optim::{AdamWConfig, LrSchedule};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::rl::{
    chain_rewards, group_outcomes, informative_chains, rollout_chains, update_policy, ChainRollout,
    DynamicSampling, GroupOutcomes, RlConfig, RlState, RlStepStats, RlTrainer, UpdateOptions,
    WorldRl,
};
use sage_trainer::rollout::RolloutConfig;
use sage_trainer::sampling::SequenceRng;
use sage_trainer::tokenizer::{Tokenizer, TrainConfig};
use sage_transformer::{ModelConfig, Transformer};

/// The canned responses of [`ChoicePolicy`].
const ARMS: usize = 4;
const DEFINE: usize = 0;
const REUSE: usize = 1;
const WRONG: usize = 2;
const NO_CODE: usize = 3;

/// Contexts of [`ChoicePolicy`]: the system prompt lists no skill, or some.
const EMPTY_LIBRARY: usize = 0;
const WITH_LIBRARY: usize = 1;

/// A short system prompt naming the library (the built-in world's is long; the tiny
/// environment needs no rules for a scripted policy).
fn system_prompt(library: &[Skill]) -> String {
    if library.is_empty() {
        "Skills: (empty)".to_owned()
    } else {
        let names: Vec<&str> = library.iter().map(|s| s.name.as_str()).collect();
        format!("Skills: {}", names.join(", "))
    }
}

/// The quoted list name of a tiny task's instruction.
fn list_name(task: &Task) -> &str {
    task.instruction
        .split('"')
        .nth(1)
        .expect("a quoted list name")
}

/// The text of `arm` for `task`.
fn response(task: &Task, arm: usize) -> String {
    let skill = TinyEnv::skill_name(task).expect("a tiny task");
    match arm {
        DEFINE => TinyEnv::expert_response(task, &[]).expect("a tiny task"),
        REUSE => format!(
            "I reuse `{skill}`.\n\n```python\napis.tiny.submit(answer={skill}({:?}))\n```",
            list_name(task)
        ),
        WRONG => "I guess.\n\n```python\napis.tiny.submit(answer=-1)\n```".to_owned(),
        _ => "I cannot do that.".to_owned(),
    }
}

/// Tasks of operations 0..5 for seeds 0..4, chained in pairs.
fn tasks_and_chains() -> (Vec<Task>, Vec<TaskChain>) {
    let scenarios = tiny_scenarios(0..4);
    let tasks = scenarios.iter().flat_map(|s| s.tasks.clone()).collect();
    let chains = scenarios.iter().flat_map(|s| s.chains(2)).collect();
    (tasks, chains)
}

/// A byte-level BPE trained on every text the tests put into a chat.
fn tokenizer(tasks: &[Task]) -> Tokenizer {
    let mut texts = Vec::new();
    for task in tasks {
        texts.push(task.instruction.clone());
        for arm in 0..ARMS {
            texts.push(response(task, arm));
        }
        if let Some(name) = TinyEnv::skill_name(task) {
            texts.push(format!("Skills: {name}"));
        }
    }
    texts.push("Skills: (empty)".to_owned());
    let config = TrainConfig {
        vocab_size: 600,
        ..TrainConfig::default()
    };
    Tokenizer::train(texts, &config).unwrap()
}

/// A softmax policy over [`ARMS`] canned responses per context, trained by plain SGD
/// (with a large learning rate: the sequence-mean token-mean loss divides a turn's
/// gradient by its ~60 agent tokens, and only the first of them carries the choice).
/// Each agent turn's whole probability sits on its first token (the others have
/// log-prob 0), so the sequence log-prob of a turn is `log pi(arm | context)`.
struct ChoicePolicy<'t> {
    template: ChatTemplate<'t>,
    tasks: Vec<Task>,
    /// logits[context][arm].
    logits: [[f32; ARMS]; 2],
    /// grad[context][arm]: the accumulated gradient.
    grad: [[f32; ARMS]; 2],
    /// Context and arm of every turn generated so far, by the chat's tokens up to the
    /// turn's end (the same text can follow different prompts).
    chosen: HashMap<Vec<u32>, (usize, usize)>,
    learning_rate: f32,
}

impl<'t> ChoicePolicy<'t> {
    fn new(tokenizer: &'t Tokenizer, tasks: Vec<Task>) -> ChoicePolicy<'t> {
        ChoicePolicy {
            template: ChatTemplate::new(tokenizer).unwrap(),
            tasks,
            logits: [[0.0; ARMS]; 2],
            grad: [[0.0; ARMS]; 2],
            chosen: HashMap::new(),
            learning_rate: 50.0,
        }
    }

    fn probabilities(&self, context: usize) -> [f32; ARMS] {
        let logits = self.logits[context];
        let max = logits.iter().cloned().fold(f32::MIN, f32::max);
        let exp = logits.map(|l| (l - max).exp());
        let sum: f32 = exp.iter().sum();
        exp.map(|e| e / sum)
    }

    /// Each agent turn of `sequence` that this policy generated: the position whose
    /// log-prob carries the turn (the one predicting its first token), context and arm.
    fn turns(&self, sequence: &[u32]) -> Vec<(usize, usize, usize)> {
        let header = self.template.header(Role::Assistant);
        let im_end = self.template.special_tokens().im_end;
        let mut turns = Vec::new();
        for start in (0..sequence.len()).filter(|&p| sequence[p..].starts_with(header)) {
            let first = start + header.len();
            let Some(end) = sequence[first..].iter().position(|&t| t == im_end) else {
                continue;
            };
            if let Some(&(context, arm)) = self.chosen.get(&sequence[..=first + end]) {
                turns.push((first - 1, context, arm));
            }
        }
        turns
    }
}

impl Policy for ChoicePolicy<'_> {
    type Error = std::io::Error;

    fn generate(
        &mut self,
        prompts: &[&[u32]],
        params: &SamplingParams,
    ) -> Result<Vec<Generation>, std::io::Error> {
        let mut out = Vec::new();
        for (i, prompt) in prompts.iter().enumerate() {
            let text = self
                .template
                .tokenizer()
                .decode(prompt)
                .map_err(std::io::Error::other)?;
            let context = if text.contains("(empty)") {
                EMPTY_LIBRARY
            } else {
                WITH_LIBRARY
            };
            let task = self
                .tasks
                .iter()
                .find(|t| text.contains(&t.instruction))
                .ok_or_else(|| std::io::Error::other("no known task in the prompt"))?
                .clone();
            let probabilities = self.probabilities(context);
            let mut u = SequenceRng::new(params.seed, i as u64).next_unit() as f32;
            let mut arm = ARMS - 1;
            for (a, p) in probabilities.iter().enumerate() {
                if u < *p {
                    arm = a;
                    break;
                }
                u -= p;
            }
            let mut tokens = self
                .template
                .encode_content(&response(&task, arm))
                .map_err(std::io::Error::other)?;
            tokens.push(self.template.special_tokens().im_end);
            let mut logprobs = vec![0.0; tokens.len()];
            logprobs[0] = probabilities[arm].ln();
            self.chosen
                .insert([*prompt, &tokens].concat(), (context, arm));
            out.push(Generation {
                tokens,
                logprobs,
                stop: StopReason::StopToken,
            });
        }
        Ok(out)
    }

    fn log_probs(&mut self, sequences: &[&[u32]]) -> Result<Vec<Vec<f32>>, std::io::Error> {
        Ok(sequences
            .iter()
            .map(|sequence| {
                let mut logp = vec![0.0; sequence.len() - 1];
                for (position, context, arm) in self.turns(sequence) {
                    logp[position] = self.probabilities(context)[arm].ln();
                }
                logp
            })
            .collect())
    }

    fn accumulate_gradient(
        &mut self,
        sequences: &[&[u32]],
        coefficients: &[&[f32]],
    ) -> Result<f32, std::io::Error> {
        let mut objective = 0.0;
        for (sequence, coef) in sequences.iter().zip(coefficients) {
            for (position, context, arm) in self.turns(sequence) {
                let c = coef[position];
                let probabilities = self.probabilities(context);
                objective += c * probabilities[arm].ln();
                // d log softmax(l)[arm] / d l[a] = 1[a = arm] - p[a].
                for (a, p) in probabilities.iter().enumerate() {
                    self.grad[context][a] += c * (f32::from(u8::from(a == arm)) - p);
                }
            }
        }
        Ok(objective)
    }

    fn optimizer_step(&mut self) -> Result<UpdateStats, std::io::Error> {
        let norm = self
            .grad
            .iter()
            .flatten()
            .map(|g| g * g)
            .sum::<f32>()
            .sqrt();
        for (logits, grad) in self.logits.iter_mut().zip(&mut self.grad) {
            for (l, g) in logits.iter_mut().zip(grad.iter_mut()) {
                *l -= self.learning_rate * *g;
                *g = 0.0;
            }
        }
        Ok(UpdateStats {
            grad_norm: norm,
            learning_rate: self.learning_rate,
            skipped: false,
        })
    }
}

/// One-turn rollouts: the tiny environment ends an episode on submit anyway.
fn one_turn() -> RolloutConfig {
    RolloutConfig {
        max_turns: 1,
        ..RolloutConfig::default()
    }
}

/// Every remaining step of `trainer` on the tiny environment, with `policy`.
fn run_to_end(trainer: &mut RlTrainer, policy: &mut ChoicePolicy<'_>) -> Vec<RlStepStats> {
    let template = policy.template.clone();
    let mut steps = Vec::new();
    while !trainer.finished() {
        let stats = trainer
            .step(
                policy,
                None,
                &|| Ok(TinyEnv::new(1)),
                &template,
                &system_prompt,
            )
            .unwrap();
        steps.push(stats);
    }
    steps
}

/// `G` rollouts of the first `chains` chains under a uniform choice policy.
fn uniform_rollouts(
    policy: &mut ChoicePolicy<'_>,
    chains: &[TaskChain],
    rollouts: usize,
) -> Vec<ChainRollout> {
    let mut envs: Vec<TinyEnv> = (0..chains.len() * rollouts)
        .map(|_| TinyEnv::new(1))
        .collect();
    let template = policy.template.clone();
    rollout_chains(
        policy,
        &mut envs,
        &template,
        &system_prompt,
        chains,
        rollouts,
        &one_turn(),
        7,
    )
    .unwrap()
}

#[test]
fn each_rollout_keeps_its_own_library() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let mut policy = ChoicePolicy::new(&tk, tasks);
    let rollouts = uniform_rollouts(&mut policy, &chains[..3], 8);
    assert_eq!(rollouts.len(), 24);
    let (mut with_skill, mut without) = (0, 0);
    for (j, rollout) in rollouts.iter().enumerate() {
        assert_eq!((rollout.chain, rollout.rollout), (j / 8, j % 8));
        let first = &rollout.episodes[0].episode;
        let second = &rollout.episodes[1].episode;
        assert_eq!(first.task, chains[rollout.chain].tasks[0]);
        assert_eq!(second.task, chains[rollout.chain].tasks[1]);
        // Task 1 starts empty; task 2 sees exactly what this rollout's task 1 saved.
        assert!(first.library.is_empty());
        let saved: Vec<String> = first
            .saved_skills()
            .iter()
            .map(|s| s.name.clone())
            .collect();
        assert_eq!(second.library, saved, "rollout {j}");
        if saved.is_empty() {
            without += 1;
            // Calling the skill without having it fails: nothing was used.
            assert!(second.used_skills().is_empty());
        } else {
            with_skill += 1;
        }
    }
    assert!(
        with_skill > 0 && without > 0,
        "{with_skill} / {without}: both kinds needed"
    );
}

/// A group is one chain's `G` rollouts: with chain 0 all passed, chain 1 none and chain
/// 2 three of eight at position 1, two of three groups solved something and one solved
/// everything; position 2 is counted on its own.
#[test]
fn group_outcomes_count_each_chains_rollouts_together() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let mut policy = ChoicePolicy::new(&tk, tasks);
    let mut rollouts = uniform_rollouts(&mut policy, &chains[..3], 8);
    for rollout in &mut rollouts {
        let first_passes = match rollout.chain {
            0 => true,
            1 => false,
            _ => rollout.rollout < 3,
        };
        rollout.episodes[0].episode.evaluation.passed = first_passes;
        // Position 2: only rollout 5 of chain 1 passes.
        rollout.episodes[1].episode.evaluation.passed = rollout.chain == 1 && rollout.rollout == 5;
    }
    assert_eq!(
        group_outcomes(&rollouts, 8, 0),
        GroupOutcomes {
            solved_any: 2.0 / 3.0,
            solved_all: 1.0 / 3.0
        }
    );
    assert_eq!(
        group_outcomes(&rollouts, 8, 1),
        GroupOutcomes {
            solved_any: 1.0 / 3.0,
            solved_all: 0.0
        }
    );
    // Groups of one rollout: each is solved entirely or not at all (8 + 0 + 3 of 24).
    let single = group_outcomes(&rollouts, 1, 0);
    assert_eq!(single.solved_any, single.solved_all);
    assert_eq!(single.solved_any, 11.0 / 24.0);
}

/// SAGE's reward for K = 2, written from the paper's formulas: `R1 = r1 + 1[r1 = 1]
/// 1[r2 = 1] used(q2 | q1)`, `R2 = r2 + 1[r2 = 1] used(q2 | q1)`, and -1 for a response
/// without code (which also counts as a failure for the other task's bonus).
fn paper_rewards(rollout: &ChainRollout) -> [f32; 2] {
    let [first, second] = [&rollout.episodes[0].episode, &rollout.episodes[1].episode];
    let no_code = |e: &sage_core::env::Episode| e.end == sage_core::env::EpisodeEnd::NoCode;
    let success = |e: &sage_core::env::Episode| !no_code(e) && e.evaluation.score == 1.0;
    let used = second
        .used_skills()
        .iter()
        .any(|name| first.saved_skills().iter().any(|s| s.name == *name));
    let bonus = f32::from(u8::from(success(first) && success(second) && used));
    let reward = |e: &sage_core::env::Episode, bonus: f32| {
        if no_code(e) {
            -1.0
        } else {
            e.evaluation.score + bonus
        }
    };
    let second_bonus = f32::from(u8::from(success(second) && used));
    [reward(first, bonus), reward(second, second_bonus)]
}

#[test]
fn rewards_of_every_rollout_follow_the_formulas() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let mut policy = ChoicePolicy::new(&tk, tasks);
    let rollouts = uniform_rollouts(&mut policy, &chains[..4], 8);
    let rewards = chain_rewards(&rollouts, &RewardConfig::default()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for (j, rollout) in rollouts.iter().enumerate() {
        let expected = paper_rewards(rollout);
        assert_eq!(&rewards[2 * j..2 * j + 2], &expected, "rollout {j}");
        seen.extend(expected.map(|r| (r * 2.0) as i32));
    }
    // The batch covers the no-code penalty, a wrong answer, a plain success and the
    // bonus, so every branch of the formulas was compared.
    for reward in [-1.0f32, 0.5, 1.0, 2.0] {
        assert!(
            seen.contains(&((reward * 2.0) as i32)),
            "no reward {reward} in {seen:?}"
        );
    }
    let outcome_only = chain_rewards(&rollouts, &RewardKind::OutcomeOnly.into()).unwrap();
    assert!(outcome_only.iter().all(|&r| r <= 1.0));
    assert!(outcome_only.iter().zip(&rewards).any(|(o, s)| s > o));
}

/// With `negative_weight` w, a failed sequence's coefficients are w times GRPO's.
#[test]
fn advantages_are_centred_per_chain_position_and_land_on_agent_tokens_only() {
    for negative_weight in [1.0f32, 0.25] {
        check_update_coefficients(negative_weight);
    }
}

fn check_update_coefficients(negative_weight: f32) {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let mut recorder = ChoicePolicy::new(&tk, tasks);
    let rollouts = uniform_rollouts(&mut recorder, &chains[..2], 6);
    let rewards = chain_rewards(&rollouts, &RewardConfig::default()).unwrap();
    // Record the coefficients the update hands to the policy.
    struct Recording<'p, 't> {
        inner: &'p mut ChoicePolicy<'t>,
        seen: Vec<(Vec<u32>, Vec<f32>)>,
    }
    impl Policy for Recording<'_, '_> {
        type Error = std::io::Error;
        fn generate(
            &mut self,
            p: &[&[u32]],
            s: &SamplingParams,
        ) -> Result<Vec<Generation>, std::io::Error> {
            self.inner.generate(p, s)
        }
        fn log_probs(&mut self, s: &[&[u32]]) -> Result<Vec<Vec<f32>>, std::io::Error> {
            self.inner.log_probs(s)
        }
        fn accumulate_gradient(
            &mut self,
            s: &[&[u32]],
            c: &[&[f32]],
        ) -> Result<f32, std::io::Error> {
            for (sequence, coef) in s.iter().zip(c) {
                self.seen.push((sequence.to_vec(), coef.to_vec()));
            }
            self.inner.accumulate_gradient(s, c)
        }
        fn optimizer_step(&mut self) -> Result<UpdateStats, std::io::Error> {
            self.inner.optimizer_step()
        }
    }
    let mut policy = Recording {
        inner: &mut recorder,
        seen: Vec::new(),
    };
    let grpo = GrpoConfig {
        negative_weight,
        ..RlConfig::default().grpo
    };
    let report = update_policy(
        &mut policy,
        None,
        &rollouts,
        &rewards,
        6,
        &grpo,
        UpdateOptions::default(),
    )
    .unwrap();
    assert!(report.not_applied.is_none(), "{report:?}");
    assert!(report.logprob_mismatch < 1e-6);
    // Sequences with at least one agent token: every episode (each has a turn).
    let sequences = rollouts.len() * 2;
    // The update trains the sequences with a non-zero advantage, in batch order.
    let mut trained = policy.seen.iter();
    let mut checked = 0;
    for (j, rollout) in rollouts.iter().enumerate() {
        for position in 0..2 {
            let group: Vec<f32> = (0..6)
                .map(|i| rewards[(rollout.chain * 6 + i) * 2 + position])
                .collect();
            let mean = group.iter().sum::<f32>() / 6.0;
            let centred = rewards[j * 2 + position] - mean;
            if centred.abs() < 1e-6 {
                continue;
            }
            let advantage = if centred < 0.0 {
                negative_weight * centred
            } else {
                centred
            };
            let chat = &rollout.episodes[position].chat;
            let (tokens, coef) = trained.next().expect("a trained sequence");
            assert_eq!(tokens.as_slice(), chat.tokens());
            let mask = &chat.agent_mask()[1..];
            let agent = mask.iter().filter(|&&m| m).count() as f32;
            // Ratio 1 (on-policy), no clip: d loss / d logp = -A / (S * n_s) on the
            // agent's tokens, where S counts every sequence with agent tokens.
            let expected = -advantage / (sequences as f32 * agent);
            for (t, (&c, &m)) in coef.iter().zip(mask).enumerate() {
                if m {
                    let error = (c - expected).abs() / expected.abs();
                    assert!(
                        error < 1e-5,
                        "rollout {j} position {position} token {t}: {c} vs {expected}"
                    );
                } else {
                    assert_eq!(c, 0.0, "a prompt token got a coefficient");
                }
            }
            checked += 1;
        }
    }
    assert!(
        trained.next().is_none(),
        "a zero-advantage sequence was trained"
    );
    assert!(checked > 0);
}

/// 40 steps of 4 chains x 8 rollouts from the uniform policy, with `dynamic_sampling`.
fn learning_run(
    tk: &Tokenizer,
    tasks: Vec<Task>,
    chains: Vec<TaskChain>,
    dynamic_sampling: DynamicSampling,
) -> (ChoicePolicy<'_>, Vec<RlStepStats>, RlState) {
    let mut policy = ChoicePolicy::new(tk, tasks);
    let config = RlConfig {
        rollouts: 8,
        chains_per_step: 4,
        steps: 40,
        rollout: one_turn(),
        seed: 3,
        dynamic_sampling,
        ..RlConfig::default()
    };
    let mut trainer = RlTrainer::new(config, chains, RlState::default()).unwrap();
    let steps = run_to_end(&mut trainer, &mut policy);
    (policy, steps, trainer.state().clone())
}

#[test]
fn the_reward_rises_and_the_policy_learns_to_write_then_reuse_skills() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let (policy, steps, state) = learning_run(&tk, tasks, chains, DynamicSampling::Off);
    assert!(steps.iter().all(|s| s.update.logprob_mismatch < 1e-6));
    // A group that solved everything solved something; success lies between the two.
    for s in &steps {
        for k in 0..2 {
            assert!(s.solved_all[k] <= s.success[k] && s.success[k] <= s.solved_any[k]);
        }
    }
    let rewards: Vec<f32> = steps
        .iter()
        .map(|s| s.reward_mean.iter().sum::<f32>())
        .collect();
    let first = rewards[0];
    let last: f32 = rewards[rewards.len() - 5..].iter().sum::<f32>() / 5.0;
    // The best chain earns 2 + 2 (define then reuse, both bonuses); the first step's
    // uniform policy earns well under 1.5 per chain.
    assert!(
        first < 1.5 && last > 3.0,
        "chain reward {first} -> {last}: {rewards:?}"
    );
    let empty = policy.probabilities(EMPTY_LIBRARY);
    let with_library = policy.probabilities(WITH_LIBRARY);
    assert!(empty[DEFINE] > 0.8, "{empty:?}");
    assert!(with_library[REUSE] > 0.8, "{with_library:?}");
    assert!(with_library[WRONG] + with_library[NO_CODE] < 0.1);
    assert_eq!(state.step, 40);
    assert_eq!(state.failed_total, 0);
}

#[test]
fn bad_settings_and_chains_are_named() {
    let (_, chains) = tasks_and_chains();
    let bad = |config: RlConfig| {
        RlTrainer::new(config, chains.clone(), RlState::default())
            .err()
            .expect("an error")
            .to_string()
    };
    assert!(bad(RlConfig {
        rollouts: 0,
        ..RlConfig::default()
    })
    .contains("rollouts"));
    assert!(bad(RlConfig {
        chain_len: 3,
        ..RlConfig::default()
    })
    .contains("chain_len"));
    // A prompt outside `skills` / `direct` fails when the settings are read.
    let error = sage_trainer::config::RunConfig::from_toml("[rl]\nprompt = \"poetry\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("unknown prompt \"poetry\" (known: skills, direct)"),
        "{error}"
    );
    let mut grpo = RlConfig::default().grpo;
    grpo.clip_eps_low = 2.0;
    assert!(bad(RlConfig {
        grpo,
        ..RlConfig::default()
    })
    .contains("clip_eps_low"));
    assert!(bad(RlConfig {
        minibatches: 0,
        ..RlConfig::default()
    })
    .contains("minibatches"));
    for rollout in [
        RolloutConfig {
            temperature: 1.5,
            ..RolloutConfig::default()
        },
        RolloutConfig {
            top_p: 0.9,
            ..RolloutConfig::default()
        },
        RolloutConfig {
            top_k: 20,
            ..RolloutConfig::default()
        },
    ] {
        let message = bad(RlConfig {
            rollout,
            ..RlConfig::default()
        });
        assert!(
            message.contains("temperature 1, top_k 0, top_p 1"),
            "{message}"
        );
    }
    let error = RlTrainer::new(RlConfig::default(), Vec::new(), RlState::default()).err();
    assert!(error.expect("an error").to_string().contains("no chains"));
}

/// The update-off control runs the same loop without a step: the policy never moves,
/// and a run with updates samples exactly what its control sampled until its first
/// update has been applied.
#[test]
fn the_update_off_control_moves_nothing_and_shares_the_first_step_with_its_run() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let run = |apply_updates: bool| {
        let mut policy = ChoicePolicy::new(&tk, tasks.clone());
        let config = RlConfig {
            rollouts: 8,
            chains_per_step: 4,
            steps: 5,
            rollout: one_turn(),
            seed: 7,
            apply_updates,
            ..RlConfig::default()
        };
        let mut trainer = RlTrainer::new(config, chains.clone(), RlState::default()).unwrap();
        (run_to_end(&mut trainer, &mut policy), policy.logits)
    };
    let (control, control_logits) = run(false);
    let (learned, learned_logits) = run(true);
    assert_eq!(control_logits, [[0.0; ARMS]; 2]);
    assert_ne!(learned_logits, control_logits);
    for stats in &control {
        assert_eq!(
            stats.update.not_applied,
            Some(sage_trainer::rl::NotApplied::Control)
        );
        assert_eq!(stats.update.grad_norm, 0.0);
    }
    assert!(learned.iter().all(|s| s.update.not_applied.is_none()));
    // Step 1 samples the same policy with the same streams: the same rewards.
    assert_eq!(control[0].reward_mean, learned[0].reward_mean);
    assert_eq!(control[0].success, learned[0].success);
    assert_eq!(
        control[0].update.zero_advantage_groups,
        learned[0].update.zero_advantage_groups
    );
    // Later the updated policy takes the rewarded choices more often.
    let total = |steps: &[RlStepStats]| -> f32 {
        steps[1..]
            .iter()
            .map(|s| s.reward_mean.iter().sum::<f32>())
            .sum()
    };
    assert!(total(&learned) > total(&control));
}

#[test]
fn a_transformer_update_is_on_policy_and_moves_toward_positive_advantages() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let template = ChatTemplate::new(&tk).unwrap();
    let config = ModelConfig {
        vocab_size: tk.vocab_size(),
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 512,
        tie_word_embeddings: true,
        qkv_bias: true,
    };
    let mut kernels = CpuBackend::new();
    let model = Transformer::new(&mut kernels, config).unwrap();
    init_params(&mut kernels, &model, 5).unwrap();
    let optimizer = AdamWConfig {
        schedule: LrSchedule::Constant { lr: 1e-3 },
        weight_decay: 0.0,
        ..AdamWConfig::default()
    };
    let mut policy = TransformerPolicy::trainable(kernels, model, optimizer).unwrap();
    let rollout = RolloutConfig {
        max_turns: 1,
        max_new_tokens: 24,
        max_episode_tokens: 512,
        ..RolloutConfig::default()
    };
    let mut envs: Vec<TinyEnv> = (0..8).map(|_| TinyEnv::new(1)).collect();
    let rollouts = rollout_chains(
        &mut policy,
        &mut envs,
        &template,
        &system_prompt,
        &chains[..2],
        4,
        &rollout,
        11,
    )
    .unwrap();
    // A random model writes no code, so every reward would be -1: give the update a
    // signal by hand, +1 and -1 alternating over rollouts.
    let rewards: Vec<f32> = (0..16)
        .map(|i| if (i / 2) % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let sequences: Vec<&[u32]> = rollouts
        .iter()
        .flat_map(|r| &r.episodes)
        .map(|e| e.chat.tokens())
        .collect();
    let agent_logp = |policy: &mut TransformerPolicy<CpuBackend>| -> Vec<f32> {
        let logp = policy.log_probs(&sequences).unwrap();
        rollouts
            .iter()
            .flat_map(|r| &r.episodes)
            .zip(&logp)
            .map(|(e, l)| {
                let mask = &e.chat.agent_mask()[1..];
                let agent: Vec<f32> = l
                    .iter()
                    .zip(mask)
                    .filter(|(_, &m)| m)
                    .map(|(&x, _)| x)
                    .collect();
                agent.iter().sum::<f32>() / agent.len() as f32
            })
            .collect()
    };
    let before = agent_logp(&mut policy);
    let grpo = RlConfig::default().grpo;
    let report = update_policy(
        &mut policy,
        None,
        &rollouts,
        &rewards,
        4,
        &grpo,
        UpdateOptions::default(),
    )
    .unwrap();
    assert!(report.not_applied.is_none(), "{report:?}");
    // The sampler's log-probs (KV-cache decoding) agree with the trainer's packed
    // forward pass to f32 rounding: the update is on-policy.
    assert!(report.logprob_mismatch < 1e-4, "{report:?}");
    assert_eq!(report.trained_sequences, 16);
    assert!(report.grad_norm > 0.0 && report.grad_norm.is_finite());
    // The report measures the step on its own rollouts: it moved the policy, and the
    // positive sequences more upward than the negative ones.
    assert!(
        report.step_kl > 0.0 && report.step_kl.is_finite(),
        "{report:?}"
    );
    assert!(
        report.logp_change_positive > report.logp_change_negative,
        "{report:?}"
    );
    assert_eq!(report.approx_kl, 0.0, "one step: every ratio is 1");
    let after = agent_logp(&mut policy);
    // A small step raises the log-probs of the positive-advantage sequences relative to
    // the negative ones.
    let shift = |sign: f32| -> f32 {
        let picked: Vec<f32> = (0..16)
            .filter(|&i| rewards[i] * sign > 0.0)
            .map(|i| after[i] - before[i])
            .collect();
        picked.iter().sum::<f32>() / picked.len() as f32
    };
    assert!(
        shift(1.0) > shift(-1.0),
        "{} vs {}",
        shift(1.0),
        shift(-1.0)
    );

    // Two minibatches take two optimizer steps; the second scores its sequences under
    // the policy the first step left, so its ratios are no longer all 1.
    let steps_before = policy.optimizer().unwrap().step();
    let options = UpdateOptions {
        minibatches: 2,
        ..UpdateOptions::default()
    };
    let report = update_policy(&mut policy, None, &rollouts, &rewards, 4, &grpo, options).unwrap();
    assert!(report.not_applied.is_none(), "{report:?}");
    assert_eq!(policy.optimizer().unwrap().step(), steps_before + 2);
    assert_eq!(report.trained_sequences, 16);
    assert!(report.approx_kl > 0.0, "{report:?}");

    // The control computes advantages and stops: no step, no gradient.
    let options = UpdateOptions {
        apply: false,
        ..UpdateOptions::default()
    };
    let report = update_policy(&mut policy, None, &rollouts, &rewards, 4, &grpo, options).unwrap();
    assert_eq!(
        report.not_applied,
        Some(sage_trainer::rl::NotApplied::Control)
    );
    assert_eq!(policy.optimizer().unwrap().step(), steps_before + 2);
}

#[test]
fn a_resumed_run_takes_exactly_the_steps_of_an_uninterrupted_one() {
    resumed_run_matches_uninterrupted(DynamicSampling::Off);
}

#[test]
fn a_resumed_run_with_resampling_takes_exactly_the_steps_of_an_uninterrupted_one() {
    resumed_run_matches_uninterrupted(DynamicSampling::Resample);
}

fn resumed_run_matches_uninterrupted(dynamic_sampling: DynamicSampling) {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    // 7 chains, 3 per step: six steps cross two pass boundaries (reshuffles).
    let chains = &chains[..7];
    let run = |policy: &mut ChoicePolicy<'_>, state: RlState, steps: u64| {
        let config = RlConfig {
            rollouts: 4,
            chains_per_step: 3,
            steps,
            rollout: one_turn(),
            seed: 9,
            dynamic_sampling,
            max_extra_chains: 2,
            ..RlConfig::default()
        };
        let mut trainer = RlTrainer::new(config, chains.to_vec(), state).unwrap();
        let mut rows = run_to_end(&mut trainer, policy);
        for stats in &mut rows {
            // Throughput is the only thing allowed to differ.
            stats.rollout_tokens_per_s = 0.0;
            stats.update_tokens_per_s = 0.0;
        }
        (rows, trainer.state().clone())
    };
    let mut straight = ChoicePolicy::new(&tk, tasks.clone());
    let (all, end) = run(&mut straight, RlState::default(), 6);
    // Off: 3 chains a step; resample: 5 set aside a step. Six steps cross two or
    // four pass boundaries of the 7 chains.
    let passes = if dynamic_sampling == DynamicSampling::Off {
        2
    } else {
        4
    };
    assert_eq!(end.epoch, passes);

    let mut interrupted = ChoicePolicy::new(&tk, tasks.clone());
    let (head, state) = run(&mut interrupted, RlState::default(), 3);
    // What a checkpoint keeps: the state (as JSON) and the parameters.
    let state: RlState = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    let mut resumed = ChoicePolicy::new(&tk, tasks);
    resumed.logits = interrupted.logits;
    let (tail, _) = run(&mut resumed, state, 6);

    assert_eq!(head.len() + tail.len(), all.len());
    assert_eq!([head, tail].concat(), all);
    assert_eq!(resumed.logits, straight.logits);
}

/// `[rl] templates` narrows the training chains to the named templates' scenarios, and
/// a name that is no training template is refused by name.
#[test]
fn rl_chains_come_from_the_named_templates_only() {
    let config = |templates: &[&str]| RlConfig {
        scenario_seeds: 2,
        templates: templates.iter().map(|t| t.to_string()).collect(),
        ..RlConfig::default()
    };
    let all = WorldRl::new(&config(&[]), false).expect("every template");
    let named = ["notes_append_line", "coinpay_spent_on_since"];
    let some = WorldRl::new(&config(&named), false).expect("two templates");
    let template_of = |chain: &TaskChain| chain.scenario_id.split('/').nth(1).unwrap().to_owned();
    assert!(!some.chains.is_empty());
    assert!(some.chains.len() < all.chains.len());
    assert!(some
        .chains
        .iter()
        .all(|c| named.contains(&template_of(c).as_str())));
    for name in named {
        let expected: Vec<&TaskChain> = all
            .chains
            .iter()
            .filter(|c| template_of(c) == name)
            .collect();
        let found: Vec<&TaskChain> = some
            .chains
            .iter()
            .filter(|c| template_of(c) == name)
            .collect();
        assert_eq!(found, expected, "{name}");
    }
    let error = WorldRl::new(&config(&["notes_append_line", "no_such_template"]), false)
        .err()
        .expect("an unknown template is refused");
    assert!(error.to_string().contains("no_such_template"), "{error}");
}

#[test]
fn a_scenario_seed_offset_draws_the_training_seeds_after_the_skipped_ones() {
    let config = |seeds: u64, offset: u64| RlConfig {
        scenario_seeds: seeds,
        scenario_seed_offset: offset,
        templates: vec!["notes_append_line".to_owned()],
        ..RlConfig::default()
    };
    let seed_of = |chain: &TaskChain| chain.scenario_id.rsplit('/').next().unwrap().to_owned();
    let seeds_of = |world: &WorldRl| {
        let mut seeds: Vec<String> = world.chains.iter().map(seed_of).collect();
        seeds.dedup();
        seeds
    };
    // Seeds 1000-1004 as the first five, the last two of them as offset 3 with two seeds.
    let first = WorldRl::new(&config(5, 0), false).expect("five seeds");
    let after = WorldRl::new(&config(2, 3), false).expect("two seeds after three");
    assert_eq!(seeds_of(&first), ["1000", "1001", "1002", "1003", "1004"]);
    assert_eq!(seeds_of(&after), ["1003", "1004"]);
    let tail: Vec<&TaskChain> = first
        .chains
        .iter()
        .filter(|c| ["1003", "1004"].contains(&seed_of(c).as_str()))
        .collect();
    assert_eq!(after.chains.iter().collect::<Vec<_>>(), tail);
    // The SFT data of 4 seeds holds 1000-1003: the first RL world shares 4 of its 5
    // seeds with it, the second 1 of 2 (1003), one that starts after it none.
    assert_eq!(config(5, 0).seeds_in_sft_data(4), 4);
    assert_eq!(config(2, 3).seeds_in_sft_data(4), 1);
    assert_eq!(config(2, 4).seeds_in_sft_data(4), 0);
    assert_eq!(config(2, 3).seeds_in_sft_data(60), 2);
    let error = WorldRl::new(&config(20, 990), false)
        .err()
        .expect("seeds past the split's own are refused");
    assert!(error.to_string().contains("1990..2010"), "{error}");
}

#[test]
fn a_chain_is_informative_when_its_rollouts_earned_different_rewards_somewhere() {
    // Two chains of K = 2 tasks, G = 2 rollouts, laid out [chain][rollout][position].
    let rewards = [
        1.0, 0.5, 1.0, 0.5, // chain 0: both rollouts earned the same at both positions
        1.0, 0.0, 1.0, 2.0, // chain 1: the same first task, different second ones
    ];
    assert_eq!(informative_chains(&rewards, 2, 2), [false, true]);
    assert_eq!(informative_chains(&[3.0, 3.0, 3.0], 3, 1), [false]);
    assert_eq!(informative_chains(&[3.0, 3.0, -1.0], 3, 1), [true]);
}

/// A `ChoicePolicy` sure of its choices (the best ones, `confidence` logits ahead): most
/// groups earn the same reward in every rollout.
fn confident_policy<'t>(tk: &'t Tokenizer, tasks: Vec<Task>, confidence: f32) -> ChoicePolicy<'t> {
    let mut policy = ChoicePolicy::new(tk, tasks);
    policy.logits[EMPTY_LIBRARY][DEFINE] = confidence;
    policy.logits[WITH_LIBRARY][REUSE] = confidence;
    policy
}

fn dynamic_config(dynamic_sampling: DynamicSampling, apply_updates: bool, steps: u64) -> RlConfig {
    RlConfig {
        rollouts: 4,
        chains_per_step: 2,
        max_extra_chains: 4,
        steps,
        rollout: one_turn(),
        seed: 5,
        dynamic_sampling,
        apply_updates,
        ..RlConfig::default()
    }
}

/// `drop` trains on the step's informative chains only; its statistics are the same
/// rollouts' as without dynamic sampling (same chains, same streams).
#[test]
fn drop_trains_on_the_informative_chains_of_the_step_only() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let step = |dynamic_sampling| {
        let mut policy = confident_policy(&tk, tasks.clone(), 2.5);
        let config = dynamic_config(dynamic_sampling, true, 1);
        let mut trainer = RlTrainer::new(config, chains.clone(), RlState::default()).unwrap();
        run_to_end(&mut trainer, &mut policy).remove(0)
    };
    let off = step(DynamicSampling::Off);
    let dropped = step(DynamicSampling::Drop);
    assert_eq!(off.reward_mean, dropped.reward_mean);
    assert_eq!(off.uninformative_chains, dropped.uninformative_chains);
    assert_eq!((off.chains_rolled_out, off.chains_trained), (2, 2));
    let informative = (2.0 * (1.0 - dropped.uninformative_chains)).round() as u64;
    assert_eq!(dropped.chains_rolled_out, 2);
    assert_eq!(dropped.chains_trained, informative);
    // Without the uninformative chains the sequence-mean loss is no longer diluted.
    assert!(
        informative == 1 && dropped.update.grad_norm > off.update.grad_norm,
        "one chain of two informative at this seed; grad norms {} and {}",
        dropped.update.grad_norm,
        off.update.grad_norm
    );
    assert_eq!(dropped.update.zero_advantage_groups, 0.0);
}

/// `resample` rolls out further chains until the batch holds `chains_per_step`
/// informative ones or `max_extra_chains` more were drawn; its control draws none, yet
/// both set aside the same chains at every step, so they stay paired.
#[test]
fn resample_draws_more_chains_up_to_its_cap_and_its_control_stays_paired() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let run = |apply_updates: bool, confidence: f32| {
        let mut policy = confident_policy(&tk, tasks.clone(), confidence);
        let config = dynamic_config(DynamicSampling::Resample, apply_updates, 4);
        let mut trainer = RlTrainer::new(config, chains.clone(), RlState::default()).unwrap();
        let mut states = Vec::new();
        let mut steps = Vec::new();
        while !trainer.finished() {
            let template = policy.template.clone();
            steps.push(
                trainer
                    .step(
                        &mut policy,
                        None,
                        &|| Ok(TinyEnv::new(1)),
                        &template,
                        &system_prompt,
                    )
                    .unwrap(),
            );
            states.push(trainer.state().clone());
        }
        (steps, states)
    };
    let (learned, learned_states) = run(true, 2.5);
    let (control, control_states) = run(false, 2.5);
    assert_eq!(learned_states, control_states, "the same chains set aside");
    assert_eq!(control[0].reward_mean, learned[0].reward_mean);
    for (stats, control) in learned.iter().zip(&control) {
        assert_eq!(
            control.chains_rolled_out, 2,
            "the control draws nothing more"
        );
        assert!(stats.chains_rolled_out >= 2 && stats.chains_rolled_out <= 6);
        assert!(stats.chains_trained <= 2);
        // Either the batch is full, or every extra chain was drawn.
        assert!(
            stats.chains_trained == 2 || stats.chains_rolled_out == 6,
            "{} trained of {} rolled out",
            stats.chains_trained,
            stats.chains_rolled_out
        );
    }
    assert!(
        learned.iter().any(|s| s.chains_rolled_out > 2),
        "some step needed more chains"
    );
    // A policy sure of everything leaves no informative chain: every extra chain is
    // drawn and the update has nothing to learn.
    let (sure, _) = run(true, 30.0);
    for stats in &sure {
        assert_eq!((stats.chains_rolled_out, stats.chains_trained), (6, 0));
        assert_eq!(
            stats.update.not_applied,
            Some(sage_trainer::rl::NotApplied::NoSignal)
        );
    }
}

#[test]
fn a_policy_still_learns_to_write_then_reuse_skills_with_resampling() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let (policy, _, _) = learning_run(&tk, tasks, chains, DynamicSampling::Resample);
    let empty = policy.probabilities(EMPTY_LIBRARY);
    let with_library = policy.probabilities(WITH_LIBRARY);
    assert!(empty[DEFINE] > 0.8, "{empty:?}");
    assert!(with_library[REUSE] > 0.8, "{with_library:?}");
}

#[test]
fn resampling_without_extra_chains_is_refused() {
    let (_, chains) = tasks_and_chains();
    let config = RlConfig {
        max_extra_chains: 0,
        dynamic_sampling: DynamicSampling::Resample,
        ..RlConfig::default()
    };
    let error = RlTrainer::new(config, chains, RlState::default())
        .err()
        .expect("an error")
        .to_string();
    assert!(error.contains("max_extra_chains"), "{error}");
    let error = sage_trainer::config::RunConfig::from_toml("[rl]\ndynamic_sampling = \"some\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("off, drop, resample"), "{error}");
}

/// The tiny environment, or one whose server is down (every call fails).
enum MaybeDown {
    Up(Box<TinyEnv>),
    Down,
}

impl sage_core::Environment for MaybeDown {
    type Error = std::io::Error;

    fn reset(
        &mut self,
        task: &Task,
        library: &[Skill],
    ) -> Result<sage_core::env::Reset, std::io::Error> {
        match self {
            MaybeDown::Up(env) => env.reset(task, library).map_err(std::io::Error::other),
            MaybeDown::Down => Err(std::io::Error::other("server down")),
        }
    }

    fn step(&mut self, text: &str) -> Result<sage_core::env::StepResult, std::io::Error> {
        match self {
            MaybeDown::Up(env) => env.step(text).map_err(std::io::Error::other),
            MaybeDown::Down => Err(std::io::Error::other("server down")),
        }
    }

    fn evaluate(&mut self) -> Result<sage_core::Evaluation, std::io::Error> {
        match self {
            MaybeDown::Up(env) => env.evaluate().map_err(std::io::Error::other),
            MaybeDown::Down => Err(std::io::Error::other("server down")),
        }
    }
}

/// A chain with an episode whose environment failed is left out of the update, and the
/// step goes on with the others.
#[test]
fn chains_whose_environment_failed_are_left_out_and_the_step_goes_on() {
    let (tasks, chains) = tasks_and_chains();
    let tk = tokenizer(&tasks);
    let mut policy = ChoicePolicy::new(&tk, tasks);
    let config = RlConfig {
        rollouts: 8,
        chains_per_step: 4,
        steps: 3,
        rollout: one_turn(),
        seed: 5,
        ..RlConfig::default()
    };
    let chain_len = config.chain_len;
    let mut trainer = RlTrainer::new(config, chains, RlState::default()).unwrap();
    let template = policy.template.clone();
    // Of every 32 environments a step makes, the first (chain 1's first rollout) is down.
    let made = std::cell::Cell::new(0usize);
    let new_env = || {
        let index = made.get();
        made.set(index + 1);
        Ok::<_, std::io::Error>(if index % 32 == 0 {
            MaybeDown::Down
        } else {
            MaybeDown::Up(Box::new(TinyEnv::new(1)))
        })
    };
    while !trainer.finished() {
        let stats = trainer
            .step(&mut policy, None, &new_env, &template, &system_prompt)
            .expect("a failed environment does not fail the step");
        assert_eq!(
            stats.failed_episodes, chain_len as u64,
            "step {}",
            stats.step
        );
        assert_eq!(stats.chains_rolled_out, 4);
        assert_eq!(stats.chains_trained, 3, "step {}", stats.step);
    }
}
