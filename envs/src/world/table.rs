//! [`Table`]: one table of the world's database, typed rows keyed by [`Id`] in
//! ascending order, shared copy-on-write so that snapshots cost nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

/// The key of a row; unique within its table, never reused after removal, starting at 1.
pub type Id = u64;

/// The key of a row of the `people` table.
pub type PersonId = Id;

/// What a table row must be: cloneable, comparable (for diffs), serializable (for
/// field-level diffs and API responses) and shareable across threads.
pub trait Record: Clone + PartialEq + Serialize + Send + Sync + 'static {}

impl<T: Clone + PartialEq + Serialize + Send + Sync + 'static> Record for T {}

/// Rows of one type keyed by id, iterated in ascending id order.
///
/// Cloning a table shares its rows; the first change after a clone copies them
/// (copy-on-write), so a snapshot of the whole database is a few reference-count bumps
/// and a diff can skip tables that were never written.
#[derive(Clone, Debug)]
pub struct Table<T> {
    rows: Arc<BTreeMap<Id, T>>,
    next_id: Id,
}

impl<T> Default for Table<T> {
    fn default() -> Table<T> {
        Table {
            rows: Arc::new(BTreeMap::new()),
            next_id: 1,
        }
    }
}

impl<T: Record> Table<T> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The row with this id.
    pub fn get(&self, id: Id) -> Option<&T> {
        self.rows.get(&id)
    }

    /// Whether a row with this id exists.
    pub fn contains(&self, id: Id) -> bool {
        self.rows.contains_key(&id)
    }

    /// All rows with their ids, in ascending id order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (Id, &T)> + '_ {
        self.rows.iter().map(|(&id, row)| (id, row))
    }

    /// The rows satisfying `keep`, with their ids, in ascending id order.
    pub fn filter<'a>(
        &'a self,
        mut keep: impl FnMut(&T) -> bool + 'a,
    ) -> impl DoubleEndedIterator<Item = (Id, &'a T)> + 'a {
        self.iter().filter(move |(_, row)| keep(row))
    }

    /// The first row (lowest id) satisfying `pred`.
    pub fn find(&self, mut pred: impl FnMut(&T) -> bool) -> Option<(Id, &T)> {
        self.iter().find(|(_, row)| pred(row))
    }

    /// The id the next inserted row will get.
    pub fn next_id(&self) -> Id {
        self.next_id
    }

    /// Adds a row under a fresh id and returns the id.
    pub fn insert(&mut self, row: T) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        Arc::make_mut(&mut self.rows).insert(id, row);
        id
    }

    /// The row with this id, for changing it in place.
    pub fn get_mut(&mut self, id: Id) -> Option<&mut T> {
        if !self.rows.contains_key(&id) {
            return None;
        }
        Arc::make_mut(&mut self.rows).get_mut(&id)
    }

    /// Removes the row with this id and returns it.
    pub fn remove(&mut self, id: Id) -> Option<T> {
        if !self.rows.contains_key(&id) {
            return None;
        }
        Arc::make_mut(&mut self.rows).remove(&id)
    }

    /// Removes every row for which `remove` is true; returns how many were removed.
    pub fn remove_where(&mut self, mut remove: impl FnMut(&T) -> bool) -> usize {
        let ids: Vec<Id> = self.filter(&mut remove).map(|(id, _)| id).collect();
        if ids.is_empty() {
            return 0;
        }
        let rows = Arc::make_mut(&mut self.rows);
        for id in &ids {
            rows.remove(id);
        }
        ids.len()
    }

    /// Whether this table still shares its rows with `other` (neither was written since
    /// one was cloned from the other): then the two are certainly equal.
    pub fn shares_rows_with(&self, other: &Table<T>) -> bool {
        Arc::ptr_eq(&self.rows, &other.rows)
    }

    /// The rows as a map, for whole-table comparisons.
    pub fn rows(&self) -> &BTreeMap<Id, T> {
        &self.rows
    }
}
