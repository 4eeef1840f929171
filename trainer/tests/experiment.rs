//! `experiment`: each arm's settings, the table's mean ± spread over seeds, bad arm
//! names, and the tables of several runs' `experiment.json` put together.

use sage_core::retrieval::RetrievalMode;
use sage_core::reward::RewardKind;
use sage_envs::expert::ExpertMode;
use sage_envs::prompt::PromptMode;
use sage_trainer::config::RunConfig;
use sage_trainer::eval::{EvalConfig, EvalMetrics, TemplateMetrics};
use sage_trainer::experiment::{Arm, ExperimentConfig};
use sage_trainer::metrics::Series;
use sage_trainer::pipeline::experiment::{
    claim_table, experiment_table, experiment_tables, gain_table, merge_runs, read_experiment_json,
    template_table, ArmControl, ArmRun, Replacement,
};
use sage_trainer::rl::control_gap;
use sage_trainer::rl::RlConfig;

#[test]
fn every_arm_changes_only_what_it_studies() {
    let base = RlConfig {
        chain_len: 2,
        chains_per_step: 3,
        ..RlConfig::default()
    };
    assert!(Arm::SftOnly.rl_config(&base).is_none());
    let sage = Arm::Sage.rl_config(&base).unwrap();
    assert_eq!(sage, base, "SAGE is the run's RL settings as they are");
    let outcome = Arm::OutcomeOnly.rl_config(&base).unwrap();
    assert_eq!(outcome.reward.kind, RewardKind::OutcomeOnly);
    assert_eq!((outcome.chain_len, outcome.prompt), (2, PromptMode::Skills));
    let chain = Arm::ChainReward.rl_config(&base).unwrap();
    assert_eq!(chain.reward.kind, RewardKind::Chain);
    // K = 3 and the no-skill baseline see as many tasks per step as SAGE (6).
    let k3 = Arm::SageK3.rl_config(&base).unwrap();
    assert_eq!((k3.chain_len, k3.chains_per_step), (3, 2));
    assert_eq!(k3.reward.kind, RewardKind::SkillIntegrated);
    let kl = Arm::SageKl.rl_config(&base).unwrap();
    assert_eq!(kl.grpo.kl_coef, Arm::KL_COEF);
    assert_eq!(
        RlConfig {
            grpo: base.grpo,
            ..kl.clone()
        },
        base,
        "the KL arm is SAGE with the KL term"
    );
    let grpo = Arm::GrpoNoSkills.rl_config(&base).unwrap();
    assert_eq!((grpo.chain_len, grpo.chains_per_step), (1, 6));
    assert_eq!(grpo.reward.kind, RewardKind::OutcomeOnly);
    assert_eq!(grpo.prompt, PromptMode::Direct);
    for arm in [
        Arm::Sage,
        Arm::OutcomeOnly,
        Arm::ChainReward,
        Arm::SageK3,
        Arm::GrpoNoSkills,
    ] {
        assert_eq!(
            arm.rl_config(&base).unwrap().steps,
            base.steps,
            "{arm:?}: same budget"
        );
    }

    let eval = EvalConfig::default();
    assert_eq!(Arm::Sage.eval_config(&eval), eval);
    let plain = Arm::GrpoNoSkills.eval_config(&eval);
    assert_eq!(
        (plain.prompt, plain.modes.as_slice()),
        (PromptMode::Direct, &[RetrievalMode::None][..])
    );
    for arm in Arm::ALL {
        assert_eq!(arm.name().parse::<Arm>(), Ok(arm));
        assert_eq!(arm.to_string(), arm.name());
    }
}

fn metrics(split: &str, tgc: f64, tokens: f64) -> EvalMetrics {
    EvalMetrics {
        split: split.to_owned(),
        tgc,
        avg_tokens: tokens,
        ..EvalMetrics::default()
    }
}

