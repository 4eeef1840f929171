//! State-based evaluation of one task: [`evaluate`] turns the reference's expected
//! outcome, the world's actual diff and the answer given to `complete_task` into a
//! [`Report`] of named checks.
//!
//! The checks:
//! - one per expected row effect (a row added, removed, or changed): it must be in the
//!   actual diff. Added rows are matched by content (ids of new rows depend on the order
//!   the agent worked in), removed and changed rows by id; a changed row must have every
//!   expected field at its expected value.
//! - `no collateral damage`: every actual change is an expected one. Logins leave no
//!   trace in the database, so nothing else is allowed.
//! - for questions, `answer`: the answer given matches the expected one; for actions,
//!   `completed`: `complete_task` was called.
//!
//! Values are compared after normalisation ([`values_match`], [`answer_matches`]): text
//! ignores case, surrounding and repeated whitespace and a final period; numbers match
//! within half a cent, whether given as numbers or as text (`$1,234.50`); lists match
//! as multisets; timestamps match by day (an agent's changes happen at other moments
//! of the logical clock than the reference's).
//!
//! An agent that only calls `complete_task` fails every expected effect (actions) or
//! the answer (questions); one that deletes data fails `no collateral damage`.

use serde_json::Value;

use super::{Expected, TaskKind};
use crate::world::{Completion, DbDiff, FieldChange, RowImage, Timestamp};
use sage_core::Evaluation;

/// Fields that hold ids of rows the task itself creates, which differ with the order
/// the agent created them in; they are not compared.
const NEW_ROW_REFERENCES: [&str; 1] = ["transaction_id"];

/// One check of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What is checked (`add coinpay.transactions row`, `answer`, ...).
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed, or what it saw (empty when there is nothing to add).
    pub detail: String,
}

/// The checks of one task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every check, expected effects first.
    pub checks: Vec<Check>,
}

