//! Run configuration: one TOML file whose sections configure each stage of the
//! pipeline (expert data, tokenizer, model, optimizer, SFT, evaluation, RL, the experiment). Every field
//! has a default, and `sage config` writes them all out; a file only needs
//! the fields it changes. Unknown fields are errors, so a typo never goes unnoticed.

mod field_docs;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use sage_envs::scenarios::Split;
use sage_transformer::ModelConfig;

use crate::backend::{Backend, Precision};
use crate::data::ExpertDataConfig;
use crate::environments::EnvSettings;
use crate::eval::EvalConfig;
use crate::experiment::ExperimentConfig;
use crate::optim::{AdamWConfig, LrSchedule};
use crate::rl::RlConfig;
use crate::rollout::RolloutConfig;
use crate::sampling::DEFAULT_HELD_TOKENS;
use crate::sft::SftConfig;
use crate::text;
use crate::tokenizer::TrainConfig;

/// The whole configuration of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Where the run writes, which backend it uses, seeds and checkpoints.
    pub run: RunSection,
    /// The expert data SFT trains on.
    pub data: ExpertDataConfig,
    /// The tokenizer trained for a model built from scratch.
    pub tokenizer: TokenizerSection,
    /// The model built from scratch (ignored when starting from a checkpoint).
    pub model: ModelConfig,
    /// AdamW and its learning-rate schedule. A `warmup_cosine` schedule with
    /// `total_steps = 0` decays over the run's whole length.
    pub optimizer: AdamWConfig,
    /// Supervised fine-tuning.
    pub sft: SftConfig,
    /// Evaluation.
    pub eval: EvalConfig,
    /// SAGE reinforcement learning (`sage train`).
    pub rl: RlConfig,
    /// The paper-style comparison (`sage experiment`).
    pub experiment: ExperimentConfig,
    /// Where `sage eval` and `sage train` run episodes: the built-in world, or remote
    /// environment servers.
    pub env: EnvSettings,
}

/// Where and how a run happens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSection {
    /// The run directory: data, tokenizer, checkpoints, metrics, plots, reports.
    pub dir: PathBuf,
    /// The compute backend: `cpu`, `cuda` or `wgpu` (compiled in by cargo feature).
    #[serde(with = "text")]
    pub backend: Backend,
    /// The arithmetic of the GEMMs and training attention: `f32`, or `bf16` (tensor
    /// cores; `backend = "cuda"` only).
    #[serde(with = "text")]
    pub precision: Precision,
    /// Seed of model initialisation.
    pub seed: u64,
    /// Save a checkpoint every this many optimizer steps (0: only at the end).
    pub checkpoint_every: u64,
    /// Checkpoints kept (the newest ones); at least 1.
    pub keep_checkpoints: usize,
    /// Token budget of one packed forward/backward pass (bounds activation memory).
    pub max_batch_tokens: usize,
    /// Tokens of KV cache a policy holds between generations, so that an agent's next
    /// turn prefills only its new tokens and prefixes that several prompts share are
    /// prefilled once (0: none, every prompt is prefilled whole).
    pub held_kv_tokens: usize,
}

impl Default for RunSection {
    fn default() -> RunSection {
        RunSection {
            dir: PathBuf::from("runs/demo"),
            backend: Backend::Cpu,
            precision: Precision::F32,
            seed: 0,
            checkpoint_every: 100,
            keep_checkpoints: 2,
            max_batch_tokens: 8192,
            held_kv_tokens: DEFAULT_HELD_TOKENS,
        }
    }
}

/// Tokenizer training settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenizerSection {
    /// Vocabulary size, special and byte tokens included.
    pub vocab_size: usize,
    /// Least frequency of a merged pair.
    pub min_frequency: u64,
}

impl Default for TokenizerSection {
    fn default() -> TokenizerSection {
        TokenizerSection {
            vocab_size: 4096,
            min_frequency: 2,
        }
    }
}

impl TokenizerSection {
    /// The tokenizer trainer's settings.
    pub fn train_config(&self) -> TrainConfig {
        TrainConfig {
            vocab_size: self.vocab_size,
            min_frequency: self.min_frequency,
        }
    }
}

/// Seeds of expert data per template in the [copying SFT recipe](RunConfig::with_copying_sft).
pub const COPYING_SFT_SEEDS: u64 = 420;

/// Epochs of the [copying SFT recipe](RunConfig::with_copying_sft).
pub const COPYING_SFT_EPOCHS: u64 = 3;

