//! A chart axis: the range that holds the data, "round" tick values (1, 2 or 5 times
//! a power of ten apart) and their labels.

/// The values an axis spans, `min < max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct AxisRange {
    /// The lowest value shown.
    pub(super) min: f64,
    /// The highest value shown.
    pub(super) max: f64,
}

impl AxisRange {
    /// The range of `values` (finite ones only), widened by `margin` of its span on
    /// each side. A single value gets a range around it; no value gets [0, 1].
    pub(super) fn of(values: impl Iterator<Item = f64>, margin: f64) -> AxisRange {
        let (min, max) = values
            .filter(|v| v.is_finite())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        if min > max {
            return AxisRange { min: 0.0, max: 1.0 };
        }
        if min == max {
            let half = if min == 0.0 { 1.0 } else { min.abs() * 0.1 };
            return AxisRange {
                min: min - half,
                max: max + half,
            };
        }
        let pad = (max - min) * margin;
        AxisRange {
            min: min - pad,
            max: max + pad,
        }
    }
}

/// Tick values inside `range`, at most about `max_count` of them, and their labels.
pub(super) fn ticks(range: AxisRange, max_count: usize) -> Vec<(f64, String)> {
    let span = range.max - range.min;
    let raw_step = span / max_count.max(1) as f64;
    if !(raw_step.is_finite() && raw_step > 0.0) {
        return Vec::new();
    }
    let power = raw_step.log10().floor();
    let magnitude = 10f64.powf(power);
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw_step)
        .unwrap_or(10.0 * magnitude);
    let exponent = if step >= 10.0 * magnitude {
        power as i32 + 1
    } else {
        power as i32
    };
    let first = (range.min / step).ceil() as i64;
    let last = (range.max / step + 1e-9).floor() as i64;
    let largest = range.min.abs().max(range.max.abs());
    (first..=last)
        .map(|i| {
            let value = i as f64 * step;
            (value, tick_label(value, exponent, largest))
        })
        .collect()
}

/// The label of tick `value` on an axis whose ticks are `10^exponent` times 1, 2 or 5
/// apart and whose largest magnitude is `largest`: plain decimals with just enough
/// digits, or `1.5e-5` style for very large or small numbers.
fn tick_label(value: f64, exponent: i32, largest: f64) -> String {
    if value == 0.0 {
        return "0".to_owned();
    }
    let plain = (1e-4..1e6).contains(&largest) && exponent >= -6;
    if plain {
        let decimals = (-exponent).max(0) as usize;
        return format!("{value:.decimals$}");
    }
    // Nudged up so that a tick a rounding error below a power of ten (9.999e-6 for
    // 1e-5) gets that power's exponent.
    let value_exponent = (value.abs() * (1.0 + 1e-9)).log10().floor() as i32;
    let digits = (value_exponent - exponent).clamp(0, 6) as usize;
    format!("{value:.digits$e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(min: f64, max: f64, count: usize) -> Vec<String> {
        ticks(AxisRange { min, max }, count)
            .into_iter()
            .map(|(_, label)| label)
            .collect()
    }

    /// Steps are 1, 2 or 5 times a power of ten, ticks stay inside the range, and
    /// labels have the digits the step needs.
    #[test]
    fn ticks_are_round_and_labelled() {
        assert_eq!(labels(0.0, 100.0, 5), ["0", "20", "40", "60", "80", "100"]);
        assert_eq!(labels(0.13, 0.61, 5), ["0.2", "0.3", "0.4", "0.5", "0.6"]);
        assert_eq!(labels(-1.0, 1.0, 4), ["-1.0", "-0.5", "0", "0.5", "1.0"]);
        assert_eq!(labels(1e-6, 5e-6, 3), ["2e-6", "4e-6"]);
        assert_eq!(labels(0.0, 3e7, 4), ["0", "1e7", "2e7", "3e7"]);
        let values: Vec<f64> = ticks(AxisRange { min: 2.3, max: 7.9 }, 6)
            .into_iter()
            .map(|(value, _)| value)
            .collect();
        assert_eq!(values, [3.0, 4.0, 5.0, 6.0, 7.0]);
    }

    /// Ranges cover their data with a margin; a constant or empty series still gets a
    /// range of positive width.
    #[test]
    fn ranges_cover_the_data() {
        let range = AxisRange::of([1.0, 3.0, f64::NAN, 2.0].into_iter(), 0.5);
        assert_eq!(range, AxisRange { min: 0.0, max: 4.0 });
        assert_eq!(
            AxisRange::of([5.0].into_iter(), 0.05),
            AxisRange { min: 4.5, max: 5.5 }
        );
        assert_eq!(
            AxisRange::of(std::iter::empty(), 0.05),
            AxisRange { min: 0.0, max: 1.0 }
        );
    }
}
