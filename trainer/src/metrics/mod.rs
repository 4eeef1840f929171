//! Training metrics: rows logged as JSON lines and CSV side by side, read back as
//! series, and drawn as PNG line charts.
//!
//! This module owns the metrics files of a run (`RUN/metrics/NAME.jsonl` and
//! `NAME.csv`) and its plots (`RUN/plots/*.png`):
//! - [`MetricsLog`]: create, resume (keeping the rows up to a checkpoint's step) and
//!   append rows of [`MetricValue`]s, flushed row by row;
//! - [`read_series`]: columns of a JSON-lines log as [`Series`] of `(x, y)` points;
//! - [`plot_line_chart`]: a [`LineChart`] of series as a PNG, text drawn with a
//!   built-in bitmap font (no system fonts needed);
//! - [`MetricsError`]: what can go wrong, naming the file and column.

mod axis;
mod error;
mod font;
mod log;
mod plot;
mod rows;
mod series;
mod value;

pub use error::MetricsError;
pub use log::{KeepRows, MetricsLog};
pub use plot::{plot_line_chart, LineChart, PlotReport, SERIES_COLOURS};
pub use series::{read_series, Series};
pub use value::MetricValue;
