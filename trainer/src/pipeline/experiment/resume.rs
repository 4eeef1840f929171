//! What an experiment's run directory records of the stages it finished, so that
//! `sage experiment --resume` picks an interrupted run up where it stopped.
//!
//! A run writes `experiment-settings.json` when it starts: its settings (as TOML, with
//! `[experiment] seeds` and `arms` and `[run] dir` left out, so a resumed run may add
//! seeds or arms) and a run id. Each stage it finishes leaves a marker that carries the
//! id: `tokenizer-finished.json` once `tokenizer.json` is saved (a resumed run loads it
//! rather than training one on other data), `sft-MODE/data-finished.json` once that
//! mode's expert data is written whole (a resumed run reads it rather than running the
//! expert again), `sft-MODE/finished.json` once that SFT
//! model is saved whole (`seed-S/sft-MODE/finished.json` under `[experiment]
//! sft_per_seed`), and `seed-S/ARM/run.json` (the arm's result) once its
//! evaluation is done. An arm's marker also holds the `[eval]` and `[rl]` settings it
//! ran under (a marker written before it did: the run's recorded ones). A resumed run's
//! `[eval]` and `[rl]` are not compared with the recorded ones: a run resumed with
//! another evaluation (more `iid` scenarios, other splits) or other RL settings (more
//! steps, more chains per step) keeps the tokenizer and the SFT models and runs again
//! each arm that ran otherwise, its RL too (an arm evaluated otherwise gets the same
//! weights again on the CPU). An SFT stage under way keeps its checkpoints in
//! `sft-MODE/checkpoints/`, marked with the id in `owner.json` there, so a resumed run
//! continues it from the last one. A resumed run reuses only markers of the run it
//! continues; a fresh run in the same directory gets a new id, so what an earlier run
//! left there is never mistaken for its own. Recorded settings are read back over
//! today's defaults before they are compared, so a setting added since (at its default)
//! does not stop a run from resuming. `[run] backend` is not compared: a run started on
//! a GPU may be finished on the CPU, and the other way round (`[run] precision` is, as
//! bf16 changes the numbers); nor is the checkpoint cadence (`[run] checkpoint_every`,
//! `keep_checkpoints`), which leaves the weights as they are.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::ArmRun;
use crate::config::RunConfig;
use crate::eval::EvalConfig;
use crate::experiment::Arm;
use crate::files::write_atomic;
use crate::pipeline::PipelineError;
use crate::rl::RlConfig;
use crate::settings::{self, SettingsDifference};
use crate::tokenizer::Tokenizer;

/// The file that holds a run's settings and id.
const SETTINGS_FILE: &str = "experiment-settings.json";
/// Written once the run's `tokenizer.json` is saved.
const TOKENIZER_FINISHED_FILE: &str = "tokenizer-finished.json";
/// Written in an SFT stage's directory (`sft-MODE/`, or `seed-S/sft-MODE/`) once the
/// model in its `model/` is saved whole.
const SFT_FINISHED_FILE: &str = "finished.json";
/// Written in a mode's first SFT stage directory once its expert data (`data/`, which
/// the mode's stages share) is written whole.
const DATA_FINISHED_FILE: &str = "data-finished.json";
/// The directory of an SFT stage's checkpoints, in the stage's directory.
const SFT_CHECKPOINTS_DIR: &str = "checkpoints";
/// The marker, in that directory, of the run whose checkpoints it holds.
const CHECKPOINTS_OWNER_FILE: &str = "owner.json";
/// An arm's result, written in its directory once it is evaluated.
const ARM_RUN_FILE: &str = "run.json";

/// The settings of a run and the id its markers carry.
#[derive(Serialize, Deserialize)]
struct RunSettings {
    run_id: String,
    settings: String,
}

/// A finished stage: the id of the run that finished it, and what it produced.
#[derive(Serialize, Deserialize)]
struct Marker<T> {
    run_id: String,
    result: T,
    /// An arm's `[eval]` settings, as [`ArmSettings::of`] prints them; `None` on other
    /// markers, and on arms of a run recorded before arms kept them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    eval: Option<String>,
    /// An arm's `[rl]` settings, likewise; `None` also on arms of a run recorded before
    /// arms kept their RL settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rl: Option<String>,
}

/// The settings an arm ran under, each section as TOML led by its header.
#[derive(Clone, Default)]
struct ArmSettings {
    eval: String,
    rl: String,
}

