//! Conversion of data between JSON (what an [`ApiHost`](super::ApiHost) speaks) and
//! Starlark values (what agent code holds), both ways, with a nesting-depth limit so
//! that neither side can hand the other unboundedly deep data.
//!
//! JSON `null`, booleans, numbers, strings, arrays and objects map to `None`, `bool`,
//! `int` or `float`, `str`, `list` and `dict`; Starlark tuples go to JSON arrays. Dict
//! keys must be strings. Functions and other Starlark objects cannot cross.

use std::fmt;

use serde_json::{Map, Number};
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value, ValueLike};

/// Why a value could not be converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConvertError {
    /// Nested deeper than the limit.
    TooDeep {
        /// Where, as a path like `args["songs"][3]`.
        path: String,
    },
    /// A value JSON cannot represent (a function, a float that is NaN, a huge int, a
    /// non-string dict key, ...).
    Unsupported {
        /// Where, as a path.
        path: String,
        /// What was found.
        what: String,
    },
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvertError::TooDeep { path } => write!(f, "{path} is nested too deeply"),
            ConvertError::Unsupported { path, what } => {
                write!(f, "{path} cannot be passed to an API: {what}")
            }
        }
    }
}

/// Converts a Starlark value to JSON, failing on values nested deeper than `max_depth`
/// or that JSON cannot represent. `path` names the value in error messages.
pub(crate) fn to_json(
    value: Value<'_>,
    max_depth: usize,
    path: &mut String,
) -> Result<serde_json::Value, ConvertError> {
    if value.is_none() {
        return Ok(serde_json::Value::Null);
    }
    if let Some(b) = value.unpack_bool() {
        return Ok(serde_json::Value::Bool(b));
    }
    if let Some(s) = value.unpack_str() {
        return Ok(serde_json::Value::String(s.to_owned()));
    }
    if value.get_type() == "int" {
        return match i64::unpack_value(value) {
            Ok(Some(i)) => Ok(serde_json::Value::from(i)),
            _ => Err(unsupported(path, "an integer outside the 64-bit range")),
        };
    }
    if let Some(f) = value.downcast_ref::<StarlarkFloat>() {
        return Number::from_f64(f.0)
            .map(serde_json::Value::Number)
            .ok_or_else(|| unsupported(path, "a float that is NaN or infinite"));
    }
    let items = ListRef::from_value(value)
        .map(|l| l.content())
        .or_else(|| TupleRef::from_value(value).map(|t| t.content()));
    if let Some(items) = items {
        if max_depth == 0 {
            return Err(ConvertError::TooDeep { path: path.clone() });
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            out.push(to_json(*item, max_depth - 1, path)?);
            path.truncate(len);
        }
        return Ok(serde_json::Value::Array(out));
    }
    if let Some(dict) = DictRef::from_value(value) {
        if max_depth == 0 {
            return Err(ConvertError::TooDeep { path: path.clone() });
        }
        let mut out = Map::new();
        for (key, item) in dict.iter() {
            let Some(key) = key.unpack_str() else {
                return Err(unsupported(
                    path,
                    &format!("a dict key of type {}", key.get_type()),
                ));
            };
            let len = path.len();
            path.push_str(&format!("[{key:?}]"));
            let item = to_json(item, max_depth - 1, path)?;
            path.truncate(len);
            out.insert(key.to_owned(), item);
        }
        return Ok(serde_json::Value::Object(out));
    }
    Err(unsupported(
        path,
        &format!("a value of type {}", value.get_type()),
    ))
}

fn unsupported(path: &str, what: &str) -> ConvertError {
    ConvertError::Unsupported {
        path: path.to_owned(),
        what: what.to_owned(),
    }
}

/// Converts JSON to a fresh, mutable Starlark value on `heap`, failing on data nested
/// deeper than `max_depth`.
pub(crate) fn from_json<'v>(
    json: &serde_json::Value,
    heap: Heap<'v>,
    max_depth: usize,
) -> Result<Value<'v>, ConvertError> {
    Ok(match json {
        serde_json::Value::Null => Value::new_none(),
        serde_json::Value::Bool(b) => Value::new_bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => heap.alloc(i),
            None => heap.alloc(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => heap.alloc_str(s).to_value(),
        serde_json::Value::Array(items) => {
            let depth = child_depth(max_depth)?;
            let values = items
                .iter()
                .map(|item| from_json(item, heap, depth))
                .collect::<Result<Vec<_>, _>>()?;
            heap.alloc(AllocList(values))
        }
        serde_json::Value::Object(map) => {
            let depth = child_depth(max_depth)?;
            let mut entries = Vec::with_capacity(map.len());
            for (key, item) in map {
                entries.push((
                    heap.alloc_str(key).to_value(),
                    from_json(item, heap, depth)?,
                ));
            }
            heap.alloc(AllocDict(entries))
        }
    })
}

fn child_depth(max_depth: usize) -> Result<usize, ConvertError> {
    max_depth.checked_sub(1).ok_or(ConvertError::TooDeep {
        path: "the API's result".to_owned(),
    })
}
