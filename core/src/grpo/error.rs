//! [`GrpoError`]: why a GRPO computation refused its input.

use core::fmt;

/// Why an advantage or loss computation refused its input. Outputs may have been
/// partly written when an error is returned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GrpoError {
    /// A slice does not have the length the others imply.
    LengthMismatch {
        /// Which slice.
        what: &'static str,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        found: usize,
    },
    /// A configuration value is out of its documented range.
    InvalidConfig {
        /// Which setting, and what it must be.
        what: &'static str,
    },
    /// An input value (reward, advantage) is NaN or infinite, or the loss came out
    /// non-finite (a NaN log-prob on an unmasked token).
    NonFinite {
        /// Which quantity.
        what: &'static str,
    },
    /// A KL coefficient is set but no reference log-probs were given.
    MissingReference,
}

impl fmt::Display for GrpoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GrpoError::LengthMismatch {
                what,
                expected,
                found,
            } => write!(f, "{what} has length {found}, expected {expected}"),
            GrpoError::InvalidConfig { what } => write!(f, "invalid configuration: {what}"),
            GrpoError::NonFinite { what } => write!(f, "{what} is not finite"),
            GrpoError::MissingReference => {
                write!(
                    f,
                    "a KL coefficient is set but no reference log-probs were given"
                )
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GrpoError {}
