//! `sft`: loss masks on the agent's tokens only (checked by decoding them), malformed
//! lines named by number, length-bucketed batches that cover every example once within
//! the budget, the policy's log-probs against a direct forward pass, and a run resumed
//! from its state that takes exactly the steps of an uninterrupted one, the two loss
//! weightings on batches of unequal agent shares, and the longest agent turn against the
//! rollouts' per-turn limits.

use sage_backend_cpu::CpuBackend;
use sage_core::Policy;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::config::RunConfig;
use sage_trainer::init::init_params;
use sage_trainer::optim::{AdamWConfig, LrSchedule};
use sage_trainer::pipeline::turn_limit_warnings;
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::sft::{
    dev_loss, epoch_batches, mean_agent_tokens, nll_coefficients, SftConfig, SftData,
    SftLossWeighting, SftState, SftTrainer,
};
use sage_trainer::tokenizer::{Tokenizer, TrainConfig};
use sage_transformer::{ModelConfig, Transformer};

/// One chat per line: two agent turns, with an observation between them.
fn jsonl(count: usize) -> String {
    (0..count)
        .map(|i| {
            let agent_one = format!("I pay.\n```python\npay(\"Ana\", {i})\n```");
            let agent_two = "Done.\n```python\napis.supervisor.complete_task()\n```";
            let messages = serde_json::json!([
                {"role": "system", "content": "Rules."},
                {"role": "user", "content": format!("Pay Ana {i} dollars.")},
                {"role": "assistant", "content": agent_one},
                {"role": "user", "content": "Observation:\nNone"},
                {"role": "assistant", "content": agent_two},
            ]);
            format!("{messages}\n")
        })
        .collect()
}

/// Chats of two shapes, alternating: a long task with a short answer (as a chain's later
/// tasks, which reuse a skill) and a short task with a long answer (as a first task,
/// which writes one), so that length-bucketed batches differ in their agent share.
fn mixed_jsonl(count: usize) -> String {
    (0..count)
        .map(|i| {
            let (task, answer) = if i % 2 == 0 {
                (
                    format!("Pay Ana {i} dollars. ").repeat(6),
                    format!("pay(\"Ana\", {i})"),
                )
            } else {
                (
                    format!("Pay Ana {i}."),
                    format!("pay(\"Ana\", {i})\n").repeat(6),
                )
            };
            let messages = serde_json::json!([
                {"role": "system", "content": "Rules."},
                {"role": "user", "content": task},
                {"role": "assistant", "content": format!("I pay.\n```python\n{answer}\n```")},
            ]);
            format!("{messages}\n")
        })
        .collect()
}

/// A tokenizer trained on the chats of [`jsonl`].
fn tokenizer() -> Tokenizer {
    let texts: Vec<String> = jsonl(200).lines().map(str::to_owned).collect();
    let config = TrainConfig {
        vocab_size: 400,
        ..TrainConfig::default()
    };
    Tokenizer::train(texts, &config).unwrap()
}

#[test]
fn loss_mask_covers_exactly_the_agent_turns_and_their_ends() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&jsonl(3), &template).unwrap();
    assert_eq!(data.examples.len(), 3);
    for (i, example) in data.examples.iter().enumerate() {
        assert_eq!(example.loss_mask.len(), example.tokens.len() - 1);
        // The targets the loss sees, decoded: both agent turns, each closed by its end
        // token, and nothing of the system prompt, the task or the observation.
        let targets: Vec<u32> = example
            .loss_mask
            .iter()
            .enumerate()
            .filter(|(_, &m)| m)
            .map(|(p, _)| example.tokens[p + 1])
            .collect();
        let ends = targets.iter().filter(|&&t| t == tk.im_end()).count();
        assert_eq!(ends, 2, "each agent turn's end is trained");
        let text: String = tk
            .decode(
                &targets
                    .iter()
                    .copied()
                    .filter(|&t| t != tk.im_end())
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        assert_eq!(
            text,
            format!(
                "I pay.\n```python\npay(\"Ana\", {i})\n```Done.\n```python\napis.supervisor.complete_task()\n```"
            )
        );
    }
}

#[test]
fn malformed_lines_are_named_and_agentless_chats_counted() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let text = format!("{}\n{{\"messages\": 3}}\n", jsonl(1));
    let (line, _) = SftData::parse(&text, &template).unwrap_err();
    assert_eq!(line, 3, "the blank line counts; the bad line is the third");

    let no_agent = r#"[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]"#;
    let data = SftData::parse(&format!("{no_agent}\n{}", jsonl(2)), &template).unwrap();
    assert_eq!((data.examples.len(), data.no_agent_turn), (2, 1));

    let short = ChatTemplate::new(&tk).unwrap().with_max_len(10);
    let data = SftData::parse(&jsonl(2), &short).unwrap();
    assert_eq!((data.examples.len(), data.too_long), (0, 2));
}

