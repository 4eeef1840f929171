//! RL settings against their update-off control on the tiny world, over several seeds:
//! the table behind `docs/rl.md`. Each seed trains a tiny transformer on the tiny
//! world's expert answers (`sage_trainer::probe`), then runs 30 steps of RL from it under
//! every setting and under the control (the same loop with no optimizer step, so the
//! same chains and random streams), and reports the sampled success over the last
//! third of the steps, the gain over the control, and how the update moved the policy:
//! the KL between the policies before and after each step on its own rollouts, and the
//! mean change of the log-prob of an agent token in positive- and negative-advantage
//! sequences. `pass@G %` is the share of groups (a chain's rollouts) that solved the task
//! at least once over the last third: for the control, the ceiling of what sharpening
//! the SFT policy onto answers it already samples could reach.
//!
//! Run: `cargo run --release -p sage-examples --example rl_probe -- [--epochs N]
//! [--seeds N] [--steps N] [--guess SHARE] [--untied] [--only NAME,NAME]`
//! (defaults: 16 SFT epochs, model seeds 1-2, 30 steps, no guessing answers).
#![forbid(unsafe_code)]

use std::error::Error;

use sage_backend_cpu::CpuBackend;
use sage_core::grpo::LossAggregation;
use sage_trainer::optim::{AdamWConfig, LrSchedule};
use sage_trainer::pipeline::experiment::mean_std;
use sage_trainer::probe::{probe_rl, probe_rl_config, probe_sft, ProbeConfig};
use sage_trainer::rl::{RlConfig, RlStepStats};

/// One RL setting: its name, AdamW's learning rate and eps, the KL weight, the weight
/// of negative advantages, and its other changes.
struct Setting {
    name: &'static str,
    learning_rate: f32,
    eps: f32,
    kl_coef: f32,
    negative_weight: f32,
    adjust: fn(&mut RlConfig),
}

fn settings() -> Vec<Setting> {
    let plain = |name, learning_rate| Setting {
        name,
        learning_rate,
        eps: 1e-8,
        kl_coef: 0.0,
        negative_weight: 1.0,
        adjust: |_| {},
    };
    vec![
        plain("lr 1e-3", 1e-3),
        plain("lr 3e-4", 3e-4),
        plain("lr 1e-4", 1e-4),
        Setting {
            adjust: |c| c.grpo.aggregation = LossAggregation::TokenMean,
            ..plain("lr 1e-3 token-mean", 1e-3)
        },
        Setting {
            adjust: |c| c.grpo.normalize_std = true,
            ..plain("lr 1e-3 std-normalised", 1e-3)
        },
        Setting {
            eps: 1e-3,
            ..plain("lr 3e-3 eps 1e-3", 3e-3)
        },
        Setting {
            adjust: |c| c.chains_per_step = 16,
            ..plain("lr 1e-3 16 chains", 1e-3)
        },
        Setting {
            adjust: |c| c.minibatches = 4,
            ..plain("lr 1e-3 4 minibatches", 1e-3)
        },
        Setting {
            adjust: |c| c.warmup_steps = 10,
            ..plain("lr 1e-3 warm-up 10", 1e-3)
        },
        Setting {
            kl_coef: 0.1,
            ..plain("lr 1e-3 KL 0.1", 1e-3)
        },
        Setting {
            negative_weight: 0.25,
            ..plain("lr 1e-3 negatives x0.25", 1e-3)
        },
        Setting {
            negative_weight: 0.0,
            ..plain("lr 1e-3 successes only", 1e-3)
        },
        Setting {
            negative_weight: 0.25,
            ..plain("lr 3e-4 negatives x0.25", 3e-4)
        },
        Setting {
            negative_weight: 0.0,
            ..plain("lr 3e-4 successes only", 3e-4)
        },
    ]
}

/// What one run (or control) reached over the last third of its steps, and how its
/// updates moved the policy.
struct Outcome {
    first: f64,
    tail_success: f64,
    tail_solved_any: f64,
    step_kl: f64,
    change_positive: f64,
    change_negative: f64,
    tail_entropy: f64,
}