impl Report {
    /// Fraction of checks passed, in `[0, 1]` (1 when there are none).
    pub fn score(&self) -> f32 {
        if self.checks.is_empty() {
            return 1.0;
        }
        self.checks.iter().filter(|c| c.passed).count() as f32 / self.checks.len() as f32
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The score and verdict as the `Environment` trait reports them.
    pub fn evaluation(&self) -> Evaluation {
        Evaluation {
            score: self.score(),
            passed: self.passed(),
        }
    }

    /// The failed checks, one per line, for messages.
    pub fn failures(&self) -> String {
        self.checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn push(&mut self, name: String, passed: bool, detail: String) {
        self.checks.push(Check {
            name,
            passed,
            detail,
        });
    }
}

/// Evaluates a task of `kind` whose expected outcome is `expected`, given the world's
/// `actual` diff since the episode started and the completion, if any.
pub fn evaluate(
    kind: TaskKind,
    expected: &Expected,
    actual: &DbDiff,
    completion: Option<&Completion>,
) -> Report {
    let mut report = Report::default();
    let mut collateral: Vec<String> = Vec::new();
    for table in &actual.tables {
        let wanted = expected.diff.table(table.table);
        let wanted_added = wanted.map(|w| w.added.as_slice()).unwrap_or_default();
        let (_, used) = match_added(wanted_added, &table.added);
        for (row, used) in table.added.iter().zip(&used) {
            if !used {
                collateral.push(format!("{} row {} added", table.table, row.id));
            }
        }
        for row in &table.removed {
            if !wanted.is_some_and(|w| w.removed.iter().any(|r| r.id == row.id)) {
                collateral.push(format!("{} row {} removed", table.table, row.id));
            }
        }
        for change in &table.changed {
            let expected_fields = wanted.and_then(|w| w.change(change.id));
            for field in &change.fields {
                if expected_fields.is_none_or(|e| e.field(&field.field).is_none()) {
                    collateral.push(format!(
                        "{} row {} field {} changed",
                        table.table, change.id, field.field
                    ));
                }
            }
        }
    }
    for table in &expected.diff.tables {
        let actual_table = actual.table(table.table);
        let actual_added = actual_table.map(|t| t.added.as_slice()).unwrap_or_default();
        let (found, _) = match_added(&table.added, actual_added);
        for (row, found) in table.added.iter().zip(found) {
            report.push(
                format!("add {} row", table.table),
                found,
                if found {
                    String::new()
                } else {
                    format!("no added row matches {}", row.row)
                },
            );
        }
        for row in &table.removed {
            let found = actual_table.is_some_and(|t| t.removed.iter().any(|r| r.id == row.id));
            report.push(
                format!("remove {} row {}", table.table, row.id),
                found,
                if found {
                    String::new()
                } else {
                    removed_detail(row)
                },
            );
        }
        for change in &table.changed {
            let actual_change = actual_table.and_then(|t| t.change(change.id));
            let missing: Vec<&FieldChange> = change
                .fields
                .iter()
                .filter(|f| {
                    !actual_change
                        .and_then(|a| a.field(&f.field))
                        .is_some_and(|a| field_matches(&f.field, &f.after, &a.after))
                })
                .collect();
            let detail = missing
                .iter()
                .map(|f| format!("{} should become {}", f.field, f.after))
                .collect::<Vec<_>>()
                .join("; ");
            report.push(
                format!("change {} row {}", table.table, change.id),
                missing.is_empty(),
                detail,
            );
        }
    }
    report.push(
        "no collateral damage".to_owned(),
        collateral.is_empty(),
        collateral.join("; "),
    );
    match kind {
        TaskKind::Question => {
            let given = completion.map(|c| &c.answer);
            let passed = given.is_some_and(|a| answer_matches(&expected.answer, a));
            let detail = match given {
                None => "complete_task was not called".to_owned(),
                Some(a) if !passed => format!("expected {}, got {a}", expected.answer),
                Some(_) => String::new(),
            };
            report.push("answer".to_owned(), passed, detail);
        }
        TaskKind::Action => {
            let passed = completion.is_some();
            report.push(
                "completed".to_owned(),
                passed,
                if passed {
                    String::new()
                } else {
                    "complete_task was not called".to_owned()
                },
            );
        }
    }
    report
}

/// Pairs expected added rows with actual ones by content, each expected row taking the
/// first unpaired actual row that matches. Returns which expected rows found a partner
/// and which actual rows were taken.
fn match_added(expected: &[RowImage], actual: &[RowImage]) -> (Vec<bool>, Vec<bool>) {
    let mut taken = vec![false; actual.len()];
    let found = expected
        .iter()
        .map(|row| pair_off(&mut taken, actual, |a| values_match(&row.row, &a.row)))
        .collect();
    (found, taken)
}

/// Takes the first untaken element of `items` that satisfies `fits`; returns whether
/// there was one.
fn pair_off<T>(taken: &mut [bool], items: &[T], fits: impl Fn(&T) -> bool) -> bool {
    let slot = items
        .iter()
        .zip(taken.iter())
        .position(|(item, &used)| !used && fits(item));
    if let Some(i) = slot {
        taken[i] = true;
    }
    slot.is_some()
}

fn removed_detail(row: &RowImage) -> String {
    format!("row {} is still there: {}", row.id, row.row)
}

/// Whether field `name` of a row, expected to be `expected`, is `actual`.
fn field_matches(name: &str, expected: &Value, actual: &Value) -> bool {
    NEW_ROW_REFERENCES.contains(&name) || values_match(expected, actual)
}

/// Whether two stored values match: objects field by field (ids of new rows aside),
/// lists as multisets, text normalised, numbers within half a cent, timestamps by day.
pub fn values_match(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len()
                && e.iter()
                    .all(|(k, v)| a.get(k).is_some_and(|w| field_matches(k, v, w)))
        }
        (Value::Array(e), Value::Array(a)) => multiset_match(e, a, values_match),
        (Value::String(e), Value::String(a)) => match (Timestamp::parse(e), Timestamp::parse(a)) {
            (Some(e), Some(a)) => e.date() == a.date(),
            _ => text_matches(e, a),
        },
        (Value::Number(e), Value::Number(a)) => {
            matches!((e.as_f64(), a.as_f64()), (Some(e), Some(a)) if numbers_match(e, a))
        }
        _ => expected == actual,
    }
}