#[test]
fn the_longest_agent_turn_is_measured_and_rollout_limits_below_it_are_named() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&jsonl(12), &template).unwrap();
    // The first agent turn of the chat with the widest number is the longest turn.
    let longest = (0..12)
        .map(|i| {
            let turn = format!("I pay.\n```python\npay(\"Ana\", {i})\n```");
            tk.encode(&turn).unwrap().len() + 1
        })
        .max()
        .unwrap();
    assert_eq!(data.longest_agent_turn, longest);

    let mut config = RunConfig::default();
    config.eval.rollout.max_new_tokens = longest as u32;
    config.rl.rollout.max_new_tokens = longest as u32 - 1;
    assert!(turn_limit_warnings(&data, &config.eval, None).is_empty());
    let warnings = turn_limit_warnings(&data, &config.eval, Some(&config.rl));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("[rl.rollout] max_new_tokens"));
    assert!(warnings[0].contains(&format!("({longest} tokens)")));
}

#[test]
fn epoch_batches_cover_every_example_once_within_the_budget() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&jsonl(40), &template).unwrap();
    let budget = 3 * data.examples[0].tokens.len();
    let batches = epoch_batches(&data.examples, budget, 7, 0);
    let mut seen: Vec<usize> = batches.concat();
    seen.sort_unstable();
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
    for batch in &batches {
        let tokens: usize = batch.iter().map(|&i| data.examples[i].tokens.len()).sum();
        assert!(tokens <= budget || batch.len() == 1, "{tokens} > {budget}");
    }
    assert_eq!(batches, epoch_batches(&data.examples, budget, 7, 0));
    assert_ne!(
        batches,
        epoch_batches(&data.examples, budget, 7, 1),
        "epochs reshuffle"
    );

    // The coefficients of a batch: -1/n on each of its n agent tokens.
    let batch: Vec<_> = batches[0].iter().map(|&i| &data.examples[i]).collect();
    let n: usize = batch.iter().map(|e| e.agent_tokens()).sum();
    let coefficients = nll_coefficients(&batch, n as f64);
    let total: f32 = coefficients.iter().flatten().sum();
    assert!(
        (total + 1.0).abs() < 1e-5,
        "coefficients sum to -1, got {total}"
    );
    assert_eq!(
        coefficients.iter().flatten().filter(|&&c| c != 0.0).count(),
        n
    );
}

/// A tiny trainable policy over `vocab` tokens, initialised from `seed`.
fn policy(vocab: usize, seed: u64) -> TransformerPolicy<CpuBackend> {
    let mut k = CpuBackend::new();
    let config = ModelConfig {
        vocab_size: vocab,
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
    let model = Transformer::new(&mut k, config).unwrap();
    init_params(&mut k, &model, seed).unwrap();
    let optimizer = AdamWConfig {
        schedule: LrSchedule::Constant { lr: 3e-3 },
        ..AdamWConfig::default()
    };
    TransformerPolicy::trainable(k, model, optimizer).unwrap()
}

#[test]
fn policy_log_probs_match_a_direct_forward_pass_in_any_batching() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&jsonl(4), &template).unwrap();
    let sequences: Vec<&[u32]> = data.examples.iter().map(|e| e.tokens.as_slice()).collect();
    let mut together = policy(tk.vocab_size(), 1);
    let batched = together.log_probs(&sequences).unwrap();
    // A budget of one sequence per pass must give the same numbers (f32 sums over the
    // same values in the same order per sequence: 1e-5 absolute covers reordering of
    // the GEMM tiles).
    let mut apart = policy(tk.vocab_size(), 1).with_max_batch_tokens(1);
    let separate = apart.log_probs(&sequences).unwrap();
    for (a, b) in batched.iter().zip(&separate) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            assert!(*x < 0.0 && x.is_finite());
        }
    }
}

#[test]
fn sft_lowers_the_loss_and_resumes_exactly_from_its_state() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&jsonl(24), &template).unwrap();
    let config = SftConfig {
        epochs: 2,
        batch_tokens: 4 * data.examples[0].tokens.len(),
        seed: 3,
        ..SftConfig::default()
    };

    let mut straight = policy(tk.vocab_size(), 5);
    let before = dev_loss(&mut straight, &data.examples).unwrap();
    let mut trainer = SftTrainer::new(config.clone(), &data, SftState::default());
    let total = trainer.total_steps();
    assert!(total >= 8, "{total} steps");
    let mut losses = Vec::new();
    while let Some(step) = trainer.next_step(&mut straight, &data).unwrap() {
        losses.push(step.loss);
    }
    assert_eq!(losses.len() as u64, total);
    let after = dev_loss(&mut straight, &data.examples).unwrap();
    assert!(after < 0.7 * before, "loss {before} -> {after}");

    // Stop half-way, rebuild the trainer from its state: the same steps follow.
    let mut resumed = policy(tk.vocab_size(), 5);
    let mut first = SftTrainer::new(config.clone(), &data, SftState::default());
    let mut resumed_losses = Vec::new();
    for _ in 0..total / 2 {
        resumed_losses.push(first.next_step(&mut resumed, &data).unwrap().unwrap().loss);
    }
    let state = first.state();
    assert_eq!(state.step, total / 2);
    let mut second = SftTrainer::new(config, &data, state);
    while let Some(step) = second.next_step(&mut resumed, &data).unwrap() {
        resumed_losses.push(step.loss);
    }
    assert_eq!(resumed_losses, losses, "bit-identical on the CPU backend");
}

