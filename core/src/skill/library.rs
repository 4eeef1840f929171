//! PLACEHOLDER owned by the library helper: replaced wholesale.
use crate::skill::Skill;

/// Library error.
#[derive(Debug)]
pub struct LibraryError;

/// A skill library.
pub trait SkillLibrary {
    /// Looks a skill up by name.
    fn get(&self, name: &str) -> Option<&Skill>;
}

/// Default library.
#[derive(Default)]
pub struct HashSkillLibrary;
