//! The splits: which templates and seeds each holds, the stable ids of their scenarios
//! and tasks, and the [`Catalog`] that builds them.
//!
//! - `train`: the training templates, seeds `1000..`.
//! - `iid`: the training templates with held-out seeds (`2000..`): same kinds of
//!   tasks, new worlds and parameters.
//! - `dev`, `test-normal`: templates not in train that only need apps the training
//!   templates use (seeds `3000..` and `4000..`).
//! - `test-challenge`: templates that each need at least one app no training template
//!   uses (`files` or `splitbill`), seeds `5000..`.
//!
//! Ids: a scenario is `<split>/<template>/<seed>`, its tasks `<scenario>/t1` to `/t3`.
//! Each seed is also the seed of the world its scenarios start from, so ids, worlds,
//! parameters and instructions are the same on every run.

use std::collections::HashMap;
use std::sync::Arc;

use super::build::BuiltScenario;
use super::{template, BuiltTask, ScenarioError};
use crate::names::Named;
use crate::world::{World, WorldConfig};

/// A split of the scenarios, named in settings by [`Split::name`] (`FromStr`,
/// `Display`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Split {
    /// Training templates, training seeds.
    Train,
    /// Held-out seeds of the training templates.
    Iid,
    /// Development templates (not in train; apps seen in train).
    Dev,
    /// Test templates not in train whose apps are all seen in train.
    TestNormal,
    /// Test templates that need an app no training template uses.
    TestChallenge,
}

impl Split {
    /// Every split, in report order.
    pub const ALL: [Split; 5] = [
        Split::Train,
        Split::Iid,
        Split::Dev,
        Split::TestNormal,
        Split::TestChallenge,
    ];

    /// The split's name as ids spell it.
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Iid => "iid",
            Split::Dev => "dev",
            Split::TestNormal => "test-normal",
            Split::TestChallenge => "test-challenge",
        }
    }

    /// The names of the split's templates.
    pub fn template_names(self) -> &'static [&'static str] {
        match self {
            Split::Train | Split::Iid => TRAIN,
            Split::Dev => DEV,
            Split::TestNormal => TEST_NORMAL,
            Split::TestChallenge => TEST_CHALLENGE,
        }
    }

    /// The first seed of the split (splits are [`SEEDS_PER_SPLIT`] seeds apart).
    fn first_seed(self) -> u64 {
        match self {
            Split::Train => 1000,
            Split::Iid => 2000,
            Split::Dev => 3000,
            Split::TestNormal => 4000,
            Split::TestChallenge => 5000,
        }
    }

    /// The seeds of the split's scenarios under `config`.
    pub fn seeds(self, config: &CatalogConfig) -> std::ops::Range<u64> {
        let count = match self {
            Split::Iid => config.iid_seeds,
            _ => config.seeds,
        };
        let first = self.first_seed() + config.seed_offset;
        first..first + count
    }

    /// The id of the scenario of `template` with `seed` in this split.
    pub fn scenario_id(self, template: &str, seed: u64) -> String {
        format!("{}/{template}/{seed}", self.name())
    }
}

/// The training templates.
const TRAIN: &[&str] = &[
    "tunes_genre_like_count",
    "tunes_playlist_minutes",
    "tunes_artist_playlist",
    "tunes_follow_playlist_artists",
    "tunes_like_top_genre_songs",
    "coinpay_received_in_month",
    "coinpay_spent_on_since",
    "coinpay_decline_requests_from",
    "coinpay_approve_small_requests",
    "coinpay_top_sender_in_month",
    "mail_archive_from_sender",
    "phone_text_relation",
    "phone_missed_calls_from",
    "notes_tag_count",
    "notes_append_line",
    "todo_complete_due",
    "todo_count_priority",
    "shop_cheapest_of_brand",
    "shop_spent_on_category",
    "shop_wishlist_to_cart",
    "cross_request_from_relation",
    "cross_inbox_count_from_contact",
    "cross_forward_latest_subject",
    "cross_email_playlist",
    "cross_todo_from_note",
];

/// The development templates.
const DEV: &[&str] = &[
    "tunes_unlike_old_genre",
    "coinpay_sent_to_person",
    "phone_delete_texts_from",
    "notes_pin_tag",
    "cross_star_from_contact",
];

/// The normal test templates.
const TEST_NORMAL: &[&str] = &[
    "tunes_playlist_genre_count",
    "tunes_plays_of_artist",
    "coinpay_cancel_requests_to",
    "todo_new_list_with_items",
    "phone_move_alarms_on",
    "cross_pay_relation",
    "cross_emails_sent_to_contact",
];

/// The challenge test templates.
const TEST_CHALLENGE: &[&str] = &[
    "splitbill_owed_by_member",
    "splitbill_settle_debts",
    "splitbill_add_shared_expense",
    "files_receipts_total",
    "files_copy_receipts",
    "cross_note_from_file",
    "cross_request_group_debts",
];

/// Seeds each split owns: a split's offset plus its seed count must stay within them.
pub const SEEDS_PER_SPLIT: u64 = 1000;