#[test]
fn the_table_gives_mean_and_spread_over_seeds_per_split_and_arm() {
    let run = |arm: Arm, seed, tgc, tokens| ArmRun {
        arm: arm.name().to_owned(),
        seed,
        metrics: vec![
            metrics("iid", tgc, tokens),
            metrics("test-normal", tgc / 2.0, tokens),
        ],
        rl_seconds: 0.0,
        control: None,
        inputs: None,
    };
    let runs = [
        run(Arm::Sage, 0, 10.0, 100.0),
        run(Arm::Sage, 1, 20.0, 300.0),
        run(Arm::SftOnly, 0, 4.0, 50.0),
        run(Arm::SftOnly, 1, 4.0, 50.0),
    ];
    let table = experiment_table(&runs, &[Arm::SftOnly, Arm::Sage]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    assert!(lines[0].contains("over 2 seeds"));
    let row = |split: &str, arm: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(split) && l.split_whitespace().nth(1) == Some(arm))
            .unwrap_or_else(|| panic!("no row {split} {arm} in\n{table}"))
    };
    // Population spread: TGC 10 and 20 -> 15 ± 5; tokens 100 and 300 -> 200 ± 100.
    assert!(row("iid", "sage").contains("15.0 ± 5.0"), "{table}");
    assert!(row("iid", "sage").contains("200 ± 100"), "{table}");
    assert!(row("test-normal", "sage").contains("7.5 ± 2.5"), "{table}");
    assert!(row("iid", "sft-only").contains("4.0 ± 0.0"), "{table}");
    // Arms in the order given.
    let position = |arm: &str| {
        lines
            .iter()
            .position(|l| l.split_whitespace().nth(1) == Some(arm))
    };
    assert!(position("sft-only") < position("sage"), "{table}");
    // A run of some seeds alone (`--only-seed`) names them, not a count up to the last.
    let table = experiment_table(&runs[1..2], &[Arm::Sage]);
    assert!(
        table.lines().next().unwrap().contains("over 1 seed (1);"),
        "{table}"
    );
    let later = [
        run(Arm::Sage, 1, 10.0, 100.0),
        run(Arm::Sage, 4, 20.0, 300.0),
    ];
    let table = experiment_table(&later, &[Arm::Sage]);
    assert!(table.contains("over 2 seeds (1, 4);"), "{table}");
}

#[test]
fn unknown_arms_and_zero_seeds_are_named() {
    let config = ExperimentConfig {
        seeds: 0,
        ..ExperimentConfig::default()
    };
    assert!(config.validate().unwrap_err().contains("seeds"));
    let config = ExperimentConfig {
        arms: Vec::new(),
        ..ExperimentConfig::default()
    };
    assert!(config.validate().unwrap_err().contains("arms"));
    let config = ExperimentConfig {
        skill_data: ExpertMode::Direct,
        ..ExperimentConfig::default()
    };
    assert!(config.validate().unwrap_err().contains("skill_data"));
    let config = ExperimentConfig {
        seeds: 3,
        only_seed: Some(3),
        ..ExperimentConfig::default()
    };
    assert!(config.validate().unwrap_err().contains("only_seed 3"));
    let config = ExperimentConfig {
        seeds: 3,
        only_seed: Some(2),
        ..ExperimentConfig::default()
    };
    config.validate().unwrap();
    // A name outside the arms fails when the file is read, naming it and the arms there are.
    let error = RunConfig::from_toml("[experiment]\narms = [\"sage\", \"magic\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("experiment")
            && error.contains("unknown arm \"magic\"")
            && error.contains("sage-k3"),
        "{error}"
    );
    assert_eq!(ExperimentConfig::default().arms, Arm::DEFAULT.to_vec());
    assert!(!Arm::DEFAULT.contains(&Arm::SageKl) && Arm::ALL.contains(&Arm::SageKl));
    RunConfig::experiment("runs/x").validate().unwrap();
}