/// Whether `actual` pairs off with `expected`, element for element, under `same`.
fn multiset_match(expected: &[Value], actual: &[Value], same: fn(&Value, &Value) -> bool) -> bool {
    if expected.len() != actual.len() {
        return false;
    }
    let mut taken = vec![false; actual.len()];
    expected
        .iter()
        .all(|e| pair_off(&mut taken, actual, |a| same(e, a)))
}

fn numbers_match(expected: f64, actual: f64) -> bool {
    (expected - actual).abs() < 0.005
}

/// A number written as text (`12`, `12.50`, `$1,234.5`, ` 7 `), if it is one.
fn parse_number(text: &str) -> Option<f64> {
    let cleaned: String = text
        .trim()
        .trim_start_matches('$')
        .chars()
        .filter(|c| *c != ',')
        .collect();
    cleaned.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// Text as compared: trimmed, quotes and a final period removed, whitespace collapsed,
/// lower-cased.
fn normalise(text: &str) -> String {
    let trimmed = text.trim().trim_matches(|c| c == '"' || c == '\'').trim();
    let trimmed = trimmed.strip_suffix('.').unwrap_or(trimmed);
    trimmed
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Whether two texts match after normalisation, or are the same number.
pub fn text_matches(expected: &str, actual: &str) -> bool {
    match (parse_number(expected), parse_number(actual)) {
        (Some(e), Some(a)) => numbers_match(e, a),
        _ => normalise(expected) == normalise(actual),
    }
}

/// Whether the answer given to `complete_task` matches the expected one. A number may
/// be given as text and text as a number; a list may be given as text with items
/// separated by commas or new lines; the order of list items does not matter.
pub fn answer_matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Number(e), _) => {
            let given = match actual {
                Value::Number(a) => a.as_f64(),
                Value::String(a) => parse_number(a),
                _ => None,
            };
            matches!((e.as_f64(), given), (Some(e), Some(a)) if numbers_match(e, a))
        }
        (Value::String(e), Value::String(a)) => text_matches(e, a),
        (Value::String(e), Value::Number(a)) => text_matches(e, &a.to_string()),
        (Value::Bool(e), Value::Bool(a)) => e == a,
        (Value::Bool(e), Value::String(a)) => {
            let a = normalise(a);
            (*e && (a == "yes" || a == "true")) || (!*e && (a == "no" || a == "false"))
        }
        (Value::Array(e), Value::Array(a)) => multiset_match(e, a, answer_matches),
        (Value::Array(e), Value::String(a)) => {
            let separator = if a.contains('\n') { '\n' } else { ',' };
            let items: Vec<Value> = a
                .split(separator)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect();
            multiset_match(e, &items, answer_matches)
        }
        _ => expected == actual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_and_text() {
        assert!(answer_matches(&json!(12.5), &json!("$12.50")));
        assert!(answer_matches(&json!(1234.5), &json!("1,234.5")));
        assert!(answer_matches(&json!(0.3), &json!(0.30000000000000004)));
        assert!(!answer_matches(&json!(12.5), &json!(12.51)));
        assert!(answer_matches(
            &json!("Ada Lovelace"),
            &json!("  ada   lovelace. ")
        ));
        assert!(answer_matches(&json!(["a", "B"]), &json!("b, A")));
        assert!(!answer_matches(&json!(["a", "b"]), &json!(["a"])));
        assert!(answer_matches(&json!(true), &json!("Yes")));
    }

    #[test]
    fn stored_values() {
        assert!(values_match(
            &json!("2025-06-14T12:00:03"),
            &json!("2025-06-14T12:09:00")
        ));
        assert!(!values_match(
            &json!("2025-06-14T12:00:03"),
            &json!("2025-06-13T12:00:03")
        ));
        assert!(values_match(
            &json!({"ids": [1, 2], "x": "A"}),
            &json!({"ids": [2, 1], "x": "a"})
        ));
        assert!(!values_match(
            &json!({"ids": [1, 2]}),
            &json!({"ids": [1, 2], "y": 1})
        ));
    }
}
