//! `metrics`: rows written to JSON lines and CSV exactly as expected and read back as
//! series, resume keeping the rows up to a step (and dropping a line cut short), rows
//! whose columns differ from the header refused by name, and line charts that decode
//! as PNGs of the requested size with each series drawn in its colour.

use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use sage_trainer::metrics::{
    plot_line_chart, read_series, KeepRows, LineChart, MetricValue, MetricsError, MetricsLog,
    Series, SERIES_COLOURS,
};

/// A fresh, empty directory under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-metrics-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// The row of SFT step `step` with loss `loss`.
fn step_row(step: u64, loss: f64) -> Vec<(&'static str, MetricValue)> {
    vec![
        ("step", MetricValue::from(step)),
        ("loss", MetricValue::from(loss)),
        ("lr", MetricValue::Float(1e-3 / step as f64)),
    ]
}

fn log_all(log: &mut MetricsLog, rows: &[(u64, f64)]) {
    for &(step, loss) in rows {
        log.log(&step_row(step, loss)).unwrap();
    }
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Both files hold exactly the expected text (text quoted for CSV, NaN written as
/// missing), and `read_series` gives back every finite point in order.
#[test]
fn logged_rows_read_back_as_series() {
    let dir = scratch("round-trip").join("metrics");
    let mut log = MetricsLog::create(&dir, "sft").unwrap();
    let row = |step: u64, loss: f64, note: &str| {
        vec![
            ("step", MetricValue::from(step)),
            ("loss", MetricValue::from(loss)),
            ("delta", MetricValue::from(-(step as i64))),
            ("note", MetricValue::from(note)),
        ]
    };
    log.log(&row(1, 2.5, "plain")).unwrap();
    log.log(&row(2, 0.1, "a, \"quoted\" one")).unwrap();
    log.log(&row(3, f64::NAN, "nan")).unwrap();
    log.log(&row(4, 1e-7, "tiny")).unwrap();
    log.log(&row(5, 3.0, "whole")).unwrap();
    assert_eq!(log.columns().unwrap(), ["step", "loss", "delta", "note"]);

    assert_eq!(
        lines(&dir.join("sft.jsonl")),
        [
            r#"{"step":1,"loss":2.5,"delta":-1,"note":"plain"}"#,
            r#"{"step":2,"loss":0.1,"delta":-2,"note":"a, \"quoted\" one"}"#,
            r#"{"step":3,"loss":null,"delta":-3,"note":"nan"}"#,
            r#"{"step":4,"loss":1e-7,"delta":-4,"note":"tiny"}"#,
            r#"{"step":5,"loss":3.0,"delta":-5,"note":"whole"}"#,
        ]
    );
    assert_eq!(
        lines(&dir.join("sft.csv")),
        [
            "step,loss,delta,note",
            "1,2.5,-1,plain",
            r#"2,0.1,-2,"a, ""quoted"" one""#,
            "3,,-3,nan",
            "4,1e-7,-4,tiny",
            "5,3.0,-5,whole",
        ]
    );

    let series = read_series(log.jsonl_path(), "step", &["loss", "delta"]).unwrap();
    assert_eq!(series.len(), 2);
    assert_eq!(series[0].name, "loss");
    assert_eq!(
        series[0].points,
        [(1.0, 2.5), (2.0, 0.1), (4.0, 1e-7), (5.0, 3.0)]
    );
    assert_eq!(series[1].name, "delta");
    assert_eq!(
        series[1].points,
        [
            (1.0, -1.0),
            (2.0, -2.0),
            (3.0, -3.0),
            (4.0, -4.0),
            (5.0, -5.0)
        ]
    );
}

/// Later rows may list the columns in another order; they are written in the
/// header's order.
#[test]
fn columns_are_written_in_header_order() {
    let dir = scratch("order");
    let mut log = MetricsLog::create(&dir, "m").unwrap();
    log.log(&[("a", 1u64.into()), ("b", 2u64.into())]).unwrap();
    log.log(&[("b", 4u64.into()), ("a", 3u64.into())]).unwrap();
    assert_eq!(lines(&dir.join("m.csv")), ["a,b", "1,2", "3,4"]);
    assert_eq!(
        lines(&dir.join("m.jsonl")),
        [r#"{"a":1,"b":2}"#, r#"{"a":3,"b":4}"#]
    );
}

/// A row with a column the header lacks, without one it has, or with one twice is
/// refused, naming the column, and writes nothing.
#[test]
fn rows_with_other_columns_are_refused_by_name() {
    let dir = scratch("mismatch");
    let mut log = MetricsLog::create(&dir, "sft").unwrap();
    log_all(&mut log, &[(1, 2.0)]);
    let mut extra = step_row(2, 1.5);
    extra.push(("gpu_memory", MetricValue::from(3u64)));
    let error = log.log(&extra).unwrap_err();
    assert!(matches!(&error, MetricsError::Column { column, .. } if column == "gpu_memory"));
    assert!(error.to_string().contains("`gpu_memory`"), "{error}");
    assert!(error.to_string().contains("sft.jsonl"), "{error}");

    let missing = &step_row(2, 1.5)[..2];
    let error = log.log(missing).unwrap_err();
    assert!(
        matches!(&error, MetricsError::Column { column, .. } if column == "lr"),
        "{error}"
    );

    let twice = [("step", 2u64.into()), ("step", 3u64.into())];
    let error = log.log(&twice).unwrap_err();
    assert!(error.to_string().contains("twice"), "{error}");
    assert!(matches!(log.log(&[]), Err(MetricsError::EmptyRow { .. })));

    assert_eq!(lines(&dir.join("sft.jsonl")).len(), 1);
    assert_eq!(lines(&dir.join("sft.csv")).len(), 2);
}

/// Resuming at step 3 keeps steps 1 to 3 in both files; the rows logged after follow
/// them, and the header is not repeated.
#[test]
fn resume_keeps_the_rows_up_to_the_step() {
    let dir = scratch("resume");
    let mut log = MetricsLog::create(&dir, "sft").unwrap();
    log_all(
        &mut log,
        &[(1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0), (5, 0.5)],
    );
    drop(log);

    let keep = KeepRows::UpTo {
        column: "step".to_owned(),
        last: 3.0,
    };
    let mut log = MetricsLog::resume(&dir, "sft", &keep).unwrap();
    assert_eq!(log.columns().unwrap(), ["step", "loss", "lr"]);
    log_all(&mut log, &[(4, 1.25), (5, 0.75)]);
    let series = read_series(&dir.join("sft.jsonl"), "step", &["loss"]).unwrap();
    assert_eq!(
        series[0].points,
        [(1.0, 4.0), (2.0, 3.0), (3.0, 2.0), (4.0, 1.25), (5.0, 0.75)]
    );
    let csv = lines(&dir.join("sft.csv"));
    assert_eq!(csv.len(), 6);
    assert_eq!(csv[0], "step,loss,lr");
    assert_eq!(csv[3], "3,2.0,0.0003333333333333333");
    assert_eq!(csv[4], "4,1.25,0.00025");
    assert!(!dir.join("sft.csv.tmp").exists());

    let mut extra = step_row(6, 0.5);
    extra.push(("epoch", MetricValue::from(1u64)));
    assert!(log.log(&extra).is_err());
}

/// A last line cut short by a kill is dropped on resume; a log whose rows are all past
/// the step starts over with the next row's header.
#[test]
fn resume_drops_a_cut_short_line_and_can_keep_nothing() {
    let dir = scratch("cut-short");
    let mut log = MetricsLog::create(&dir, "sft").unwrap();
    log_all(&mut log, &[(1, 4.0), (2, 3.0)]);
    drop(log);
    let jsonl = dir.join("sft.jsonl");
    let mut text = fs::read_to_string(&jsonl).unwrap();
    text.push_str(r#"{"step":3,"lo"#);
    fs::write(&jsonl, text).unwrap();

    let log = MetricsLog::resume(&dir, "sft", &KeepRows::All).unwrap();
    drop(log);
    assert_eq!(lines(&jsonl).len(), 2);
    assert_eq!(lines(&dir.join("sft.csv")).len(), 3);

    let keep = KeepRows::UpTo {
        column: "step".to_owned(),
        last: 0.0,
    };
    let mut log = MetricsLog::resume(&dir, "sft", &keep).unwrap();
    assert!(log.columns().is_none());
    log.log(&[("step", 1u64.into()), ("reward", 0.5.into())])
        .unwrap();
    assert_eq!(lines(&dir.join("sft.csv")), ["step,reward", "1,0.5"]);

    let fresh = scratch("resume-fresh");
    let mut log = MetricsLog::resume(&fresh, "rl", &KeepRows::All).unwrap();
    log_all(&mut log, &[(1, 1.0)]);
    assert_eq!(lines(&fresh.join("rl.csv")).len(), 2);
}

/// A bad line in the middle of a log is an error naming the file and line; a column no
/// row has is an error naming it.
#[test]
fn bad_logs_and_unknown_columns_are_named() {
    let dir = scratch("bad");
    fs::create_dir_all(&dir).unwrap();
    let jsonl = dir.join("sft.jsonl");
    fs::write(
        &jsonl,
        "{\"step\":1,\"loss\":2.0}\nnot json\n{\"step\":3,\"loss\":1.0}\n",
    )
    .unwrap();
    let error = read_series(&jsonl, "step", &["loss"]).unwrap_err();
    assert!(
        matches!(&error, MetricsError::BadLine { line: 2, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("sft.jsonl, line 2"), "{error}");
    assert!(MetricsLog::resume(&dir, "sft", &KeepRows::All).is_err());

    fs::write(&jsonl, "{\"step\":1,\"loss\":2.0}\n").unwrap();
    let error = read_series(&jsonl, "step", &["loss", "reward"]).unwrap_err();
    assert!(
        matches!(&error, MetricsError::UnknownColumn { column, .. } if column == "reward"),
        "{error}"
    );
}

/// The pixels of a decoded RGB PNG, with its size.
fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let bytes = fs::read(path).unwrap();
    let decoder = png::Decoder::new(Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0u8; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

/// Pixels of exactly `colour` in rows `rows` of an RGB image `width` wide.
fn count_colour(pixels: &[u8], width: u32, rows: std::ops::Range<u32>, colour: [u8; 3]) -> usize {
    let row_bytes = 3 * width as usize;
    pixels[rows.start as usize * row_bytes..rows.end as usize * row_bytes]
        .chunks_exact(3)
        .filter(|pixel| *pixel == colour)
        .count()
}

/// The chart decodes at the requested size, each series shows in its colour, the
/// title's text is drawn in black, and the report counts the finite points.
#[test]
fn the_chart_is_a_png_with_each_series_in_its_colour() {
    let dir = scratch("plot");
    let loss = Series {
        name: "loss".to_owned(),
        points: (0..50)
            .map(|i| (i as f64, 3.0 * (-(i as f64) / 15.0).exp()))
            .chain([(50.0, f64::NAN)])
            .collect(),
    };
    let dev = Series {
        name: "dev loss".to_owned(),
        points: (0..50)
            .step_by(10)
            .map(|i| (i as f64, 2.5 - 0.03 * i as f64))
            .collect(),
    };
    let series = [loss, dev];
    let chart = LineChart {
        title: "SFT loss (mean NLL per agent token)",
        x_label: "step",
        y_label: "loss",
        series: &series,
        width: 640,
        height: 400,
    };
    let path = dir.join("plots").join("loss.png");
    let report = plot_line_chart(&path, &chart).unwrap();
    assert_eq!(report.path, path);
    assert_eq!(report.points, 55);

    let (width, height, pixels) = decode_png(&path);
    assert_eq!((width, height), (640, 400));
    assert_eq!(pixels.len(), 3 * 640 * 400);
    for colour in &SERIES_COLOURS[..2] {
        assert!(
            count_colour(&pixels, width, 0..height, *colour) > 100,
            "{colour:?}"
        );
    }
    assert_eq!(
        count_colour(&pixels, width, 0..height, SERIES_COLOURS[2]),
        0
    );
    let white = count_colour(&pixels, width, 0..height, [255, 255, 255]);
    assert!(
        white > pixels.len() / 3 / 2,
        "the background is mostly white"
    );
    // At this size the title's 16 rows (its font pixels are 2x2) start 6 pixels down
    // and the plot's frame starts 6 pixels below them.
    let title_ink = count_colour(&pixels, width, 0..22, [0, 0, 0]);
    assert!(title_ink > 100, "title pixels: {title_ink}");

    let untitled = LineChart { title: "", ..chart };
    let untitled_path = dir.join("plots").join("untitled.png");
    plot_line_chart(&untitled_path, &untitled).unwrap();
    let (_, _, untitled_pixels) = decode_png(&untitled_path);
    assert_eq!(count_colour(&untitled_pixels, width, 0..6, [0, 0, 0]), 0);
    assert_ne!(untitled_pixels, pixels);
}

/// A single point is still drawn; an empty series list still gives a chart; sizes
/// out of range are refused naming the file.
#[test]
fn sparse_charts_draw_and_bad_sizes_are_refused() {
    let dir = scratch("plot-edge");
    let single = [Series {
        name: "reward".to_owned(),
        points: vec![(3.0, 0.5)],
    }];
    let chart = LineChart {
        title: "one point",
        x_label: "step",
        y_label: "reward",
        series: &single,
        width: 300,
        height: 200,
    };
    let path = dir.join("single.png");
    assert_eq!(plot_line_chart(&path, &chart).unwrap().points, 1);
    let (width, height, pixels) = decode_png(&path);
    assert!(count_colour(&pixels, width, 0..height, SERIES_COLOURS[0]) > 4);

    let empty = LineChart {
        series: &[],
        ..chart
    };
    assert_eq!(
        plot_line_chart(&dir.join("empty.png"), &empty)
            .unwrap()
            .points,
        0
    );

    let tiny = LineChart { width: 40, ..chart };
    let error = plot_line_chart(&dir.join("tiny.png"), &tiny).unwrap_err();
    assert!(matches!(error, MetricsError::Chart { .. }), "{error}");
    assert!(error.to_string().contains("tiny.png"), "{error}");
    assert!(!dir.join("tiny.png").exists());
}