fn series(points: &[(f64, f64)]) -> Series {
    Series {
        name: "success_all".to_owned(),
        points: points.to_vec(),
    }
}

#[test]
fn a_run_is_compared_with_its_control_over_the_last_third_of_their_common_steps() {
    // Steps 1-6 in both (the run also has a step 7 the control lacks): the window is
    // steps 5-6.
    let run = series(&[
        (1.0, 0.5),
        (2.0, 0.5),
        (3.0, 0.6),
        (4.0, 0.6),
        (5.0, 0.8),
        (6.0, 0.4),
        (7.0, 1.0),
    ]);
    let control = series(&[
        (1.0, 0.5),
        (2.0, 0.5),
        (3.0, 0.5),
        (4.0, 0.5),
        (5.0, 0.5),
        (6.0, 0.5),
    ]);
    let gap = control_gap(&run, &control).unwrap();
    assert_eq!((gap.first_step, gap.last_step), (5, 6));
    assert!((gap.run - 0.6).abs() < 1e-12 && (gap.control - 0.5).abs() < 1e-12);
    assert!((gap.gain() - 0.1).abs() < 1e-12);
    assert_eq!((gap.below, gap.above), (1, 1));
    // Seven common steps: the last three.
    let long = series(&(1..=7).map(|s| (s as f64, 0.0)).collect::<Vec<_>>());
    assert_eq!(control_gap(&long, &long).unwrap().first_step, 5);
    assert!(control_gap(&run, &series(&[(9.0, 0.1)])).is_none());
}

#[test]
fn the_gain_table_puts_each_arm_against_its_control_and_its_sft_start() {
    let gap = |run: f64, control: f64| {
        control_gap(&series(&[(1.0, run)]), &series(&[(1.0, control)])).unwrap()
    };
    let run = |arm: Arm, seed, sgc: f64, control: Option<(f64, f64)>| ArmRun {
        arm: arm.name().to_owned(),
        seed,
        metrics: vec![EvalMetrics {
            split: "iid".to_owned(),
            tgc: sgc,
            sgc,
            ..EvalMetrics::default()
        }],
        rl_seconds: 0.0,
        control: control.map(|(r, c)| ArmControl {
            success: gap(r, c),
            reward: gap(2.0 * r, 2.0 * c),
            skill_writing: gap(r / 2.0, c),
        }),
        inputs: None,
    };
    let runs = [
        run(Arm::SftOnly, 0, 50.0, None),
        run(Arm::SftOnly, 1, 50.0, None),
        run(Arm::SftDirect, 0, 40.0, None),
        run(Arm::Sage, 0, 60.0, Some((0.9, 0.8))),
        run(Arm::Sage, 1, 50.0, Some((0.8, 0.8))),
        run(Arm::GrpoNoSkills, 0, 45.0, Some((0.5, 0.6))),
    ];
    let arms = [Arm::SftOnly, Arm::SftDirect, Arm::Sage, Arm::GrpoNoSkills];
    let table = gain_table(&runs, &arms, "iid");
    let row = |arm: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(arm))
            .unwrap_or_else(|| panic!("no row {arm} in\n{table}"))
            .to_owned()
    };
    // sage: success +10 and +0 points over its controls, SGC +10 and +0 over sft-only.
    assert!(row("sage").contains("+5.0 ± 5.0"), "{table}");
    assert!(row("sage").contains("+0.100 ± 0.100"), "{table}");
    assert!(row("sage").contains("80.0"), "control success: {table}");
    // Skill writing: 45 - 80 and 40 - 80 points: -37.5 ± 2.5.
    assert!(row("sage").contains("-37.5 ± 2.5"), "{table}");
    // grpo-no-skills is measured against sft-direct, not sft-only.
    assert!(row("grpo-no-skills").contains("-10.0 ± 0.0"), "{table}");
    assert!(row("grpo-no-skills").contains("+5.0 ± 0.0"), "{table}");
    // Arms without RL have no row.
    assert!(table.lines().all(|l| !l.starts_with("sft-")), "{table}");
}

