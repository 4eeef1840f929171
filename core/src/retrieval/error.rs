//! What can go wrong in retrieval: [`IndexError`] for the indices themselves, and
//! [`RetrievalError`] for a [`Retriever`](super::Retriever), which also meets embedder
//! and library failures.

use core::fmt;

use crate::skill::LibraryError;

/// An index was given a vector or a size it cannot use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexError {
    /// A vector dimension of 0 was asked for.
    ZeroDimension,
    /// A vector's length is not the index's dimension.
    DimensionMismatch {
        /// The index's dimension.
        expected: usize,
        /// The vector's length.
        found: usize,
    },
    /// A vector has a NaN or infinite component.
    NonFinite,
}

/// A [`Retriever`](super::Retriever) failed.
#[derive(Clone, Debug, PartialEq)]
pub enum RetrievalError<E> {
    /// The index refused a vector.
    Index(IndexError),
    /// The embedder failed.
    Embedder(E),
    /// Counting a retrieval in the library failed.
    Library(LibraryError),
}

impl<E> From<IndexError> for RetrievalError<E> {
    fn from(err: IndexError) -> Self {
        RetrievalError::Index(err)
    }
}

impl<E> From<LibraryError> for RetrievalError<E> {
    fn from(err: LibraryError) -> Self {
        RetrievalError::Library(err)
    }
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::ZeroDimension => f.write_str("vector dimension 0"),
            IndexError::DimensionMismatch { expected, found } => {
                write!(
                    f,
                    "vector of length {found} where the index holds {expected}"
                )
            }
            IndexError::NonFinite => f.write_str("vector with a NaN or infinite component"),
        }
    }
}

impl<E: fmt::Display> fmt::Display for RetrievalError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetrievalError::Index(err) => write!(f, "retrieval index: {err}"),
            RetrievalError::Embedder(err) => write!(f, "embedder: {err}"),
            RetrievalError::Library(err) => write!(f, "skill library: {err}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for IndexError {}

#[cfg(feature = "std")]
impl<E: std::error::Error + 'static> std::error::Error for RetrievalError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RetrievalError::Index(err) => Some(err),
            RetrievalError::Embedder(err) => Some(err),
            RetrievalError::Library(err) => Some(err),
        }
    }
}
