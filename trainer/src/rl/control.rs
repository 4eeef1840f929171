//! [`ControlGap`]: a run measured against its update-off control, step by step over the
//! last third of the steps both took.
//!
//! A run and its control share their chains and their random streams, so at step `k`
//! they sample the same way until their policies differ; the gap between their curves
//! is what the updates did, and a step's sampling noise mostly cancels in it.

use serde::{Deserialize, Serialize};

use crate::metrics::Series;

/// How one metric of a run compares with its control over a window of steps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ControlGap {
    /// The window's first step.
    pub first_step: u64,
    /// The window's last step.
    pub last_step: u64,
    /// The run's mean over the window.
    pub run: f64,
    /// The control's mean over the same steps.
    pub control: f64,
    /// Steps of the window where the run was below its control.
    pub below: usize,
    /// Steps where it was above.
    pub above: usize,
}

impl ControlGap {
    /// The run's mean minus the control's.
    pub fn gain(&self) -> f64 {
        self.run - self.control
    }
}

/// The last third (rounded up) of the steps that both `run` and `control` hold (points
/// `(step, value)`); `None` when they share no step.
pub fn control_gap(run: &Series, control: &Series) -> Option<ControlGap> {
    let pairs: Vec<(f64, f64, f64)> = run
        .points
        .iter()
        .filter_map(|&(step, value)| {
            let paired = control.points.iter().find(|&&(s, _)| s == step)?;
            Some((step, value, paired.1))
        })
        .collect();
    let window = &pairs[pairs.len() - pairs.len().div_ceil(3)..];
    let (first, last) = (window.first()?, window.last()?);
    let n = window.len() as f64;
    Some(ControlGap {
        first_step: first.0 as u64,
        last_step: last.0 as u64,
        run: window.iter().map(|p| p.1).sum::<f64>() / n,
        control: window.iter().map(|p| p.2).sum::<f64>() / n,
        below: window.iter().filter(|p| p.1 < p.2).count(),
        above: window.iter().filter(|p| p.1 > p.2).count(),
    })
}
