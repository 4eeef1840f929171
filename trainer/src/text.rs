//! Serde for settings written as text: an enum that a configuration names (`iid`,
//! `skills`, `query-ngram:3`, ...) is read through its `FromStr`, whose error names
//! the values it knows, and written through its `Display`. Use with
//! `#[serde(with = "text")]`, or `text::list` for a list of them.

use std::fmt::Display;
use std::str::FromStr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// Writes `value` as its text.
pub fn serialize<T: Display, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// Reads a value from its text.
pub fn deserialize<'de, T, D>(deserializer: D) -> Result<T, D::Error>
where
    T: FromStr,
    T::Err: Display,
    D: Deserializer<'de>,
{
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(D::Error::custom)
}

/// The same for a list of values, each written as its text.
pub mod list {
    use super::*;

    /// Writes `values` as a list of texts.
    pub fn serialize<T: Display, S: Serializer>(
        values: &[T],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(values.iter().map(ToString::to_string))
    }

    /// Reads a list of values from their texts.
    pub fn deserialize<'de, T, D>(deserializer: D) -> Result<Vec<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        Vec::<String>::deserialize(deserializer)?
            .iter()
            .map(|text| text.parse().map_err(D::Error::custom))
            .collect()
    }
}
