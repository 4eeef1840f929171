//! What can go wrong with a skill library: [`LibraryError`], and [`JsonlProblem`] for a
//! JSON lines import.

use alloc::string::String;
use core::fmt;

/// A skill library operation or import failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LibraryError {
    /// A skill with an empty name.
    EmptyName,
    /// Two skills share a name.
    DuplicateName {
        /// The shared name.
        name: String,
    },
    /// No skill has this name.
    UnknownSkill {
        /// The name looked up.
        name: String,
    },
    /// A postcard blob is truncated or malformed.
    CorruptPostcard {
        /// Postcard's description of the problem.
        message: String,
    },
    /// A postcard blob holds a whole library followed by more bytes.
    TrailingBytes {
        /// How many bytes follow the library.
        count: usize,
    },
    /// A line of a JSON lines import is unusable.
    BadJsonlLine {
        /// The line's number, counting from 1.
        line: usize,
        /// What is wrong with it.
        problem: JsonlProblem,
    },
}

/// What is wrong with one line of a JSON lines import.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonlProblem {
    /// The line is not valid JSON.
    InvalidJson {
        /// The JSON parser's description.
        message: String,
    },
    /// The line is JSON but not an object.
    NotAnObject,
    /// A required field is absent.
    MissingField {
        /// The field's name.
        field: &'static str,
    },
    /// A required field is not a string.
    NotAString {
        /// The field's name.
        field: &'static str,
    },
    /// The `name` field is empty.
    EmptyName,
    /// The `function` source has no top-level definition of the line's `name`.
    NotDefined {
        /// The name that was expected to be defined.
        name: String,
    },
    /// An earlier line already imported a skill of this name.
    DuplicateName {
        /// The repeated name.
        name: String,
    },
}

impl fmt::Display for LibraryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LibraryError::EmptyName => f.write_str("skill with an empty name"),
            LibraryError::DuplicateName { name } => write!(f, "duplicate skill name `{name}`"),
            LibraryError::UnknownSkill { name } => write!(f, "no skill named `{name}`"),
            LibraryError::CorruptPostcard { message } => {
                write!(f, "corrupt or truncated postcard blob: {message}")
            }
            LibraryError::TrailingBytes { count } => {
                write!(f, "corrupt postcard blob: {count} bytes after the library")
            }
            LibraryError::BadJsonlLine { line, problem } => {
                write!(f, "bad JSONL line {line}: {problem}")
            }
        }
    }
}

impl fmt::Display for JsonlProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonlProblem::InvalidJson { message } => write!(f, "not valid JSON ({message})"),
            JsonlProblem::NotAnObject => f.write_str("not a JSON object"),
            JsonlProblem::MissingField { field } => write!(f, "missing field `{field}`"),
            JsonlProblem::NotAString { field } => write!(f, "field `{field}` is not a string"),
            JsonlProblem::EmptyName => f.write_str("empty skill name"),
            JsonlProblem::NotDefined { name } => {
                write!(f, "the function does not define `{name}`")
            }
            JsonlProblem::DuplicateName { name } => {
                write!(f, "skill `{name}` was already defined on an earlier line")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LibraryError {}
