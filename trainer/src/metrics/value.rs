//! [`MetricValue`]: one cell of a metrics row, and how it is spelled in JSON and CSV.
//!
//! Numbers are written the same way in both files: integers in decimal, floats in
//! Rust's shortest form that reads back to the same value (`0.1`, `3.0`, `1e-7`). JSON
//! has no NaN or infinity, so a non-finite float is `null` in JSON and an empty cell in
//! CSV, and reads back as NaN.

/// One value of a metrics row.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricValue {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer (steps, token counts).
    UInt(u64),
    /// A float; NaN and infinities are written as missing values.
    Float(f64),
    /// Text.
    Text(String),
}

impl MetricValue {
    /// The value as a number; `None` for text (NaN for a missing float).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetricValue::Int(i) => Some(i as f64),
            MetricValue::UInt(u) => Some(u as f64),
            MetricValue::Float(x) => Some(x),
            MetricValue::Text(_) => None,
        }
    }

    /// The value as a JSON value's text.
    pub(super) fn to_json(&self) -> String {
        match self {
            MetricValue::Int(i) => i.to_string(),
            MetricValue::UInt(u) => u.to_string(),
            MetricValue::Float(x) if x.is_finite() => format!("{x:?}"),
            MetricValue::Float(_) => "null".to_owned(),
            MetricValue::Text(text) => json_string(text),
        }
    }

    /// The value as a CSV cell (quoted where needed).
    pub(super) fn to_csv(&self) -> String {
        match self {
            MetricValue::Float(x) if !x.is_finite() => String::new(),
            MetricValue::Text(text) => csv_cell(text),
            number => number.to_json(),
        }
    }

    /// The value of a parsed JSON cell; `None` for booleans, arrays and objects.
    pub(super) fn from_json(value: &serde_json::Value) -> Option<MetricValue> {
        match value {
            serde_json::Value::Null => Some(MetricValue::Float(f64::NAN)),
            serde_json::Value::String(text) => Some(MetricValue::Text(text.clone())),
            serde_json::Value::Number(number) => Some(if let Some(u) = number.as_u64() {
                MetricValue::UInt(u)
            } else if let Some(i) = number.as_i64() {
                MetricValue::Int(i)
            } else {
                MetricValue::Float(number.as_f64()?)
            }),
            _ => None,
        }
    }
}

/// `text` as a JSON string literal.
pub(super) fn json_string(text: &str) -> String {
    // Serialising a `str` only fails for writers that fail; a `String` never does.
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

/// `text` as a CSV cell: quoted, with quotes doubled, when it holds a comma, a quote,
/// a line break or leading or trailing spaces.
pub(super) fn csv_cell(text: &str) -> String {
    let needs_quotes =
        text.contains([',', '"', '\n', '\r']) || text.starts_with(' ') || text.ends_with(' ');
    if needs_quotes {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

impl From<i64> for MetricValue {
    fn from(value: i64) -> Self {
        MetricValue::Int(value)
    }
}

impl From<i32> for MetricValue {
    fn from(value: i32) -> Self {
        MetricValue::Int(i64::from(value))
    }
}

impl From<u64> for MetricValue {
    fn from(value: u64) -> Self {
        MetricValue::UInt(value)
    }
}

impl From<u32> for MetricValue {
    fn from(value: u32) -> Self {
        MetricValue::UInt(u64::from(value))
    }
}

impl From<usize> for MetricValue {
    fn from(value: usize) -> Self {
        MetricValue::UInt(value as u64)
    }
}

impl From<bool> for MetricValue {
    /// `true` is 1, `false` 0.
    fn from(value: bool) -> Self {
        MetricValue::UInt(u64::from(value))
    }
}

impl From<f64> for MetricValue {
    fn from(value: f64) -> Self {
        MetricValue::Float(value)
    }
}

impl From<f32> for MetricValue {
    fn from(value: f32) -> Self {
        MetricValue::Float(f64::from(value))
    }
}

impl From<String> for MetricValue {
    fn from(value: String) -> Self {
        MetricValue::Text(value)
    }
}

impl From<&str> for MetricValue {
    fn from(value: &str) -> Self {
        MetricValue::Text(value.to_owned())
    }
}
