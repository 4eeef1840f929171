//! A small timing harness shared by the core benchmarks (`cargo bench -p sage-core`):
//! runs a closure in timed batches and reports the median batch, so one slow batch
//! (a context switch) does not move the figure.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// The median time of one call of `f`, measured over `batches` batches whose size is
/// chosen so that a batch takes about `batch_target`.
pub fn median_time<R>(
    mut f: impl FnMut() -> R,
    batches: usize,
    batch_target: Duration,
) -> Duration {
    // Warm up and calibrate the batch size.
    let mut per_batch = 1u64;
    loop {
        let start = Instant::now();
        for _ in 0..per_batch {
            black_box(f());
        }
        if start.elapsed() >= batch_target / 4 || per_batch >= 1 << 30 {
            let scale = batch_target.as_secs_f64() / start.elapsed().as_secs_f64().max(1e-9);
            per_batch = ((per_batch as f64 * scale).ceil() as u64).max(1);
            break;
        }
        per_batch *= 2;
    }
    let mut times: Vec<Duration> = (0..batches.max(1))
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_batch {
                black_box(f());
            }
            start.elapsed() / per_batch as u32
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Prints one row of a result table: name, measured figure, target, and whether it is met.
pub fn report(name: &str, figure: f64, unit: &str, target: &str, met: bool) {
    println!(
        "| {name:<44} | {figure:>12.2} {unit:<8} | {target:<14} | {} |",
        if met { "met" } else { "NOT met" }
    );
}

/// Prints the header of the result table.
pub fn header() {
    let (name, figure, target, status) = ("benchmark", "figure", "target", "status");
    println!("| {name:<44} | {figure:>21} | {target:<14} | {status} |");
    println!(
        "|{}|{}|{}|-----|",
        "-".repeat(46),
        "-".repeat(23),
        "-".repeat(16)
    );
}
