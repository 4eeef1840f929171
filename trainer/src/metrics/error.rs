//! [`MetricsError`]: why metrics could not be written, read or plotted; every case
//! names the file, and the column or line where there is one.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A metrics log, series or plot that cannot be written or read.
#[derive(Debug)]
pub enum MetricsError {
    /// A file or directory could not be created, read, written or renamed.
    Io {
        /// The file or directory.
        file: PathBuf,
        /// What was being done, e.g. `cannot write`.
        action: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// A row's columns differ from the log's header.
    Column {
        /// The log being written or read.
        file: PathBuf,
        /// The column at fault.
        column: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A row with no column at all.
    EmptyRow {
        /// The log being written.
        file: PathBuf,
    },
    /// A line of a JSON-lines log is not a flat object of numbers, strings and nulls.
    BadLine {
        /// The log.
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        detail: String,
    },
    /// A column asked for is in no row of the log.
    UnknownColumn {
        /// The log.
        file: PathBuf,
        /// The column.
        column: String,
    },
    /// A chart that cannot be drawn (size out of range, no room for its labels).
    Chart {
        /// The image that was to be written.
        file: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// Drawing or PNG encoding failed.
    Render {
        /// The image being written.
        file: PathBuf,
        /// The drawing library's or encoder's message.
        detail: String,
    },
}

impl MetricsError {
    /// An I/O failure of `action` on `file`.
    pub(crate) fn io(action: &'static str, file: &Path, source: io::Error) -> MetricsError {
        MetricsError::Io {
            file: file.to_path_buf(),
            action,
            source,
        }
    }

    /// A problem with `column` of the log `file`.
    pub(crate) fn column(file: &Path, column: &str, problem: &'static str) -> MetricsError {
        MetricsError::Column {
            file: file.to_path_buf(),
            column: column.to_owned(),
            problem,
        }
    }

    /// A drawing or encoding failure while writing `file`.
    pub(crate) fn render(file: &Path, detail: impl fmt::Display) -> MetricsError {
        MetricsError::Render {
            file: file.to_path_buf(),
            detail: detail.to_string(),
        }
    }
}

impl fmt::Display for MetricsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsError::Io {
                file,
                action,
                source,
            } => write!(f, "{action} {}: {source}", file.display()),
            MetricsError::Column {
                file,
                column,
                problem,
            } => write!(f, "{}: column `{column}` {problem}", file.display()),
            MetricsError::EmptyRow { file } => {
                write!(f, "{}: a row needs at least one column", file.display())
            }
            MetricsError::BadLine { file, line, detail } => {
                write!(f, "{}, line {line}: {detail}", file.display())
            }
            MetricsError::UnknownColumn { file, column } => {
                write!(f, "{}: no row has a column `{column}`", file.display())
            }
            MetricsError::Chart { file, problem } => {
                write!(f, "cannot plot {}: {problem}", file.display())
            }
            MetricsError::Render { file, detail } => {
                write!(f, "cannot render {}: {detail}", file.display())
            }
        }
    }
}

impl std::error::Error for MetricsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MetricsError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
