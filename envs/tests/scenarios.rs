//! Tests of the task layer: the template catalog, the splits and their rules, stable
//! ids, determinism, and the shape of every built scenario and its expected outcome.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, OnceLock};

use sage_envs::scenarios::{
    template, templates, Catalog, CatalogConfig, ScenarioError, Split, TaskKind, TASKS_PER_SCENARIO,
};
use sage_envs::world::registry;

fn catalog() -> Arc<Catalog> {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            Arc::new(Catalog::build(&CatalogConfig::default()).expect("the catalog builds"))
        })
        .clone()
}

fn apps_of(split: Split) -> BTreeSet<&'static str> {
    split
        .template_names()
        .iter()
        .flat_map(|name| {
            template(name)
                .expect("listed templates exist")
                .apps
                .iter()
                .copied()
        })
        .collect()
}

#[test]
fn there_are_at_least_40_templates_with_unique_names() {
    let all = templates();
    assert!(all.len() >= 40, "{} templates", all.len());
    let names: HashSet<&str> = all.iter().map(|t| t.name).collect();
    assert_eq!(names.len(), all.len(), "names are unique");
    let kinds: HashSet<TaskKind> = all.iter().map(|t| t.kind).collect();
    assert_eq!(kinds.len(), 2, "questions and actions");
    assert!(
        all.iter().filter(|t| t.apps.len() > 1).count() >= 8,
        "multi-app templates"
    );
    assert!(
        all.iter().filter(|t| t.apps.len() == 1).count() >= 20,
        "single-app templates"
    );
    assert!(all.iter().filter(|t| t.kind == TaskKind::Question).count() >= 12);
}

#[test]
fn every_template_is_in_exactly_one_split() {
    let splits = [
        Split::Train,
        Split::Dev,
        Split::TestNormal,
        Split::TestChallenge,
    ];
    for t in templates() {
        let homes: Vec<Split> = splits
            .into_iter()
            .filter(|s| s.template_names().contains(&t.name))
            .collect();
        assert_eq!(homes.len(), 1, "{} is in {homes:?}", t.name);
    }
    let listed: usize = splits.iter().map(|s| s.template_names().len()).sum();
    assert_eq!(
        listed,
        templates().len(),
        "no split lists a template twice or an unknown one"
    );
    assert!(Split::Train.template_names().len() >= 24);
}

#[test]
fn splits_follow_their_rules() {
    let train_apps = apps_of(Split::Train);
    for split in [Split::Dev, Split::TestNormal] {
        for name in split.template_names() {
            assert!(!Split::Train.template_names().contains(name));
            for app in template(name).unwrap().apps {
                assert!(
                    train_apps.contains(app),
                    "{name} ({}) uses {app}, unseen in train",
                    split.name()
                );
            }
        }
    }
    for name in Split::TestChallenge.template_names() {
        let apps = template(name).unwrap().apps;
        assert!(
            apps.iter().any(|a| !train_apps.contains(a)),
            "{name} needs no app that train lacks"
        );
    }
    assert_eq!(Split::Iid.template_names(), Split::Train.template_names());
    let config = CatalogConfig::default();
    let train: BTreeSet<u64> = Split::Train.seeds(&config).collect();
    assert!(
        Split::Iid.seeds(&config).all(|s| !train.contains(&s)),
        "iid seeds are held out"
    );
    for split in Split::ALL {
        assert_eq!(split.name().parse::<Split>(), Ok(split));
        assert_eq!(split.to_string(), split.name());
    }
}

#[test]
fn ids_are_stable_unique_and_well_formed() {
    let catalog = catalog();
    let mut seen = HashSet::new();
    for built in catalog.scenarios() {
        let s = &built.scenario;
        let split: Split = s.split.parse().expect("known split");
        assert_eq!(s.id, split.scenario_id(built.template.name, built.seed));
        assert_eq!(
            s.id,
            format!("{}/{}/{}", s.split, built.template.name, built.seed)
        );
        assert!(seen.insert(s.id.clone()), "duplicate {}", s.id);
        assert_eq!(s.tasks.len(), TASKS_PER_SCENARIO);
        for (k, task) in s.tasks.iter().enumerate() {
            assert_eq!(task.id, format!("{}/t{}", s.id, k + 1));
            assert_eq!(task.scenario_id, s.id);
            assert!(seen.insert(task.id.clone()), "duplicate {}", task.id);
            assert_eq!(
                catalog
                    .task(&task.id)
                    .expect("tasks are found by id")
                    .index(),
                k
            );
        }
        assert!(catalog.scenario(&s.id).is_some());
    }
    assert!(catalog.task("train/nope/1/t1").is_err());
    assert!(catalog.scenario("train").is_none());
}

#[test]
fn building_twice_gives_the_same_catalog() {
    let config = CatalogConfig {
        seeds: 2,
        iid_seeds: 1,
        ..CatalogConfig::default()
    };
    let (a, b) = (
        Catalog::build(&config).unwrap(),
        Catalog::build(&config).unwrap(),
    );
    assert_eq!(a.scenarios().len(), b.scenarios().len());
    for (x, y) in a.scenarios().iter().zip(b.scenarios()) {
        assert_eq!(x.scenario, y.scenario);
        for (s, t) in x.tasks.iter().zip(&y.tasks) {
            assert_eq!(s.params, t.params);
            assert_eq!(s.expected, t.expected);
        }
    }
}

#[test]
fn split_sizes_follow_the_config() {
    let catalog = catalog();
    let config = CatalogConfig::default();
    for split in Split::ALL {
        let expected = split.template_names().len() * split.seeds(&config).count();
        assert_eq!(catalog.split(split).len(), expected, "{}", split.name());
    }
}

