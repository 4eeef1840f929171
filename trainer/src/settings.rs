//! What a run directory records of the settings that made it, and their comparison
//! with today's.
//!
//! Every command writes `RUN_DIR/config.toml` (its merged settings, `sage config`'s
//! format) and `RUN_DIR/run-info.json` (the command, the crate version, the
//! git revision it was built from and the start time) when it starts
//! ([`record_command`]). A stage whose output a later command continues or compares
//! also keeps its own record, `RUN_DIR/settings/STAGE.toml` ([`StageRecord`]): SFT's
//! (`sft`), RL's (`rl`) and its update-off control's (`rl-control`). A resumed stage, or
//! a control beside its run, must have the recorded settings, but for the ones it may
//! change (its normalisation): a mismatch is refused, naming the first line that
//! differs ([`SettingsDifference`]).
//!
//! Recorded settings are read back over today's defaults before they are compared, so
//! a setting added since (at its default) does not count as a difference.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::RunConfig;
use crate::files::write_atomic;

/// The git revision the binary was built from (`unknown` outside a git checkout).
pub const GIT_REVISION: &str = env!("SAGE_GIT_REVISION");

/// Where recorded settings differ from today's: the first line (1-based) that differs,
/// each side led by its TOML section (`[sft] epochs = 3`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsDifference {
    /// The line of the settings text.
    pub line: usize,
    /// The recorded line (`(end of settings)` past its end).
    pub was: String,
    /// Today's line.
    pub now: String,
}

impl fmt::Display for SettingsDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "settings line {}: was `{}`, now `{}`",
            self.line, self.was, self.now
        )
    }
}

/// Resets where a run runs and on what: its directory and backend, which no comparison
/// counts (a run started on a GPU may be continued on the CPU, or in a copied
/// directory). Every stage's normalisation starts from it.
pub fn portable(config: &mut RunConfig) {
    config.run.dir = PathBuf::new();
    config.run.backend = Default::default();
}

/// `config` as TOML after `normalize` has reset what the comparison leaves out.
pub fn comparable(config: &RunConfig, normalize: fn(&mut RunConfig)) -> String {
    let mut config = config.clone();
    normalize(&mut config);
    config.to_toml()
}

/// Where the settings text `saved` differs from `now`, both normalised by `normalize`.
/// `saved` is read back over today's defaults first; text that no longer parses (a
/// setting removed or renamed) is compared as it is.
pub fn difference(
    saved: &str,
    now: &RunConfig,
    normalize: fn(&mut RunConfig),
) -> Option<SettingsDifference> {
    let now = comparable(now, normalize);
    match RunConfig::from_toml_unchecked(saved) {
        Ok(recorded) => first_difference(&comparable(&recorded, normalize), &now),
        Err(_) => first_difference(saved, &now),
    }
}

/// The first line where `was` and `now` differ, each led by its TOML section.
pub fn first_difference(was: &str, now: &str) -> Option<SettingsDifference> {
    let (mut was_lines, mut now_lines) = (was.lines(), now.lines());
    let mut section = String::new();
    let mut line = 0;
    loop {
        line += 1;
        match (was_lines.next(), now_lines.next()) {
            (None, None) => return None,
            (Some(a), Some(b)) if a == b => {
                if a.starts_with('[') {
                    a.clone_into(&mut section);
                }
            }
            (a, b) => {
                let show = |l: Option<&str>| match l {
                    None => "(end of settings)".to_owned(),
                    Some(l) if section.is_empty() || l.starts_with('[') => l.to_owned(),
                    Some(l) => format!("{section} {l}"),
                };
                return Some(SettingsDifference {
                    line,
                    was: show(a),
                    now: show(b),
                });
            }
        }
    }
}

/// What `RUN_DIR/run-info.json` holds.
#[derive(Serialize)]
struct RunInfo<'a> {
    command: &'a str,
    version: &'a str,
    git_revision: &'a str,
    started_unix_seconds: u64,
}

