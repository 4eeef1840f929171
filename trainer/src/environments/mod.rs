//! Where episodes run, as `[env]` picks: the built-in world in this process (`kind =
//! "builtin"`, the default), or environment servers in other processes that speak
//! AppWorld's HTTP protocol (`kind = "remote"`): running ones at `urls`, or `servers`
//! of them started from `command`. One server runs one episode at a time, so a pool of
//! N servers runs a rollout's episodes N at a time.
//!
//! - [`http`]: one server's endpoint: bounded, retried JSON calls.
//! - [`remote`]: [`RemoteEnv`], an `Environment` over one server.
//! - [`listing`]: the scenarios of a split of a remote environment.
//! - [`servers`]: the pool of servers, started and stopped with the run.
//! - [`serve`]: `sage serve-world`, the built-in world behind the same protocol.

pub mod http;
pub mod listing;
pub mod remote;
pub mod serve;
pub mod servers;

use std::cell::Cell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rollout::EnvFactory;
use crate::text;
use http::{CallLimits, Server};
use listing::{list_split, ListingError, RemoteScenario};
use remote::{RemoteEnv, RemoteError, RemoteSettings};
use servers::{ServerPool, ServersError};

/// Which environment a run's episodes use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EnvKind {
    /// The built-in world, in this process.
    #[default]
    Builtin,
    /// Environment servers in other processes, over HTTP.
    Remote,
}

impl fmt::Display for EnvKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvKind::Builtin => "builtin",
            EnvKind::Remote => "remote",
        })
    }
}

impl FromStr for EnvKind {
    type Err = String;

    fn from_str(text: &str) -> Result<EnvKind, String> {
        match text {
            "builtin" => Ok(EnvKind::Builtin),
            "remote" => Ok(EnvKind::Remote),
            other => Err(format!(
                "unknown environment kind `{other}` (builtin or remote)"
            )),
        }
    }
}

/// The `[env]` section of a run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnvSettings {
    /// `builtin` or `remote`.
    #[serde(with = "text")]
    pub kind: EnvKind,
    /// Running servers' base URLs (`http://host:port`), one per concurrent episode.
    pub urls: Vec<String>,
    /// With no `urls`: the command that starts one server, `{port}` standing for its
    /// port (run by `sh -c`); `servers` of them are started, and stopped on exit.
    pub command: String,
    /// Servers started from `command`.
    pub servers: usize,
    /// A directory of task-id files (`<split>.txt`, AppWorld's layout); empty: the
    /// servers list each split's scenarios (`GET /scenarios/{split}`).
    pub tasks: PathBuf,
    /// Seconds one call to a server may take.
    pub call_timeout_s: f64,
    /// Seconds one episode may take, reset to evaluation.
    pub episode_timeout_s: f64,
    /// Further tries of a call that is safe to repeat, when the server was not reached.
    pub retries: u32,
    /// Bytes one reply may hold.
    pub max_reply_bytes: u64,
    /// Seconds a started server may take to listen.
    pub startup_timeout_s: f64,
    /// The `experiment_name` sent with each `/initialize`.
    pub experiment_name: String,
}

impl Default for EnvSettings {
    fn default() -> EnvSettings {
        EnvSettings {
            kind: EnvKind::Builtin,
            urls: Vec::new(),
            command: String::new(),
            servers: 2,
            tasks: PathBuf::new(),
            call_timeout_s: 60.0,
            episode_timeout_s: 600.0,
            retries: 2,
            max_reply_bytes: 4 << 20,
            startup_timeout_s: 60.0,
            experiment_name: "sage".to_owned(),
        }
    }
}

/// Why the remote environment could not be set up.
#[derive(Debug)]
pub enum RemoteEnvsError {
    /// A setting is out of range.
    Settings(String),
    /// The servers could not be started.
    Servers(ServersError),
}

impl fmt::Display for RemoteEnvsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteEnvsError::Settings(e) => write!(f, "[env]: {e}"),
            RemoteEnvsError::Servers(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RemoteEnvsError {}

impl EnvSettings {
    /// The remote environment these settings describe, its servers started; `None` for
    /// the built-in world.
    pub fn start(&self) -> Result<Option<RemoteEnvs>, RemoteEnvsError> {
        if self.kind == EnvKind::Builtin {
            return Ok(None);
        }
        let seconds = |name: &str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(RemoteEnvsError::Settings(format!(
                    "{name} = {value} is not a positive number of seconds"
                )))
            }
        };
        let limits = CallLimits {
            timeout: seconds("call_timeout_s", self.call_timeout_s)?,
            retries: self.retries,
            max_reply_bytes: self.max_reply_bytes,
        };
        let episode_timeout = seconds("episode_timeout_s", self.episode_timeout_s)?;
        let startup = seconds("startup_timeout_s", self.startup_timeout_s)?;
        let pool = if self.urls.is_empty() {
            ServerPool::start(&self.command, self.servers, startup)
        } else {
            ServerPool::at(self.urls.clone())
        }
        .map_err(RemoteEnvsError::Servers)?;
        Ok(Some(RemoteEnvs {
            pool,
            limits,
            episode_timeout,
            tasks: (!self.tasks.as_os_str().is_empty()).then(|| self.tasks.clone()),
            experiment_name: self.experiment_name.clone(),
        }))
    }
}

/// A run's remote environment: its pool of servers and the limits of their episodes.
#[derive(Debug)]
pub struct RemoteEnvs {
    pool: ServerPool,
    limits: CallLimits,
    episode_timeout: Duration,
    tasks: Option<PathBuf>,
    experiment_name: String,
}

impl RemoteEnvs {
    /// The servers' URLs.
    pub fn urls(&self) -> &[String] {
        self.pool.urls()
    }

    /// The scenarios of `split` (its name, as the built-in world's splits are named).
    pub fn list(&self, split: &str) -> Result<Vec<RemoteScenario>, ListingError> {
        let server = Server::new(&self.pool.urls()[0], self.limits.clone());
        list_split(&server, split, self.tasks.as_deref().map(Path::new))
    }

    /// A maker of environments for episodes of at most `max_turns` turns, sampling with
    /// `seed` (sent as `/initialize`'s `random_seed`).
    pub fn factory(&self, max_turns: u32, seed: u64) -> RemoteFactory<'_> {
        RemoteFactory {
            envs: self,
            settings: RemoteSettings {
                call: self.limits.clone(),
                episode_timeout: self.episode_timeout,
                max_turns,
                experiment_name: self.experiment_name.clone(),
                random_seed: seed,
            },
            next: Cell::new(0),
        }
    }
}

/// Makes [`RemoteEnv`]s on the pool's servers in turn, at most one per server at once.
pub struct RemoteFactory<'a> {
    envs: &'a RemoteEnvs,
    settings: RemoteSettings,
    next: Cell<usize>,
}

impl EnvFactory for RemoteFactory<'_> {
    type Env = RemoteEnv;

    fn make(&self) -> Result<RemoteEnv, RemoteError> {
        let urls = self.envs.urls();
        let index = self.next.get();
        self.next.set(index + 1);
        Ok(RemoteEnv::new(
            &urls[index % urls.len()],
            self.settings.clone(),
        ))
    }

    fn capacity(&self) -> Option<usize> {
        Some(self.envs.urls().len())
    }
}