/// With 40 training seeds, some template finds too few parameters in some world (seed
/// 1026 has fewer pending coinpay requests than tasks): that pair has no scenario, is
/// listed as skipped, and every other scenario is there under its usual id.
#[test]
fn a_template_without_parameters_in_a_world_is_skipped() {
    let config = CatalogConfig {
        seeds: 40,
        ..CatalogConfig::default()
    };
    let catalog = Catalog::build_splits(&config, &[Split::Train]).expect("the catalog builds");
    let skipped = catalog.skipped();
    assert!(!skipped.is_empty(), "no template-seed pair was skipped");
    let mut missing = HashSet::new();
    for error in skipped {
        let ScenarioError::NoTask { template, seed, .. } = error else {
            panic!("skipped for another reason: {error}");
        };
        let id = Split::Train.scenario_id(template, *seed);
        assert!(catalog.scenario(&id).is_none(), "{id} was built");
        missing.insert(id);
    }
    let ids: HashSet<String> = catalog
        .split(Split::Train)
        .iter()
        .map(|s| s.scenario.id.clone())
        .collect();
    for seed in Split::Train.seeds(&config) {
        for name in Split::Train.template_names() {
            let id = Split::Train.scenario_id(name, seed);
            assert!(ids.contains(&id) != missing.contains(&id), "{id}");
        }
    }
}

#[test]
fn tasks_are_similar_but_distinct_and_never_trivial() {
    for built in catalog().scenarios() {
        let instructions: HashSet<&str> = built
            .tasks
            .iter()
            .map(|t| t.task.instruction.as_str())
            .collect();
        assert_eq!(
            instructions.len(),
            TASKS_PER_SCENARIO,
            "{}",
            built.scenario.id
        );
        let arguments: HashSet<String> = built
            .tasks
            .iter()
            .map(|t| format!("{:?}", built.template.arguments(&t.params)))
            .collect();
        assert_eq!(
            arguments.len(),
            TASKS_PER_SCENARIO,
            "{}: skill arguments differ",
            built.scenario.id
        );
        for task in &built.tasks {
            match built.template.kind {
                TaskKind::Question => {
                    assert!(!task.expected.answer.is_null(), "{}", task.task.id);
                    assert!(
                        task.expected.diff.is_empty(),
                        "{}: questions change nothing",
                        task.task.id
                    );
                }
                TaskKind::Action => {
                    assert!(task.expected.answer.is_null(), "{}", task.task.id);
                    assert!(
                        !task.expected.diff.is_empty(),
                        "{}: actions change something",
                        task.task.id
                    );
                }
            }
            for p in built.template.solution.params {
                assert!(
                    task.params.contains_key(p.name),
                    "{}: no value for {}",
                    task.task.id,
                    p.name
                );
            }
        }
    }
}

#[test]
fn solutions_are_well_formed() {
    let registry = registry();
    let apps: BTreeSet<&str> = registry.app_names().into_iter().collect();
    for t in templates() {
        let s = &t.solution;
        assert!(
            !s.names.is_empty() && !s.summaries.is_empty() && !s.params.is_empty(),
            "{}",
            t.name
        );
        let returns = s
            .body
            .lines()
            .filter(|l| l.trim_start().starts_with("return "))
            .count();
        assert_eq!(returns, 1, "{}: one return", t.name);
        assert!(
            s.body
                .trim_end()
                .lines()
                .last()
                .unwrap()
                .starts_with("    return "),
            "{}",
            t.name
        );
        assert!(
            s.body
                .lines()
                .all(|l| l.is_empty() || l.starts_with("    ")),
            "{}: body indented",
            t.name
        );
        for app in t.apps {
            assert!(apps.contains(app), "{}: unknown app {app}", t.name);
        }
        for (app, api) in s.docs {
            assert!(
                registry.doc(app, api).is_some(),
                "{}: no API {app}.{api}",
                t.name
            );
            assert!(
                t.apps.contains(app),
                "{}: looks up {app}, not one of its apps",
                t.name
            );
        }
        for p in s.params {
            assert!(
                ["str", "int", "float", "list"].contains(&p.ty),
                "{}: type {}",
                t.name,
                p.ty
            );
        }
    }
}

#[test]
fn catalogs_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Catalog>();
    let catalog = catalog();
    let count = std::thread::spawn(move || catalog.split(Split::Dev).len())
        .join()
        .unwrap();
    assert!(count > 0);
}

#[test]
fn a_catalog_of_chosen_scenarios_serves_their_tasks() {
    let full = catalog();
    let chosen: Vec<_> = full.scenarios()[..3]
        .iter()
        .map(|s| (**s).clone())
        .collect();
    let ids: Vec<String> = chosen.iter().map(|s| s.scenario.id.clone()).collect();
    let custom = Catalog::from_scenarios(chosen);
    assert_eq!(custom.scenarios().len(), 3);
    for (built, id) in custom.scenarios().iter().zip(&ids) {
        assert_eq!(&built.scenario.id, id);
        let task = &built.scenario.tasks[0];
        assert_eq!(custom.task(&task.id).unwrap().scenario().scenario.id, *id);
    }
    let other = &full.scenarios()[3].scenario.tasks[0].id;
    assert!(
        custom.task(other).is_err(),
        "only the chosen scenarios' tasks"
    );
}

#[test]
fn an_unknown_split_name_lists_the_known_ones() {
    let error = "iidd".parse::<Split>().unwrap_err().to_string();
    assert_eq!(
        error,
        "unknown split \"iidd\" (known: train, iid, dev, test-normal, test-challenge)"
    );
}
