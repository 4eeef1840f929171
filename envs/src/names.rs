//! Settings that a configuration or a command line names by text: [`Named`] gives an
//! enum with a fixed set of names its `FromStr`-style parsing and the error that lists
//! the names it knows.

use std::fmt;

/// A name outside the closed set of names a setting takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownName {
    /// What was being named (`split`, `prompt`, ...).
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The names that exist.
    pub known: Vec<&'static str>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} {:?} (known: {})",
            self.what,
            self.name,
            self.known.join(", ")
        )
    }
}

impl std::error::Error for UnknownName {}

/// An enum whose values are named by fixed texts.
pub trait Named: Copy + 'static {
    /// What a value names (`split`, `prompt`, ...), for errors.
    const WHAT: &'static str;
    /// Every value, in the order errors list them.
    const ALL: &'static [Self];

    /// The value's name.
    fn name(self) -> &'static str;

    /// The value called `name`, or the error that lists the names there are.
    fn from_name(name: &str) -> Result<Self, UnknownName> {
        Self::ALL
            .iter()
            .copied()
            .find(|value| value.name() == name)
            .ok_or_else(|| UnknownName {
                what: Self::WHAT,
                name: name.to_owned(),
                known: Self::ALL.iter().map(|value| value.name()).collect(),
            })
    }
}

/// Implements `FromStr` and `Display` of a [`Named`] enum through its names.
#[macro_export]
macro_rules! impl_named_text {
    ($type:ty) => {
        impl ::std::str::FromStr for $type {
            type Err = $crate::names::UnknownName;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                <$type as $crate::names::Named>::from_name(text)
            }
        }

        impl ::std::fmt::Display for $type {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::names::Named::name(*self))
            }
        }
    };
}
