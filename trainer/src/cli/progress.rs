//! [`BarReporter`]: progress bars on the terminal (indicatif) for SFT steps, with the
//! ETA and training tokens per second, RL steps (of `sage train` and of each experiment
//! arm) with their ETA, and evaluation waves; messages go through `tracing`.

use indicatif::{ProgressBar, ProgressStyle};
use tracing::info;

use sage_trainer::pipeline::Reporter;
use sage_trainer::sft::SftStep;

/// Progress bars for the stages of a run.
#[derive(Default)]
pub struct BarReporter {
    sft: Option<ProgressBar>,
    rl: Option<ProgressBar>,
    eval: Option<ProgressBar>,
}

impl BarReporter {
    fn finish(&mut self) {
        if let Some(bar) = self.sft.take() {
            bar.finish();
        }
        if let Some(bar) = self.rl.take() {
            bar.finish();
        }
        if let Some(bar) = self.eval.take() {
            bar.finish();
        }
    }
}

impl Drop for BarReporter {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Reporter for BarReporter {
    fn stage(&mut self, name: &str) {
        self.finish();
        info!("{name}");
    }

    fn info(&mut self, message: &str) {
        match self
            .sft
            .as_ref()
            .or(self.rl.as_ref())
            .or(self.eval.as_ref())
        {
            Some(bar) => bar.suspend(|| info!("{message}")),
            None => info!("{message}"),
        }
    }

    fn sft_started(&mut self, done: u64, total: u64) {
        let bar = ProgressBar::new(total).with_position(done);
        bar.set_style(
            ProgressStyle::with_template("sft {bar:30} {pos}/{len} steps, eta {eta} | {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        self.sft = Some(bar);
    }

    fn result(&mut self, text: &str) {
        self.finish();
        println!("{text}");
    }

    fn sft_step(&mut self, step: &SftStep, tokens_per_second: f64) {
        if let Some(bar) = &self.sft {
            let message = format!("loss {:.3}, {:.0} tokens/s", step.loss, tokens_per_second);
            bar.set_position(step.step);
            // Without a terminal the bar is hidden: a log line every 5% instead.
            let every = bar.length().unwrap_or(1).div_ceil(20).max(1);
            if bar.is_hidden() && step.step % every == 0 {
                info!(
                    "sft step {}/{}: {message}",
                    step.step,
                    bar.length().unwrap_or(0)
                );
            }
            bar.set_message(message);
        }
    }

    fn rl_step(&mut self, label: &str, step: u64, steps: u64) {
        // Every step already logs a line, so a hidden bar (no terminal) adds nothing.
        let bar = self.rl.get_or_insert_with(|| {
            // Started at the step before this one (the run's first, or a resumed run's),
            // so the ETA counts only the steps timed here.
            let bar = ProgressBar::new(steps).with_position(step.saturating_sub(1));
            bar.set_style(
                ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} steps, eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        bar.set_message(label.to_owned());
        bar.set_length(steps);
        bar.set_position(step);
        if step >= steps {
            if let Some(bar) = self.rl.take() {
                bar.finish();
            }
        }
    }

    fn eval_wave(&mut self, split: &str, mode: &str, wave: usize, waves: usize) {
        let bar = self.eval.get_or_insert_with(|| {
            let bar = ProgressBar::new(waves as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "eval {msg} {bar:20} task {pos}/{len} of each scenario [{elapsed}]",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        bar.set_message(format!("{split} / {mode}"));
        bar.set_length(waves as u64);
        bar.set_position(wave as u64);
    }
}