#[test]
fn the_claim_table_puts_sage_against_grpo_and_outcome_only_seed_by_seed() {
    let runs = [
        iid_run(Arm::Sage, 0, 90.0, 120.0, 1.5),
        iid_run(Arm::Sage, 1, 86.0, 140.0, 1.5),
        iid_run(Arm::Sage, 2, 70.0, 100.0, 1.0),
        iid_run(Arm::GrpoNoSkills, 0, 88.0, 240.0, 2.0),
        iid_run(Arm::GrpoNoSkills, 1, 88.0, 260.0, 2.0),
        iid_run(Arm::OutcomeOnly, 0, 80.0, 200.0, 2.0),
    ];
    let arms = [Arm::GrpoNoSkills, Arm::Sage, Arm::OutcomeOnly, Arm::SageK3];
    let table = claim_table(&runs, &arms, "iid", false);
    let row = |claim: &str| {
        table
            .lines()
            .find(|l| l.starts_with(claim))
            .unwrap_or_else(|| panic!("no row {claim} in\n{table}"))
            .to_owned()
    };
    // Seeds 0 and 1 ran both arms (seed 2 has no GRPO run): SGC +2 and -2 -> +0.0 ± 2.0;
    // tokens 260 of 500 -> 0.52x; steps 3 of 4 -> 0.75x.
    let grpo = row("sage vs grpo-no-skills");
    assert_eq!(grpo.split_whitespace().nth(3), Some("2"), "seeds: {table}");
    assert!(grpo.contains("+0.0 ± 2.0"), "{table}");
    // Its paired standard error: sample spread 2.83 over sqrt(2); none from one seed.
    assert_eq!(grpo.split_whitespace().nth(7), Some("2.00"), "{table}");
    assert!(grpo.contains("0.52x") && grpo.contains("0.75x"), "{table}");
    // Against outcome-only, seed 0 only: +10 SGC at 0.60x its tokens.
    let outcome = row("sage vs sage-outcome-only");
    assert!(outcome.contains("+10.0 ± 0.0"), "{table}");
    assert_eq!(outcome.split_whitespace().nth(7), Some("-"), "{table}");
    assert!(outcome.contains("0.60x"), "{table}");
    // A listed arm without runs, and an arm not listed, have no row.
    assert!(
        !table.contains("sage-k3") && !table.contains("sage-kl"),
        "{table}"
    );
    assert!(
        table.lines().next().unwrap().contains("+8.9 SGC"),
        "{table}"
    );
    // Without a baseline there is no table.
    assert_eq!(claim_table(&runs[..3], &arms, "iid", true), "");
    // With one SFT model per mode shared by every seed, the GRPO row's ± is qualified;
    // against outcome-only alone (the same SFT model) there is nothing to qualify.
    let note = "leaves out a second SFT run's spread";
    assert!(!table.contains(note), "{table}");
    assert!(claim_table(&runs, &arms, "iid", true).contains(note));
    let outcome_only = [runs[0].clone(), runs[5].clone()];
    assert!(!claim_table(&outcome_only, &arms, "iid", true).contains(note));
}