impl ArmSettings {
    /// `config`'s `[eval]` and `[rl]` sections.
    fn of(config: &RunConfig) -> ArmSettings {
        ArmSettings {
            eval: section("eval", &config.eval),
            rl: section("rl", &config.rl),
        }
    }

    /// Where these recorded settings, read back over today's defaults (so a setting
    /// added since, at its default, is no difference), first differ from `now`'s:
    /// `[eval]`, then `[rl]`. Text that no longer parses is compared as it is.
    fn difference(&self, now: &ArmSettings) -> Option<SettingsDifference> {
        let was = RunConfig::from_toml_unchecked(&format!("{}\n{}", self.eval, self.rl))
            .map_or_else(|_| self.clone(), |recorded| ArmSettings::of(&recorded));
        settings::first_difference(&was.eval, &now.eval)
            .or_else(|| settings::first_difference(&was.rl, &now.rl))
    }
}

/// What a resumed run finds of one arm under one seed.
pub(super) enum FinishedArm {
    /// Finished by this run under today's `[eval]` and `[rl]` settings.
    Reusable(Box<ArmRun>),
    /// Finished by this run, but under other `[eval]` or `[rl]` settings: the first
    /// line that differs.
    OtherSettings(SettingsDifference),
    /// Not finished by this run.
    NotRun,
}

/// An SFT stage's summary, kept in its marker.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(super) struct SftFinished {
    /// The last step's training loss.
    pub final_loss: f64,
    /// The loss on the dev trajectories, when there were any.
    pub dev_loss: Option<f64>,
}

/// The record of one experiment's run directory.
pub(super) struct RunRecord {
    dir: PathBuf,
    run_id: String,
    /// The `[eval]` and `[rl]` settings the run recorded when it started.
    recorded: ArmSettings,
    /// Today's, which every arm finished now is marked with.
    now: ArmSettings,
}

impl RunRecord {
    /// Starts the record of `config`'s run. Fresh (`resume` false): a new run id, and the
    /// settings written. Resumed: the settings saved there must equal `config`'s but
    /// for seeds, arms, the directory, the evaluation and the RL settings; an error names
    /// the first line that differs.
    pub fn open(config: &RunConfig, resume: bool) -> Result<RunRecord, PipelineError> {
        let dir = config.run.dir.clone();
        let path = dir.join(SETTINGS_FILE);
        let settings = settings::comparable(config, recordable);
        let now = ArmSettings::of(config);
        if resume {
            let text = fs::read_to_string(&path).map_err(|e| {
                resume_error(format!(
                    "nothing to resume in {}: {}: {e}",
                    dir.display(),
                    path.display()
                ))
            })?;
            let saved: RunSettings = serde_json::from_str(&text)
                .map_err(|e| resume_error(format!("{}: {e}", path.display())))?;
            if let Some(found) = settings::difference(&saved.settings, config, resumable) {
                return Err(resume_error(format!(
                    "the run in {} used other settings, so its results cannot be reused \
                     ({found}); run with those settings, or without --resume to start afresh",
                    dir.display()
                )));
            }
            // Text that no longer parses counts as other settings: its arms run again.
            let recorded = RunConfig::from_toml_unchecked(&saved.settings)
                .map(|recorded| ArmSettings::of(&recorded))
                .unwrap_or_default();
            return Ok(RunRecord {
                dir,
                run_id: saved.run_id,
                recorded,
                now,
            });
        }
        let run_id = new_run_id();
        let record = RunSettings {
            run_id: run_id.clone(),
            settings,
        };
        write_json(&path, &record)?;
        Ok(RunRecord {
            dir,
            run_id,
            recorded: now.clone(),
            now,
        })
    }

    /// The tokenizer this run trained and saved, when it did.
    pub fn finished_tokenizer(&self) -> Result<Option<Tokenizer>, PipelineError> {
        let marker: Option<String> = self.read_marker(&self.dir.join(TOKENIZER_FINISHED_FILE))?;
        marker
            .map(|file| {
                let path = self.dir.join(file);
                Tokenizer::from_file(&path)
                    .map_err(|e| resume_error(format!("{}: {e}", path.display())))
            })
            .transpose()
    }

    /// Records that the run's tokenizer is saved as `tokenizer.json` in its directory.
    pub fn mark_tokenizer_finished(&self) -> Result<(), PipelineError> {
        self.write_marker(
            &self.dir.join(TOKENIZER_FINISHED_FILE),
            "tokenizer.json".to_owned(),
        )
    }

    /// Whether this run wrote the expert data in `stage` (the directory of the mode's
    /// first SFT stage, whose `data/` the mode's stages share) whole.
    pub fn finished_data(&self, stage: &str) -> Result<bool, PipelineError> {
        Ok(self.read_marker::<()>(&self.data_marker(stage))?.is_some())
    }

