//! One SAGE training example through the core, with scripted model responses: a chain
//! of two tasks from one scenario, two rollouts. Rollout A writes a skill in task 1 and
//! reuses it in task 2; rollout B writes the same skill but rewrites it in task 2. Both
//! solve both tasks, so only the skill-integrated reward tells them apart, and the GRPO
//! coefficients must push towards A.

use sage_core::grpo::{chain_advantages, policy_loss, GrpoConfig, TokenBatch};
use sage_core::retrieval::{HashingEmbedder, RetrievalMode, Retriever};
use sage_core::reward::{Reward, RewardKind, TaskOutcome};
use sage_core::skill::{parse_response, used_skills, HashSkillLibrary};
use sage_core::{Origin, Skill, SkillLibrary, Task};

const TASK1_RESPONSE: &str = r#"I need the total Venmo money Bob sent me in March. I'll write a reusable function.
```python
def total_received(sender: str, month: int = 1) -> float:
    """Total amount received from `sender` in `month`."""
    token = apis.venmo.login(username=me, password=passwords["venmo"])["access_token"]
    total = 0.0
    page = 0
    while True:
        items = apis.venmo.list_transactions(access_token=token, page_index=page)
        if not items:
            break
        for t in items:
            if t["sender"] == sender and t["month"] == month:
                total += t["amount"]
        page += 1
    return total

print(total_received("Bob", 3))
```"#;

const REUSE_RESPONSE: &str = r#"The library has `total_received`; I'll call it.
```python
answer = total_received("Alice", 5)
apis.supervisor.complete_task(answer=answer)
```"#;

const REWRITE_RESPONSE: &str = r#"I'll write it again.
```python
def total_received(sender, month):
    return 0.0

apis.supervisor.complete_task(answer=total_received("Alice", 5))
```"#;

fn task(id: &str, instruction: &str) -> Task {
    Task {
        id: id.into(),
        scenario_id: "venmo-received".into(),
        instruction: instruction.into(),
    }
}

/// The skills a response saves (here every definition: the scripted code ran fine).
fn saved_skills(response: &str, task: &Task) -> Vec<Skill> {
    let parsed = parse_response(response);
    parsed
        .analysis
        .defs
        .iter()
        .map(|def| {
            Skill::from_def(
                def,
                &parsed.code,
                Origin {
                    scenario_id: task.scenario_id.clone(),
                    task_id: task.id.clone(),
                },
            )
        })
        .collect()
}

/// Runs task 2 of one rollout: the library task 1 left, what task 2 sees, what it used.
fn task2_used_skill(task1: &Task, task2: &Task, task2_response: &str) -> bool {
    let mut library = HashSkillLibrary::new();
    let mut retriever =
        Retriever::new(RetrievalMode::SameScenario, 3, HashingEmbedder::default()).unwrap();
    for skill in saved_skills(TASK1_RESPONSE, task1) {
        retriever.add(&skill, &task1.instruction).unwrap();
        library.insert(skill).unwrap();
    }
    let shown = retriever.retrieve(&mut library, task2).unwrap();
    assert_eq!(
        shown.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["total_received"]
    );
    assert_eq!(library.get("total_received").unwrap().stats.retrieved, 1);

    let parsed = parse_response(task2_response);
    !used_skills(&parsed.analysis, &library).is_empty()
}

#[test]
fn skill_reuse_earns_the_larger_advantage() {
    let task1 = task("t1", "How much money did Bob send me on Venmo in March?");
    let task2 = task("t2", "How much money did Alice send me on Venmo in May?");

    // The skill parsed from task 1 carries its signature and docstring.
    let skills = saved_skills(TASK1_RESPONSE, &task1);
    assert_eq!(skills.len(), 1);
    assert_eq!(
        skills[0].signature(),
        "total_received(sender: str, month: int = 1)"
    );
    assert_eq!(
        skills[0].docstring.as_deref(),
        Some("Total amount received from `sender` in `month`.")
    );
    assert!(skills[0].source.starts_with("def total_received("));
    assert!(skills[0].source.ends_with("return total"));

    let reused = task2_used_skill(&task1, &task2, REUSE_RESPONSE);
    let rewritten = task2_used_skill(&task1, &task2, REWRITE_RESPONSE);
    assert!(reused);
    assert!(!rewritten, "a redefined skill is not a used skill");

    // Rewards: both rollouts solve both tasks (score 1).
    let chain = |used: bool| {
        let task2 = TaskOutcome::new(1.0, true);
        [
            TaskOutcome::new(1.0, true),
            if used {
                task2.using_skill_from(0)
            } else {
                task2
            },
        ]
    };
    let mut rewards = [0.0f32; 4]; // [rollout][position]
    RewardKind::SkillIntegrated
        .rewards(&chain(reused), &mut rewards[0..2])
        .unwrap();
    RewardKind::SkillIntegrated
        .rewards(&chain(rewritten), &mut rewards[2..4])
        .unwrap();
    assert_eq!(rewards, [2.0, 2.0, 1.0, 1.0]);

    // Advantages per chain position over the 2 rollouts: mean-centred.
    let mut advantages = [0.0f32; 4];
    chain_advantages(&rewards, 2, 2, false, 1e-6, &mut advantages).unwrap();
    assert_eq!(advantages, [0.5, 0.5, -0.5, -0.5]);

    // GRPO: 4 sequences (rollout x position) of 5 positions; the first 2 positions of
    // each are prompt (masked). On-policy, so every ratio is 1 and the coefficient of
    // an agent token is -A / (sequences * agent tokens of its sequence).
    let positions = 5;
    let logp: Vec<f32> = (0..4 * positions).map(|i| -0.1 - 0.01 * i as f32).collect();
    let mask: Vec<bool> = (0..4 * positions).map(|i| i % positions >= 2).collect();
    let seq_lens = [positions; 4];
    let batch = TokenBatch {
        logp: &logp,
        logp_old: &logp,
        logp_ref: None,
        mask: &mask,
        seq_lens: &seq_lens,
        advantages: &advantages,
    };
    let mut coef = vec![f32::NAN; logp.len()];
    let stats = policy_loss(&GrpoConfig::default(), &batch, &mut coef).unwrap();
    assert_eq!(stats.tokens, 12);
    assert_eq!(stats.clip_fraction, 0.0);
    assert!(stats.loss.abs() < 1e-7, "advantages cancel: {}", stats.loss);
    for (i, &c) in coef.iter().enumerate() {
        let (seq, pos) = (i / positions, i % positions);
        let expected = if pos < 2 {
            0.0
        } else {
            -advantages[seq] / (4.0 * 3.0)
        };
        assert!(
            (c - expected).abs() < 1e-7,
            "coef[{i}] = {c}, expected {expected}"
        );
    }
}

#[test]
fn library_survives_a_postcard_round_trip_with_its_counters() {
    let task1 = task("t1", "How much money did Bob send me on Venmo in March?");
    let mut library = HashSkillLibrary::new();
    for skill in saved_skills(TASK1_RESPONSE, &task1) {
        library.insert(skill).unwrap();
    }
    library.record_used("total_received", true).unwrap();
    let bytes = library.to_postcard();
    let back = HashSkillLibrary::from_postcard(&bytes).unwrap();
    assert_eq!(back, library);
    assert_eq!(back.get("total_received").unwrap().stats.used_in_success, 1);
    assert!(HashSkillLibrary::from_postcard(&bytes[..bytes.len() - 1]).is_err());
}
