//! One line about every setting of a run configuration, printed above it by `sage
//! config` ([`RunConfig::to_commented_toml`](super::RunConfig::to_commented_toml)). A
//! test checks that every key the configuration prints has its line here.

/// `(section, key, what it sets)`; the section as its TOML header names it.
const FIELD_DOCS: &[(&str, &str, &str)] = &[
    (
        "run",
        "dir",
        "the run directory: data, checkpoints, metrics, plots, reports",
    ),
    ("run", "backend", "the compute backend: cpu, cuda or wgpu"),
    (
        "run",
        "precision",
        "f32, or bf16 GEMM operands with f32 sums (cuda: on tensor cores, training attention too; cpu: the larger products, fast with AVX-512 BF16, and decoding from bf16 copies of the weights)",
    ),
    ("run", "seed", "seed of the model's initialisation"),
    (
        "run",
        "checkpoint_every",
        "SFT saves a checkpoint every this many steps (0: at the end only; an experiment's SFT: none but at a stop)",
    ),
    (
        "run",
        "keep_checkpoints",
        "checkpoints kept, the newest ones",
    ),
    (
        "run",
        "max_batch_tokens",
        "tokens of one packed forward/backward pass (bounds activation memory)",
    ),
    (
        "run",
        "held_kv_tokens",
        "tokens of KV cache held between generations, so a next turn prefills only its new tokens and shared prefixes are prefilled once (0: off)",
    ),
    (
        "data",
        "split",
        "the split whose scenarios the expert solves for SFT data",
    ),
    (
        "data",
        "seeds",
        "scenario seeds per template: more worlds, people and values",
    ),
    (
        "data",
        "variants",
        "style variants per scenario (wordings, names, mistakes)",
    ),
    (
        "data",
        "mode",
        "skills (SAGE's format), direct (plain code) or mixed (some of each)",
    ),
    (
        "data",
        "skill_share",
        "mixed: the share of scenarios solved in skill style",
    ),
    (
        "data",
        "rewrite_share",
        "mixed: the share of reusing tasks that write the skill again",
    ),
    (
        "data",
        "bound_reuse",
        "a reusing task binds the values to the parameter names before the call",
    ),
    (
        "data",
        "mistake_rate",
        "share of scenarios whose first attempt holds a mistake fixed next turn (SFT trains on the fix only)",
    ),
    (
        "data",
        "read_docs",
        "the expert reads the API docs before writing new code",
    ),
    (
        "data",
        "varied_style",
        "scenarios differ in style (names, docstrings, wordings)",
    ),
    (
        "data",
        "prompt_rules",
        "the system prompt spells out the agent's rules (true for pretrained models)",
    ),
    (
        "tokenizer",
        "vocab_size",
        "vocabulary size of the trained BPE, special and byte tokens included",
    ),
    (
        "tokenizer",
        "min_frequency",
        "least frequency of a merged pair",
    ),
    ("model", "vocab_size", "tokens in the vocabulary (V)"),
    ("model", "hidden_size", "width of the residual stream (D)"),
    (
        "model",
        "intermediate_size",
        "width of the MLP's hidden layer (I)",
    ),
    ("model", "num_hidden_layers", "decoder layers (L)"),
    ("model", "num_attention_heads", "query heads (H)"),
    (
        "model",
        "num_key_value_heads",
        "key/value heads (KV), dividing H",
    ),
    (
        "model",
        "rope_theta",
        "base of the rotary embedding frequencies",
    ),
    (
        "model",
        "rms_norm_eps",
        "epsilon inside RMSNorm's square root",
    ),
    (
        "model",
        "max_position_embeddings",
        "longest sequence the model is meant for (bounds KV caches)",
    ),
    (
        "model",
        "tie_word_embeddings",
        "the output projection shares the input embedding table",
    ),
    (
        "model",
        "qkv_bias",
        "q, k and v projections carry a bias (true for Qwen2)",
    ),
    (
        "optimizer",
        "beta1",
        "AdamW's first-moment decay, in [0, 1)",
    ),
    (
        "optimizer",
        "beta2",
        "AdamW's second-moment decay, in [0, 1)",
    ),
    ("optimizer", "eps", "added to the root of the second moment"),
    (
        "optimizer",
        "weight_decay",
        "decoupled weight decay of matrices (not norms or biases)",
    ),
    (
        "optimizer",
        "max_grad_norm",
        "clip the gradient's global L2 norm to this value",
    ),
    (
        "optimizer.schedule.warmup_cosine",
        "peak_lr",
        "SFT's learning rate at the end of warm-up",
    ),
    (
        "optimizer.schedule.warmup_cosine",
        "min_lr",
        "the floor the cosine decay reaches at total_steps",
    ),
    (
        "optimizer.schedule.warmup_cosine",
        "warmup_steps",
        "steps of linear warm-up (0: start at the peak)",
    ),
    (
        "optimizer.schedule.warmup_cosine",
        "total_steps",
        "the step the decay ends at (0: the SFT run's length)",
    ),
    (
        "optimizer.schedule.constant",
        "lr",
        "the learning rate of every step",
    ),
    ("sft", "epochs", "passes over the training data (unless steps is set)"),
    (
        "sft",
        "steps",
        "optimizer steps of the run, epoch after epoch (0: epochs whole passes)",
    ),
    (
        "sft",
        "batch_tokens",
        "tokens of one optimizer step's batch",
    ),
    ("sft", "seed", "seed of the batch order"),
    (
        "sft",
        "loss_weighting",
        "batch: each step the mean over its agent tokens; token: every agent token alike (unclipped steps)",
    ),
    (
        "sft.lora",
        "rank",
        "LoRA: rank of the adapters trained instead of every weight (0: off)",
    ),
    (
        "sft.lora",
        "alpha",
        "LoRA: the update is (alpha / rank) B A",
    ),
    (
        "sft.lora",
        "targets",
        "LoRA: adapted projections (q_proj ... down_proj)",
    ),
    (
        "rl.lora",
        "rank",
        "LoRA: rank of the adapters trained instead of every weight (0: off)",
    ),
    ("rl.lora", "alpha", "LoRA: the update is (alpha / rank) B A"),
    (
        "rl.lora",
        "targets",
        "LoRA: adapted projections (q_proj ... down_proj)",
    ),
    (
        "eval",
        "splits",
        "splits to evaluate: iid, test-normal, test-challenge, dev, train",
    ),
    (
        "eval",
        "modes",
        "skill retrieval modes: same-scenario, query-ngram, none, ...",
    ),
    (
        "eval",
        "max_scenarios",
        "scenarios evaluated per split, in catalog order (0: all)",
    ),
    (
        "eval",
        "iid_seeds",
        "held-out seeds of every training template in iid",
    ),
    ("eval", "top_k", "skills shown per task"),
    (
        "eval",
        "prompt",
        "skills (SAGE's prompt) or direct (the no-skill baseline's)",
    ),
    (
        "eval",
        "seed",
        "seed of sampling (when the temperature is above 0)",
    ),
    (
        "eval.rollout",
        "max_turns",
        "agent turns an episode may take",
    ),
    (
        "eval.rollout",
        "max_new_tokens",
        "new tokens per agent turn",
    ),
    (
        "eval.rollout",
        "max_episode_tokens",
        "tokens an episode's chat may hold",
    ),
    (
        "eval.rollout",
        "temperature",
        "sampling temperature (0: greedy)",
    ),
    ("eval.rollout", "top_k", "top-k filter (0: off)"),
    ("eval.rollout", "top_p", "top-p filter (1: off)"),
    (
        "eval.rollout",
        "batch_tokens",
        "tokens of one generation batch (prompts plus new tokens)",
    ),
    (
        "rl",
        "chain_len",
        "tasks per chain (K): consecutive tasks of one scenario",
    ),
    ("rl", "rollouts", "rollouts per chain (G)"),
    ("rl", "chains_per_step", "chains per step"),
    ("rl", "steps", "optimizer steps of the run"),
    (
        "rl",
        "checkpoint_every",
        "sage train saves a checkpoint every this many steps (0: at the end)",
    ),
    (
        "rl",
        "learning_rate",
        "RL's learning rate, constant after warmup_steps",
    ),
    (
        "rl",
        "warmup_steps",
        "steps of linear learning-rate warm-up (0: none)",
    ),
    (
        "rl",
        "minibatches",
        "optimizer steps per batch of rollouts (1: strictly on-policy)",
    ),
    (
        "rl",
        "apply_updates",
        "false runs the update-off control, the baseline of every RL result",
    ),
    (
        "rl",
        "scenario_seeds",
        "seeds per training template that give the training chains",
    ),
    (
        "rl",
        "scenario_seed_offset",
        "training seeds skipped first (at least [data] seeds: unseen worlds)",
    ),
    (
        "rl",
        "templates",
        "training templates the chains come from (empty: all)",
    ),
    (
        "rl",
        "prompt",
        "skills (SAGE) or direct (the no-skill baseline)",
    ),
    (
        "rl",
        "dynamic_sampling",
        "chains the update trains on: off, drop (informative only), resample",
    ),
    (
        "rl",
        "max_extra_chains",
        "most chains a resample step draws beyond chains_per_step",
    ),
    (
        "rl",
        "max_failed_in_row",
        "non-finite updates in a row that stop the run",
    ),
    ("rl", "seed", "seed of the chain order and of sampling"),
    (
        "rl.reward",
        "kind",
        "SkillIntegrated (SAGE), OutcomeOnly or Chain",
    ),
    (
        "rl.reward",
        "no_code_penalty",
        "the reward of a task that ended without code",
    ),
    ("rl.grpo", "clip_eps_low", "lower clip range of the ratio"),
    ("rl.grpo", "clip_eps_high", "upper clip range of the ratio"),
    (
        "rl.grpo",
        "kl_coef",
        "weight of the k3 KL term to the frozen SFT model (0: none)",
    ),
    (
        "rl.grpo",
        "aggregation",
        "how token losses are combined into the loss",
    ),
    (
        "rl.grpo",
        "normalize_std",
        "divide advantages by the group's standard deviation",
    ),
    (
        "rl.grpo",
        "std_eps",
        "added to the standard deviation before dividing",
    ),
    (
        "rl.grpo",
        "max_log_ratio",
        "log-ratios are clamped to this before exp",
    ),
    (
        "rl.grpo",
        "norm_length",
        "the constant length of the SeqMeanTokenSumNorm aggregation",
    ),
    (
        "rl.grpo",
        "negative_weight",
        "weight of negative advantages, in [0, 1]",
    ),
    ("rl.rollout", "max_turns", "agent turns an episode may take"),
    ("rl.rollout", "max_new_tokens", "new tokens per agent turn"),
    (
        "rl.rollout",
        "max_episode_tokens",
        "tokens an episode's chat may hold",
    ),
    (
        "rl.rollout",
        "temperature",
        "sampling temperature (1: the policy's own distribution)",
    ),
    ("rl.rollout", "top_k", "top-k filter (0: off)"),
    ("rl.rollout", "top_p", "top-p filter (1: off)"),
    (
        "rl.rollout",
        "batch_tokens",
        "tokens of one generation batch (prompts plus new tokens)",
    ),
    (
        "experiment",
        "seeds",
        "seeds per arm (chain order and sampling; SFT models shared unless sft_per_seed)",
    ),
    (
        "experiment",
        "sft_per_seed",
        "train the SFT models once per seed, each seed's arms from its own",
    ),
    (
        "experiment",
        "arms",
        "the arms: sft-only, sft-direct, grpo-no-skills, sage, ...",
    ),
    (
        "experiment",
        "equal_sft_steps",
        "every SFT model takes the steps of the mode with the most data",
    ),
    (
        "experiment",
        "controls",
        "run every RL arm's update-off control beside it",
    ),
    (
        "experiment",
        "skill_data",
        "the skill arms' SFT data: skills or mixed",
    ),
    (
        "experiment",
        "init",
        "a model directory both SFT models start from (empty: fresh models of [model])",
    ),
    (
        "experiment.anneal",
        "epochs",
        "more SFT epochs from each SFT model, which the arms start from (0: none)",
    ),
    (
        "experiment.anneal",
        "peak_lr",
        "the anneal's learning rate after its warmup (a fresh AdamW)",
    ),
    (
        "experiment.anneal",
        "min_lr",
        "the anneal's learning rate at its last step (cosine decay)",
    ),
    (
        "experiment.anneal",
        "warmup_steps",
        "steps of the anneal's linear warmup",
    ),
    (
        "env",
        "kind",
        "where sage eval and sage train run episodes: builtin, or remote servers",
    ),
    (
        "env",
        "urls",
        "remote: running servers' URLs, one per concurrent episode",
    ),
    (
        "env",
        "command",
        "remote without urls: starts one server, {port} replaced (run by sh -c)",
    ),
    ("env", "servers", "remote: servers started from command"),
    (
        "env",
        "tasks",
        "remote: a directory of <split>.txt task-id files (empty: the servers list them)",
    ),
    ("env", "call_timeout_s", "remote: seconds one call may take"),
    (
        "env",
        "episode_timeout_s",
        "remote: seconds one episode may take",
    ),
    (
        "env",
        "retries",
        "remote: tries again of a repeatable call the server did not answer",
    ),
    ("env", "max_reply_bytes", "remote: bytes one reply may hold"),
    (
        "env",
        "startup_timeout_s",
        "remote: seconds a started server may take to listen",
    ),
    (
        "env",
        "experiment_name",
        "remote: the experiment_name sent to /initialize",
    ),
];

/// What `key` of `[section]` sets, if the table has it.
pub(super) fn field_doc(section: &str, key: &str) -> Option<&'static str> {
    FIELD_DOCS
        .iter()
        .find(|(s, k, _)| *s == section && *k == key)
        .map(|(_, _, doc)| *doc)
}

/// `toml` (as `RunConfig::to_toml` prints it) with each key's line from the table
/// above it; keys without one are left as they are.
pub(super) fn commented(toml: &str) -> String {
    let mut out = String::with_capacity(toml.len() * 2);
    let mut section = "";
    for line in toml.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name;
        } else if let Some((key, _)) = line.split_once(" = ") {
            if let Some(doc) = field_doc(section, key.trim()) {
                out.push_str("# ");
                out.push_str(doc);
                out.push('\n');
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