#[test]
fn the_template_table_shows_only_the_templates_where_the_arms_part() {
    let template = |name: &str, tgc: f64, copied: f64| TemplateMetrics {
        template: name.to_owned(),
        tgc,
        sgc: tgc / 2.0,
        values_copied: copied,
        ..TemplateMetrics::default()
    };
    let run = |arm: Arm, seed, spent: f64| ArmRun {
        arm: arm.name().to_owned(),
        seed,
        metrics: vec![EvalMetrics {
            split: "iid".to_owned(),
            templates: vec![
                template("notes_tag_count", 100.0, 100.0),
                template("coinpay_spent_on_since", spent, spent),
            ],
            ..EvalMetrics::default()
        }],
        rl_seconds: 0.0,
        control: None,
        inputs: None,
    };
    let runs = [
        run(Arm::Sage, 0, 60.0),
        run(Arm::Sage, 1, 80.0),
        run(Arm::GrpoNoSkills, 0, 100.0),
    ];
    let table = template_table(&runs, &[Arm::GrpoNoSkills, Arm::Sage, Arm::SageK3], "iid");
    let lines: Vec<&str> = table.lines().collect();
    // A header, two rows for the template that differs, the count.
    assert_eq!(lines.len(), 4, "{table}");
    assert!(!table.contains("notes_tag_count"), "{table}");
    assert!(lines[1].starts_with("coinpay_spent_on_since"), "{table}");
    let cells = |line: &str| -> Vec<String> {
        line.split_whitespace()
            .rev()
            .take(4)
            .map(str::to_owned)
            .collect()
    };
    // GRPO first (the order of the arms), then SAGE: mean of 60 and 80 over its seeds.
    assert_eq!(cells(lines[1]), ["100", "50.0", "100.0", "grpo-no-skills"]);
    assert_eq!(cells(lines[2]), ["70", "35.0", "70.0", "sage"]);
    assert_eq!(lines[3], "1 of 2 templates have the same TGC in every arm");
    // One arm alone has nothing to compare.
    assert_eq!(template_table(&runs[..2], &[Arm::Sage], "iid"), "");
}

/// An arm run with one `iid` row of this SGC (TGC 5 points above it), tokens and steps
/// per task.
fn iid_run(arm: Arm, seed: u64, sgc: f64, tokens: f64, steps: f64) -> ArmRun {
    ArmRun {
        arm: arm.name().to_owned(),
        seed,
        metrics: vec![EvalMetrics {
            split: "iid".to_owned(),
            tgc: sgc + 5.0,
            sgc,
            avg_tokens: tokens,
            avg_steps: steps,
            ..EvalMetrics::default()
        }],
        rl_seconds: 0.0,
        control: None,
        inputs: None,
    }
}

#[test]
fn runs_put_together_keep_the_later_files_row_of_an_arm_and_seed() {
    use std::path::PathBuf;
    let first = PathBuf::from("first/experiment.json");
    let second = PathBuf::from("second/experiment.json");
    let files = [
        (
            first.clone(),
            vec![
                iid_run(Arm::Sage, 1, 80.0, 100.0, 1.0),
                iid_run(Arm::GrpoNoSkills, 0, 90.0, 100.0, 1.0),
                iid_run(Arm::Sage, 0, 70.0, 100.0, 1.0),
                iid_run(Arm::GrpoNoSkills, 1, 90.0, 100.0, 1.0),
            ],
        ),
        (
            second.clone(),
            vec![iid_run(Arm::Sage, 0, 95.0, 100.0, 1.0)],
        ),
    ];
    let merged = merge_runs(&files, None).unwrap();
    // In the order of the seeds, then of the arms' table order (GRPO before SAGE).
    let order: Vec<(&str, u64, f64)> = merged
        .runs
        .iter()
        .map(|r| (r.arm.as_str(), r.seed, r.metrics[0].sgc))
        .collect();
    assert_eq!(
        order,
        [
            ("grpo-no-skills", 0, 90.0),
            ("sage", 0, 95.0),
            ("grpo-no-skills", 1, 90.0),
            ("sage", 1, 80.0)
        ]
    );
    assert_eq!(merged.arms, [Arm::GrpoNoSkills, Arm::Sage]);
    assert_eq!(
        merged.replaced,
        [Replacement {
            arm: "sage".to_owned(),
            seed: 0,
            earlier: first.clone(),
            later: second.clone(),
        }]
    );
    // The claim over both seeds uses the later row: SGC +5 and -10 -> -2.5 ± 7.5.
    let (printed, with_templates) = experiment_tables(&merged.runs, &merged.arms, false);
    let claim = printed
        .lines()
        .find(|l| l.starts_with("sage vs grpo-no-skills"))
        .unwrap_or_else(|| panic!("no claim row in\n{printed}"));
    assert!(claim.contains("-2.5 ± 7.5"), "{printed}");
    assert!(with_templates.starts_with(&printed));
    // Every arm ran both seeds: no note on seeds. With seed 1 of GRPO alone, a note.
    assert!(!printed.contains("different seeds"), "{printed}");
    let uneven = [
        merged.runs[1].clone(),
        merged.runs[2].clone(),
        merged.runs[3].clone(),
    ];
    let (printed, _) = experiment_tables(&uneven, &merged.arms, false);
    assert!(
        printed.contains("(the arms ran different seeds: grpo-no-skills 1; sage 0, 1)"),
        "{printed}"
    );
    // Keeping seed 1 alone drops seed 0's rows, so nothing was replaced.
    let seed_one = merge_runs(&files, Some(&[1])).unwrap();
    assert_eq!(seed_one.runs.len(), 2);
    assert!(seed_one.replaced.is_empty());
    // No row left, or one arm and seed twice in a file: an error naming the problem.
    let none = merge_runs(&files, Some(&[7])).unwrap_err();
    assert!(none.message.contains("[7]"), "{}", none.message);
    let twice = [(
        first.clone(),
        vec![
            iid_run(Arm::Sage, 2, 1.0, 100.0, 1.0),
            iid_run(Arm::Sage, 2, 2.0, 100.0, 1.0),
        ],
    )];
    let error = merge_runs(&twice, None).unwrap_err();
    assert!(
        error.message.contains("first/experiment.json")
            && error.message.contains("sage under seed 2 appears twice"),
        "{}",
        error.message
    );
}