fn outcome(steps: &[RlStepStats]) -> Outcome {
    let tail = &steps[steps.len() - steps.len().div_ceil(3)..];
    let mean = |over: &[RlStepStats], f: &dyn Fn(&RlStepStats) -> f32| {
        over.iter().map(|s| f64::from(f(s))).sum::<f64>() / over.len().max(1) as f64
    };
    Outcome {
        first: f64::from(steps[0].success[0]),
        tail_success: mean(tail, &|s| s.success[0]),
        tail_solved_any: mean(tail, &|s| s.solved_any[0]),
        step_kl: mean(steps, &|s| s.update.step_kl),
        change_positive: mean(steps, &|s| s.update.logp_change_positive),
        change_negative: mean(steps, &|s| s.update.logp_change_negative),
        tail_entropy: mean(tail, &|s| s.entropy),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let mut probe = ProbeConfig::default();
    let (mut seeds, mut steps) = (2u64, 30u64);
    let mut only: Option<Vec<String>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--epochs" => probe.sft_epochs = value()?.parse()?,
            "--seeds" => seeds = value()?.parse()?,
            "--steps" => steps = value()?.parse()?,
            "--guess" => probe.guess_share = value()?.parse()?,
            "--untied" => probe.tied_embeddings = false,
            "--only" => only = Some(value()?.split(',').map(str::to_owned).collect()),
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let settings: Vec<Setting> = settings()
        .into_iter()
        .filter(|s| {
            only.as_ref()
                .is_none_or(|names| names.iter().any(|n| n == s.name))
        })
        .collect();
    println!(
        "tiny world, SFT {} epochs{}{}, {steps} RL steps of 4 chains x 8 rollouts, model seeds 1-{seeds}",
        probe.sft_epochs,
        if probe.guess_share > 0.0 { format!(", guessing share {}", probe.guess_share) } else { String::new() },
        if probe.tied_embeddings { "" } else { ", untied embeddings" },
    );
    // controls[seed]: the control of the default batch; results[setting][seed]: the run
    // and the control with its own chains per step (they sample alike only then).
    let mut controls: Vec<Outcome> = Vec::new();
    let mut results: Vec<Vec<(Outcome, f64)>> = settings.iter().map(|_| Vec::new()).collect();
    for model_seed in 1..=seeds {
        probe.model_seed = model_seed;
        let rl_seed = model_seed;
        let optimizer = |lr: f32, eps: f32| AdamWConfig {
            schedule: LrSchedule::Constant { lr },
            weight_decay: 0.0,
            eps,
            ..AdamWConfig::default()
        };
        let (tokenizer, mut sft_policy, loss) =
            probe_sft(CpuBackend::new(), &probe, optimizer(1e-3, 1e-8))?;
        eprintln!("seed {model_seed}: SFT loss {loss:.4}");
        // The controls of this seed by chains per step (a control leaves the policy as
        // it was, so one SFT model serves them all).
        let mut seed_controls: Vec<(usize, Outcome)> = Vec::new();
        let mut control_of = |rl: &RlConfig| -> Result<f64, Box<dyn Error>> {
            if let Some((_, found)) = seed_controls
                .iter()
                .find(|(chains, _)| *chains == rl.chains_per_step)
            {
                return Ok(found.tail_success);
            }
            let control = RlConfig {
                apply_updates: false,
                grpo: probe_rl_config(steps, rl_seed).grpo,
                ..rl.clone()
            };
            let reached = outcome(&probe_rl(
                &mut sft_policy,
                None,
                &tokenizer,
                &probe,
                control,
            )?);
            let tail = reached.tail_success;
            seed_controls.push((rl.chains_per_step, reached));
            Ok(tail)
        };
        control_of(&probe_rl_config(steps, rl_seed))?;
        for (setting, out) in settings.iter().zip(&mut results) {
            let mut rl = probe_rl_config(steps, rl_seed);
            rl.learning_rate = setting.learning_rate;
            rl.grpo.kl_coef = setting.kl_coef;
            rl.grpo.negative_weight = setting.negative_weight;
            (setting.adjust)(&mut rl);
            // The RL optimizer as `sage train` makes it (warm-up included).
            let rl_optimizer = rl.optimizer(&optimizer(setting.learning_rate, setting.eps));
            let (tokenizer, mut policy, _) = probe_sft(CpuBackend::new(), &probe, rl_optimizer)?;
            let mut reference = if setting.kl_coef > 0.0 {
                Some(probe_sft(CpuBackend::new(), &probe, optimizer(1e-3, 1e-8))?.1)
            } else {
                None
            };
            let control = control_of(&rl)?;
            let stats = probe_rl(&mut policy, reference.as_mut(), &tokenizer, &probe, rl)?;
            let reached = outcome(&stats);
            eprintln!(
                "seed {model_seed}: {}: success {:.1}% against the control's {:.1}%",
                setting.name,
                100.0 * reached.tail_success,
                100.0 * control
            );
            out.push((reached, control));
        }
        let default_control = seed_controls.swap_remove(0).1;
        controls.push(default_control);
    }
    let control_tail: Vec<f64> = controls.iter().map(|c| 100.0 * c.tail_success).collect();
    let (control_mean, control_std) = mean_std(&control_tail);
    println!(
        "{:<24} {:>11} {:>14} {:>9} {:>14} {:>10} {:>11} {:>11} {:>9}",
        "setting",
        "first %",
        "success %",
        "pass@G %",
        "gain (pts)",
        "step KL",
        "dlogp A>0",
        "dlogp A<0",
        "entropy"
    );
    let first: Vec<f64> = controls.iter().map(|c| 100.0 * c.first).collect();
    let control_solved: Vec<f64> = controls.iter().map(|c| 100.0 * c.tail_solved_any).collect();
    println!(
        "{:<24} {:>11.1} {:>14} {:>9.1} {:>14} {:>10} {:>11} {:>11} {:>9.3}",
        "update-off control",
        mean_std(&first).0,
        format!("{control_mean:.1} ± {control_std:.1}"),
        mean_std(&control_solved).0,
        "-",
        "-",
        "-",
        "-",
        mean_std(&controls.iter().map(|c| c.tail_entropy).collect::<Vec<_>>()).0,
    );
    for (setting, out) in settings.iter().zip(&results) {
        let pick = |f: &dyn Fn(&Outcome) -> f64| {
            mean_std(&out.iter().map(|(o, _)| f(o)).collect::<Vec<_>>())
        };
        let (success, success_std) = pick(&|o| 100.0 * o.tail_success);
        let gains: Vec<f64> = out
            .iter()
            .map(|(o, control)| 100.0 * (o.tail_success - control))
            .collect();
        let (gain, gain_std) = mean_std(&gains);
        println!(
            "{:<24} {:>11.1} {:>14} {:>9.1} {:>14} {:>10.2e} {:>+11.2e} {:>+11.2e} {:>9.3}",
            setting.name,
            pick(&|o| 100.0 * o.first).0,
            format!("{success:.1} ± {success_std:.1}"),
            pick(&|o| 100.0 * o.tail_solved_any).0,
            format!("{gain:+.1} ± {gain_std:.1}"),
            pick(&|o| o.step_kl).0,
            pick(&|o| o.change_positive).0,
            pick(&|o| o.change_negative).0,
            pick(&|o| o.tail_entropy).0,
        );
    }
    Ok(())
}