/// Writes `RUN_DIR/config.toml` (the merged settings) and `RUN_DIR/run-info.json` for
/// `command` starting now.
pub fn record_command(config: &RunConfig, command: &str) -> std::io::Result<()> {
    let dir = &config.run.dir;
    fs::create_dir_all(dir)?;
    write_atomic(&dir.join("config.toml"), config.to_toml().as_bytes())?;
    let info = RunInfo {
        command,
        version: env!("CARGO_PKG_VERSION"),
        git_revision: GIT_REVISION,
        started_unix_seconds: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let text = serde_json::to_string_pretty(&info).map_err(std::io::Error::other)?;
    write_atomic(&dir.join("run-info.json"), text.as_bytes())
}

/// The settings record of one stage of a run directory: `RUN_DIR/settings/NAME.toml`.
pub struct StageRecord {
    path: PathBuf,
}

impl StageRecord {
    /// The record of stage `name` in `run_dir`.
    pub fn new(run_dir: &Path, name: &str) -> StageRecord {
        StageRecord {
            path: run_dir.join("settings").join(format!("{name}.toml")),
        }
    }

    /// Where it is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The recorded settings, if the stage has run.
    pub fn read(&self) -> std::io::Result<Option<String>> {
        match fs::read_to_string(&self.path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Where the recorded settings differ from `config`'s (both normalised); `None`
    /// when they agree or nothing is recorded.
    pub fn difference(
        &self,
        config: &RunConfig,
        normalize: fn(&mut RunConfig),
    ) -> std::io::Result<Option<SettingsDifference>> {
        Ok(self
            .read()?
            .and_then(|saved| difference(&saved, config, normalize)))
    }

    /// Records `config` as the stage's settings.
    pub fn write(&self, config: &RunConfig) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir)?;
        }
        write_atomic(&self.path, config.to_toml().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings recorded before a setting with a default existed still match a run at
    /// that default, and not one that changes it.
    #[test]
    fn a_setting_added_since_the_record_takes_its_default() {
        let keep = |_: &mut RunConfig| {};
        let config = RunConfig::default();
        let now = config.to_toml();
        let line = "scenario_seed_offset = 0";
        assert!(now.lines().any(|l| l == line), "{now}");
        let recorded: String = now
            .lines()
            .filter(|l| *l != line)
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(difference(&recorded, &config, keep), None);
        // Compared as raw text, the two differ.
        assert!(first_difference(&recorded, &now).is_some());

        let mut offset = config.clone();
        offset.rl.scenario_seed_offset = 60;
        let found = difference(&recorded, &offset, keep).expect("differs");
        assert_eq!(
            (found.was.as_str(), found.now.as_str()),
            (
                "[rl] scenario_seed_offset = 0",
                "[rl] scenario_seed_offset = 60"
            )
        );

        let unknown = format!("{recorded}[retired]\nsetting = 1\n");
        assert!(difference(&unknown, &config, keep).is_some());
    }

    #[test]
    fn the_first_difference_names_its_line_and_both_texts() {
        let at = |line: usize, was: &str, now: &str| {
            Some(SettingsDifference {
                line,
                was: was.to_owned(),
                now: now.to_owned(),
            })
        };
        assert_eq!(first_difference("a\nb\nc", "a\nb\nc"), None);
        assert_eq!(
            first_difference("a\nb = 1\nc", "a\nb = 2\nc"),
            at(2, "b = 1", "b = 2")
        );
        assert_eq!(
            first_difference(
                "[run]\nx = 1\n[sft]\nepochs = 7",
                "[run]\nx = 1\n[sft]\nepochs = 3"
            ),
            at(4, "[sft] epochs = 7", "[sft] epochs = 3")
        );
        assert_eq!(
            first_difference("a", "a\nextra"),
            at(2, "(end of settings)", "extra")
        );
    }

    #[test]
    fn a_stage_record_round_trips_and_names_a_changed_setting() {
        let dir = std::env::temp_dir().join(format!("sage-settings-{}", std::process::id()));
        let record = StageRecord::new(&dir, "rl");
        let ignore_steps = |c: &mut RunConfig| c.rl.steps = 0;
        let config = RunConfig::default();
        assert_eq!(record.difference(&config, ignore_steps).unwrap(), None);
        record.write(&config).unwrap();
        assert!(record.path().ends_with("settings/rl.toml"));
        let mut more_steps = config.clone();
        more_steps.rl.steps += 10;
        assert_eq!(record.difference(&more_steps, ignore_steps).unwrap(), None);
        let mut other = config.clone();
        other.rl.learning_rate *= 2.0;
        let found = record
            .difference(&other, ignore_steps)
            .unwrap()
            .expect("differs");
        assert!(found.was.starts_with("[rl] learning_rate = "), "{found}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
