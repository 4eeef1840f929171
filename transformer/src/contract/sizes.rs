//! The checked sizes a [`Device`](crate::device::Device) receives: one type per kind of
//! call, built by the one implementation of [`Kernels`](crate::Kernels) after it has
//! checked every operand's length against them. A device trusts these sizes and adds
//! only its own limits.

use alloc::format;

use super::{expect_len, rows_of, AttentionDims, ContractError};
use crate::kernels::{AdamWStep, AttentionShape, Tensor};

/// `rows` rows of `width` elements: the sizes of a row-wise call (RMSNorm, bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Rows (N).
    pub rows: usize,
    /// Elements of one row (D or C).
    pub width: usize,
}

impl Rows {
    /// The rows of `operand` (`len` elements) of width `width`; fails unless they are whole.
    pub fn of(op: &str, operand: &str, len: usize, width: usize) -> Result<Rows, ContractError> {
        let rows = rows_of(op, operand, len, width)?;
        Ok(Rows { rows, width })
    }
}

/// The sizes of an embedding call: `tokens[N]` index rows of `table[V, D]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingSizes {
    /// Tokens (N).
    pub rows: usize,
    /// Width of a table row (D).
    pub dim: usize,
    /// Rows of the table (V); a token must be below it (the device checks the ids).
    pub vocab: usize,
}

impl EmbeddingSizes {
    /// Checks `table` (whole rows of `dim`) and the `[N, D]` operand `rows_operand`.
    pub fn new(
        op: &str,
        table: &Tensor,
        rows_operand: (&str, &Tensor),
        tokens: usize,
        dim: usize,
    ) -> Result<EmbeddingSizes, ContractError> {
        let vocab = rows_of(op, "table", table.len, dim)?;
        let (name, operand) = rows_operand;
        expect_len(op, name, operand.len, tokens * dim)?;
        Ok(EmbeddingSizes {
            rows: tokens,
            dim,
            vocab,
        })
    }
}

/// The sizes of a rotary-embedding call on `x[N, heads * head_dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeSizes {
    /// Rows (N), one position each.
    pub rows: usize,
    /// Heads per row.
    pub heads: usize,
    /// Width of one head (even: its halves are rotated against each other).
    pub head_dim: usize,
}

impl RopeSizes {
    /// Checks an even head width, whole rows of `x` and one position per row.
    pub fn new(
        op: &str,
        x: &Tensor,
        positions: usize,
        heads: usize,
        head_dim: usize,
    ) -> Result<RopeSizes, ContractError> {
        if head_dim % 2 != 0 {
            return Err(ContractError::BadArgument(format!(
                "{op}: head_dim {head_dim} is odd"
            )));
        }
        let rows = rows_of(op, "x", x.len, heads * head_dim)?;
        expect_len(op, "positions", positions, rows)?;
        Ok(RopeSizes {
            rows,
            heads,
            head_dim,
        })
    }
}

/// Tokens in a packed batch (the last start) after checking that `seq_starts` begins at
/// 0 and never decreases.
pub fn packed_tokens(op: &str, seq_starts: &[u32]) -> Result<usize, ContractError> {
    let ordered = seq_starts.windows(2).all(|w| w[0] <= w[1]);
    match (seq_starts.first(), seq_starts.last()) {
        (Some(0), Some(&last)) if ordered => Ok(last as usize),
        _ => Err(ContractError::Sequences(format!(
            "{op}: seq_starts must start at 0 and never decrease, got {seq_starts:?}"
        ))),
    }
}

/// The sizes of a training attention call: N packed tokens and the heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionSizes {
    /// Tokens of the packed batch (N), the last of `seq_starts`.
    pub tokens: usize,
    /// The heads, checked.
    pub dims: AttentionDims,
}

