//! `[experiment] equal_sft_steps`: the optimizer steps every SFT model and every anneal
//! of an experiment take, so that the skill model and the plain-code model get the same
//! number of updates over the same schedule whatever the size of their data.

use std::fmt::Write;

use sage_envs::expert::ExpertMode;

use crate::config::RunConfig;
use crate::sft::{SftData, SftState, SftTrainer};

/// The step counts shared by the SFT stages of every mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EqualSteps {
    /// Steps of each SFT model: `[sft] epochs` passes over the largest mode's data.
    pub sft: u64,
    /// Steps of each anneal: `[experiment.anneal] epochs` passes over the same data.
    pub anneal: u64,
}

impl EqualSteps {
    /// The counts for `modes`' training data under `config`, and a line saying how they
    /// were sized (each mode's batches per epoch).
    pub fn of(config: &RunConfig, modes: &[(ExpertMode, &SftData)]) -> (EqualSteps, String) {
        let mut largest = 0;
        let mut sizes = String::new();
        for (mode, train) in modes {
            let per_epoch =
                SftTrainer::new(config.sft.clone(), train, SftState::default()).batches_per_epoch();
            largest = largest.max(per_epoch);
            let sep = if sizes.is_empty() { "" } else { ", " };
            let _ = write!(sizes, "{sep}{mode}: {per_epoch}");
        }
        let steps = EqualSteps {
            sft: config.sft.epochs * largest,
            anneal: config.experiment.anneal.epochs * largest,
        };
        let line = format!(
            "equal SFT steps: {} per model, {} per anneal (batches per epoch: {sizes})",
            steps.sft, steps.anneal
        );
        (steps, line)
    }
}
