//! [`TaskOutcome`]: what the reward needs to know about one task of a chain, and the
//! checks that an outcome is well formed.

use serde::{Deserialize, Serialize};

use super::{RewardError, MAX_CHAIN_LEN};

/// The outcome of the task at one position of a chain, as the reward sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskOutcome {
    /// The task's outcome score `r` in `[0, 1]`: the fraction of its checks that passed.
    pub score: f32,
    /// The episode ended on a turn with code. `false` is SAGE's "response that ends
    /// without any code" (`EpisodeEnd::NoCode`), which earns the no-code penalty.
    pub had_code: bool,
    /// Bit `j` is set when this task's code called a skill saved by the task at chain
    /// position `j`; only positions earlier than this task's own may be set.
    pub used_skills_from: u64,
}

impl TaskOutcome {
    /// An outcome with the given score and code flag that used no saved skill.
    pub fn new(score: f32, had_code: bool) -> Self {
        TaskOutcome {
            score,
            had_code,
            used_skills_from: 0,
        }
    }

    /// The same outcome, additionally recording a call to a skill saved by the task at
    /// chain position `source`. Positions of 64 or more cannot be recorded and are
    /// ignored (no chain is that long).
    pub fn using_skill_from(mut self, source: usize) -> Self {
        if source < MAX_CHAIN_LEN {
            self.used_skills_from |= 1 << source;
        }
        self
    }

    /// The task completed: its score reaches 1 and it did not end without code. Scores
    /// are fractions of checks, so a complete task's score is exactly `1.0` (`n / n` is
    /// exact in floating point) and no tolerance is applied.
    pub fn succeeded(&self) -> bool {
        self.had_code && self.score >= 1.0
    }

    /// This task called a skill saved by the task at chain position `source`.
    pub fn used_skill_from(&self, source: usize) -> bool {
        source < MAX_CHAIN_LEN && self.used_skills_from & (1 << source) != 0
    }

    /// This task called a skill saved by any earlier task of the chain.
    pub fn used_any_skill(&self) -> bool {
        self.used_skills_from != 0
    }

    /// Checks that the outcome can stand at chain position `position`.
    pub(crate) fn validate(&self, position: usize) -> Result<(), RewardError> {
        if !(0.0..=1.0).contains(&self.score) {
            return Err(RewardError::InvalidScore {
                position,
                score: self.score,
            });
        }
        let later = if position >= MAX_CHAIN_LEN {
            0
        } else {
            self.used_skills_from >> position
        };
        if later != 0 {
            return Err(RewardError::InvalidSkillSource {
                position,
                source: position + later.trailing_zeros() as usize,
            });
        }
        Ok(())
    }
}
