//! A model sees in evaluation and in RL the system prompt its SFT data showed it:
//! `[data] prompt_rules` decides for all three. A recording policy captures the prompts
//! the evaluation and an RL step hand it and answers without code (ending each episode).

use std::path::Path;

use sage_core::policy::{Generation, SamplingParams, StopReason, UpdateStats};
use sage_core::retrieval::RetrievalMode;
use sage_core::Policy;
use sage_envs::prompt::{Prompt, PromptMode};
use sage_envs::scenarios::Split;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::config::RunConfig;
use sage_trainer::data::expert_data;
use sage_trainer::pipeline::{run_eval, PrintReporter};
use sage_trainer::rl::{RlState, RlTrainer, WorldRl};
use sage_trainer::tokenizer::{Tokenizer, TrainConfig};

/// Decodes and keeps every prompt; answers each with an empty turn.
struct Recorder<'t> {
    template: ChatTemplate<'t>,
    prompts: Vec<String>,
}

impl Policy for Recorder<'_> {
    type Error = std::io::Error;

    fn generate(
        &mut self,
        prompts: &[&[u32]],
        _: &SamplingParams,
    ) -> Result<Vec<Generation>, std::io::Error> {
        let im_end = self.template.special_tokens().im_end;
        prompts
            .iter()
            .map(|prompt| {
                let text = self
                    .template
                    .tokenizer()
                    .decode(prompt)
                    .map_err(std::io::Error::other)?;
                self.prompts.push(text);
                Ok(Generation {
                    tokens: vec![im_end],
                    logprobs: vec![0.0],
                    stop: StopReason::StopToken,
                })
            })
            .collect()
    }

    fn log_probs(&mut self, sequences: &[&[u32]]) -> Result<Vec<Vec<f32>>, std::io::Error> {
        Ok(sequences
            .iter()
            .map(|s| vec![0.0; s.len().saturating_sub(1)])
            .collect())
    }

    fn accumulate_gradient(&mut self, _: &[&[u32]], _: &[&[f32]]) -> Result<f32, std::io::Error> {
        Ok(0.0)
    }

    fn optimizer_step(&mut self) -> Result<UpdateStats, std::io::Error> {
        Ok(UpdateStats::default())
    }
}

/// The system message of a decoded ChatML prompt.
fn system_message(prompt: &str) -> &str {
    let start = prompt
        .find("<|im_start|>system\n")
        .expect("a system message")
        + "<|im_start|>system\n".len();
    let end = start + prompt[start..].find("<|im_end|>").expect("its end");
    &prompt[start..end]
}

/// The tiny configuration with `prompt_rules`, one scenario of iid, and the system
/// messages of its SFT data.
fn setup(prompt_rules: bool) -> (RunConfig, Vec<String>) {
    let mut config = RunConfig::tiny(Path::new("unused"));
    config.data.prompt_rules = prompt_rules;
    config.eval.splits = vec![Split::Iid];
    config.eval.modes = vec![RetrievalMode::SameScenario];
    config.eval.max_scenarios = 1;
    let data = expert_data(&config.data).expect("expert data");
    let systems = data
        .records
        .iter()
        .map(|r| r.messages[0].content.clone())
        .collect();
    (config, systems)
}

#[test]
fn evaluation_and_rl_use_the_data_prompt() {
    let rules_text = "You complete tasks for a user";
    for prompt_rules in [false, true] {
        let (config, systems) = setup(prompt_rules);
        let expected = Prompt {
            mode: PromptMode::Skills,
            rules: prompt_rules,
        }
        .system(&[]);
        // The data: every first task starts from this prompt, rules or not.
        assert!(systems.contains(&expected), "rules {prompt_rules}");
        assert!(systems
            .iter()
            .all(|s| s.contains(rules_text) == prompt_rules));

        let tokenizer = Tokenizer::train(
            systems.iter().map(String::as_str),
            &TrainConfig {
                vocab_size: 400,
                min_frequency: 2,
            },
        )
        .expect("tokenizer");
        let template = ChatTemplate::new(&tokenizer).expect("template");
        let mut policy = Recorder {
            template: template.clone(),
            prompts: Vec::new(),
        };

        // Evaluation: three tasks, each ended by the first (code-less) turn.
        let mut reporter = PrintReporter { every: 1 };
        run_eval(
            &mut policy,
            &config.eval,
            config.data.prompt_rules,
            &template,
            None,
            None,
            &mut reporter,
        )
        .expect("eval");
        assert_eq!(policy.prompts.len(), 3);
        for prompt in &policy.prompts {
            assert_eq!(system_message(prompt), expected, "rules {prompt_rules}");
        }

        // One RL step: every rollout of every chain position sees the same prompt.
        policy.prompts.clear();
        let world = WorldRl::new(&config.rl, config.data.prompt_rules).expect("world");
        let mut trainer =
            RlTrainer::new(config.rl.clone(), world.chains.clone(), RlState::default())
                .expect("trainer");
        world
            .step(&mut trainer, &mut policy, None, &template)
            .expect("rl step");
        assert!(!policy.prompts.is_empty());
        for prompt in &policy.prompts {
            assert_eq!(system_message(prompt), expected, "rules {prompt_rules}");
        }
    }
}
