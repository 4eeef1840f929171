//! [`plot_line_chart`]: series as coloured lines on a gridded, labelled chart, written
//! as a PNG.
//!
//! plotters draws the graphics (background, grid, lines, frame, ticks, legend box)
//! into an RGB buffer; the built-in bitmap font then writes the title, axis labels,
//! tick labels and legend names; `png` encodes the buffer. The file is written
//! beside its final name and renamed over it, so a reader never sees half an image.

use std::path::{Path, PathBuf};

use crate::files::write_atomic;
use plotters::prelude::{
    BitMapBackend, ChartBuilder, Circle, IntoDrawingArea, LineSeries, PathElement, RGBColor,
    Rectangle, ShapeStyle,
};
use plotters::style::Color;

use super::axis::{ticks, AxisRange};
use super::error::MetricsError;
use super::font::{text_length, text_thickness, Canvas, Direction};
use super::series::Series;

/// The colour of series `i` is `SERIES_COLOURS[i % SERIES_COLOURS.len()]` (RGB).
pub const SERIES_COLOURS: [[u8; 3]; 12] = [
    [0, 92, 230],
    [230, 97, 0],
    [0, 153, 77],
    [204, 0, 51],
    [128, 64, 191],
    [0, 160, 176],
    [176, 128, 0],
    [230, 0, 172],
    [102, 102, 102],
    [115, 64, 26],
    [122, 184, 0],
    [0, 38, 115],
];

/// The chart's background.
const BACKGROUND: [u8; 3] = [255, 255, 255];
/// Grid lines.
const GRID: [u8; 3] = [226, 226, 226];
/// Frame, ticks and text.
const INK: [u8; 3] = [0, 0, 0];
/// The smallest width or height accepted, in pixels.
const MIN_SIDE: u32 = 120;
/// The largest width or height accepted, in pixels.
const MAX_SIDE: u32 = 8192;
/// Margin above and below the data on the y axis, as a fraction of its span.
const Y_MARGIN: f64 = 0.05;

/// A line chart to draw.
#[derive(Clone, Copy, Debug)]
pub struct LineChart<'a> {
    /// Written centred above the chart (empty: no title).
    pub title: &'a str,
    /// Written under the x axis.
    pub x_label: &'a str,
    /// Written up the left side.
    pub y_label: &'a str,
    /// The lines, named in a legend.
    pub series: &'a [Series],
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
}

/// What [`plot_line_chart`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotReport {
    /// The PNG file.
    pub path: PathBuf,
    /// Points drawn, over all series (non-finite ones are skipped).
    pub points: usize,
}

/// Where everything goes, in pixels.
struct Layout {
    /// Size of one font pixel.
    scale: u32,
    /// Size of one font pixel of the title (one more than the rest).
    title_scale: u32,
    /// Spacing between elements.
    pad: i32,
    /// Length of a tick mark.
    tick: i32,
    /// The plot's margins inside the image: top, bottom, left, right.
    margins: (i32, i32, i32, i32),
    /// The legend's box, top-left and bottom-right corners; `None` without series.
    legend: Option<((i32, i32), (i32, i32))>,
}

/// The axes' ranges, ticks and labels.
struct Axes {
    x: AxisRange,
    y: AxisRange,
    x_ticks: Vec<(f64, String)>,
    y_ticks: Vec<(f64, String)>,
}

/// Where plotters put the ticks and the plot area, for the text pass.
struct Placed {
    /// Pixel column of each x tick.
    x_ticks: Vec<i32>,
    /// Pixel row of each y tick.
    y_ticks: Vec<i32>,
    /// The plot area's corners.
    plot: ((i32, i32), (i32, i32)),
}

/// Draws `chart` and writes it to `path` as an RGB PNG of the chart's size (creating
/// the parent directory).
pub fn plot_line_chart(path: &Path, chart: &LineChart<'_>) -> Result<PlotReport, MetricsError> {
    let chart_error = |problem: String| MetricsError::Chart {
        file: path.to_path_buf(),
        problem,
    };
    for (side, value) in [("width", chart.width), ("height", chart.height)] {
        if !(MIN_SIDE..=MAX_SIDE).contains(&value) {
            return Err(chart_error(format!(
                "{side} {value} is outside {MIN_SIDE}..={MAX_SIDE} pixels"
            )));
        }
    }
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
    let points = chart
        .series
        .iter()
        .map(|s| s.points.iter().filter(|p| finite(p)).count())
        .sum();
    let all_points = || {
        chart
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter(|p| finite(p)))
    };
    let scale = (chart.width.min(chart.height) / 240).clamp(1, 4);
    let x = AxisRange::of(all_points().map(|p| p.0), 0.0);
    let y = AxisRange::of(all_points().map(|p| p.1), Y_MARGIN);
    let label_room = |length: u32| (length / (text_length("0.00", scale) * 2)).max(2) as usize;
    let axes = Axes {
        x,
        y,
        x_ticks: ticks(x, label_room(chart.width).min(10)),
        y_ticks: ticks(
            y,
            (chart.height / (text_thickness(scale) * 4)).clamp(2, 10) as usize,
        ),
    };
    let layout = layout(chart, &axes, scale);
    let (top, bottom, left, right) = layout.margins;
    let plot_width = chart.width as i32 - left - right;
    let plot_height = chart.height as i32 - top - bottom;
    if plot_width < 20 || plot_height < 20 {
        return Err(chart_error(format!(
            "{}x{} pixels leave no room for the plot beside its labels and legend",
            chart.width, chart.height
        )));
    }
    let mut pixels = vec![0u8; 3 * chart.width as usize * chart.height as usize];
    let placed = draw_graphics(&mut pixels, chart, &axes, &layout)
        .map_err(|e| MetricsError::render(path, e))?;
    let mut canvas = Canvas {
        pixels: &mut pixels,
        width: chart.width,
        height: chart.height,
    };
    draw_text(&mut canvas, chart, &axes, &layout, &placed);
    write_png(path, &pixels, chart.width, chart.height)?;
    Ok(PlotReport {
        path: path.to_path_buf(),
        points,
    })
}