    /// Records that the expert data in `stage` is written whole.
    pub fn mark_data_finished(&self, stage: &str) -> Result<(), PipelineError> {
        self.write_marker(&self.data_marker(stage), ())
    }

    /// The summary of the SFT stage in `stage` (its directory in the run directory,
    /// e.g. `sft-mixed`), when this run finished it.
    pub fn finished_sft(&self, stage: &str) -> Result<Option<SftFinished>, PipelineError> {
        self.read_marker(&self.sft_marker(stage))
    }

    /// Records that the model of the SFT stage in `stage` is saved whole.
    pub fn mark_sft_finished(&self, stage: &str, sft: SftFinished) -> Result<(), PipelineError> {
        self.write_marker(&self.sft_marker(stage), sft)
    }

    /// The directory where the SFT stage in `stage` keeps its checkpoints, created;
    /// emptied first unless this run wrote what it holds, so a fresh run never
    /// continues an earlier run's SFT.
    pub fn sft_checkpoints(&self, stage: &str) -> Result<PathBuf, PipelineError> {
        let dir = self.sft_checkpoints_dir(stage);
        let owner = dir.join(CHECKPOINTS_OWNER_FILE);
        if self.read_marker::<()>(&owner)?.is_none() {
            self.remove_sft_checkpoints(stage)?;
            fs::create_dir_all(&dir)
                .map_err(|e| resume_error(format!("{}: {e}", dir.display())))?;
            self.write_marker(&owner, ())?;
        }
        Ok(dir)
    }

    /// Removes the checkpoints of the SFT stage in `stage`, once its model is saved
    /// whole and marked finished.
    pub fn remove_sft_checkpoints(&self, stage: &str) -> Result<(), PipelineError> {
        let dir = self.sft_checkpoints_dir(stage);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(resume_error(format!("{}: {e}", dir.display())))
            }
            _ => Ok(()),
        }
    }

    /// What this run left of `arm` under the seed of `seed_dir`: its result when it ran
    /// under today's `[eval]` settings and, for an arm with RL, today's `[rl]`.
    pub fn finished_arm(&self, seed_dir: &Path, arm: Arm) -> Result<FinishedArm, PipelineError> {
        let path = seed_dir.join(arm.name()).join(ARM_RUN_FILE);
        let Some(marker) = self.read_own_marker::<ArmRun>(&path)? else {
            return Ok(FinishedArm::NotRun);
        };
        let rl = if arm.trains() {
            marker.rl.unwrap_or_else(|| self.recorded.rl.clone())
        } else {
            self.now.rl.clone()
        };
        let ran_under = ArmSettings {
            eval: marker.eval.unwrap_or_else(|| self.recorded.eval.clone()),
            rl,
        };
        Ok(match ran_under.difference(&self.now) {
            None => FinishedArm::Reusable(Box::new(marker.result)),
            Some(found) => FinishedArm::OtherSettings(found),
        })
    }

    /// Records `run`, the finished result of its arm under the seed of `seed_dir`, run
    /// under today's `[eval]` and `[rl]` settings.
    pub fn mark_arm_finished(&self, seed_dir: &Path, run: &ArmRun) -> Result<(), PipelineError> {
        let path = seed_dir.join(&run.arm).join(ARM_RUN_FILE);
        let marker = Marker {
            run_id: self.run_id.clone(),
            result: run.clone(),
            eval: Some(self.now.eval.clone()),
            rl: Some(self.now.rl.clone()),
        };
        write_json(&path, &marker)
    }

    fn sft_checkpoints_dir(&self, stage: &str) -> PathBuf {
        self.dir.join(stage).join(SFT_CHECKPOINTS_DIR)
    }

    fn data_marker(&self, stage: &str) -> PathBuf {
        self.dir.join(stage).join(DATA_FINISHED_FILE)
    }

    fn sft_marker(&self, stage: &str) -> PathBuf {
        self.dir.join(stage).join(SFT_FINISHED_FILE)
    }

    /// What the marker at `path` records, when it exists and carries this run's id.
    fn read_marker<T: for<'de> Deserialize<'de>>(
        &self,
        path: &Path,
    ) -> Result<Option<T>, PipelineError> {
        Ok(self.read_own_marker(path)?.map(|marker| marker.result))
    }

    /// The marker at `path` when it exists and carries this run's id.
    fn read_own_marker<T: for<'de> Deserialize<'de>>(
        &self,
        path: &Path,
    ) -> Result<Option<Marker<T>>, PipelineError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(resume_error(format!("{}: {e}", path.display()))),
        };
        let marker: Marker<T> = serde_json::from_str(&text)
            .map_err(|e| resume_error(format!("{}: {e}", path.display())))?;
        Ok((marker.run_id == self.run_id).then_some(marker))
    }

    fn write_marker<T: Serialize>(&self, path: &Path, result: T) -> Result<(), PipelineError> {
        let marker = Marker {
            run_id: self.run_id.clone(),
            result,
            eval: None,
            rl: None,
        };
        write_json(path, &marker)
    }
}

