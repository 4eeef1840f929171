//! [`MetricsLog`]: rows of metrics appended to `NAME.jsonl` and `NAME.csv` side by
//! side, one write per row per file, so a run killed at any point keeps every row it
//! logged.
//!
//! The JSON-lines file is the record; the CSV file is derived from it (on resume it is
//! rebuilt from the kept JSON rows), with a header fixed by the first row.

use crate::files::write_atomic;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::MetricsError;
use super::rows::{read_rows, Row};
use super::value::{csv_cell, json_string, MetricValue};

/// Which rows of an existing log [`MetricsLog::resume`] keeps.
#[derive(Clone, Debug, PartialEq)]
pub enum KeepRows {
    /// Every row.
    All,
    /// The rows whose `column` is at most `last` (e.g. `step` up to the checkpoint's
    /// step); every row must hold a number there.
    UpTo {
        /// The column compared.
        column: String,
        /// The largest value kept.
        last: f64,
    },
}

/// An open metrics log: `dir/NAME.jsonl` and `dir/NAME.csv`.
#[derive(Debug)]
pub struct MetricsLog {
    jsonl_path: PathBuf,
    csv_path: PathBuf,
    jsonl: File,
    csv: File,
    /// The header, once the first row fixed it.
    columns: Option<Vec<String>>,
}

impl MetricsLog {
    /// Starts an empty log `dir/name.{jsonl,csv}` (creating `dir`, truncating the files).
    pub fn create(dir: &Path, name: &str) -> Result<MetricsLog, MetricsError> {
        let (jsonl_path, csv_path) = paths(dir, name)?;
        let create = |path: &Path| {
            File::create(path).map_err(|e| MetricsError::io("cannot create", path, e))
        };
        Ok(MetricsLog {
            jsonl: create(&jsonl_path)?,
            csv: create(&csv_path)?,
            jsonl_path,
            csv_path,
            columns: None,
        })
    }

    /// Reopens the log `dir/name.{jsonl,csv}` keeping the rows `keep` selects, to append
    /// after them: both files are rewritten atomically (a temporary file renamed over
    /// each), the CSV rebuilt from the kept JSON rows. Without a JSON-lines file this
    /// is [`MetricsLog::create`].
    pub fn resume(dir: &Path, name: &str, keep: &KeepRows) -> Result<MetricsLog, MetricsError> {
        let (jsonl_path, csv_path) = paths(dir, name)?;
        let Some(rows) = read_rows(&jsonl_path)? else {
            return MetricsLog::create(dir, name);
        };
        let columns = rows.first().map(|(_, row)| column_names(row));
        if let Some(columns) = &columns {
            for (line, row) in &rows {
                check_same_columns(&jsonl_path, *line, columns, row)?;
            }
        }
        let mut kept = Vec::with_capacity(rows.len());
        for (line, row) in rows {
            if keeps(keep, &jsonl_path, line, &row)? {
                kept.push(row);
            }
        }
        let columns = columns.filter(|_| !kept.is_empty());
        let mut jsonl_text = String::new();
        let mut csv_text = String::new();
        if let Some(columns) = &columns {
            csv_text.push_str(&csv_header(columns));
            for row in &kept {
                jsonl_text.push_str(&json_line(row));
                csv_text.push_str(&csv_line(row));
            }
        }
        replace_file(&csv_path, &csv_text)?;
        replace_file(&jsonl_path, &jsonl_text)?;
        let append = |path: &Path| {
            OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| MetricsError::io("cannot open", path, e))
        };
        Ok(MetricsLog {
            jsonl: append(&jsonl_path)?,
            csv: append(&csv_path)?,
            jsonl_path,
            csv_path,
            columns,
        })
    }

    /// Appends one row to both files. The first row fixes the columns; later rows must
    /// have the same columns (in any order; they are written in the header's order).
    pub fn log(&mut self, row: &[(&str, MetricValue)]) -> Result<(), MetricsError> {
        if row.is_empty() {
            return Err(MetricsError::EmptyRow {
                file: self.jsonl_path.clone(),
            });
        }
        for (i, (column, _)) in row.iter().enumerate() {
            if row[..i].iter().any(|(earlier, _)| earlier == column) {
                return Err(MetricsError::column(
                    &self.jsonl_path,
                    column,
                    "appears twice in the row",
                ));
            }
        }
        let ordered: Row = match &self.columns {
            None => row
                .iter()
                .map(|(column, value)| ((*column).to_owned(), value.clone()))
                .collect(),
            Some(columns) => {
                if let Some((extra, _)) = row.iter().find(|(c, _)| !columns.iter().any(|h| h == c))
                {
                    return Err(MetricsError::column(
                        &self.jsonl_path,
                        extra,
                        "is not in the header (the first row fixes the columns)",
                    ));
                }
                let mut ordered = Row::with_capacity(columns.len());
                for column in columns {
                    let value = row
                        .iter()
                        .find(|(c, _)| c == column)
                        .map(|(_, value)| value.clone())
                        .ok_or_else(|| {
                            MetricsError::column(
                                &self.jsonl_path,
                                column,
                                "of the header is missing from the row",
                            )
                        })?;
                    ordered.push((column.clone(), value));
                }
                ordered
            }
        };
        if self.columns.is_none() {
            let columns = column_names(&ordered);
            write_all(&mut self.csv, &self.csv_path, &csv_header(&columns))?;
            self.columns = Some(columns);
        }
        write_all(&mut self.jsonl, &self.jsonl_path, &json_line(&ordered))?;
        write_all(&mut self.csv, &self.csv_path, &csv_line(&ordered))
    }

    /// The JSON-lines file.
    pub fn jsonl_path(&self) -> &Path {
        &self.jsonl_path
    }

    /// The CSV file.
    pub fn csv_path(&self) -> &Path {
        &self.csv_path
    }

    /// The columns, once a row has fixed them.
    pub fn columns(&self) -> Option<&[String]> {
        self.columns.as_deref()
    }
}

