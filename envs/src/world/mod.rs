//! The built-in world: a deterministic, seeded simulation of a person's everyday apps,
//! which agent code reaches through the sandbox as `apis.<app>.<api>(kw=...)`.
//!
//! [`World`] owns one world's state and implements [`ApiHost`]. Modules:
//! - `records`: the typed rows of every table, one file per app ([`records`]).
//! - `table`, `db`: [`Table`] (rows keyed by [`Id`], copy-on-write) and [`Db`], the
//!   named tables that make up the state; `queries` adds read-only questions on it
//!   (relations, ratings, debts, ...) that both the apps and scenario code use.
//! - `diff`: [`DbDiff`], what changed between two states, per table and per field.
//! - `time`, `money`: [`Date`]/[`Timestamp`] (no clock: a fixed [`today`] and a
//!   logical clock) and [`Money`] (exact cents).
//! - `docs`, `declare`, `registry`: [`ApiDoc`], how an app declares its APIs, and the
//!   [`Registry`] of every app's APIs (doc, signature, handler; [`registry`] gives the
//!   one every world shares); `args`: typed access to arguments and paging; `session`:
//!   access tokens.
//! - `apps`: one file per app with its APIs (`supervisor`, `api_docs`, `tunes`,
//!   `coinpay`, `mail`, `phone`, `notes`, `todo`, `shop`, `files`, `splitbill`).
//! - `generate`: the seeded generator, one file per app plus word pools; `rng`: its
//!   random numbers.
//!
//! Determinism: the same seed and [`WorldConfig`] give the same world, and the same
//! calls give the same results (tokens and timestamps included). Nothing reads the
//! system clock or any other outside state.
//!
//! How scenario code uses a world: read (and, before an episode, plant) data through
//! the typed tables of [`World::db`] / [`World::db_mut`] and the questions of `queries`
//! ([`Db::related`], [`Db::group_debts`], ...); compute expected answers from them;
//! take a [`World::snapshot`] when the episode starts, run the agent's code against the
//! world, then check [`World::diff_since`] and [`World::completion`].
//!
//! ```
//! use sage_envs::world::{records::RelationKind, Money, World, USER};
//! use serde_json::json;
//!
//! let mut world = World::generate(42);
//! let roommate = world.db().related(USER, RelationKind::Roommate)[0];
//! let before = world.snapshot();
//!
//! // What agent code would do, called from Rust.
//! let password = world.db().account(USER, "coinpay").unwrap().password.clone();
//! let email = world.db().email_of(USER);
//! let login = world.invoke("coinpay", "login", json!({"username": email, "password": password}));
//! let token = login.unwrap()["access_token"].clone();
//! let receiver = world.db().email_of(roommate);
//! let args = json!({"access_token": token, "receiver_email": receiver, "amount": 25});
//! world.invoke("coinpay", "send_payment", args).unwrap();
//! world.invoke("supervisor", "complete_task", json!({})).unwrap();
//!
//! let diff = world.diff_since(&before);
//! assert_eq!(diff.changed_tables(), ["coinpay.wallets", "coinpay.transactions"]);
//! let payment = world.db().transactions.get(diff.table("coinpay.transactions").unwrap().added[0].id).unwrap();
//! assert_eq!((payment.receiver, payment.amount), (roommate, Money::from_dollars(25)));
//! assert!(world.is_complete());
//! ```

mod apps;
mod args;
mod db;
mod declare;
mod diff;
mod docs;
mod generate;
mod money;
mod queries;
pub mod records;
mod registry;
mod rng;
mod session;
mod table;
mod time;

use std::sync::OnceLock;

use serde_json::{Map, Value};

pub use apps::LOGIN_APPS;
pub use args::MAX_PAGE_LIMIT;
pub use db::Db;
pub use diff::{AnyTable, DbDiff, FieldChange, RowChange, RowImage, TableDiff};
pub use docs::{ApiDoc, ParamDoc};
pub use money::Money;
pub use registry::Registry;
pub use table::{Id, PersonId, Record, Table};
pub use time::{days_in_month, today, Date, Timestamp};

use crate::sandbox::{bind_args, ApiError, ApiHost, ApiSpec};
use args::Args;
use session::Sessions;

/// The catalog of every app's APIs, built from the apps' declarations on first use and
/// shared by every world.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry::new(apps::all()))
}

/// The person the agent works for: the supervisor app's user.
pub const USER: PersonId = 1;

/// Knobs of the generator and of the APIs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldConfig {
    /// People in the world, the user included (at least 30; smaller values are raised).
    pub people: usize,
    /// API calls after its login that an access token stays valid for.
    pub token_lifetime: u64,
}

impl Default for WorldConfig {
    fn default() -> WorldConfig {
        WorldConfig {
            people: 60,
            token_lifetime: 1000,
        }
    }
}

/// The answer the agent gave through `apis.supervisor.complete_task`.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The answer (`null` for tasks without one).
    pub answer: Value,
    /// The API call (1-based count since the episode started) that completed the task.
    pub at_call: u64,
}