#[test]
fn every_kept_result_reads_as_an_experiment_and_bad_files_are_named() {
    // The JSON of every table docs/results keeps, whatever build wrote it.
    let results = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results");
    let mut read = 0;
    for entry in std::fs::read_dir(&results).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let runs = read_experiment_json(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!runs.is_empty(), "{}", path.display());
            read += 1;
        }
    }
    assert!(
        read >= 10,
        "only {read} JSON files in {}",
        results.display()
    );
    let dir = std::env::temp_dir().join(format!("sage-tables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_rows = dir.join("config.json");
    std::fs::write(&not_rows, r#"{"arm": "sage"}"#).unwrap();
    let message = read_experiment_json(&not_rows).unwrap_err().message;
    assert!(
        message.contains("config.json") && message.contains("not an experiment.json"),
        "{message}"
    );
    let unknown = dir.join("unknown.json");
    let mut row = serde_json::to_value(vec![iid_run(Arm::Sage, 3, 1.0, 100.0, 1.0)]).unwrap();
    row[0]["arm"] = "sage-v2".into();
    std::fs::write(&unknown, row.to_string()).unwrap();
    let message = read_experiment_json(&unknown).unwrap_err().message;
    assert!(
        message.contains("unknown.json")
            && message.contains("seed 3")
            && message.contains("sage-v2"),
        "{message}"
    );
    let missing = read_experiment_json(&dir.join("absent.json")).unwrap_err();
    assert!(
        missing.message.contains("absent.json"),
        "{}",
        missing.message
    );
    // A run directory stands for its experiment.json.
    let no_run = read_experiment_json(&dir).unwrap_err();
    assert!(
        no_run.message.contains("experiment.json"),
        "{}",
        no_run.message
    );
    std::fs::write(
        dir.join("experiment.json"),
        row.to_string().replace("sage-v2", "sage"),
    )
    .unwrap();
    let from_dir = read_experiment_json(&dir).unwrap();
    assert_eq!((from_dir[0].arm.as_str(), from_dir[0].seed), ("sage", 3));
    std::fs::remove_dir_all(&dir).unwrap();
}
