//! Tests of `WorldEnv`: episode life cycle (reset, turn limit, no-code, completion),
//! skill bookkeeping (defined, saved, used, dropped), fresh worlds per episode,
//! determinism, and evaluation that an agent cannot fool by only completing or by
//! deleting data.

use std::sync::{Arc, OnceLock};

use sage_core::skill::Origin;
use sage_core::{Environment, Skill, Task};
use sage_envs::environment::{EnvConfig, EnvError, WorldEnv, NO_CODE_OBSERVATION};
use sage_envs::scenarios::{BuiltScenario, Catalog, CatalogConfig, Split};

fn catalog() -> Arc<Catalog> {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            let config = CatalogConfig {
                seeds: 1,
                iid_seeds: 1,
                ..CatalogConfig::default()
            };
            Arc::new(Catalog::build_splits(&config, &[Split::Train]).expect("the catalog builds"))
        })
        .clone()
}

fn env() -> WorldEnv {
    WorldEnv::new(catalog(), EnvConfig::default()).expect("a sandbox worker")
}

fn scenario(template: &str) -> Arc<BuiltScenario> {
    catalog()
        .scenarios()
        .iter()
        .find(|s| s.template.name == template)
        .cloned()
        .unwrap_or_else(|| panic!("no scenario of {template}"))
}

fn task(template: &str) -> Task {
    scenario(template).tasks[0].task.clone()
}

fn code(text: &str) -> String {
    format!("Thinking.\n\n```python\n{text}\n```")
}

const NOTES_LOGIN: &str = r#"passwords = {p["account_name"]: p["password"] for p in apis.supervisor.show_account_passwords()}
profile = apis.supervisor.show_profile()
token = apis.notes.login(username=profile["email"], password=passwords["notes"])["access_token"]"#;

fn skill(name: &str, source: &str) -> Skill {
    Skill {
        name: name.to_owned(),
        params: Vec::new(),
        docstring: None,
        source: source.to_owned(),
        origin: Origin::default(),
        stats: Default::default(),
        revision: 0,
    }
}

#[test]
fn a_response_without_code_ends_the_episode() {
    let mut env = env();
    env.reset(&task("notes_tag_count"), &[]).unwrap();
    let step = env.step("I think the answer is 3.").unwrap();
    assert!(step.done && !step.had_code);
    assert_eq!(step.observation, NO_CODE_OBSERVATION);
    assert_eq!(env.step(&code("print(1)")), Err(EnvError::EpisodeOver));
    assert!(!env.evaluate().unwrap().passed);
}

#[test]
fn steps_need_an_episode_and_tasks_must_exist() {
    let mut env = env();
    assert_eq!(env.step(&code("print(1)")), Err(EnvError::NoEpisode));
    assert_eq!(env.evaluate(), Err(EnvError::NoEpisode));
    let unknown = Task {
        id: "train/no_such_template/1000/t1".to_owned(),
        scenario_id: "train/no_such_template/1000".to_owned(),
        instruction: String::new(),
    };
    assert!(matches!(
        env.reset(&unknown, &[]),
        Err(EnvError::UnknownTask(_))
    ));
}

#[test]
fn the_turn_limit_ends_the_episode() {
    let config = EnvConfig {
        max_turns: 2,
        ..EnvConfig::default()
    };
    let mut env = WorldEnv::new(catalog(), config).expect("a sandbox worker");
    env.reset(&task("notes_tag_count"), &[]).unwrap();
    assert!(!env.step(&code("x = 1")).unwrap().done);
    let last = env.step(&code("print(x + 1)")).unwrap();
    assert!(last.done && last.had_code);
    assert_eq!(last.observation, "2\n");
    assert_eq!(env.turns(), 2);
}

#[test]
fn complete_task_ends_the_episode() {
    let mut env = env();
    env.reset(&task("notes_tag_count"), &[]).unwrap();
    let step = env
        .step(&code("apis.supervisor.complete_task(answer=1)"))
        .unwrap();
    assert!(step.done);
    assert!(env.is_done());
}

#[test]
fn defined_saved_and_used_skills_are_reported() {
    let mut env = env();
    let t = task("notes_tag_count");
    env.reset(&t, &[]).unwrap();
    let step = env
        .step(&code(
            "def double(x: int) -> int:\n    \"\"\"Doubles a number.\"\"\"\n    return 2 * x\n\ndef broken() -> int:\n    return {}[\"missing\"]\n\nprint(double(3))\nbroken()",
        ))
        .unwrap();
    assert_eq!(step.defined, ["double", "broken"]);
    assert_eq!(
        step.saved.len(),
        1,
        "only the function that ran without error is saved"
    );
    let saved = &step.saved[0];
    assert_eq!(saved.name, "double");
    assert_eq!(saved.docstring.as_deref(), Some("Doubles a number."));
    assert_eq!(saved.params[0].annotation.as_deref(), Some("int"));
    assert!(saved.source.starts_with("def double(x: int) -> int:"));
    assert_eq!(saved.origin.task_id, t.id);
    assert_eq!(saved.origin.scenario_id, t.scenario_id);
    assert!(step.used.is_empty());

    let library = vec![saved.clone()];
    let reset = env
        .reset(&scenario("notes_tag_count").tasks[1].task, &library)
        .unwrap();
    assert!(reset.dropped.is_empty());
    assert_eq!(env.library(), ["double"]);
    let step = env.step(&code("y = 5\nprint(y)")).unwrap();
    assert!(
        step.used.is_empty(),
        "a library skill counts as used only when it runs"
    );
    let step = env.step(&code("print(double(4))")).unwrap();
    assert_eq!(step.observation, "8\n");
    assert_eq!(step.used, ["double"]);
    assert!(step.saved.is_empty(), "library skills are not saved again");
    let step = env
        .step(&code(
            "def double(x: int) -> int:\n    return x + x\n\nprint(double(5))",
        ))
        .unwrap();
    assert!(
        step.used.is_empty(),
        "a redefined skill is the episode's own"
    );
    assert_eq!(step.saved.len(), 1);
}

