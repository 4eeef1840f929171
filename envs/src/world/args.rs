//! [`Args`]: typed access to a call's keyword arguments, and [`Page`], the paging every
//! list API shares.
//!
//! The sandbox has already checked the arguments against the API's signature, but the
//! world can be called directly too, so every accessor still checks and reports a
//! clear [`ApiError`] instead of panicking.

use serde_json::{Map, Value};

use super::money::Money;
use super::table::Id;
use super::time::Date;
use crate::sandbox::ApiError;

/// The largest `page_limit` any list API accepts.
pub const MAX_PAGE_LIMIT: i64 = 20;

/// The keyword arguments of one call.
pub(crate) struct Args(pub(crate) Map<String, Value>);

impl Args {
    fn value(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    fn missing(name: &str) -> ApiError {
        ApiError::new(format!("missing argument `{name}`"))
    }

    fn wrong(name: &str, expected: &str) -> ApiError {
        ApiError::new(format!("argument `{name}` must be {expected}"))
    }

    /// A required string.
    pub(crate) fn str(&self, name: &str) -> Result<&str, ApiError> {
        self.opt_str(name)?.ok_or_else(|| Args::missing(name))
    }

    /// An optional string (`None` when absent or null).
    pub(crate) fn opt_str(&self, name: &str) -> Result<Option<&str>, ApiError> {
        match self.value(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Args::wrong(name, "a str")),
        }
    }

    /// A required string that is not blank, trimmed.
    pub(crate) fn text(&self, name: &str) -> Result<&str, ApiError> {
        let text = self.str(name)?.trim();
        if text.is_empty() {
            return Err(ApiError::new(format!(
                "argument `{name}` must not be empty"
            )));
        }
        Ok(text)
    }

    /// An optional string that, when given, is not blank; trimmed.
    pub(crate) fn opt_text(&self, name: &str) -> Result<Option<&str>, ApiError> {
        match self.opt_str(name)? {
            None => Ok(None),
            Some(_) => self.text(name).map(Some),
        }
    }

    /// A required integer.
    pub(crate) fn int(&self, name: &str) -> Result<i64, ApiError> {
        self.opt_int(name)?.ok_or_else(|| Args::missing(name))
    }

    /// An optional integer.
    pub(crate) fn opt_int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.value(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| Args::wrong(name, "an int")),
        }
    }

    /// A required row id: a positive integer.
    pub(crate) fn id(&self, name: &str) -> Result<Id, ApiError> {
        self.opt_id(name)?.ok_or_else(|| Args::missing(name))
    }

    /// An optional row id.
    pub(crate) fn opt_id(&self, name: &str) -> Result<Option<Id>, ApiError> {
        match self.opt_int(name)? {
            None => Ok(None),
            Some(id) if id > 0 => Ok(Some(id as Id)),
            Some(id) => Err(ApiError::new(format!(
                "`{name}` must be a positive id, got {id}"
            ))),
        }
    }

    /// A required number.
    pub(crate) fn float(&self, name: &str) -> Result<f64, ApiError> {
        match self.value(name) {
            None => Err(Args::missing(name)),
            Some(v) => v.as_f64().ok_or_else(|| Args::wrong(name, "a number")),
        }
    }

    /// An optional number.
    pub(crate) fn opt_float(&self, name: &str) -> Result<Option<f64>, ApiError> {
        match self.value(name) {
            None => Ok(None),
            Some(_) => self.float(name).map(Some),
        }
    }

    /// An optional boolean.
    pub(crate) fn opt_bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.value(name) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| Args::wrong(name, "a bool")),
        }
    }

    /// A required list of strings.
    pub(crate) fn str_list(&self, name: &str) -> Result<Vec<String>, ApiError> {
        self.opt_str_list(name)?.ok_or_else(|| Args::missing(name))
    }

    /// An optional list of strings.
    pub(crate) fn opt_str_list(&self, name: &str) -> Result<Option<Vec<String>>, ApiError> {
        match self.value(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(|s| s.trim().to_owned()))
                .collect::<Option<Vec<String>>>()
                .map(Some)
                .ok_or_else(|| Args::wrong(name, "a list of str")),
            Some(_) => Err(Args::wrong(name, "a list of str")),
        }
    }

    /// A required amount of money in dollars (positive, at most two decimals).
    pub(crate) fn money(&self, name: &str) -> Result<Money, ApiError> {
        Money::parse_amount(self.float(name)?).map_err(|e| ApiError::new(format!("`{name}`: {e}")))
    }

    /// An optional amount of money.
    pub(crate) fn opt_money(&self, name: &str) -> Result<Option<Money>, ApiError> {
        match self.value(name) {
            None => Ok(None),
            Some(_) => self.money(name).map(Some),
        }
    }

    /// An optional price bound in dollars (zero allowed).
    pub(crate) fn opt_price(&self, name: &str) -> Result<Option<Money>, ApiError> {
        match self.opt_float(name)? {
            None => Ok(None),
            Some(x) if x.is_finite() && x >= 0.0 => {
                Ok(Some(Money::from_cents((x * 100.0).round() as i64)))
            }
            Some(x) => Err(ApiError::new(format!(
                "`{name}` must be a non-negative number, got {x}"
            ))),
        }
    }

    /// An optional day, `YYYY-MM-DD`.
    pub(crate) fn opt_date(&self, name: &str) -> Result<Option<Date>, ApiError> {
        match self.opt_str(name)? {
            None => Ok(None),
            Some(text) => Date::parse(text).map(Some).ok_or_else(|| {
                ApiError::new(format!(
                    "`{name}` must be a date written YYYY-MM-DD, got {text:?}"
                ))
            }),
        }
    }

    /// The paging arguments.
    pub(crate) fn page(&self) -> Result<Page, ApiError> {
        let index = self.opt_int("page_index")?.unwrap_or(0);
        let limit = self.opt_int("page_limit")?.unwrap_or(10);
        if index < 0 {
            return Err(ApiError::new(format!(
                "page_index must be 0 or more, got {index}"
            )));
        }
        if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
            return Err(ApiError::new(format!(
                "page_limit must be between 1 and {MAX_PAGE_LIMIT}, got {limit}"
            )));
        }
        Ok(Page {
            index: index as usize,
            limit: limit as usize,
        })
    }
}

/// One page of a list: `limit` results starting at result `index * limit`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Page {
    index: usize,
    limit: usize,
}

impl Page {
    /// The page's items of `items`, mapped to JSON by `show`.
    pub(crate) fn of<T>(
        self,
        items: impl IntoIterator<Item = T>,
        show: impl FnMut(T) -> Value,
    ) -> Value {
        Value::Array(
            items
                .into_iter()
                .skip(self.index.saturating_mul(self.limit))
                .take(self.limit)
                .map(show)
                .collect(),
        )
    }
}