#[test]
fn a_run_of_set_steps_continues_epoch_after_epoch_and_stops_there() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&jsonl(24), &template).unwrap();
    let by_epochs = SftConfig {
        epochs: 2,
        batch_tokens: 4 * data.examples[0].tokens.len(),
        seed: 3,
        ..SftConfig::default()
    };
    let losses = |config: &SftConfig| {
        let mut model = policy(tk.vocab_size(), 5);
        let mut trainer = SftTrainer::new(config.clone(), &data, SftState::default());
        let mut steps = Vec::new();
        while let Some(step) = trainer.next_step(&mut model, &data).unwrap() {
            steps.push((step.epoch, step.loss, step.progress));
        }
        (steps, trainer.total_steps())
    };
    let (two_epochs, total) = losses(&by_epochs);
    let per_epoch =
        SftTrainer::new(by_epochs.clone(), &data, SftState::default()).batches_per_epoch();
    assert!(per_epoch >= 4, "{per_epoch} batches per epoch");
    assert_eq!(total, 2 * per_epoch);

    // As many steps as the two epochs take: the same run (epochs is not read).
    let same = SftConfig {
        epochs: 9,
        steps: total,
        ..by_epochs.clone()
    };
    assert_eq!(losses(&same).0, two_epochs);

    // Two steps more: the third epoch's first two batches, the schedule over all of them.
    let longer = SftConfig {
        steps: total + 2,
        ..by_epochs
    };
    let (steps, longer_total) = losses(&longer);
    assert_eq!(longer_total, total + 2);
    assert_eq!(steps.len() as u64, total + 2);
    let epochs: Vec<u64> = steps.iter().map(|s| s.0).collect();
    assert_eq!(epochs[total as usize..], [2, 2]);
    assert_eq!(steps.last().unwrap().2, 1.0);
    assert!(steps[total as usize - 1].2 < 1.0);
}

#[test]
fn token_weighting_gives_every_agent_token_the_same_weight_and_the_same_mean_step() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&mixed_jsonl(24), &template).unwrap();
    let budget = 3 * data.examples[0].tokens.len();
    let batches = epoch_batches(&data.examples, budget, 3, 0);
    assert!(batches.len() >= 4, "{} batches", batches.len());
    let shares: Vec<usize> = batches
        .iter()
        .map(|b| b.iter().map(|&i| data.examples[i].agent_tokens()).sum())
        .collect();
    let mean = mean_agent_tokens(&data.examples, &batches);
    assert_eq!(
        mean,
        shares.iter().sum::<usize>() as f64 / batches.len() as f64
    );

    // Per batch (the default), a token's weight is 1 / its batch's agent tokens, and
    // the data's two shapes make those differ; per token it is 1 / mean everywhere, and
    // an epoch's coefficients still sum to -1 per batch. Tolerance: f32 sums of a few
    // hundred equal terms, 1e-5 relative.
    assert!(shares.iter().min() < shares.iter().max(), "{shares:?}");
    let mut epoch_sum = 0.0f64;
    for batch in &batches {
        let examples: Vec<_> = batch.iter().map(|&i| &data.examples[i]).collect();
        for coefficients in nll_coefficients(&examples, mean) {
            for c in coefficients.into_iter().filter(|&c| c != 0.0) {
                assert_eq!(c, (-1.0 / mean) as f32);
                epoch_sum += f64::from(c);
            }
        }
    }
    let per_batch = epoch_sum / batches.len() as f64;
    assert!((per_batch + 1.0).abs() < 1e-5, "{per_batch}");

    // Trained from one initialisation: the first step reports the same mean loss under
    // both (the loss is the batch's mean NLL either way; 1e-5 relative for f32 sums),
    // and the runs part once batches of unequal agent shares have stepped.
    let losses = |loss_weighting| {
        let config = SftConfig {
            epochs: 1,
            batch_tokens: budget,
            seed: 3,
            loss_weighting,
            ..SftConfig::default()
        };
        let mut model = policy(tk.vocab_size(), 5);
        let mut trainer = SftTrainer::new(config, &data, SftState::default());
        let mut losses = Vec::new();
        while let Some(step) = trainer.next_step(&mut model, &data).unwrap() {
            losses.push(step.loss);
        }
        losses
    };
    let (by_batch, by_token) = (
        losses(SftLossWeighting::Batch),
        losses(SftLossWeighting::Token),
    );
    assert_eq!(by_batch.len(), batches.len());
    let relative = (by_batch[0] - by_token[0]).abs() / by_batch[0];
    assert!(relative < 1e-5, "{} vs {}", by_batch[0], by_token[0]);
    assert_ne!(by_batch, by_token);
}