/// One world: its database, the access tokens handed out, the logical clock and the
/// task's completion. Cloning is cheap (tables are shared until written), so one
/// generated world can serve many tasks.
#[derive(Clone, Debug)]
pub struct World {
    db: Db,
    seed: u64,
    config: WorldConfig,
    sessions: Sessions,
    clock: u64,
    completion: Option<Completion>,
}

impl World {
    /// The world of `seed` with the default [`WorldConfig`].
    pub fn generate(seed: u64) -> World {
        World::generate_with(seed, WorldConfig::default())
    }

    /// The world of `seed` and `config`.
    pub fn generate_with(seed: u64, config: WorldConfig) -> World {
        let config = WorldConfig {
            people: config.people.max(generate::MIN_PEOPLE),
            ..config
        };
        World {
            db: generate::generate(seed, config.people),
            seed,
            config,
            sessions: Sessions::default(),
            clock: 0,
            completion: None,
        }
    }

    /// The seed it was generated from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Its configuration.
    pub fn config(&self) -> &WorldConfig {
        &self.config
    }

    /// The person the agent works for ([`USER`]).
    pub fn user(&self) -> PersonId {
        USER
    }

    /// The state.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The state, for planting a task's data before an episode.
    pub fn db_mut(&mut self) -> &mut Db {
        &mut self.db
    }

    /// A snapshot of the state (cheap: tables are shared until written).
    pub fn snapshot(&self) -> Db {
        self.db.clone()
    }

    /// What changed since `before` (a [`World::snapshot`]).
    pub fn diff_since(&self, before: &Db) -> DbDiff {
        before.diff(&self.db)
    }

    /// Starts an episode: forgets every access token and the completion, and sets the
    /// logical clock back to zero. The state is kept.
    pub fn start_episode(&mut self) {
        self.sessions.clear();
        self.clock = 0;
        self.completion = None;
    }

    /// API calls made since the episode started (the logical clock).
    pub fn api_calls(&self) -> u64 {
        self.clock
    }

    /// The logical time: noon of [`today`] plus one second per API call so far.
    pub fn now(&self) -> Timestamp {
        today().at(12, 0, 0).add_seconds(self.clock as i64)
    }

    /// How the task was completed, once `complete_task` was called.
    pub fn completion(&self) -> Option<&Completion> {
        self.completion.as_ref()
    }

    /// Whether `complete_task` was called (the episode is over).
    pub fn is_complete(&self) -> bool {
        self.completion.is_some()
    }

    /// Takes back a completion: the execution that called `complete_task` was stopped
    /// before it ended, so its call does not count.
    pub(crate) fn withdraw_completion(&mut self) {
        self.completion = None;
    }

    /// An access token for `person` in `app`, as if they had logged in (for tests and
    /// scenario set-up; agent code logs in with the app's `login`).
    pub fn issue_token(&mut self, app: &str, person: PersonId) -> Result<String, ApiError> {
        let app = LOGIN_APPS
            .iter()
            .copied()
            .find(|&a| a == app)
            .ok_or_else(|| ApiError::new(format!("{app} has no login")))?;
        if !self.db.people.contains(person) {
            return Err(ApiError::new(format!("no person with id {person}")));
        }
        Ok(self.sessions.issue(self.seed, app, person, self.clock))
    }

    /// Calls an API from Rust as agent code would: `args` (a JSON object) is checked
    /// against the signature and defaults are filled in first.
    pub fn invoke(&mut self, app: &str, api: &str, args: Value) -> Result<Value, ApiError> {
        let spec = registry()
            .spec(app, api)
            .ok_or_else(|| ApiError::new(format!("no API apis.{app}.{api}")))?;
        let Value::Object(args) = args else {
            return Err(ApiError::new("arguments must be a JSON object"));
        };
        let bound = bind_args(spec, args).map_err(|e| ApiError::new(e.to_string()))?;
        self.call(app, api, bound)
    }

    /// The person an access token passed in `args` logs into `app`.
    pub(crate) fn auth(&self, app: &str, args: &Args) -> Result<PersonId, ApiError> {
        let token = args.str("access_token")?;
        self.sessions
            .check(token, app, self.clock, self.config.token_lifetime)
    }
}

impl ApiHost for World {
    fn spec(&self, app: &str, api: &str) -> Option<&ApiSpec> {
        registry().spec(app, api)
    }

    fn app_names(&self) -> Vec<String> {
        registry()
            .app_names()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    fn api_names(&self, app: &str) -> Vec<String> {
        registry()
            .docs(app)
            .into_iter()
            .map(|d| d.name.to_owned())
            .collect()
    }

    fn call(&mut self, app: &str, api: &str, args: Map<String, Value>) -> Result<Value, ApiError> {
        self.clock += 1;
        let def = registry()
            .def(app, api)
            .ok_or_else(|| ApiError::new(format!("no API apis.{app}.{api}")))?;
        if self.completion.is_some() {
            return Err(ApiError::new(
                "the task is already complete: no more API calls are accepted",
            ));
        }
        (def.handler)(self, &Args(args))
    }
}