#[test]
fn skills_that_fail_to_load_are_dropped() {
    let mut env = env();
    let library = vec![
        skill("good", "def good():\n    return 1"),
        skill("syntax", "def syntax(:\n    return 1"),
        skill("renamed", "def other():\n    return 1"),
        skill(
            "two",
            "def two():\n    return 1\ndef three():\n    return 1",
        ),
    ];
    let reset = env.reset(&task("notes_tag_count"), &library).unwrap();
    let dropped: Vec<&str> = reset.dropped.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(dropped, ["syntax", "renamed", "two"]);
    assert!(reset.dropped.iter().all(|d| !d.reason.is_empty()));
    assert_eq!(env.library(), ["good"]);
}

#[test]
fn only_completing_never_passes() {
    for template in [
        "notes_tag_count",
        "coinpay_decline_requests_from",
        "cross_todo_from_note",
    ] {
        let mut env = env();
        env.reset(&task(template), &[]).unwrap();
        env.step(&code("apis.supervisor.complete_task()")).unwrap();
        let evaluation = env.evaluate().unwrap();
        assert!(!evaluation.passed, "{template}");
        assert!(evaluation.score < 1.0, "{template}");
    }
}

#[test]
fn wrong_answers_fail_and_right_ones_pass() {
    let built = scenario("notes_tag_count");
    let expected = built.tasks[0].expected.answer.as_i64().unwrap();
    let mut env = env();
    env.reset(&built.tasks[0].task, &[]).unwrap();
    env.step(&code(&format!(
        "apis.supervisor.complete_task(answer={})",
        expected + 1
    )))
    .unwrap();
    assert!(!env.evaluate().unwrap().passed);
    env.reset(&built.tasks[0].task, &[]).unwrap();
    env.step(&code(&format!(
        "apis.supervisor.complete_task(answer=\"{expected}\")"
    )))
    .unwrap();
    assert!(
        env.evaluate().unwrap().passed,
        "{}",
        env.report().unwrap().failures()
    );
}

#[test]
fn deleting_data_fails_even_with_the_right_answer() {
    let built = scenario("notes_tag_count");
    let expected = built.tasks[0].expected.answer.clone();
    let mut env = env();
    env.reset(&built.tasks[0].task, &[]).unwrap();
    let vandal = format!(
        "{NOTES_LOGIN}\nnotes = apis.notes.show_notes(access_token=token)\napis.notes.delete_note(access_token=token, note_id=notes[0][\"note_id\"])\napis.supervisor.complete_task(answer={expected})"
    );
    let step = env.step(&code(&vandal)).unwrap();
    assert!(step.done, "{}", step.observation);
    let report = env.report().unwrap();
    assert!(!report.passed());
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(failed, ["no collateral damage"]);
}

#[test]
fn every_episode_starts_from_a_fresh_world() {
    let mut env = env();
    let t = task("notes_tag_count");
    env.reset(&t, &[]).unwrap();
    let rows = env.world().unwrap().db().notes.len();
    let delete = "notes = apis.notes.show_notes(access_token=token)\napis.notes.delete_note(access_token=token, note_id=notes[0][\"note_id\"])";
    env.step(&code(&format!("{NOTES_LOGIN}\n{delete}")))
        .unwrap();
    assert_eq!(env.world().unwrap().db().notes.len(), rows - 1);
    env.reset(&t, &[]).unwrap();
    assert_eq!(env.world().unwrap().db().notes.len(), rows);
    let step = env.step(&code("print(x)")).unwrap();
    assert!(
        step.observation.contains("not found"),
        "variables do not survive a reset: {}",
        step.observation
    );
}

#[test]
fn the_same_turns_give_the_same_observations() {
    let turns = [
        format!("{NOTES_LOGIN}\nprint(apis.notes.show_notes(access_token=token, page_limit=3))"),
        "print(apis.supervisor.show_current_date())".to_owned(),
        "apis.notes.show_note(access_token=token, note_id=999999)".to_owned(),
    ];
    let run = || {
        let mut env = env();
        env.reset(&task("notes_tag_count"), &[]).unwrap();
        turns
            .iter()
            .map(|t| env.step(&code(t)).unwrap().observation)
            .collect::<Vec<_>>()
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a[2].contains("ApiError"), "{}", a[2]);
}