impl AttentionSizes {
    /// Checks `shape` and `seq_starts`, then each `[N, H*hd]` operand of `queries`, each
    /// `[N, KV*hd]` operand of `keys` and each `[N, H]` operand of `per_head`.
    pub fn new(
        op: &str,
        seq_starts: &[u32],
        shape: AttentionShape,
        queries: &[(&str, &Tensor)],
        keys: &[(&str, &Tensor)],
        per_head: &[(&str, &Tensor)],
    ) -> Result<AttentionSizes, ContractError> {
        let dims = AttentionDims::new(op, shape)?;
        let tokens = packed_tokens(op, seq_starts)?;
        for (widths, width) in [
            (queries, dims.q_width),
            (keys, dims.kv_width),
            (per_head, dims.heads),
        ] {
            for (name, tensor) in widths {
                expect_len(op, name, tensor.len, tokens * width)?;
            }
        }
        Ok(AttentionSizes { tokens, dims })
    }
}

/// The sizes of a KV-cache call: B sequences, caches `[B, T, width]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSizes {
    /// Sequences (B), one length each.
    pub batch: usize,
    /// Rows of each sequence's cache (T).
    pub capacity: usize,
    /// Elements of one cached row (KV * hd).
    pub width: usize,
}

impl CacheSizes {
    /// Checks both caches against `[B, T, width]` with B = `lengths.len()`, and that
    /// every length is in `allowed` (which names the rule in its error).
    pub fn new(
        op: &str,
        caches: [&Tensor; 2],
        lengths: &[u32],
        capacity: usize,
        width: usize,
        allowed: LengthRule,
    ) -> Result<CacheSizes, ContractError> {
        let batch = lengths.len();
        for (name, cache) in ["k_cache", "v_cache"].into_iter().zip(caches) {
            expect_len(op, name, cache.len, batch * capacity * width)?;
        }
        let bad = lengths.iter().enumerate().find(|(_, &length)| {
            let length = length as usize;
            match allowed {
                LengthRule::Filled => length >= capacity,
                LengthRule::Attended => length == 0 || length > capacity,
            }
        });
        if let Some((b, &length)) = bad {
            return Err(ContractError::Sequences(match allowed {
                LengthRule::Filled => {
                    format!("{op}: the cache of sequence {b} is full ({length} rows of {capacity})")
                }
                LengthRule::Attended => {
                    format!("{op}: sequence {b} attends to {length} rows; need 1..={capacity}")
                }
            }));
        }
        Ok(CacheSizes {
            batch,
            capacity,
            width,
        })
    }
}

impl CacheSizes {
    /// Checks both caches against `[B, T, width]` with B whatever their length holds
    /// (at least 1), and the rows of a call that attends to them: one sequence (below B)
    /// and one attended count (in `1..=T`) per query row.
    pub fn for_rows(
        op: &str,
        caches: [&Tensor; 2],
        sequences: &[u32],
        attended: &[u32],
        capacity: usize,
        width: usize,
    ) -> Result<CacheSizes, ContractError> {
        expect_len(op, "attended", attended.len(), sequences.len())?;
        let span = capacity * width;
        let batch = caches[0].len.checked_div(span).unwrap_or(0);
        if batch == 0 || batch * span != caches[0].len {
            return Err(ContractError::Sequences(format!(
                "{op}: k_cache holds {} elements, not a whole number (at least 1) of sequences \
                 of {capacity} rows of {width}",
                caches[0].len
            )));
        }
        expect_len(op, "v_cache", caches[1].len, caches[0].len)?;
        if let Some(r) = (0..sequences.len()).find(|&r| sequences[r] as usize >= batch) {
            return Err(ContractError::Sequences(format!(
                "{op}: query row {r} reads sequence {} of a cache of {batch}",
                sequences[r]
            )));
        }
        if let Some(r) = (0..attended.len()).find(|&r| {
            let rows = attended[r] as usize;
            rows == 0 || rows > capacity
        }) {
            return Err(ContractError::Sequences(format!(
                "{op}: query row {r} attends to {} rows; need 1..={capacity}",
                attended[r]
            )));
        }
        Ok(CacheSizes {
            batch,
            capacity,
            width,
        })
    }
}