/// `dir/name.jsonl` and `dir/name.csv`, creating `dir`.
fn paths(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), MetricsError> {
    fs::create_dir_all(dir).map_err(|e| MetricsError::io("cannot create", dir, e))?;
    Ok((
        dir.join(format!("{name}.jsonl")),
        dir.join(format!("{name}.csv")),
    ))
}

/// The column names of `row`, in order.
fn column_names(row: &Row) -> Vec<String> {
    row.iter().map(|(column, _)| column.clone()).collect()
}

/// Fails unless `row` (line `line` of `file`) has exactly `columns`, in order.
fn check_same_columns(
    file: &Path,
    line: usize,
    columns: &[String],
    row: &Row,
) -> Result<(), MetricsError> {
    let same = row.len() == columns.len() && row.iter().zip(columns).all(|((c, _), h)| c == h);
    if same {
        return Ok(());
    }
    Err(MetricsError::BadLine {
        file: file.to_path_buf(),
        line,
        detail: format!(
            "its columns ({}) differ from the first row's ({})",
            column_names(row).join(", "),
            columns.join(", ")
        ),
    })
}

/// Whether `keep` keeps `row` (line `line` of `file`).
fn keeps(keep: &KeepRows, file: &Path, line: usize, row: &Row) -> Result<bool, MetricsError> {
    let KeepRows::UpTo { column, last } = keep else {
        return Ok(true);
    };
    let Some((_, value)) = row.iter().find(|(c, _)| c == column) else {
        return Err(MetricsError::UnknownColumn {
            file: file.to_path_buf(),
            column: column.clone(),
        });
    };
    match value.as_f64() {
        Some(x) => Ok(x <= *last),
        None => Err(MetricsError::BadLine {
            file: file.to_path_buf(),
            line,
            detail: format!("column `{column}` is not a number"),
        }),
    }
}

/// The CSV header line.
fn csv_header(columns: &[String]) -> String {
    let cells: Vec<String> = columns.iter().map(|c| csv_cell(c)).collect();
    cells.join(",") + "\n"
}

/// The CSV line of `row`.
fn csv_line(row: &Row) -> String {
    let cells: Vec<String> = row.iter().map(|(_, value)| value.to_csv()).collect();
    cells.join(",") + "\n"
}

/// The JSON line of `row`, its columns in order.
fn json_line(row: &Row) -> String {
    let entries: Vec<String> = row
        .iter()
        .map(|(column, value)| format!("{}:{}", json_string(column), value.to_json()))
        .collect();
    format!("{{{}}}\n", entries.join(","))
}

/// Writes `text` to `file` (the open `path`) in one call.
fn write_all(file: &mut File, path: &Path, text: &str) -> Result<(), MetricsError> {
    file.write_all(text.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|e| MetricsError::io("cannot write", path, e))
}

/// Replaces `path` with `text` atomically: a synced temporary file beside it is renamed
/// over it.
fn replace_file(path: &Path, text: &str) -> Result<(), MetricsError> {
    write_atomic(path, text.as_bytes()).map_err(|e| MetricsError::io("cannot replace", path, e))
}
