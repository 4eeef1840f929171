//! Rewards: a hand-computed table over every combination of (r1, r2, skill used, code
//! present) for K = 2 and all three kinds, K = 3 cases, and input validation.

use sage_core::reward::{
    Reward, RewardConfig, RewardError, RewardKind, TaskOutcome, MAX_CHAIN_LEN, NO_CODE_PENALTY,
};

const Y: bool = true;
const N: bool = false;

/// One K = 2 case: scores, whether task 2 used a skill of task 1, whether each task
/// ended with code, then the expected (R1, R2) for skill-integrated, outcome-only and
/// chain rewards, worked out by hand.
type Row = (f32, f32, bool, bool, bool, [f32; 2], [f32; 2], [f32; 2]);

#[rustfmt::skip]
const TABLE: [Row; 72] = [
    // r1,  r2,  used, code1, code2, skill-integrated, outcome-only, chain
    // Both tasks ended with code.
    (0.0, 0.0, N, Y, Y, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]),
    (0.0, 0.0, Y, Y, Y, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]),
    (0.0, 0.5, N, Y, Y, [0.0, 0.5], [0.0, 0.5], [0.0, 0.5]),
    (0.0, 0.5, Y, Y, Y, [0.0, 0.5], [0.0, 0.5], [0.0, 0.5]),
    (0.0, 1.0, N, Y, Y, [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]),
    (0.0, 1.0, Y, Y, Y, [0.0, 2.0], [0.0, 1.0], [0.0, 1.0]),
    (0.5, 0.0, N, Y, Y, [0.5, 0.0], [0.5, 0.0], [0.5, 0.0]),
    (0.5, 0.0, Y, Y, Y, [0.5, 0.0], [0.5, 0.0], [0.5, 0.0]),
    (0.5, 0.5, N, Y, Y, [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]),
    (0.5, 0.5, Y, Y, Y, [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]),
    (0.5, 1.0, N, Y, Y, [0.5, 1.0], [0.5, 1.0], [0.5, 1.0]),
    (0.5, 1.0, Y, Y, Y, [0.5, 2.0], [0.5, 1.0], [0.5, 1.0]),
    (1.0, 0.0, N, Y, Y, [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]),
    (1.0, 0.0, Y, Y, Y, [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]),
    (1.0, 0.5, N, Y, Y, [1.0, 0.5], [1.0, 0.5], [1.0, 0.5]),
    (1.0, 0.5, Y, Y, Y, [1.0, 0.5], [1.0, 0.5], [1.0, 0.5]),
    (1.0, 1.0, N, Y, Y, [1.0, 1.0], [1.0, 1.0], [2.0, 2.0]),
    (1.0, 1.0, Y, Y, Y, [2.0, 2.0], [1.0, 1.0], [2.0, 2.0]),
    // Task 2 ended without code: it gets -1 and counts as failed for task 1's bonuses.
    (0.0, 0.0, N, Y, N, [0.0, -1.0], [0.0, -1.0], [0.0, -1.0]),
    (0.0, 0.0, Y, Y, N, [0.0, -1.0], [0.0, -1.0], [0.0, -1.0]),
    (0.0, 0.5, N, Y, N, [0.0, -1.0], [0.0, -1.0], [0.0, -1.0]),
    (0.0, 0.5, Y, Y, N, [0.0, -1.0], [0.0, -1.0], [0.0, -1.0]),
    (0.0, 1.0, N, Y, N, [0.0, -1.0], [0.0, -1.0], [0.0, -1.0]),
    (0.0, 1.0, Y, Y, N, [0.0, -1.0], [0.0, -1.0], [0.0, -1.0]),
    (0.5, 0.0, N, Y, N, [0.5, -1.0], [0.5, -1.0], [0.5, -1.0]),
    (0.5, 0.0, Y, Y, N, [0.5, -1.0], [0.5, -1.0], [0.5, -1.0]),
    (0.5, 0.5, N, Y, N, [0.5, -1.0], [0.5, -1.0], [0.5, -1.0]),
    (0.5, 0.5, Y, Y, N, [0.5, -1.0], [0.5, -1.0], [0.5, -1.0]),
    (0.5, 1.0, N, Y, N, [0.5, -1.0], [0.5, -1.0], [0.5, -1.0]),
    (0.5, 1.0, Y, Y, N, [0.5, -1.0], [0.5, -1.0], [0.5, -1.0]),
    (1.0, 0.0, N, Y, N, [1.0, -1.0], [1.0, -1.0], [1.0, -1.0]),
    (1.0, 0.0, Y, Y, N, [1.0, -1.0], [1.0, -1.0], [1.0, -1.0]),
    (1.0, 0.5, N, Y, N, [1.0, -1.0], [1.0, -1.0], [1.0, -1.0]),
    (1.0, 0.5, Y, Y, N, [1.0, -1.0], [1.0, -1.0], [1.0, -1.0]),
    (1.0, 1.0, N, Y, N, [1.0, -1.0], [1.0, -1.0], [1.0, -1.0]),
    (1.0, 1.0, Y, Y, N, [1.0, -1.0], [1.0, -1.0], [1.0, -1.0]),
    // Task 1 ended without code (it may still have saved skills in earlier turns).
    (0.0, 0.0, N, N, Y, [-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]),
    (0.0, 0.0, Y, N, Y, [-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]),
    (0.0, 0.5, N, N, Y, [-1.0, 0.5], [-1.0, 0.5], [-1.0, 0.5]),
    (0.0, 0.5, Y, N, Y, [-1.0, 0.5], [-1.0, 0.5], [-1.0, 0.5]),
    (0.0, 1.0, N, N, Y, [-1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0]),
    (0.0, 1.0, Y, N, Y, [-1.0, 2.0], [-1.0, 1.0], [-1.0, 1.0]),
    (0.5, 0.0, N, N, Y, [-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]),
    (0.5, 0.0, Y, N, Y, [-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]),
    (0.5, 0.5, N, N, Y, [-1.0, 0.5], [-1.0, 0.5], [-1.0, 0.5]),
    (0.5, 0.5, Y, N, Y, [-1.0, 0.5], [-1.0, 0.5], [-1.0, 0.5]),
    (0.5, 1.0, N, N, Y, [-1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0]),
    (0.5, 1.0, Y, N, Y, [-1.0, 2.0], [-1.0, 1.0], [-1.0, 1.0]),
    (1.0, 0.0, N, N, Y, [-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]),
    (1.0, 0.0, Y, N, Y, [-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]),
    (1.0, 0.5, N, N, Y, [-1.0, 0.5], [-1.0, 0.5], [-1.0, 0.5]),
    (1.0, 0.5, Y, N, Y, [-1.0, 0.5], [-1.0, 0.5], [-1.0, 0.5]),
    (1.0, 1.0, N, N, Y, [-1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0]),
    (1.0, 1.0, Y, N, Y, [-1.0, 2.0], [-1.0, 1.0], [-1.0, 1.0]),
    // Neither task ended with code.
    (0.0, 0.0, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.0, 0.0, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.0, 0.5, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.0, 0.5, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.0, 1.0, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.0, 1.0, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.5, 0.0, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.5, 0.0, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.5, 0.5, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.5, 0.5, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.5, 1.0, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (0.5, 1.0, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (1.0, 0.0, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (1.0, 0.0, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (1.0, 0.5, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (1.0, 0.5, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (1.0, 1.0, N, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
    (1.0, 1.0, Y, N, N, [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]),
];

fn rewards(kind: impl Reward, chain: &[TaskOutcome]) -> Vec<f32> {
    let mut out = vec![f32::NAN; chain.len()];
    kind.rewards(chain, &mut out).expect("valid chain");
    out
}

#[test]
fn k2_table_covers_every_combination_and_kind() {
    // Every combination appears exactly once.
    for (i, a) in TABLE.iter().enumerate() {
        for b in &TABLE[i + 1..] {
            assert!(
                (a.0, a.1, a.2, a.3, a.4) != (b.0, b.1, b.2, b.3, b.4),
                "duplicate row {a:?}"
            );
        }
    }
    for &(r1, r2, used, code1, code2, skill, outcome, chain) in &TABLE {
        let mut q2 = TaskOutcome::new(r2, code2);
        if used {
            q2 = q2.using_skill_from(0);
        }
        let tasks = [TaskOutcome::new(r1, code1), q2];
        for (kind, expected) in [
            (RewardKind::SkillIntegrated, skill),
            (RewardKind::OutcomeOnly, outcome),
            (RewardKind::Chain, chain),
        ] {
            assert_eq!(
                rewards(kind, &tasks),
                expected,
                "{kind:?}: r1={r1} r2={r2} used={used} code1={code1} code2={code2}"
            );
        }
    }
}

/// Three tasks; `uses[k]` lists the positions whose skills task k called.
fn chain3(scores: [f32; 3], uses: [&[usize]; 3]) -> [TaskOutcome; 3] {
    core::array::from_fn(|k| {
        uses[k]
            .iter()
            .fold(TaskOutcome::new(scores[k], true), |t, &j| {
                t.using_skill_from(j)
            })
    })
}

/// Scores, skill sources used by each task, expected skill-integrated rewards.
type ChainCase = ([f32; 3], [&'static [usize]; 3], [f32; 3]);

#[test]
fn k3_skill_integrated_generalisation() {
    let cases: [ChainCase; 7] = [
        // All succeed; t2 uses t1's skill, t3 uses t1's and t2's: t2 earns both bonuses.
        ([1.0, 1.0, 1.0], [&[], &[0], &[0, 1]], [2.0, 3.0, 2.0]),
        // t3 reuses t1's skill across a failed t2.
        ([1.0, 0.5, 1.0], [&[], &[], &[0]], [2.0, 0.5, 2.0]),
        // t2 used t1's skill but failed; t3's successful use still pays t1 once.
        ([1.0, 0.5, 1.0], [&[], &[0], &[0]], [2.0, 0.5, 2.0]),
        // Two later successful uses of t1's skill: still one generation bonus.
        ([1.0, 1.0, 1.0], [&[], &[0], &[0]], [2.0, 2.0, 2.0]),
        // t3 failed with t2's skill: t2 keeps only its usage bonus.
        ([1.0, 1.0, 0.5], [&[], &[0], &[1]], [2.0, 2.0, 0.5]),
        // A failed generator gets no generation bonus; its user still gets usage.
        ([0.5, 1.0, 0.0], [&[], &[0], &[]], [0.5, 2.0, 0.0]),
        // All succeed, no skill reused: no bonus.
        ([1.0, 1.0, 1.0], [&[], &[], &[]], [1.0, 1.0, 1.0]),
    ];
    for (scores, uses, expected) in cases {
        let chain = chain3(scores, uses);
        assert_eq!(
            rewards(RewardKind::SkillIntegrated, &chain),
            expected,
            "{scores:?} {uses:?}"
        );
    }
}

#[test]
fn k3_chain_and_outcome_only() {
    let all = chain3([1.0, 1.0, 1.0], [&[], &[], &[]]);
    assert_eq!(rewards(RewardKind::Chain, &all), [2.0, 2.0, 2.0]);
    assert_eq!(rewards(RewardKind::OutcomeOnly, &all), [1.0, 1.0, 1.0]);
    let one_failed = chain3([1.0, 0.5, 1.0], [&[], &[0], &[0, 1]]);
    assert_eq!(rewards(RewardKind::Chain, &one_failed), [1.0, 0.5, 1.0]);
    assert_eq!(
        rewards(RewardKind::OutcomeOnly, &one_failed),
        [1.0, 0.5, 1.0]
    );
    let mut no_code = all;
    no_code[2].had_code = false;
    assert_eq!(rewards(RewardKind::Chain, &no_code), [1.0, 1.0, -1.0]);
}

#[test]
fn k3_no_code_task_pays_no_generation_bonus() {
    let mut chain = chain3([1.0, 1.0, 1.0], [&[], &[], &[0]]);
    chain[2].had_code = false;
    assert_eq!(
        rewards(RewardKind::SkillIntegrated, &chain),
        [1.0, 1.0, -1.0]
    );
}

#[test]
fn single_task_gets_its_score_under_every_kind() {
    for kind in [
        RewardKind::SkillIntegrated,
        RewardKind::OutcomeOnly,
        RewardKind::Chain,
    ] {
        assert_eq!(rewards(kind, &[TaskOutcome::new(1.0, true)]), [1.0]);
        assert_eq!(rewards(kind, &[TaskOutcome::new(0.25, true)]), [0.25]);
        assert_eq!(rewards(kind, &[TaskOutcome::new(1.0, false)]), [-1.0]);
        assert_eq!(rewards(kind, &[]), Vec::<f32>::new());
    }
}

#[test]
fn custom_no_code_penalty() {
    let config = RewardConfig {
        kind: RewardKind::SkillIntegrated,
        no_code_penalty: -0.5,
    };
    let chain = [TaskOutcome::new(1.0, false), TaskOutcome::new(0.5, true)];
    assert_eq!(rewards(config, &chain), [-0.5, 0.5]);
    let bad = RewardConfig {
        no_code_penalty: f32::NAN,
        ..config
    };
    let mut out = [0.0; 2];
    assert!(matches!(
        bad.rewards(&chain, &mut out),
        Err(RewardError::InvalidPenalty { .. })
    ));
}

#[test]
fn defaults_and_serde() {
    assert_eq!(RewardKind::default(), RewardKind::SkillIntegrated);
    let config = RewardConfig::default();
    assert_eq!(config.kind, RewardKind::SkillIntegrated);
    assert_eq!(config.no_code_penalty, NO_CODE_PENALTY);
    assert_eq!(NO_CODE_PENALTY, -1.0);
    let chain = RewardConfig {
        kind: RewardKind::Chain,
        no_code_penalty: -2.0,
    };
    let json = serde_json::to_string(&chain).unwrap();
    assert_eq!(serde_json::from_str::<RewardConfig>(&json).unwrap(), chain);
    let partial: RewardConfig = serde_json::from_str(r#"{"kind":"OutcomeOnly"}"#).unwrap();
    assert_eq!(partial, RewardConfig::from(RewardKind::OutcomeOnly));
    let bytes = postcard::to_allocvec(&chain).unwrap();
    assert_eq!(postcard::from_bytes::<RewardConfig>(&bytes).unwrap(), chain);
}

#[test]
fn invalid_inputs_are_errors_and_leave_output_untouched() {
    let ok = TaskOutcome::new(1.0, true);
    let reward = RewardKind::SkillIntegrated;
    let check = |chain: &[TaskOutcome], out_len: usize, expected: RewardError| {
        let mut out = vec![7.0; out_len];
        assert_eq!(reward.rewards(chain, &mut out), Err(expected));
        assert!(out.iter().all(|&x| x == 7.0), "output written on error");
        assert!(!expected.to_string().is_empty());
    };
    check(
        &[ok, ok],
        1,
        RewardError::LengthMismatch { chain: 2, out: 1 },
    );
    check(&[ok], 2, RewardError::LengthMismatch { chain: 1, out: 2 });
    for score in [-0.1, 1.5, f32::INFINITY] {
        check(
            &[ok, TaskOutcome::new(score, true)],
            2,
            RewardError::InvalidScore { position: 1, score },
        );
    }
    let mut out = [0.0; 1];
    assert!(matches!(
        reward.rewards(&[TaskOutcome::new(f32::NAN, true)], &mut out),
        Err(RewardError::InvalidScore { position: 0, .. })
    ));
    // A task cannot use its own skills or a later task's.
    check(
        &[ok.using_skill_from(0), ok],
        2,
        RewardError::InvalidSkillSource {
            position: 0,
            source: 0,
        },
    );
    check(
        &[ok, ok.using_skill_from(0).using_skill_from(2), ok],
        3,
        RewardError::InvalidSkillSource {
            position: 1,
            source: 2,
        },
    );
    check(
        &[ok; MAX_CHAIN_LEN + 1],
        MAX_CHAIN_LEN + 1,
        RewardError::ChainTooLong {
            len: MAX_CHAIN_LEN + 1,
        },
    );
}

#[test]
fn longest_chain_reaches_the_last_bit() {
    let mut chain = [TaskOutcome::new(1.0, true); MAX_CHAIN_LEN];
    chain[MAX_CHAIN_LEN - 1] = chain[MAX_CHAIN_LEN - 1].using_skill_from(MAX_CHAIN_LEN - 2);
    let out = rewards(RewardKind::SkillIntegrated, &chain);
    assert_eq!(out[MAX_CHAIN_LEN - 2], 2.0);
    assert_eq!(out[MAX_CHAIN_LEN - 1], 2.0);
    assert!(out[..MAX_CHAIN_LEN - 2].iter().all(|&r| r == 1.0));
    assert!(chain[MAX_CHAIN_LEN - 1].used_skill_from(MAX_CHAIN_LEN - 2));
    assert!(!chain[MAX_CHAIN_LEN - 1].used_skill_from(MAX_CHAIN_LEN));
}