/// How many scenarios each template gets, and the worlds they start from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogConfig {
    /// Seeds per template in train, dev, test-normal and test-challenge.
    pub seeds: u64,
    /// Held-out seeds per training template in iid.
    pub iid_seeds: u64,
    /// Seeds skipped at the start of every split (0: the usual scenarios). RL uses it to
    /// draw training scenarios that an SFT model's data, built from the first seeds, did
    /// not contain.
    pub seed_offset: u64,
    /// The generator's settings for every world.
    pub world: WorldConfig,
}

impl Default for CatalogConfig {
    fn default() -> CatalogConfig {
        CatalogConfig {
            seeds: 5,
            iid_seeds: 2,
            seed_offset: 0,
            world: WorldConfig::default(),
        }
    }
}

/// A task of the catalog: its scenario and its index there.
#[derive(Clone, Debug)]
pub struct TaskRef {
    scenario: Arc<BuiltScenario>,
    index: usize,
}

impl TaskRef {
    /// The scenario.
    pub fn scenario(&self) -> &Arc<BuiltScenario> {
        &self.scenario
    }

    /// The task's index in the scenario.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The task.
    pub fn task(&self) -> &BuiltTask {
        &self.scenario.tasks[self.index]
    }
}

/// Built scenarios of some splits, by id.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    scenarios: Vec<Arc<BuiltScenario>>,
    by_id: HashMap<String, usize>,
    skipped: Vec<ScenarioError>,
}

impl Catalog {
    /// Every split's scenarios.
    pub fn build(config: &CatalogConfig) -> Result<Catalog, ScenarioError> {
        Catalog::build_splits(config, &Split::ALL)
    }

    /// The scenarios of `splits` (each split's templates with each of its seeds). Each
    /// seed's world is generated once and shared by its scenarios. A template that finds
    /// no parameters for one of its tasks in a seed's world (say, fewer pending requests
    /// than tasks) has no scenario with that seed: it is left out and listed in
    /// [`Catalog::skipped`]; ids of the other scenarios do not change.
    pub fn build_splits(
        config: &CatalogConfig,
        splits: &[Split],
    ) -> Result<Catalog, ScenarioError> {
        let mut catalog = Catalog::default();
        for &split in splits {
            let seeds = split.seeds(config);
            if seeds.end - split.first_seed() > SEEDS_PER_SPLIT {
                return Err(ScenarioError::SeedRange {
                    split: split.name(),
                    seeds,
                });
            }
            let templates = split
                .template_names()
                .iter()
                .map(|&name| {
                    template(name).ok_or_else(|| ScenarioError::UnknownTemplate(name.to_owned()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            for seed in seeds {
                let world = Arc::new(World::generate_with(seed, config.world.clone()));
                for &template in &templates {
                    let id = split.scenario_id(template.name, seed);
                    match BuiltScenario::build(&id, split.name(), template, seed, world.clone()) {
                        Ok(scenario) => catalog.insert(scenario),
                        Err(e @ ScenarioError::NoTask { .. }) => catalog.skipped.push(e),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(catalog)
    }

    /// A catalog of the given scenarios (for custom selections; ids must be unique).
    pub fn from_scenarios(scenarios: impl IntoIterator<Item = BuiltScenario>) -> Catalog {
        let mut catalog = Catalog::default();
        for scenario in scenarios {
            catalog.insert(scenario);
        }
        catalog
    }

    /// The (template, seed) pairs left out because the template found no parameters
    /// for a task in the seed's world.
    pub fn skipped(&self) -> &[ScenarioError] {
        &self.skipped
    }

    fn insert(&mut self, scenario: BuiltScenario) {
        self.by_id
            .insert(scenario.scenario.id.clone(), self.scenarios.len());
        for task in &scenario.tasks {
            self.by_id
                .insert(task.task.id.clone(), self.scenarios.len());
        }
        self.scenarios.push(Arc::new(scenario));
    }

    /// Every scenario, split by split, template by template within a seed.
    pub fn scenarios(&self) -> &[Arc<BuiltScenario>] {
        &self.scenarios
    }

    /// The scenarios of `split`.
    pub fn split(&self, split: Split) -> Vec<&Arc<BuiltScenario>> {
        self.scenarios
            .iter()
            .filter(|s| s.scenario.split == split.name())
            .collect()
    }

    /// The scenario with this id.
    pub fn scenario(&self, id: &str) -> Option<&Arc<BuiltScenario>> {
        self.by_id
            .get(id)
            .map(|&i| &self.scenarios[i])
            .filter(|s| s.scenario.id == id)
    }

    /// The task with this id.
    pub fn task(&self, task_id: &str) -> Result<TaskRef, ScenarioError> {
        let scenario = self
            .by_id
            .get(task_id)
            .map(|&i| &self.scenarios[i])
            .ok_or_else(|| ScenarioError::BadId(task_id.to_owned()))?;
        let index = scenario
            .tasks
            .iter()
            .position(|t| t.task.id == task_id)
            .ok_or_else(|| ScenarioError::BadId(task_id.to_owned()))?;
        Ok(TaskRef {
            scenario: scenario.clone(),
            index,
        })
    }
}

impl Named for Split {
    const WHAT: &'static str = "split";
    const ALL: &'static [Split] = &Split::ALL;
    fn name(self) -> &'static str {
        Split::name(self)
    }
}

crate::impl_named_text!(Split);
