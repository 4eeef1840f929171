//! [`RewardError`]: why a chain's outcomes could not be turned into rewards.

use core::fmt;

/// Why [`Reward::rewards`](super::Reward::rewards) refused its input. Nothing is
/// written to the output when an error is returned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RewardError {
    /// The chain has more tasks than [`MAX_CHAIN_LEN`](super::MAX_CHAIN_LEN).
    ChainTooLong {
        /// Number of tasks given.
        len: usize,
    },
    /// The output slice does not have one slot per task.
    LengthMismatch {
        /// Number of tasks in the chain.
        chain: usize,
        /// Length of the output slice.
        out: usize,
    },
    /// A task's score is NaN or outside `[0, 1]`.
    InvalidScore {
        /// Chain position of the task (0-based).
        position: usize,
        /// The offending score.
        score: f32,
    },
    /// A task claims to have used a skill saved by itself or by a later task.
    InvalidSkillSource {
        /// Chain position of the task (0-based).
        position: usize,
        /// The chain position the skill supposedly came from.
        source: usize,
    },
    /// The configured no-code penalty is not a finite number.
    InvalidPenalty {
        /// The offending penalty.
        penalty: f32,
    },
}

impl fmt::Display for RewardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RewardError::ChainTooLong { len } => write!(
                f,
                "chain of {len} tasks exceeds the maximum of {}",
                super::MAX_CHAIN_LEN
            ),
            RewardError::LengthMismatch { chain, out } => write!(
                f,
                "chain has {chain} tasks but the output has {out} slots"
            ),
            RewardError::InvalidScore { position, score } => write!(
                f,
                "task {position} has score {score}, expected a number in [0, 1]"
            ),
            RewardError::InvalidSkillSource { position, source } => write!(
                f,
                "task {position} claims a skill saved by task {source}, which is not earlier in the chain"
            ),
            RewardError::InvalidPenalty { penalty } => {
                write!(f, "no-code penalty {penalty} is not finite")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RewardError {}