/// Margins around the plot for the title, labels and ticks, and the legend's box.
fn layout(chart: &LineChart<'_>, axes: &Axes, scale: u32) -> Layout {
    let pad = 6 * scale as i32;
    let tick = 4 * scale as i32;
    let line = text_thickness(scale) as i32;
    let title_scale = scale + 1;
    let widest_y_tick = axes
        .y_ticks
        .iter()
        .map(|(_, label)| text_length(label, scale) as i32)
        .max()
        .unwrap_or(0);
    let last_x_tick = axes
        .x_ticks
        .last()
        .map_or(0, |(_, label)| text_length(label, scale) as i32);
    let top = pad
        + if chart.title.is_empty() {
            0
        } else {
            text_thickness(title_scale) as i32 + pad
        };
    let bottom = tick
        + pad
        + line
        + pad
        + if chart.x_label.is_empty() {
            0
        } else {
            line + pad
        };
    let left =
        pad + if chart.y_label.is_empty() {
            0
        } else {
            line + pad
        } + widest_y_tick
            + pad
            + tick;
    let mut right = pad + last_x_tick / 2;
    // The legend stands right of the plot, never over a line.
    let legend = (!chart.series.is_empty()).then(|| {
        let sample = 16 * scale as i32;
        let widest_name = chart
            .series
            .iter()
            .map(|s| text_length(&s.name, scale) as i32)
            .max()
            .unwrap_or(0);
        let width = pad + sample + pad + widest_name + pad;
        let height = pad + chart.series.len() as i32 * (line + pad);
        let corner = (chart.width as i32 - pad - width, top);
        right += width + pad;
        (corner, (corner.0 + width, corner.1 + height))
    });
    Layout {
        scale,
        title_scale,
        pad,
        tick,
        margins: (top, bottom, left, right),
        legend,
    }
}

/// A plotters style of `rgb`, `width` pixels wide.
fn style(rgb: [u8; 3], width: u32) -> ShapeStyle {
    RGBColor(rgb[0], rgb[1], rgb[2]).stroke_width(width)
}

