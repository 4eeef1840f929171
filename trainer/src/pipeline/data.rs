//! The data stage: the scripted expert's trajectories of the training and dev splits,
//! written as JSON lines under the run directory.

use std::path::{Path, PathBuf};

use sage_envs::scenarios::Split;

use super::{failed, PipelineError, Reporter};
use crate::data::{expert_data, write_records, ExpertDataConfig};

/// The files of the prepared data.
#[derive(Clone, Debug)]
pub struct DataFiles {
    /// Training trajectories.
    pub train: PathBuf,
    /// Held-out trajectories (the dev split) for the dev loss.
    pub dev: PathBuf,
}

impl DataFiles {
    /// Where [`prepare_data`] writes the files of `dir`: `dir/data/{train,dev}.jsonl`.
    pub fn in_dir(dir: &Path) -> DataFiles {
        DataFiles {
            train: dir.join("data").join("train.jsonl"),
            dev: dir.join("data").join("dev.jsonl"),
        }
    }
}

/// Runs the expert over the training split and the dev split and writes both under
/// `dir/data/`.
pub fn prepare_data(
    config: &ExpertDataConfig,
    dir: &Path,
    reporter: &mut dyn Reporter,
) -> Result<DataFiles, PipelineError> {
    reporter.stage("expert data");
    let files = DataFiles::in_dir(dir);
    let train = expert_data(config).map_err(failed("data"))?;
    write_records(&files.train, &train.records).map_err(failed("data"))?;
    let dev_config = ExpertDataConfig {
        split: Split::Dev,
        seeds: config.seeds.min(4),
        variants: 1,
        ..config.clone()
    };
    let dev = expert_data(&dev_config).map_err(failed("data"))?;
    write_records(&files.dev, &dev.records).map_err(failed("data"))?;
    reporter.info(&format!(
        "expert: {} training scenarios kept ({} rejected, {} template-seed pairs without one), {} trajectories -> {}; {} dev trajectories",
        train.kept,
        train.dropped,
        train.skipped,
        train.records.len(),
        files.train.display(),
        dev.records.len()
    ));
    Ok(files)
}