/// Resets what an experiment's record leaves out: its seeds, arms, directory, backend
/// and checkpoint cadence.
fn recordable(config: &mut RunConfig) {
    settings::portable(config);
    config.experiment.seeds = 0;
    config.experiment.arms = Vec::new();
    config.run.checkpoint_every = 0;
    config.run.keep_checkpoints = 0;
}

/// Resets what a resumed experiment may change: what its record leaves out, its
/// evaluation and its RL settings (which each arm's marker records instead).
fn resumable(config: &mut RunConfig) {
    recordable(config);
    config.eval = EvalConfig::default();
    config.rl = RlConfig::default();
}

/// One section of the settings (`value`, printed under `[name]`) as TOML.
fn section<T: Serialize>(name: &str, value: &T) -> String {
    toml::to_string_pretty(&std::collections::BTreeMap::from([(name, value)]))
        .unwrap_or_else(|e| format!("# cannot print: {e}\n"))
}

/// An id no earlier run in the directory has: the start time in nanoseconds and the
/// process id.
fn new_run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{:x}", std::process::id())
}

/// Writes `value` as JSON to `path` through a temporary file, so a marker is whole or
/// absent.
fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), PipelineError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| resume_error(e.to_string()))?;
    write_atomic(path, text.as_bytes())
        .map_err(|e| resume_error(format!("{}: {e}", path.display())))
}

