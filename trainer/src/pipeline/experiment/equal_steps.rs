//! `[experiment] equal_sft_steps`: the optimizer steps every SFT model and every anneal
//! of an experiment take, so that the skill model and the plain-code model get the same
//! number of updates over the same schedule whatever the size of their data.

use std::fmt::Write;

use sage_envs::expert::ExpertMode;

use crate::config::RunConfig;
use crate::pipeline::PipelineError;
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
    /// The counts under `config` from the training data of both modes, the skill data
    /// and plain code, whichever arms the run has (so that a model's steps do not depend
    /// on the arms beside it: a resumed run may add arms): `loaded`, one mode's data,
    /// and the other's from `load`. Also a line saying how they were sized (each mode's
    /// batches per epoch).
    pub fn size(
        config: &RunConfig,
        loaded: (ExpertMode, &SftData),
        load: &mut dyn FnMut(ExpertMode) -> Result<SftData, PipelineError>,
    ) -> Result<(EqualSteps, String), PipelineError> {
        let per_epoch = |train: &SftData| {
            SftTrainer::new(config.sft.clone(), train, SftState::default()).batches_per_epoch()
        };
        let mut largest = 0;
        let mut sizes = String::new();
        for mode in [config.experiment.skill_data, ExpertMode::Direct] {
            let batches = match loaded {
                (loaded_mode, train) if loaded_mode == mode => per_epoch(train),
                _ => per_epoch(&load(mode)?),
            };
            largest = largest.max(batches);
            let sep = if sizes.is_empty() { "" } else { ", " };
            let _ = write!(sizes, "{sep}{mode}: {batches}");
        }
        let steps = EqualSteps {
            sft: config.sft.epochs * largest,
            anneal: config.experiment.anneal.epochs * largest,
        };
        let line = format!(
            "equal SFT steps: {} per model, {} per anneal (batches per epoch: {sizes})",
            steps.sft, steps.anneal
        );
        Ok((steps, line))
    }
}
