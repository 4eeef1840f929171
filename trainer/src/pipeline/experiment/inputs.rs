//! What an arm's models were trained from, as digests: the run's tokenizer and the
//! expert data of the arm's SFT mode. Each row of `experiment.json` carries them, and
//! `sage tables` compares them across the rows it joins, so that rows of runs that
//! trained another tokenizer or on other data are not tabled together unnoticed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ArmRun;
use crate::pipeline::{failed, PipelineError};
use crate::tokenizer::Tokenizer;

/// Hex characters of a digest kept in a row: 64 bits of BLAKE3, enough to tell apart
/// the few tokenizers and data sets an experiment's runs could have used.
const DIGEST_CHARS: usize = 16;

/// Digests of the inputs an arm's models were trained from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmInputs {
    /// Digest of the run's tokenizer, as `tokenizer.json` writes it.
    pub tokenizer: String,
    /// The expert data mode of the arm's SFT (`skills`, `direct`, `mixed`).
    pub sft_mode: String,
    /// Digest of that mode's training data (`sft-MODE/data/train.jsonl`); `None` when
    /// the run directory no longer holds it (a copy made without its data).
    pub sft_data: Option<String>,
}

impl ArmInputs {
    /// The inputs of an arm on `mode`'s data: `tokenizer`'s digest, and the digest of
    /// `train` when that file is there. A file there that cannot be read is an error.
    pub fn of(tokenizer: &Tokenizer, mode: &str, train: &Path) -> Result<ArmInputs, PipelineError> {
        let json = tokenizer.to_json().map_err(failed("tokenizer"))?;
        let sft_data = match std::fs::read(train) {
            Ok(bytes) => Some(digest(&bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                let message = format!("{}: {e}", train.display());
                return Err(PipelineError::new("experiment", message));
            }
        };
        Ok(ArmInputs {
            tokenizer: digest(json.as_bytes()),
            sft_mode: mode.to_owned(),
            sft_data,
        })
    }
}

/// The first [`DIGEST_CHARS`] hex characters of the BLAKE3 digest of `bytes`.
fn digest(bytes: &[u8]) -> String {
    let mut hex = blake3::hash(bytes).to_hex().to_string();
    hex.truncate(DIGEST_CHARS);
    hex
}

/// Where joined rows differ in their inputs, one line each: the tokenizers, when the
/// rows hold more than one, and per SFT mode its data sets, when that mode's rows hold
/// more than one; each digest named with the files and counts of its rows. Then, when
/// some rows carry no digests (written before rows kept them), a line naming their
/// files, as those rows go unchecked. Empty when every row carries digests and they
/// agree.
pub fn input_mismatches(rows: &[(&Path, &ArmRun)]) -> Vec<String> {
    let mut lines = Vec::new();
    let tokenizers = rows_by(rows, |inputs| Some(inputs.tokenizer.clone()));
    if tokenizers.len() > 1 {
        lines.push(format!(
            "warning: the rows were trained with {} tokenizers: {}",
            tokenizers.len(),
            describe(&tokenizers)
        ));
    }
    let mut modes: Vec<&str> = rows
        .iter()
        .filter_map(|(_, run)| run.inputs.as_ref().map(|i| i.sft_mode.as_str()))
        .collect();
    modes.sort_unstable();
    modes.dedup();
    for mode in modes {
        let data = rows_by(rows, |inputs| {
            (inputs.sft_mode == mode)
                .then(|| inputs.sft_data.clone())
                .flatten()
        });
        if data.len() > 1 {
            lines.push(format!(
                "warning: the rows on {mode} data were trained on {} data sets: {}",
                data.len(),
                describe(&data)
            ));
        }
    }
    let mut unchecked: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for (path, _) in rows.iter().filter(|(_, run)| run.inputs.is_none()) {
        *unchecked.entry(path.to_path_buf()).or_default() += 1;
    }
    if !unchecked.is_empty() {
        lines.push(format!(
            "note: rows without digests of their tokenizer and data (written before rows \
             kept them) are not compared: {}",
            counts(&unchecked)
        ));
    }
    lines
}

/// The rows' files and counts under each value `key` gives their inputs (rows without
/// inputs, or for which `key` gives `None`, left out).
fn rows_by(
    rows: &[(&Path, &ArmRun)],
    key: impl Fn(&ArmInputs) -> Option<String>,
) -> BTreeMap<String, BTreeMap<PathBuf, usize>> {
    let mut by: BTreeMap<String, BTreeMap<PathBuf, usize>> = BTreeMap::new();
    for (path, run) in rows {
        if let Some(value) = run.inputs.as_ref().and_then(&key) {
            *by.entry(value)
                .or_default()
                .entry(path.to_path_buf())
                .or_default() += 1;
        }
    }
    by
}

/// "DIGEST (file: N rows, ...); DIGEST (...)".
fn describe(by: &BTreeMap<String, BTreeMap<PathBuf, usize>>) -> String {
    let parts: Vec<String> = by
        .iter()
        .map(|(digest, files)| format!("{digest} ({})", counts(files)))
        .collect();
    parts.join("; ")
}

/// "file: N rows, file: 1 row".
fn counts(files: &BTreeMap<PathBuf, usize>) -> String {
    let parts: Vec<String> = files
        .iter()
        .map(|(path, n)| {
            let rows = if *n == 1 { "row" } else { "rows" };
            format!("{}: {n} {rows}", path.display())
        })
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::TrainConfig;

    fn tokenizer(text: &str) -> Tokenizer {
        let config = TrainConfig {
            vocab_size: TrainConfig::MIN_VOCAB_SIZE + 8,
            min_frequency: 1,
        };
        Tokenizer::train([text; 4].iter(), &config).unwrap()
    }

    fn row(arm: &str, seed: u64, inputs: Option<(&str, &str, &str)>) -> ArmRun {
        ArmRun {
            arm: arm.to_owned(),
            seed,
            metrics: Vec::new(),
            rl_seconds: 0.0,
            control: None,
            inputs: inputs.map(|(tokenizer, mode, data)| ArmInputs {
                tokenizer: tokenizer.to_owned(),
                sft_mode: mode.to_owned(),
                sft_data: Some(data.to_owned()),
            }),
        }
    }

    #[test]
    fn the_digests_follow_the_tokenizer_and_the_data_file() {
        let dir = std::env::temp_dir().join(format!("sage-arm-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let train = dir.join("train.jsonl");
        std::fs::write(&train, "{\"a\": 1}\n").unwrap();
        let first = tokenizer("send the mail to ana and to bob");
        let of = |t: &Tokenizer| ArmInputs::of(t, "skills", &train).unwrap();
        let inputs = of(&first);
        assert_eq!(inputs.tokenizer.len(), DIGEST_CHARS);
        assert_eq!(inputs, of(&first.clone()));
        let other = tokenizer("pay the invoice of the shop twice");
        assert_ne!(of(&other).tokenizer, inputs.tokenizer);
        assert_eq!(of(&other).sft_data, inputs.sft_data);
        std::fs::write(&train, "{\"a\": 2}\n").unwrap();
        assert_ne!(of(&first).sft_data, inputs.sft_data);
        std::fs::remove_file(&train).unwrap();
        assert_eq!(of(&first).sft_data, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn joined_rows_of_other_tokenizers_or_data_are_named() {
        let (a, b) = (Path::new("a.json"), Path::new("b.json"));
        let same = [
            (a, row("sft-only", 0, Some(("t1", "skills", "s1")))),
            (a, row("grpo-no-skills", 0, Some(("t1", "direct", "d1")))),
            (b, row("sft-only", 1, Some(("t1", "skills", "s1")))),
        ];
        let check = |rows: &[(&'static Path, ArmRun)]| {
            let joined: Vec<(&Path, &ArmRun)> = rows.iter().map(|(p, r)| (*p, r)).collect();
            input_mismatches(&joined)
        };
        assert!(check(&same).is_empty(), "{:?}", check(&same));

        let mut other_tokenizer = same.to_vec();
        other_tokenizer.push((b, row("grpo-no-skills", 1, Some(("t2", "direct", "d1")))));
        let lines = check(&other_tokenizer);
        assert_eq!(
            lines,
            [
                "warning: the rows were trained with 2 tokenizers: t1 (a.json: 2 rows, \
              b.json: 1 row); t2 (b.json: 1 row)"
            ]
        );

        let mut other_data = same.to_vec();
        other_data.push((b, row("grpo-no-skills", 1, Some(("t1", "direct", "d2")))));
        let lines = check(&other_data);
        assert_eq!(
            lines,
            [
                "warning: the rows on direct data were trained on 2 data sets: d1 (a.json: 1 \
              row); d2 (b.json: 1 row)"
            ]
        );

        let mut unchecked = same.to_vec();
        unchecked.push((b, row("sage", 1, None)));
        let lines = check(&unchecked);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("note: ") && lines[0].ends_with("b.json: 1 row"));
    }
}
