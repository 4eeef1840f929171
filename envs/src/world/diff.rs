//! Differences between two states of the world's database: [`DbDiff`] lists, per
//! table, the rows added and removed (with their contents) and the rows changed (with
//! the fields that changed, before and after). Scenario evaluation checks a task's
//! expected changes against it and treats anything else as collateral damage.

use std::any::Any;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::table::{Id, Record, Table};

/// A row as it was when added or removed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowImage {
    /// The row's id.
    pub id: Id,
    /// The row's fields, as JSON.
    pub row: Value,
}

/// One field of a changed row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldChange {
    /// The field's name.
    pub field: String,
    /// Its value before (`null` when the field did not exist).
    pub before: Value,
    /// Its value after (`null` when the field no longer exists).
    pub after: Value,
}

/// A row present before and after, with different contents.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowChange {
    /// The row's id.
    pub id: Id,
    /// The fields that differ, in field-name order.
    pub fields: Vec<FieldChange>,
}

impl RowChange {
    /// The change of `field`, if it changed.
    pub fn field(&self, field: &str) -> Option<&FieldChange> {
        self.fields.iter().find(|f| f.field == field)
    }

    /// Names of the changed fields.
    pub fn field_names(&self) -> Vec<&str> {
        self.fields.iter().map(|f| f.field.as_str()).collect()
    }
}

/// The changes to one table, each list in ascending id order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableDiff {
    /// The table's name (`coinpay.transactions`, ...).
    pub table: &'static str,
    /// Rows present only after.
    pub added: Vec<RowImage>,
    /// Rows present only before.
    pub removed: Vec<RowImage>,
    /// Rows present in both, with different contents.
    pub changed: Vec<RowChange>,
}

impl TableDiff {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// Ids of the added rows.
    pub fn added_ids(&self) -> Vec<Id> {
        self.added.iter().map(|r| r.id).collect()
    }

    /// Ids of the removed rows.
    pub fn removed_ids(&self) -> Vec<Id> {
        self.removed.iter().map(|r| r.id).collect()
    }

    /// Ids of the changed rows.
    pub fn changed_ids(&self) -> Vec<Id> {
        self.changed.iter().map(|r| r.id).collect()
    }

    /// The change to the row `id`, if it changed.
    pub fn change(&self, id: Id) -> Option<&RowChange> {
        self.changed.iter().find(|c| c.id == id)
    }
}

/// The changes between two database states: one [`TableDiff`] per table that changed,
/// in the database's table order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DbDiff {
    /// The tables that changed.
    pub tables: Vec<TableDiff>,
}

impl DbDiff {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The changes to `table`, `None` when it did not change.
    pub fn table(&self, table: &str) -> Option<&TableDiff> {
        self.tables.iter().find(|t| t.table == table)
    }

    /// Names of the tables that changed.
    pub fn changed_tables(&self) -> Vec<&'static str> {
        self.tables.iter().map(|t| t.table).collect()
    }
}

impl fmt::Display for DbDiff {
    /// One line per table: `table: +added -removed ~changed [ids]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tables.is_empty() {
            return writeln!(f, "no changes");
        }
        for t in &self.tables {
            writeln!(
                f,
                "{}: +{:?} -{:?} ~{:?}",
                t.table,
                t.added_ids(),
                t.removed_ids(),
                t.changed_ids()
            )?;
        }
        Ok(())
    }
}

/// A table seen without its row type, so the database can diff all its tables in one
/// loop.
pub trait AnyTable: Any {
    /// The changes from `self` (before) to `later` (after); `None` when `later` is not a
    /// table of the same row type.
    fn diff_with(&self, name: &'static str, later: &dyn AnyTable) -> Option<TableDiff>;

    /// Number of rows.
    fn row_count(&self) -> usize;

    /// The table as [`Any`], for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Record> AnyTable for Table<T> {
    fn diff_with(&self, name: &'static str, later: &dyn AnyTable) -> Option<TableDiff> {
        let later = later.as_any().downcast_ref::<Table<T>>()?;
        Some(diff_tables(name, self, later))
    }

    fn row_count(&self) -> usize {
        self.len()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The changes from `before` to `after`, by a merge walk over both tables' ids.
fn diff_tables<T: Record>(name: &'static str, before: &Table<T>, after: &Table<T>) -> TableDiff {
    let mut diff = TableDiff {
        table: name,
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
    };
    if before.shares_rows_with(after) {
        return diff;
    }
    let mut old = before.iter().peekable();
    let mut new = after.iter().peekable();
    loop {
        match (old.peek(), new.peek()) {
            (None, None) => break,
            (Some(&(id, row)), None) => {
                diff.removed.push(image(id, row));
                old.next();
            }
            (None, Some(&(id, row))) => {
                diff.added.push(image(id, row));
                new.next();
            }
            (Some(&(old_id, old_row)), Some(&(new_id, new_row))) => {
                if old_id < new_id {
                    diff.removed.push(image(old_id, old_row));
                    old.next();
                } else if new_id < old_id {
                    diff.added.push(image(new_id, new_row));
                    new.next();
                } else {
                    if old_row != new_row {
                        diff.changed.push(RowChange {
                            id: old_id,
                            fields: field_changes(&to_json(old_row), &to_json(new_row)),
                        });
                    }
                    old.next();
                    new.next();
                }
            }
        }
    }
    diff
}

fn image<T: Record>(id: Id, row: &T) -> RowImage {
    RowImage {
        id,
        row: to_json(row),
    }
}

/// A row as JSON; a row that cannot be serialized shows the error instead.
fn to_json<T: Record>(row: &T) -> Value {
    serde_json::to_value(row)
        .unwrap_or_else(|e| Value::String(format!("<unserializable row: {e}>")))
}

/// The top-level fields that differ between two JSON rows.
fn field_changes(before: &Value, after: &Value) -> Vec<FieldChange> {
    let (Value::Object(before), Value::Object(after)) = (before, after) else {
        return vec![FieldChange {
            field: String::new(),
            before: before.clone(),
            after: after.clone(),
        }];
    };
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let old = before.get(name).cloned().unwrap_or(Value::Null);
            let new = after.get(name).cloned().unwrap_or(Value::Null);
            (old != new).then(|| FieldChange {
                field: name.clone(),
                before: old,
                after: new,
            })
        })
        .collect()
}