/// The demo's model: a small Qwen2-style decoder that trains on two CPU cores in
/// minutes (about 1.6M parameters besides the embeddings).
pub fn demo_model() -> ModelConfig {
    ModelConfig {
        vocab_size: 4096,
        hidden_size: 192,
        intermediate_size: 512,
        num_hidden_layers: 4,
        num_attention_heads: 6,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 4096,
        tie_word_embeddings: true,
        qkv_bias: true,
    }
}

impl Default for RunConfig {
    /// The `sage demo` settings: the expert's trajectories over 60 seeds of every
    /// training template (no docs lookups, no mistakes, one canonical style per
    /// template, the system prompt without its rules text), a 4096-token BPE, the
    /// [`demo_model`], 7 epochs of SFT in batches of at most 2,048 tokens at a
    /// warmup-cosine learning rate, and greedy evaluation of 20 scenarios (60 tasks)
    /// of iid and of test-normal with same-scenario retrieval.
    fn default() -> RunConfig {
        RunConfig {
            run: RunSection::default(),
            data: ExpertDataConfig {
                seeds: 60,
                mistake_rate: 0.0,
                read_docs: false,
                varied_style: false,
                prompt_rules: false,
                ..ExpertDataConfig::default()
            },
            tokenizer: TokenizerSection::default(),
            model: demo_model(),
            optimizer: AdamWConfig {
                schedule: LrSchedule::WarmupCosine {
                    peak_lr: 3e-3,
                    min_lr: 3e-4,
                    warmup_steps: 20,
                    total_steps: 0,
                },
                ..AdamWConfig::default()
            },
            sft: SftConfig {
                epochs: 7,
                batch_tokens: 2048,
                ..SftConfig::default()
            },
            eval: EvalConfig {
                max_scenarios: 20,
                ..EvalConfig::default()
            },
            rl: RlConfig {
                rollout: RolloutConfig {
                    max_turns: 6,
                    max_new_tokens: 512,
                    ..RolloutConfig::default()
                },
                ..RlConfig::default()
            },
            experiment: ExperimentConfig::default(),
            env: EnvSettings::default(),
        }
    }
}

/// Tables that hold one of several kinds (an enum, written as `[path.kind]`): given in a
/// file with another kind than the default's, it replaces the default's whole, since
/// merging would leave two kinds; with the same kind its fields merge as elsewhere.
const ONE_OF_TABLES: [&str; 1] = ["optimizer.schedule"];