/// What a cache length counts, and so which lengths are allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthRule {
    /// Rows already filled, before an append: each below T.
    Filled,
    /// Rows a decoding query attends to: each in `1..=T`.
    Attended,
}

/// The sizes of one decoding step: the heads and the caches of its B sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeSizes {
    /// The heads, checked.
    pub dims: AttentionDims,
    /// The caches (their row width is `dims.kv_width`).
    pub cache: CacheSizes,
}

/// The scalars of one AdamW step as a kernel uses them: the bias corrections folded on
/// the host in f64, then rounded to f32, so that every backend applies the same numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWScalars {
    /// First-moment decay (b1).
    pub beta1: f32,
    /// Second-moment decay (b2).
    pub beta2: f32,
    /// Added to the root of the (bias-corrected) second moment.
    pub eps: f32,
    /// lr / (1 - b1^t).
    pub step_size: f32,
    /// sqrt(1 - b2^t).
    pub correction2_sqrt: f32,
    /// 1 - lr * weight_decay, the decoupled decay factor of the parameters.
    pub decay: f32,
}

impl AdamWScalars {
    /// The scalars of `step`; fails on step 0 (steps are 1-based).
    pub fn new(step: AdamWStep) -> Result<AdamWScalars, ContractError> {
        if step.step == 0 {
            return Err(ContractError::BadArgument(
                "adamw: `step` is 1-based, got 0".into(),
            ));
        }
        let t = f64::from(step.step);
        let correction1 = 1.0 - libm::pow(f64::from(step.beta1), t);
        let correction2_sqrt = libm::sqrt(1.0 - libm::pow(f64::from(step.beta2), t)) as f32;
        Ok(AdamWScalars {
            beta1: step.beta1,
            beta2: step.beta2,
            eps: step.eps,
            step_size: (f64::from(step.learning_rate) / correction1) as f32,
            correction2_sqrt,
            decay: 1.0 - step.learning_rate * step.weight_decay,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::BufferId;
    use alloc::string::ToString;

    fn tensor(len: usize) -> Tensor {
        Tensor::whole(BufferId(0), len)
    }

    #[test]
    fn attention_sizes_come_from_seq_starts_and_every_operand_is_checked() {
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
        };
        // 5 tokens: q rows of 32, k rows of 16, lse rows of 4.
        let (q, k, lse) = (tensor(5 * 32), tensor(5 * 16), tensor(5 * 4));
        let sizes = AttentionSizes::new(
            "attn",
            &[0, 2, 5],
            shape,
            &[("q", &q)],
            &[("k", &k)],
            &[("lse", &lse)],
        )
        .unwrap();
        assert_eq!(sizes.tokens, 5);
        assert_eq!(sizes.dims.kv_width, 16);
        let short = tensor(4 * 16);
        let error = AttentionSizes::new("attn", &[0, 5], shape, &[], &[("v", &short)], &[])
            .unwrap_err()
            .to_string();
        assert_eq!(error, "attn: `v` has 64 elements, expected 80");
        for bad in [&[][..], &[1, 5], &[0, 3, 2]] {
            assert!(matches!(
                AttentionSizes::new("attn", bad, shape, &[], &[], &[]),
                Err(ContractError::Sequences(_))
            ));
        }
    }

    #[test]
    fn cache_lengths_follow_their_rule() {
        let cache = tensor(2 * 4 * 3);
        let sizes =
            |lengths: &[u32], rule| CacheSizes::new("cache", [&cache, &cache], lengths, 4, 3, rule);
        assert!(sizes(&[0, 3], LengthRule::Filled).is_ok());
        assert!(sizes(&[0, 4], LengthRule::Filled).is_err());
        assert!(sizes(&[1, 4], LengthRule::Attended).is_ok());
        let error = sizes(&[0, 4], LengthRule::Attended).unwrap_err();
        assert_eq!(
            error,
            ContractError::Sequences("cache: sequence 0 attends to 0 rows; need 1..=4".into())
        );
        // Three lengths need caches of 3 x 4 x 3.
        assert!(matches!(
            sizes(&[1, 1, 1], LengthRule::Attended),
            Err(ContractError::Shape(_))
        ));
    }

    #[test]
    fn rope_needs_an_even_head_and_a_position_per_row() {
        let x = tensor(3 * 2 * 4);
        assert_eq!(
            RopeSizes::new("rope", &x, 3, 2, 4),
            Ok(RopeSizes {
                rows: 3,
                heads: 2,
                head_dim: 4
            })
        );
        assert!(matches!(
            RopeSizes::new("rope", &tensor(3 * 2 * 3), 3, 2, 3),
            Err(ContractError::BadArgument(_))
        ));
        assert!(RopeSizes::new("rope", &x, 2, 2, 4).is_err());
    }

    #[test]
    fn adamw_scalars_fold_the_bias_corrections() {
        let step = AdamWStep {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            step: 2,
        };
        let scalars = AdamWScalars::new(step).unwrap();
        // 1 - 0.9^2 = 0.19 and 1 - 0.999^2 = 0.001999, up to the f32 rounding of the
        // hyper-parameters: 1e-6 relative for the first, 1e-4 for sqrt(1 - b2^2), where
        // b2's rounding (1.3e-8) is amplified 1000-fold by the difference.
        let close = |got: f32, want: f64, tolerance: f64| {
            ((f64::from(got) - want) / want).abs() < tolerance
        };
        assert!(close(scalars.step_size, 1e-3 / 0.19, 1e-6));
        assert!(close(scalars.correction2_sqrt, 0.001999f64.sqrt(), 1e-4));
        assert!(close(scalars.decay, 1.0 - 1e-4, 1e-6));
        assert!(matches!(
            AdamWScalars::new(AdamWStep { step: 0, ..step }),
            Err(ContractError::BadArgument(_))
        ));
    }
}

/// Largest vocabulary [`ChoiceSizes`] accepts: token ids travel as f32, exact below 2^24.
pub const MAX_CHOICE_VOCAB: usize = 1 << 24;

/// The sizes and rule of a `choose_tokens` call: B rows of V logits, B pairs of
/// (token, log-probability), and the temperature (0: greedy).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChoiceSizes {
    /// Rows (B).
    pub rows: usize,
    /// Logits per row (V), at least 1 and at most [`MAX_CHOICE_VOCAB`].
    pub vocab: usize,
    /// Finite and not negative; 0 picks greedily.
    pub temperature: f32,
}

impl ChoiceSizes {
    /// Checks `choices` (2 per row), `logits` (whole rows of at least one logit), the
    /// temperature, and, when it is not 0, one uniform number in [0, 1) per row.
    pub fn new(
        choices: usize,
        logits: usize,
        uniforms: &[f64],
        temperature: f32,
    ) -> Result<ChoiceSizes, ContractError> {
        let op = "choose_tokens";
        if choices == 0 || choices % 2 != 0 {
            return Err(ContractError::Shape(format!(
                "{op}: choices holds {choices} elements, not 2 per row of at least one row"
            )));
        }
        let rows = choices / 2;
        if logits == 0 || logits % rows != 0 {
            return Err(ContractError::Shape(format!(
                "{op}: logits holds {logits} elements, not {rows} whole rows"
            )));
        }
        let vocab = logits / rows;
        if vocab > MAX_CHOICE_VOCAB {
            return Err(ContractError::TooLarge(format!(
                "{op}: a vocabulary of {vocab}; token ids are exact in f32 only up to \
                 {MAX_CHOICE_VOCAB}"
            )));
        }
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(ContractError::BadArgument(format!(
                "{op}: temperature {temperature} is not finite and non-negative"
            )));
        }
        if temperature > 0.0 {
            expect_len(op, "uniforms", uniforms.len(), rows)?;
            if let Some(u) = uniforms.iter().find(|u| !(0.0..1.0).contains(*u)) {
                return Err(ContractError::BadArgument(format!(
                    "{op}: uniform number {u} is outside [0, 1)"
                )));
            }
        }
        Ok(ChoiceSizes {
            rows,
            vocab,
            temperature,
        })
    }
}
