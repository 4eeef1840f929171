//! `eval`: the skill-writing rate of an evaluation counts the tasks that started with
//! an empty library and saved a skill, and the copying rates count the tasks whose
//! code states the instruction's values. A canned policy answers its calls in turn from a
//! list, on one `iid` scenario of three one-turn tasks under same-scenario retrieval
//! (the tasks run one after the other, so call `i` is task `i + 1`).

use std::path::Path;

use sage_core::policy::{Generation, SamplingParams, StopReason, UpdateStats};
use sage_core::retrieval::RetrievalMode;
use sage_core::Policy;
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};
use sage_trainer::chat::ChatTemplate;
use sage_trainer::config::RunConfig;
use sage_trainer::pipeline::{run_eval, EvalReport, PrintReporter};
use sage_trainer::tokenizer::{Tokenizer, TrainConfig};

/// Answers call `i` with `answers[i]` (the last one once they run out) and the end of
/// the turn.
struct Canned {
    answers: Vec<Vec<u32>>,
    calls: usize,
    im_end: u32,
}

impl Policy for Canned {
    type Error = std::io::Error;

    fn generate(
        &mut self,
        prompts: &[&[u32]],
        _: &SamplingParams,
    ) -> Result<Vec<Generation>, std::io::Error> {
        let mut tokens = self.answers[self.calls.min(self.answers.len() - 1)].clone();
        tokens.push(self.im_end);
        self.calls += 1;
        Ok(prompts
            .iter()
            .map(|_| Generation {
                logprobs: vec![0.0; tokens.len()],
                tokens: tokens.clone(),
                stop: StopReason::StopToken,
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
}

/// The evaluation of a policy that answers task `i` with `answers[i]`.
fn evaluate(answers: &[&str]) -> EvalReport {
    let mut config = RunConfig::tiny(Path::new("unused"));
    config.eval.splits = vec![Split::Iid];
    config.eval.modes = vec![RetrievalMode::SameScenario];
    config.eval.max_scenarios = 1;
    config.eval.rollout.max_turns = 1;
    let tokenizer = Tokenizer::train(
        answers.to_vec(),
        &TrainConfig {
            vocab_size: 300,
            min_frequency: 2,
        },
    )
    .expect("tokenizer");
    let template = ChatTemplate::new(&tokenizer).expect("template");
    let mut policy = Canned {
        answers: answers
            .iter()
            .map(|a| tokenizer.encode(a).expect("tokens"))
            .collect(),
        calls: 0,
        im_end: template.special_tokens().im_end,
    };
    let mut reporter = PrintReporter { every: 1 };
    let reports = run_eval(
        &mut policy,
        &config.eval,
        config.data.prompt_rules,
        &template,
        None,
        None,
        &mut reporter,
    )
    .expect("eval");
    assert_eq!(policy.calls, 3, "three one-turn tasks");
    reports.into_iter().next().expect("one split, one mode")
}

/// The skill-writing and skill-usage rates of a policy that answers task `i` with
/// `answers[i]`.
fn rates_of(answers: &[&str]) -> (f64, f64) {
    let metrics = evaluate(answers).metrics;
    (metrics.skill_writing, metrics.skill_usage)
}

const PLAIN: &str = "Plain code.\n\n```python\nprint(1)\n```";
const HELPER: &str =
    "I write a helper.\n\n```python\ndef helper():\n    return 1\n\nprint(helper())\n```";
const CALL: &str = "I call it.\n\n```python\nprint(helper())\n```";

#[test]
fn skill_writing_counts_the_tasks_that_start_empty_and_save_a_skill() {
    // Task 1 writes plain code: nothing saved, so task 2 also starts empty; it writes
    // the helper (a function that runs is saved); task 3 starts with it and calls it.
    // Two tasks started empty and one of them wrote a skill: 50%, where counting every
    // task would give 1 of 3. Task 3 is the only one with a library, and it used it.
    let (writing, usage) = rates_of(&[PLAIN, HELPER, CALL]);
    assert_eq!(writing, 50.0);
    assert_eq!(usage, 100.0);
    // A first task that writes the helper: 1 of 1 started empty.
    let (writing, _) = rates_of(&[HELPER, PLAIN]);
    assert_eq!(writing, 100.0);
    let (writing, _) = rates_of(&[PLAIN]);
    assert_eq!(writing, 0.0);
}

#[test]
fn copying_rates_count_the_tasks_whose_code_states_the_instructions_values() {
    let catalog = Catalog::build_splits(&CatalogConfig::default(), &[Split::Iid]).expect("catalog");
    let scenario = &catalog.split(Split::Iid)[0];
    let stated: Vec<Vec<(&str, String)>> =
        scenario.tasks.iter().map(|t| t.stated_values()).collect();
    assert!(
        stated.iter().all(|values| !values.is_empty()),
        "every task of {} states a value: {stated:?}",
        scenario.scenario.id
    );
    // Code that prints task 1's values (and does nothing else, so every task fails).
    let values: Vec<String> = stated[0]
        .iter()
        .map(|(_, text)| format!("{text:?}"))
        .collect();
    let copying = format!("Printing.\n\n```python\nprint({})\n```", values.join(", "));
    // Task 1 states its values, tasks 2 and 3 (other values) state none of theirs.
    let report = evaluate(&[&copying, PLAIN]);
    assert!(report.tasks.iter().all(|t| !t.passed));
    let third = 100.0 / 3.0;
    assert!((report.metrics.values_copied - third).abs() < 1e-9);
    assert!((report.metrics.failures_miscopied - 2.0 * third).abs() < 1e-9);
    assert_eq!(report.tasks[0].miscopied, Vec::<String>::new());
    let names: Vec<String> = stated[1].iter().map(|(n, _)| (*n).to_owned()).collect();
    assert_eq!(report.tasks[1].miscopied, names);
    // Plain code states nothing: every failure is a miscopy.
    let report = evaluate(&[PLAIN]);
    assert_eq!(report.metrics.values_copied, 0.0);
    assert_eq!(report.metrics.failures_miscopied, 100.0);
}

#[test]
fn every_rate_comes_with_its_interval_and_every_template_with_its_row() {
    // Task 1 states its values and fails; tasks 2 and 3 fail without them.
    let catalog = Catalog::build_splits(&CatalogConfig::default(), &[Split::Iid]).expect("catalog");
    let scenario = &catalog.split(Split::Iid)[0];
    let values: Vec<String> = scenario.tasks[0]
        .stated_values()
        .iter()
        .map(|(_, text)| format!("{text:?}"))
        .collect();
    let copying = format!("Printing.\n\n```python\nprint({})\n```", values.join(", "));
    let metrics = evaluate(&[&copying, PLAIN]).metrics;
    // 0 of 3 tasks: the Wilson interval is [0, 56.1], not the empty [0, 0] of the
    // normal approximation; 0 of 1 scenario: [0, 79.3].
    assert_eq!(metrics.tgc_interval.low, 0.0);
    assert!(
        (metrics.tgc_interval.high - 56.15).abs() < 0.05,
        "{metrics:?}"
    );
    assert!(
        (metrics.sgc_interval.high - 79.35).abs() < 0.05,
        "{metrics:?}"
    );
    assert_eq!(metrics.templates.len(), 1, "{:?}", metrics.templates);
    let row = &metrics.templates[0];
    assert_eq!(row.template, scenario.template.name);
    assert_eq!((row.scenarios, row.tasks), (1, 3));
    assert_eq!((row.tgc, row.sgc), (0.0, 0.0));
    assert!((row.values_copied - 100.0 / 3.0).abs() < 1e-9, "{row:?}");
}

#[test]
fn the_experiments_evaluation_covers_every_training_template_in_60_scenarios_or_more() {
    let eval = RunConfig::experiment(Path::new("unused")).eval;
    assert_eq!(eval.max_scenarios, 0, "every scenario of the split");
    let catalog = Catalog::build_splits(
        &CatalogConfig {
            iid_seeds: eval.iid_seeds,
            ..CatalogConfig::default()
        },
        &[Split::Iid],
    )
    .expect("catalog");
    let scenarios = catalog.split(Split::Iid);
    assert!(scenarios.len() >= 60, "{} scenarios", scenarios.len());
    for template in Split::Iid.template_names() {
        assert!(
            scenarios.iter().any(|s| s.template.name == *template),
            "{template} is not evaluated"
        );
    }
    // The demo's evaluation stays as it was: 20 scenarios of 2 seeds.
    let demo = RunConfig::default().eval;
    assert_eq!((demo.max_scenarios, demo.iid_seeds), (20, 2));
}
