//! The skill library: the [`SkillLibrary`] trait (an ordered set of [`Skill`]s keyed by
//! name, with usage counters) and [`HashSkillLibrary`], its default implementation over a
//! `Vec` in insertion order plus a `hashbrown` index from name to position.
//!
//! This module owns the library's invariants (names are non-empty and unique; the order is
//! the order skills were first inserted; a replaced skill keeps its position) and its
//! persistence: serde, a postcard blob ([`HashSkillLibrary::to_postcard`]) and the JSON
//! lines exchange format ([`HashSkillLibrary::to_jsonl`]).

mod error;
mod jsonl;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use hashbrown::HashMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::skill::{Skill, SkillStats};

pub use error::{JsonlProblem, LibraryError};

/// An ordered set of skills keyed by name, with usage counters.
///
/// Implementations keep the skills contiguous in insertion order, so that
/// [`skills`](SkillLibrary::skills) can hand them out as a slice (the form
/// [`Environment::reset`](crate::Environment::reset) takes). The trait is object safe:
/// `&dyn SkillLibrary` and `L: SkillLibrary + ?Sized` both work.
pub trait SkillLibrary {
    /// All skills, in the order their names were first inserted.
    fn skills(&self) -> &[Skill];

    /// The position of the skill called `name` in [`skills`](SkillLibrary::skills).
    fn position(&self, name: &str) -> Option<usize>;

    /// Inserts `skill`. A skill of a new name goes last. A skill whose name is already
    /// present replaces the old one in place and gets `revision = old.revision + 1`; its
    /// counters are the old skill's counters plus its own (normally zero), so counters
    /// count the name across revisions. Returns the replaced skill, if any.
    ///
    /// # Errors
    /// [`LibraryError::EmptyName`] when `skill.name` is empty.
    fn insert(&mut self, skill: Skill) -> Result<Option<Skill>, LibraryError>;

    /// Removes the skill called `name`, keeping the order of the others.
    fn remove(&mut self, name: &str) -> Option<Skill>;

    /// Mutable access to the counters of the skill called `name`.
    fn stats_mut(&mut self, name: &str) -> Option<&mut SkillStats>;

    /// Number of skills.
    fn len(&self) -> usize {
        self.skills().len()
    }

    /// The library holds no skill.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The skill called `name`.
    fn get(&self, name: &str) -> Option<&Skill> {
        self.position(name).and_then(|i| self.skills().get(i))
    }

    /// A skill called `name` is present.
    fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Counts one retrieval of `name` (the skill was shown to a task).
    ///
    /// # Errors
    /// [`LibraryError::UnknownSkill`] when no skill has that name.
    fn record_retrieved(&mut self, name: &str) -> Result<(), LibraryError> {
        let stats = self
            .stats_mut(name)
            .ok_or_else(|| LibraryError::UnknownSkill { name: name.into() })?;
        stats.retrieved = stats.retrieved.saturating_add(1);
        Ok(())
    }

    /// Counts one use of `name` by a task, and one use in a successful task when
    /// `success` (the task passed all its checks).
    ///
    /// # Errors
    /// [`LibraryError::UnknownSkill`] when no skill has that name.
    fn record_used(&mut self, name: &str, success: bool) -> Result<(), LibraryError> {
        let stats = self
            .stats_mut(name)
            .ok_or_else(|| LibraryError::UnknownSkill { name: name.into() })?;
        stats.used = stats.used.saturating_add(1);
        if success {
            stats.used_in_success = stats.used_in_success.saturating_add(1);
        }
        Ok(())
    }
}

/// The default [`SkillLibrary`]: skills in a `Vec` in insertion order, and a `hashbrown`
/// map from name to position.
///
/// Lookup and insertion are O(1); removal is O(n) (later skills move up one place and
/// their index entries follow). Serde sees only the ordered skills; deserializing
/// rebuilds the index and rejects empty or duplicate names.
#[derive(Clone, Default)]
pub struct HashSkillLibrary {
    skills: Vec<Skill>,
    positions: HashMap<String, usize>,
}

impl HashSkillLibrary {
    /// An empty library.
    pub fn new() -> HashSkillLibrary {
        HashSkillLibrary::default()
    }

    /// A library holding `skills` in the given order, with their revisions and counters
    /// as given.
    ///
    /// # Errors
    /// [`LibraryError::EmptyName`] or [`LibraryError::DuplicateName`].
    pub fn from_skills(skills: Vec<Skill>) -> Result<HashSkillLibrary, LibraryError> {
        let mut positions = HashMap::with_capacity(skills.len());
        for (position, skill) in skills.iter().enumerate() {
            if skill.name.is_empty() {
                return Err(LibraryError::EmptyName);
            }
            if positions.insert(skill.name.clone(), position).is_some() {
                return Err(LibraryError::DuplicateName {
                    name: skill.name.clone(),
                });
            }
        }
        Ok(HashSkillLibrary { skills, positions })
    }

