//! Tests of the tiny environment: its task list, its rules, the reuse it rewards, and
//! its speed.

use std::time::Instant;

use sage_core::{Environment, Skill};
use sage_envs::tiny::{tiny_scenarios, TinyEnv, TinyError, OPERATIONS};

fn code(text: &str) -> String {
    format!("```python\n{text}\n```")
}

#[test]
fn scenarios_hold_three_tasks_of_one_operation() {
    let scenarios = tiny_scenarios(0..4);
    assert_eq!(scenarios.len(), 4 * OPERATIONS.len());
    for s in &scenarios {
        assert_eq!(s.tasks.len(), 3);
        let operation = s.id.split('/').nth(1).unwrap();
        for (k, t) in s.tasks.iter().enumerate() {
            assert_eq!(t.id, format!("{}/t{}", s.id, k + 1));
            assert_eq!(TinyEnv::skill_name(t), Some(format!("tiny_{operation}")));
        }
    }
    assert_eq!(tiny_scenarios(0..4), scenarios, "deterministic");
}

#[test]
fn the_expert_response_passes_and_reuse_takes_one_turn() {
    let mut env = TinyEnv::default();
    for scenario in tiny_scenarios(0..3) {
        let mut library: Vec<Skill> = Vec::new();
        for (k, task) in scenario.tasks.iter().enumerate() {
            env.reset(task, &library).unwrap();
            let step = env
                .step(&TinyEnv::expert_response(task, &library).unwrap())
                .unwrap();
            assert!(step.done, "{}: {}", task.id, step.observation);
            assert!(
                env.evaluate().unwrap().passed,
                "{}: {}",
                task.id,
                step.observation
            );
            if k == 0 {
                assert_eq!(step.saved.len(), 1);
                assert!(step.used.is_empty());
                library = step.saved;
            } else {
                assert_eq!(step.used, [library[0].name.as_str()], "{}", task.id);
                assert!(step.saved.is_empty());
            }
        }
    }
}

#[test]
fn wrong_missing_and_codeless_answers_fail() {
    let task = tiny_scenarios(0..1)[0].tasks[0].clone();
    let mut env = TinyEnv::new(2);
    env.reset(&task, &[]).unwrap();
    env.step(&code("apis.tiny.submit(answer=-1)")).unwrap();
    let evaluation = env.evaluate().unwrap();
    assert!(!evaluation.passed);
    assert_eq!(evaluation.score, 0.5);

    env.reset(&task, &[]).unwrap();
    assert!(!env.step(&code("x = 1")).unwrap().done);
    assert!(env.step(&code("x = 2")).unwrap().done, "turn limit");
    assert_eq!(env.evaluate().unwrap().score, 0.0);
    assert_eq!(env.step(&code("x = 3")), Err(TinyError::EpisodeOver));

    env.reset(&task, &[]).unwrap();
    let step = env.step("no code here").unwrap();
    assert!(step.done && !step.had_code);
    assert!(env
        .reset(
            &sage_core::Task {
                id: "tiny/nope/0/t1".into(),
                scenario_id: String::new(),
                instruction: String::new()
            },
            &[]
        )
        .is_err());
}

#[test]
fn episodes_take_well_under_a_millisecond() {
    let scenarios = tiny_scenarios(0..20);
    let mut env = TinyEnv::default();
    let start = Instant::now();
    let mut episodes = 0;
    for scenario in &scenarios {
        for task in &scenario.tasks {
            env.reset(task, &[]).unwrap();
            env.step(&TinyEnv::expert_response(task, &[]).unwrap())
                .unwrap();
            env.evaluate().unwrap();
            episodes += 1;
        }
    }
    let per_episode = start.elapsed() / episodes;
    assert!(per_episode.as_millis() < 20, "{per_episode:?} per episode");
}
