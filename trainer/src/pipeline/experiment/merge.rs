//! An experiment's tables from the `experiment.json` of several runs: seeds run apart
//! (`--only-seed` in copies of the run directory, one seed on a GPU and another on a
//! CPU), or the arms of one run beside another run's. `sage tables` reads the files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{input_mismatches, ArmRun};
use crate::experiment::Arm;
use crate::pipeline::PipelineError;

/// The rows of several runs put together by [`merge_runs`].
#[derive(Clone, Debug)]
pub struct MergedRuns {
    /// One row per arm and seed, in the order of the seeds, then of [`Arm::ALL`].
    pub runs: Vec<ArmRun>,
    /// The arms the rows hold, in table order.
    pub arms: Vec<Arm>,
    /// Every row a later file put in place of an earlier file's.
    pub replaced: Vec<Replacement>,
    /// Where the kept rows differ in their tokenizer or SFT data, and which rows carry
    /// no digests to compare, one line each ([`input_mismatches`]).
    pub mismatches: Vec<String>,
}

/// A row of one file that a later file's row of the same arm and seed replaced.
#[derive(Clone, Debug, PartialEq)]
pub struct Replacement {
    /// The arm.
    pub arm: String,
    /// The seed.
    pub seed: u64,
    /// The file whose row was dropped.
    pub earlier: PathBuf,
    /// The file whose row was kept.
    pub later: PathBuf,
}

/// Reads one `experiment.json` (what `sage experiment` writes): a list of arm runs;
/// `path` may be the file or the run directory that holds it. A file that is not one,
/// or names an arm this build does not know, is an error naming the file.
pub fn read_experiment_json(path: &Path) -> Result<Vec<ArmRun>, PipelineError> {
    let path = if path.is_dir() {
        path.join("experiment.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| PipelineError::new("tables", format!("{}: {e}", path.display())))?;
    let runs: Vec<ArmRun> = serde_json::from_str(&text).map_err(|e| {
        PipelineError::new(
            "tables",
            format!(
                "{}: not an experiment.json (a list of arm runs): {e}",
                path.display()
            ),
        )
    })?;
    for run in &runs {
        run.arm.parse::<Arm>().map_err(|e| {
            PipelineError::new(
                "tables",
                format!("{}: seed {}: {e}", path.display(), run.seed),
            )
        })?;
    }
    Ok(runs)
}

/// Puts the rows of `files` (each file's path and rows, in the order given) together,
/// keeping only the seeds in `seeds` when it is given. Where two files hold the same
/// arm under the same seed, the later file's row is kept and the replacement recorded,
/// so a rerun of some arms is laid over the run it completes. A file holding one arm
/// and seed twice, or no row at all once `seeds` is applied, is an error.
pub fn merge_runs(
    files: &[(PathBuf, Vec<ArmRun>)],
    seeds: Option<&[u64]>,
) -> Result<MergedRuns, PipelineError> {
    let mut kept: HashMap<(String, u64), (usize, ArmRun)> = HashMap::new();
    let mut replaced = Vec::new();
    for (index, (path, runs)) in files.iter().enumerate() {
        let mut seen_here = Vec::new();
        for run in runs {
            if seeds.is_some_and(|seeds| !seeds.contains(&run.seed)) {
                continue;
            }
            let key = (run.arm.clone(), run.seed);
            if seen_here.contains(&key) {
                return Err(PipelineError::new(
                    "tables",
                    format!(
                        "{}: arm {} under seed {} appears twice",
                        path.display(),
                        run.arm,
                        run.seed
                    ),
                ));
            }
            seen_here.push(key.clone());
            if let Some((earlier, _)) = kept.insert(key, (index, run.clone())) {
                replaced.push(Replacement {
                    arm: run.arm.clone(),
                    seed: run.seed,
                    earlier: files[earlier].0.clone(),
                    later: path.clone(),
                });
            }
        }
    }
    if kept.is_empty() {
        return Err(PipelineError::new(
            "tables",
            match seeds {
                Some(seeds) => format!("no row of the files has one of the seeds {seeds:?}"),
                None => "the files hold no row".to_owned(),
            },
        ));
    }
    let arms: Vec<Arm> = Arm::ALL
        .into_iter()
        .filter(|arm| kept.keys().any(|(name, _)| name == arm.name()))
        .collect();
    let rows: Vec<(&Path, &ArmRun)> = kept
        .values()
        .map(|(index, run)| (files[*index].0.as_path(), run))
        .collect();
    let mismatches = input_mismatches(&rows);
    let order = |name: &str| arms.iter().position(|arm| arm.name() == name);
    let mut runs: Vec<ArmRun> = kept.into_values().map(|(_, run)| run).collect();
    runs.sort_by_key(|run| (run.seed, order(&run.arm)));
    Ok(MergedRuns {
        runs,
        arms,
        replaced,
        mismatches,
    })
}
