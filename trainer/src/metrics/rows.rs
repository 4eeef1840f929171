//! Reading a JSON-lines metrics log back as rows whose columns keep their order.
//!
//! A run killed while writing may leave a last line cut short (no final newline, not
//! valid JSON): that line is dropped. Any other bad line is an error naming the file
//! and line.

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use super::error::MetricsError;
use super::value::MetricValue;

/// One row of a log: `(column, value)` in the order the line lists them.
pub(super) type Row = Vec<(String, MetricValue)>;

/// A JSON object's entries in the order written (`serde_json`'s own map sorts them).
struct OrderedObject(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for OrderedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(OrderedObjectVisitor)
    }
}

struct OrderedObjectVisitor;

impl<'de> Visitor<'de> for OrderedObjectVisitor {
    type Value = OrderedObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedObject, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
            entries.push(entry);
        }
        Ok(OrderedObject(entries))
    }
}

/// The rows of the log `path`, with their 1-based line numbers; blank lines are
/// skipped. `None` when the file does not exist.
pub(super) fn read_rows(path: &Path) -> Result<Option<Vec<(usize, Row)>>, MetricsError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MetricsError::io("cannot read", path, e)),
    };
    let cut_short = !text.is_empty() && !text.ends_with('\n');
    let line_count = text.lines().count();
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line_number = index + 1;
        let bad = |detail: String| MetricsError::BadLine {
            file: path.to_path_buf(),
            line: line_number,
            detail,
        };
        let object = match serde_json::from_str::<OrderedObject>(line) {
            Ok(object) => object,
            Err(_) if cut_short && line_number == line_count => break,
            Err(e) => return Err(bad(e.to_string())),
        };
        let mut row = Row::with_capacity(object.0.len());
        for (column, value) in object.0 {
            let value = MetricValue::from_json(&value).ok_or_else(|| {
                bad(format!(
                    "column `{column}` holds {value}, not a number, string or null"
                ))
            })?;
            row.push((column, value));
        }
        rows.push((line_number, row));
    }
    Ok(Some(rows))
}