    /// The skills in insertion order, consuming the library.
    pub fn into_skills(self) -> Vec<Skill> {
        self.skills
    }

    /// The library as a postcard blob (the ordered skills, every field included).
    pub fn to_postcard(&self) -> Vec<u8> {
        // Strings, integers, options and slices of known length always serialize into a
        // growable buffer, so the empty fallback is never taken.
        postcard::to_allocvec(&self.skills).unwrap_or_default()
    }

    /// Reads a blob written by [`to_postcard`](HashSkillLibrary::to_postcard). Never
    /// panics, whatever the bytes.
    ///
    /// # Errors
    /// [`LibraryError::CorruptPostcard`] (truncated or malformed, with postcard's message),
    /// [`LibraryError::TrailingBytes`], or the errors of
    /// [`from_skills`](HashSkillLibrary::from_skills).
    pub fn from_postcard(bytes: &[u8]) -> Result<HashSkillLibrary, LibraryError> {
        let (skills, rest) = postcard::take_from_bytes::<Vec<Skill>>(bytes).map_err(|err| {
            LibraryError::CorruptPostcard {
                message: alloc::format!("{err}"),
            }
        })?;
        if !rest.is_empty() {
            return Err(LibraryError::TrailingBytes { count: rest.len() });
        }
        HashSkillLibrary::from_skills(skills)
    }

    /// The library as JSON lines, one skill per line in insertion order:
    /// `{"task_id": origin.task_id, "name": name, "function": source}`.
    ///
    /// The format is lossy: scenario ids, counters and revisions are not written.
    pub fn to_jsonl(&self) -> String {
        jsonl::write(&self.skills)
    }

    /// Reads JSON lines in the format of [`to_jsonl`](HashSkillLibrary::to_jsonl). Blank
    /// lines are skipped and fields other than the three are ignored. Each `function` is
    /// parsed with [`parse_code`](crate::skill::parse_code); parameters and docstring
    /// come from its last top-level definition of `name`, and the skill's source is the
    /// `function` text as given. The format has no scenario id: `scenario_of` maps each
    /// line's task id to one (`|_| String::new()` leaves it empty). Counters start at
    /// zero and revisions at 0.
    ///
    /// # Errors
    /// [`LibraryError::BadJsonlLine`] with the 1-based line number and the
    /// [`JsonlProblem`]; a name seen on an earlier line is
    /// [`JsonlProblem::DuplicateName`].
    pub fn from_jsonl(
        text: &str,
        scenario_of: impl FnMut(&str) -> String,
    ) -> Result<HashSkillLibrary, LibraryError> {
        jsonl::read(text, scenario_of)
    }
}

impl SkillLibrary for HashSkillLibrary {
    fn skills(&self) -> &[Skill] {
        &self.skills
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.positions.get(name).copied()
    }

    fn insert(&mut self, mut skill: Skill) -> Result<Option<Skill>, LibraryError> {
        if skill.name.is_empty() {
            return Err(LibraryError::EmptyName);
        }
        let Some(slot) = self
            .position(&skill.name)
            .and_then(|position| self.skills.get_mut(position))
        else {
            self.positions.insert(skill.name.clone(), self.skills.len());
            self.skills.push(skill);
            return Ok(None);
        };
        skill.revision = slot.revision.saturating_add(1);
        skill.stats = add_stats(slot.stats, skill.stats);
        Ok(Some(core::mem::replace(slot, skill)))
    }

    fn remove(&mut self, name: &str) -> Option<Skill> {
        let position = self.positions.remove(name)?;
        let removed = self.skills.remove(position);
        for later in &self.skills[position..] {
            if let Some(p) = self.positions.get_mut(later.name.as_str()) {
                *p -= 1;
            }
        }
        Some(removed)
    }

    fn stats_mut(&mut self, name: &str) -> Option<&mut SkillStats> {
        let position = self.position(name)?;
        self.skills.get_mut(position).map(|skill| &mut skill.stats)
    }
}

/// Counters of two records of one skill name, added (saturating).
fn add_stats(a: SkillStats, b: SkillStats) -> SkillStats {
    SkillStats {
        retrieved: a.retrieved.saturating_add(b.retrieved),
        used: a.used.saturating_add(b.used),
        used_in_success: a.used_in_success.saturating_add(b.used_in_success),
    }
}

impl PartialEq for HashSkillLibrary {
    /// Libraries are equal when they hold equal skills in the same order.
    fn eq(&self, other: &HashSkillLibrary) -> bool {
        self.skills == other.skills
    }
}

impl Eq for HashSkillLibrary {}

impl fmt::Debug for HashSkillLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashSkillLibrary")
            .field("skills", &self.skills)
            .finish()
    }
}

impl Serialize for HashSkillLibrary {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.skills.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for HashSkillLibrary {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let skills = Vec::<Skill>::deserialize(deserializer)?;
        HashSkillLibrary::from_skills(skills).map_err(serde::de::Error::custom)
    }
}