/// Draws everything but text into `pixels` with plotters.
fn draw_graphics(
    pixels: &mut [u8],
    chart: &LineChart<'_>,
    axes: &Axes,
    layout: &Layout,
) -> Result<Placed, Box<dyn std::error::Error>> {
    let root = BitMapBackend::with_buffer(pixels, (chart.width, chart.height)).into_drawing_area();
    let [r, g, b] = BACKGROUND;
    root.fill(&RGBColor(r, g, b))?;
    let (top, bottom, left, right) = layout.margins;
    let area = root.margin(top, bottom, left, right);
    let mut cartesian = ChartBuilder::on(&area)
        .build_cartesian_2d(axes.x.min..axes.x.max, axes.y.min..axes.y.max)?;
    let grid = style(GRID, 1);
    cartesian.draw_series(
        axes.x_ticks
            .iter()
            .map(|&(t, _)| PathElement::new(vec![(t, axes.y.min), (t, axes.y.max)], grid)),
    )?;
    cartesian.draw_series(
        axes.y_ticks
            .iter()
            .map(|&(t, _)| PathElement::new(vec![(axes.x.min, t), (axes.x.max, t)], grid)),
    )?;
    let line_width = 2 * layout.scale;
    for (i, series) in chart.series.iter().enumerate() {
        let colour = style(SERIES_COLOURS[i % SERIES_COLOURS.len()], line_width);
        let points: Vec<(f64, f64)> = series
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        if let [only] = points.as_slice() {
            let radius = (line_width + 1) as i32;
            cartesian.draw_series(std::iter::once(Circle::new(*only, radius, colour.filled())))?;
        } else {
            cartesian.draw_series(LineSeries::new(points, colour))?;
        }
    }
    let placed = Placed {
        x_ticks: axes
            .x_ticks
            .iter()
            .map(|&(t, _)| cartesian.backend_coord(&(t, axes.y.min)).0)
            .collect(),
        y_ticks: axes
            .y_ticks
            .iter()
            .map(|&(t, _)| cartesian.backend_coord(&(axes.x.min, t)).1)
            .collect(),
        plot: (
            cartesian.backend_coord(&(axes.x.min, axes.y.max)),
            cartesian.backend_coord(&(axes.x.max, axes.y.min)),
        ),
    };
    let ink = style(INK, 1);
    let ((x0, y0), (x1, y1)) = placed.plot;
    root.draw(&Rectangle::new([(x0, y0), (x1, y1)], ink))?;
    for &x in &placed.x_ticks {
        root.draw(&PathElement::new(vec![(x, y1), (x, y1 + layout.tick)], ink))?;
    }
    for &y in &placed.y_ticks {
        root.draw(&PathElement::new(vec![(x0 - layout.tick, y), (x0, y)], ink))?;
    }
    if let Some((corner, far)) = layout.legend {
        let [r, g, b] = BACKGROUND;
        root.draw(&Rectangle::new([corner, far], RGBColor(r, g, b).filled()))?;
        root.draw(&Rectangle::new([corner, far], ink))?;
        let line = text_thickness(layout.scale) as i32;
        for (i, _) in chart.series.iter().enumerate() {
            let y = corner.1 + layout.pad + i as i32 * (line + layout.pad) + line / 2;
            let from = (corner.0 + layout.pad, y);
            let to = (from.0 + 16 * layout.scale as i32, y);
            let colour = style(SERIES_COLOURS[i % SERIES_COLOURS.len()], line_width);
            root.draw(&PathElement::new(vec![from, to], colour))?;
        }
    }
    root.present()?;
    Ok(placed)
}

/// Writes the title, axis labels, tick labels and legend names.
fn draw_text(
    canvas: &mut Canvas<'_>,
    chart: &LineChart<'_>,
    axes: &Axes,
    layout: &Layout,
    placed: &Placed,
) {
    let scale = layout.scale;
    let pad = i64::from(layout.pad);
    let line = i64::from(text_thickness(scale));
    let length = |text: &str| i64::from(text_length(text, scale));
    let ((x0, y0), (x1, y1)) = placed.plot;
    let (x0, y0, x1, y1) = (i64::from(x0), i64::from(y0), i64::from(x1), i64::from(y1));
    let width = i64::from(chart.width);
    let title_length = i64::from(text_length(chart.title, layout.title_scale));
    canvas.draw_text(
        chart.title,
        ((width - title_length) / 2, pad),
        layout.title_scale,
        INK,
        Direction::Right,
    );
    let tick_labels_top = y1 + i64::from(layout.tick) + pad / 2;
    for ((_, label), &x) in axes.x_ticks.iter().zip(&placed.x_ticks) {
        let anchor = (i64::from(x) - length(label) / 2, tick_labels_top);
        canvas.draw_text(label, anchor, scale, INK, Direction::Right);
    }
    let x_label_anchor = (
        (x0 + x1 - length(chart.x_label)) / 2,
        tick_labels_top + line + pad,
    );
    canvas.draw_text(chart.x_label, x_label_anchor, scale, INK, Direction::Right);
    let tick_labels_right = x0 - i64::from(layout.tick) - pad / 2;
    for ((_, label), &y) in axes.y_ticks.iter().zip(&placed.y_ticks) {
        // Capitals and digits stand on glyph row 6 of 8: centre rows 0 to 6 on the tick.
        let anchor = (
            tick_labels_right - length(label),
            i64::from(y) - 7 * i64::from(scale) / 2,
        );
        canvas.draw_text(label, anchor, scale, INK, Direction::Right);
    }
    let y_label_anchor = (pad, (y0 + y1 + length(chart.y_label)) / 2);
    canvas.draw_text(chart.y_label, y_label_anchor, scale, INK, Direction::Up);
    if let Some((corner, _)) = layout.legend {
        let text_left = i64::from(corner.0) + 2 * pad + 16 * i64::from(scale);
        for (i, series) in chart.series.iter().enumerate() {
            let top = i64::from(corner.1) + pad + i as i64 * (line + pad);
            canvas.draw_text(&series.name, (text_left, top), scale, INK, Direction::Right);
        }
    }
}

/// Encodes `pixels` (RGB, `width` x `height`) as PNG into `path`, through a temporary
/// file renamed over it.
fn write_png(path: &Path, pixels: &[u8], width: u32, height: u32) -> Result<(), MetricsError> {
    let mut encoded = Vec::new();
    let mut encoder = png::Encoder::new(&mut encoded, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .map_err(|e| MetricsError::render(path, e))?;
    writer
        .write_image_data(pixels)
        .and_then(|()| writer.finish())
        .map_err(|e| MetricsError::render(path, e))?;
    write_atomic(path, &encoded).map_err(|e| MetricsError::io("cannot write", path, e))
}