fn resume_error(message: String) -> PipelineError {
    PipelineError::new("resume", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resumed run keeps the SFT checkpoints it wrote; a fresh run in the same
    /// directory empties them, so it never continues another run's SFT.
    #[test]
    fn sft_checkpoints_belong_to_the_run_that_wrote_them() {
        let dir = std::env::temp_dir().join(format!("sage-sft-owner-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut config = RunConfig::default();
        config.run.dir = dir.clone();
        let first = RunRecord::open(&config, false).unwrap();
        let checkpoints = first.sft_checkpoints("sft-mixed").unwrap();
        let step = checkpoints.join("step-000100");
        fs::create_dir_all(&step).unwrap();

        let resumed = RunRecord::open(&config, true).unwrap();
        assert_eq!(resumed.sft_checkpoints("sft-mixed").unwrap(), checkpoints);
        assert!(step.is_dir(), "the resumed run lost its own checkpoint");
        // Another mode's stage is not touched.
        assert!(resumed.sft_checkpoints("sft-direct").unwrap().is_dir());

        let fresh = RunRecord::open(&config, false).unwrap();
        fresh.sft_checkpoints("sft-mixed").unwrap();
        assert!(
            !step.exists(),
            "a fresh run kept an earlier run's checkpoint"
        );
        assert!(checkpoints.join(CHECKPOINTS_OWNER_FILE).is_file());

        fresh.remove_sft_checkpoints("sft-mixed").unwrap();
        assert!(!checkpoints.exists());
        fresh.remove_sft_checkpoints("sft-mixed").unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// An arm is reused only under the `[eval]` and `[rl]` settings it ran with: those
    /// its marker holds, or, for a marker written before arms kept them, the run's
    /// recorded ones. Other settings are named by their first differing line.
    #[test]
    fn an_arm_is_reused_only_under_the_evaluation_and_rl_it_had() {
        let dir = std::env::temp_dir().join(format!("sage-arm-eval-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut config = RunConfig::default();
        config.run.dir = dir.clone();
        let seed_dir = dir.join("seed-0");
        let run = ArmRun {
            arm: Arm::Sage.name().to_owned(),
            seed: 0,
            metrics: Vec::new(),
            rl_seconds: 1.5,
            control: None,
            inputs: None,
        };
        let record = RunRecord::open(&config, false).unwrap();
        assert!(matches!(
            record.finished_arm(&seed_dir, Arm::Sage).unwrap(),
            FinishedArm::NotRun
        ));
        // A marker as runs wrote it before arms kept their evaluation.
        let path = seed_dir.join(&run.arm).join(ARM_RUN_FILE);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let old_marker = serde_json::json!({ "run_id": record.run_id, "result": run });
        fs::write(&path, old_marker.to_string()).unwrap();

        let mut more_scenarios = config.clone();
        more_scenarios.eval.iid_seeds += 17;
        let resumed = RunRecord::open(&more_scenarios, true).unwrap();
        let FinishedArm::OtherSettings(found) = resumed.finished_arm(&seed_dir, Arm::Sage).unwrap()
        else {
            panic!("an arm evaluated on fewer scenarios was reused");
        };
        assert_eq!(
            (found.was, found.now),
            (
                format!("[eval] iid_seeds = {}", config.eval.iid_seeds),
                format!("[eval] iid_seeds = {}", more_scenarios.eval.iid_seeds)
            )
        );
        let same = RunRecord::open(&config, true).unwrap();
        let FinishedArm::Reusable(reused) = same.finished_arm(&seed_dir, Arm::Sage).unwrap() else {
            panic!("the recorded evaluation's arm was not reused");
        };
        assert_eq!(reused.rl_seconds, run.rl_seconds);

        // Marked under the new evaluation, the arm belongs to it and no longer to the
        // recorded one.
        resumed.mark_arm_finished(&seed_dir, &run).unwrap();
        let again = RunRecord::open(&more_scenarios, true).unwrap();
        assert!(matches!(
            again.finished_arm(&seed_dir, Arm::Sage).unwrap(),
            FinishedArm::Reusable(_)
        ));
        assert!(matches!(
            same.finished_arm(&seed_dir, Arm::Sage).unwrap(),
            FinishedArm::OtherSettings(_)
        ));

        // More RL steps: the arm trained for fewer runs again, and once marked under
        // them it belongs to the longer RL alone.
        let mut longer = more_scenarios.clone();
        longer.rl.steps += 90;
        let longer_record = RunRecord::open(&longer, true).unwrap();
        let FinishedArm::OtherSettings(found) =
            longer_record.finished_arm(&seed_dir, Arm::Sage).unwrap()
        else {
            panic!("an arm trained for fewer RL steps was reused");
        };
        assert_eq!(
            (found.was, found.now),
            (
                format!("[rl] steps = {}", config.rl.steps),
                format!("[rl] steps = {}", longer.rl.steps)
            )
        );
        longer_record.mark_arm_finished(&seed_dir, &run).unwrap();
        assert!(matches!(
            RunRecord::open(&longer, true)
                .unwrap()
                .finished_arm(&seed_dir, Arm::Sage)
                .unwrap(),
            FinishedArm::Reusable(_)
        ));
        assert!(matches!(
            again.finished_arm(&seed_dir, Arm::Sage).unwrap(),
            FinishedArm::OtherSettings(_)
        ));
        // An arm without RL is reused under any `[rl]`.
        let sft_only = ArmRun {
            arm: Arm::SftOnly.name().to_owned(),
            ..run.clone()
        };
        again.mark_arm_finished(&seed_dir, &sft_only).unwrap();
        assert!(matches!(
            longer_record.finished_arm(&seed_dir, Arm::SftOnly).unwrap(),
            FinishedArm::Reusable(_)
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A run recorded on one backend, or with another checkpoint cadence, evaluation or
    /// RL, resumes on another; other settings still refuse it.
    #[test]
    fn the_backend_cadence_and_rl_are_not_compared_but_the_sft_recipe_is() {
        let config = RunConfig::default();
        let mut elsewhere = config.clone();
        elsewhere.run.backend = crate::backend::Backend::Wgpu;
        elsewhere.run.checkpoint_every += 7;
        elsewhere.run.keep_checkpoints += 1;
        elsewhere.eval.iid_seeds += 1;
        elsewhere.eval.rollout.max_new_tokens += 1;
        elsewhere.rl.steps += 90;
        elsewhere.rl.chains_per_step += 12;
        assert_eq!(
            settings::comparable(&config, resumable),
            settings::comparable(&elsewhere, resumable)
        );
        let mut recipe = config.clone();
        recipe.sft.epochs += 1;
        let found = settings::first_difference(
            &settings::comparable(&config, resumable),
            &settings::comparable(&recipe, resumable),
        )
        .expect("differs");
        assert_eq!(found.was, format!("[sft] epochs = {}", config.sft.epochs));
        assert_eq!(found.now, format!("[sft] epochs = {}", recipe.sft.epochs));
    }
}
