//! [`read_series`]: columns of a JSON-lines metrics log as `(x, y)` series to plot.

use std::io;
use std::path::Path;

use super::error::MetricsError;
use super::rows::read_rows;
use super::value::MetricValue;

/// One named line of a chart: `(x, y)` points in the order logged.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The line's name (the column it came from).
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// The columns `ys` of the log `jsonl` against the column `x`, one [`Series`] per
/// entry of `ys`, in that order.
///
/// A row contributes a point to a series when both its `x` and its `y` are finite
/// numbers (text, missing values and NaN are skipped). A column that no row holds is
/// an error, so that a misspelt name does not plot an empty chart; a log with no row
/// gives empty series.
pub fn read_series(jsonl: &Path, x: &str, ys: &[&str]) -> Result<Vec<Series>, MetricsError> {
    let rows = read_rows(jsonl)?.ok_or_else(|| {
        MetricsError::io(
            "cannot read",
            jsonl,
            io::Error::from(io::ErrorKind::NotFound),
        )
    })?;
    if !rows.is_empty() {
        for column in std::iter::once(&x).chain(ys) {
            let present = rows
                .iter()
                .any(|(_, row)| row.iter().any(|(c, _)| c == column));
            if !present {
                return Err(MetricsError::UnknownColumn {
                    file: jsonl.to_path_buf(),
                    column: (*column).to_owned(),
                });
            }
        }
    }
    let number = |row: &[(String, MetricValue)], column: &str| {
        row.iter()
            .find(|(c, _)| c == column)
            .and_then(|(_, value)| value.as_f64())
            .filter(|v| v.is_finite())
    };
    Ok(ys
        .iter()
        .map(|&y| Series {
            name: y.to_owned(),
            points: rows
                .iter()
                .filter_map(|(_, row)| Some((number(row, x)?, number(row, y)?)))
                .collect(),
        })
        .collect())
}