/// Overwrites `base` with `given`, table by table, so the fields `given` leaves out keep
/// their values in `base`; `path` names `base` (empty at the top).
fn merge_into(base: &mut toml::Table, given: toml::Table, path: &str) {
    for (key, value) in given {
        let inner_path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let other_kind = |inner: &toml::Table, value: &toml::Table| {
            ONE_OF_TABLES.contains(&inner_path.as_str())
                && value.keys().any(|kind| !inner.contains_key(kind))
        };
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(value))
                if !other_kind(inner, &value) =>
            {
                merge_into(inner, value, &inner_path)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// A configuration that cannot be used: the file, and what is wrong.
#[derive(Debug)]
pub struct ConfigFileError {
    /// The file (empty for a configuration built in code).
    pub path: PathBuf,
    /// What is wrong, naming the section and field.
    pub problem: String,
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.as_os_str().is_empty() {
            write!(f, "configuration: {}", self.problem)
        } else {
            write!(f, "{}: {}", self.path.display(), self.problem)
        }
    }
}

impl std::error::Error for ConfigFileError {}

impl RunConfig {
    /// A run small enough for a test or a CI smoke run (under a minute on two cores):
    /// one seed of expert data, a 512-token BPE, a two-layer model of width 64 trained
    /// for 3 epochs, an evaluation of the first 4 scenarios of each split with short
    /// episodes, 2 RL steps of 2 chains x 2 rollouts, and an experiment of 2 seeds.
    pub fn tiny(dir: impl Into<PathBuf>) -> RunConfig {
        let mut config = RunConfig::default();
        config.run.dir = dir.into();
        config.run.checkpoint_every = 0;
        config.data.seeds = 1;
        config.tokenizer.vocab_size = 512;
        config.model = ModelConfig {
            vocab_size: 512,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            max_position_embeddings: 4096,
            ..demo_model()
        };
        config.optimizer.schedule = LrSchedule::WarmupCosine {
            peak_lr: 3e-3,
            min_lr: 3e-4,
            warmup_steps: 2,
            total_steps: 0,
        };
        config.sft.epochs = 3;
        config.sft.batch_tokens = 4096;
        config.eval.max_scenarios = 4;
        config.eval.rollout.max_turns = 3;
        config.eval.rollout.max_new_tokens = 96;
        config.rl.steps = 2;
        config.rl.chains_per_step = 2;
        config.rl.rollouts = 2;
        config.rl.scenario_seeds = 1;
        config.rl.rollout.max_turns = 2;
        config.rl.rollout.max_new_tokens = 64;
        config.experiment.seeds = 2;
        config
    }

    /// The default `sage experiment` run in `dir`: every arm over 3 seeds (see
    /// `docs/results.md`): the demo's model and tokenizer trained with the
    /// [copying SFT recipe](RunConfig::with_copying_sft) (per data mode, shared by the
    /// seeds), reuse calls that bind their values first (`[data] bound_reuse`), each SFT
    /// model annealed one epoch more from 3e-4 to 3e-5 (`[experiment.anneal]`), 16 RL
    /// steps of 2 chains x 4 rollouts of episodes of at most 4 turns on training
    /// scenarios the SFT data did not hold, and the
    /// [large evaluation](RunConfig::with_large_eval). Turns may take 512 new tokens:
    /// the expert's longest skill definition is about 410. Both SFT models and both
    /// anneals take the same optimizer steps (`[experiment] equal_sft_steps`): the
    /// plain-code model's, whose answers are longer, so neither start gets more updates
    /// than the other. The SFT stages checkpoint every 1,000 steps (5-7 minutes on two
    /// cores), which `--resume` continues.
    pub fn experiment(dir: impl Into<PathBuf>) -> RunConfig {
        let mut config = RunConfig::default().with_copying_sft().with_large_eval();
        config.run.dir = dir.into();
        config.run.checkpoint_every = 1000;
        config.data.bound_reuse = true;
        config.experiment.anneal.epochs = 1;
        config.experiment.equal_sft_steps = true;
        config.eval.rollout.max_turns = 4;
        config.eval.rollout.max_new_tokens = 512;
        config.rl.steps = 16;
        config.rl.chains_per_step = 2;
        config.rl.rollouts = 4;
        config.rl.rollout.max_turns = 4;
        config.rl.rollout.max_new_tokens = 512;
        config
    }

    /// The SFT recipe at which the demo's model copies the instruction's values (greedy
    /// `iid` 100.0 TGC with 98.3% of tasks copying every value on an H100, against the
    /// demo's 80.0 and 78.3%): seven times the demo's distinct scenarios
    /// ([`COPYING_SFT_SEEDS`] seeds of expert data) for [`COPYING_SFT_EPOCHS`] epochs in
    /// the demo's batches of 2,048 tokens, about three times the demo's SFT compute. RL
    /// then draws its scenarios after the SFT data's seeds (`[rl] scenario_seed_offset`),
    /// so its success comes from reading the instruction, not from recall.
    /// `configs/sft-copying.toml` is the same recipe for `sage demo`.
    pub fn with_copying_sft(mut self) -> RunConfig {
        self.data.seeds = COPYING_SFT_SEEDS;
        self.sft.epochs = COPYING_SFT_EPOCHS;
        self.rl.scenario_seed_offset = COPYING_SFT_SEEDS;
        self
    }

    /// An evaluation that can tell arms 2 points apart: every scenario of 20 held-out
    /// seeds of every training template in `iid` (499 scenarios, 1,497 tasks, but for
    /// template-seed pairs without a task), and every scenario of `test-normal` and
    /// `test-challenge` (35 each), each rate with its 95% interval and per template.
    pub fn with_large_eval(mut self) -> RunConfig {
        self.eval.iid_seeds = 20;
        self.eval.max_scenarios = 0;
        self.eval.splits = vec![Split::Iid, Split::TestNormal, Split::TestChallenge];
        self
    }

    /// Reads a TOML file; missing fields take their defaults, then the whole is
    /// checked.
    pub fn from_file(path: &Path) -> Result<RunConfig, ConfigFileError> {
        let error = |problem: String| ConfigFileError {
            path: path.to_owned(),
            problem,
        };
        let text = fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        let config = RunConfig::from_toml(&text).map_err(|e| error(e.problem))?;
        Ok(config)
    }

    /// Parses TOML text and checks it. A field the text leaves out keeps its value in
    /// [`RunConfig::default`], also inside a section the text does give.
    pub fn from_toml(text: &str) -> Result<RunConfig, ConfigFileError> {
        let config = RunConfig::from_toml_unchecked(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and checks a TOML file whose fields change `base` (rather than the
    /// defaults): `sage train --tiny --config F` is the tiny run with F's changes.
    pub fn from_file_over(path: &Path, base: &RunConfig) -> Result<RunConfig, ConfigFileError> {
        let error = |problem: String| ConfigFileError {
            path: path.to_owned(),
            problem,
        };
        let text = fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        let config = RunConfig::over(&text, base).map_err(|e| error(e.problem))?;
        config.validate().map_err(|e| error(e.problem))?;
        Ok(config)
    }

    /// Parses TOML text over the defaults as [`RunConfig::from_toml`] does, without
    /// checking the values: for settings a run recorded, which leave some out.
    pub(crate) fn from_toml_unchecked(text: &str) -> Result<RunConfig, ConfigFileError> {
        RunConfig::over(text, &RunConfig::default())
    }

    /// TOML text's fields over `base`, unchecked.
    fn over(text: &str, base: &RunConfig) -> Result<RunConfig, ConfigFileError> {
        let problem = |problem: String| ConfigFileError {
            path: PathBuf::new(),
            problem,
        };
        let given: toml::Table = toml::from_str(text).map_err(|e| problem(e.to_string()))?;
        let mut merged = toml::Table::try_from(base.clone()).map_err(|e| problem(e.to_string()))?;
        merge_into(&mut merged, given, "");
        RunConfig::deserialize(merged).map_err(|e| problem(e.to_string()))
    }

    /// The configuration as TOML, every field written out.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
    }

    /// [`RunConfig::to_toml`] with a comment line above each setting saying what it
    /// sets: what `sage config` prints, and a file `--config` reads back as it is.
    pub fn to_commented_toml(&self) -> String {
        field_docs::commented(&self.to_toml())
    }

    /// Checks every section; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ConfigFileError> {
        let bad = |problem: String| {
            Err(ConfigFileError {
                path: PathBuf::new(),
                problem,
            })
        };
        if let Err(e) = self.model.validate() {
            return bad(format!("[model]: {e}"));
        }
        if let Err(e) = self.optimizer.validate_ignoring_auto_length() {
            return bad(format!("[optimizer]: {e}"));
        }
        if let Err(e) = self.tokenizer.train_config().validate() {
            return bad(format!("[tokenizer]: {e}"));
        }
        if let Err(e) = self.data.validate() {
            return bad(format!("[data]: {e}"));
        }
        if self.eval.rollout.max_episode_tokens > self.model.max_position_embeddings {
            return bad(format!(
                "[eval.rollout] max_episode_tokens ({}) exceeds [model] max_position_embeddings ({})",
                self.eval.rollout.max_episode_tokens, self.model.max_position_embeddings
            ));
        }
        if let Err(e) = self.rl.validate() {
            return bad(format!("[rl]: {e}"));
        }
        if self.rl.rollout.max_episode_tokens > self.model.max_position_embeddings {
            return bad(format!(
                "[rl.rollout] max_episode_tokens ({}) exceeds [model] max_position_embeddings ({})",
                self.rl.rollout.max_episode_tokens, self.model.max_position_embeddings
            ));
        }
        if let Err(e) = self.experiment.validate() {
            return bad(format!("[experiment]: {e}"));
        }
        for (section, lora) in [("sft.lora", &self.sft.lora), ("rl.lora", &self.rl.lora)] {
            if let Err(e) = lora.config() {
                return bad(format!("[{section}]: {e}"));
            }
        }
        if self.sft.batch_tokens == 0 {
            return bad("[sft] batch_tokens must be at least 1".into());
        }
        if self.sft.batch_tokens > self.run.max_batch_tokens {
            return bad(format!(
                "[sft] batch_tokens ({}) does not fit [run] max_batch_tokens ({}), the token \
                 budget of one forward/backward pass: raise max_batch_tokens to at least \
                 batch_tokens, or lower batch_tokens (which changes the SFT recipe)",
                self.sft.batch_tokens, self.run.max_batch_tokens
            ));
        }
        if self.eval.iid_seeds == 0 {
            return bad("[eval] iid_seeds must be at least 1".into());
        }
        if self.run.keep_checkpoints == 0 {
            return bad("[run] keep_checkpoints must be at least 1".into());
        }
        if self.run.max_batch_tokens == 0 {
            return bad("[run] max_batch_tokens must be at least 1".into());
        }
        if !self.run.backend.is_compiled() {
            let compiled: Vec<&str> = Backend::compiled().iter().map(|b| b.name()).collect();
            return bad(format!(
                "[run] backend {:?} is not compiled into this binary (compiled: {}; \
                 others need `--features cuda` or `--features wgpu`)",
                self.run.backend.name(),
                compiled.join(", ")
            ));
        }
        if self.run.precision == Precision::Bf16 && self.run.backend == Backend::Wgpu {
            return bad(
                "[run] precision \"bf16\" needs backend \"cuda\" or \"cpu\" (the wgpu backend \
                 computes in f32)"
                    .into(),
            );
        }
        Ok(())
    }
}
