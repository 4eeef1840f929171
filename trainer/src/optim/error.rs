//! Why an optimizer could not be built or could not step.

use std::fmt;

/// A hyper-parameter out of its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field at fault.
    pub field: &'static str,
    /// What it must be.
    pub requirement: &'static str,
}

impl ConfigError {
    /// `field` must be `requirement`.
    pub fn new(field: &'static str, requirement: &'static str) -> ConfigError {
        ConfigError { field, requirement }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "optimizer config: `{}` must be {}",
            self.field, self.requirement
        )
    }
}

impl std::error::Error for ConfigError {}

/// Why an optimizer call failed; `E` is the backend's error.
#[derive(Debug)]
pub enum OptimError<E> {
    /// A hyper-parameter is out of range.
    Config(ConfigError),
    /// The model's parameter slab is not the one the optimizer was built for.
    SlabMismatch {
        /// Elements of the optimizer's moments.
        expected: usize,
        /// Elements of the model's parameters.
        got: usize,
    },
    /// The named tensors of the parameter layout do not tile the slab, so weight
    /// decay cannot be assigned to every element.
    LayoutGap {
        /// First element not covered exactly once.
        offset: usize,
    },
    /// The step counter reached `u32::MAX`, the last step the kernel accepts.
    StepLimit,
    /// Writing the merged weights of the model's LoRA adapters failed (the reason).
    Merge(String),
    /// The model's weights are frozen for inference (`Transformer::new_frozen`).
    Frozen,
    /// The backend failed.
    Backend(E),
}

impl<E: fmt::Display> fmt::Display for OptimError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptimError::Config(e) => write!(f, "{e}"),
            OptimError::SlabMismatch { expected, got } => write!(
                f,
                "optimizer: the model has {got} parameters but the optimizer's moments hold \
                 {expected}"
            ),
            OptimError::LayoutGap { offset } => write!(
                f,
                "optimizer: the parameter layout's named tensors do not tile the slab at \
                 element {offset}"
            ),
            OptimError::StepLimit => write!(f, "optimizer: the step counter is exhausted"),
            OptimError::Merge(why) => write!(f, "optimizer: merging the LoRA adapters: {why}"),
            OptimError::Frozen => write!(
                f,
                "optimizer: the model's weights are frozen for inference and take no step"
            ),
            OptimError::Backend(e) => write!(f, "optimizer backend: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for OptimError<E> {}

impl<E> From<ConfigError> for OptimError<E> {
    fn from(e: ConfigError) -> Self {
        OptimError::Config(e)
    }
}
