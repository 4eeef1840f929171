//! [`Picker`]: what a template sees while it picks a task's parameters: the world's
//! state and a seeded random stream of its own (so the same template and seed always
//! pick the same tasks, whatever other templates do).

use serde_json::Value;

use super::Params;
use crate::world::Db;

/// The world's state and a deterministic random stream (SplitMix64).
pub struct Picker<'a> {
    db: &'a Db,
    state: u64,
}

impl<'a> Picker<'a> {
    /// A picker over `db` whose stream is a function of `template` and `seed`.
    pub fn new(db: &'a Db, template: &str, seed: u64) -> Picker<'a> {
        let name = template.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Picker {
            db,
            state: name ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        }
    }

    /// The world's state.
    pub fn db(&self) -> &'a Db {
        self.db
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: i64, high: i64) -> i64 {
        if high <= low {
            return low;
        }
        low + self.below((high - low + 1) as usize) as i64
    }

    /// A random element of `items`.
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            None
        } else {
            Some(items[self.below(items.len())].clone())
        }
    }
}

/// Parameters from `(key, value)` pairs.
pub(super) fn params<const N: usize>(pairs: [(&str, Value); N]) -> Params {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The string parameter `key` (empty when missing).
pub(super) fn text<'p>(params: &'p Params, key: &str) -> &'p str {
    params.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The parameter `key` (`null` when missing).
pub(super) fn value<'p>(params: &'p Params, key: &str) -> &'p Value {
    params.get(key).unwrap_or(&Value::Null)
}

/// The strings of the list parameter `key` (empty when missing).
pub(super) fn texts<'p>(params: &'p Params, key: &str) -> Vec<&'p str> {
    value(params, key)
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The number parameter `key` (0 when missing).
pub(super) fn number(params: &Params, key: &str) -> f64 {
    params.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// The integer parameter `key` (0 when missing).
pub(super) fn int(params: &Params, key: &str) -> i64 {
    params.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// `2025-03` as `March 2025`.
pub(super) fn month_name(month: &str) -> String {
    const NAMES: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let (year, number) = month.split_once('-').unwrap_or((month, "1"));
    let index = number.parse::<usize>().unwrap_or(1).clamp(1, 12) - 1;
    format!("{} {year}", NAMES[index])
}

/// Dollars written for people: `$12`, `$12.50`.
pub(super) fn dollars(amount: f64) -> String {
    let cents = (amount * 100.0).round() as i64;
    if cents % 100 == 0 {
        format!("${}", cents / 100)
    } else {
        format!("${}.{:02}", cents / 100, cents % 100)
    }
}
