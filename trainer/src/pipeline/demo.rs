//! The whole demo: data, tokenizer, a fresh model, SFT and evaluation in one call.

use std::time::Instant;

use sage_transformer::Kernels;

use super::{
    failed, fresh_model, load_sft_data, prepare_data, run_eval, run_sft, sft_policy,
    train_tokenizer, warn_turn_limits, EvalReport, PipelineError, Reporter, SftSummary,
};
use crate::chat::ChatTemplate;
use crate::config::RunConfig;
use crate::policy::TransformerPolicy;
use crate::sft::{SftState, SftStep};
use crate::tokenizer::Tokenizer;

/// An [`SftHook`](super::SftHook) of the demo, which also gets the tokenizer the demo
/// trained.
pub type DemoHook<'a, K> = dyn FnMut(&mut TransformerPolicy<K>, &Tokenizer, &SftStep, SftState) -> Result<(), PipelineError>
    + 'a;

/// What `sage demo` produced.
#[derive(Clone, Debug)]
pub struct DemoReport {
    /// The SFT summary.
    pub sft: SftSummary,
    /// The evaluation, per split and mode.
    pub eval: Vec<EvalReport>,
    /// Wall-clock seconds of the whole pipeline.
    pub seconds: f64,
}

/// The whole demo on backend `k`: expert data, tokenizer, a fresh model, SFT, then
/// evaluation, everything under `config.run.dir`. `on_step` sees every SFT step with
/// the run's tokenizer (the CLI saves checkpoints and metrics there).
pub fn run_demo<K: Kernels>(
    mut k: K,
    config: &RunConfig,
    reporter: &mut dyn Reporter,
    on_step: &mut DemoHook<'_, K>,
) -> Result<(DemoReport, TransformerPolicy<K>, Tokenizer), PipelineError> {
    let started = Instant::now();
    let dir = config.run.dir.clone();
    let files = prepare_data(&config.data, &dir, reporter)?;
    let tokenizer = train_tokenizer(&config.tokenizer, &files.train, &dir, reporter)?;
    let template = ChatTemplate::new(&tokenizer)
        .map_err(failed("tokenizer"))?
        .with_max_len(config.model.max_position_embeddings);
    let train = load_sft_data(&files.train, &template, reporter)?;
    let dev = load_sft_data(&files.dev, &template, reporter)?;
    warn_turn_limits(&train, &config.eval, None);
    let model = fresh_model(&mut k, &config.model, config.run.seed, &tokenizer)?;
    let (mut policy, total) = sft_policy(k, model, config, &train, reporter)?;
    reporter.info(&format!(
        "model: {} parameters; sft: {} trajectories, {} tokens ({} trained), {} steps",
        policy.model().params().len,
        train.examples.len(),
        train.tokens(),
        train
            .examples
            .iter()
            .map(|e| e.agent_tokens())
            .sum::<usize>(),
        total
    ));
    let mut with_tokenizer = |policy: &mut TransformerPolicy<K>, step: &SftStep, state| {
        on_step(policy, &tokenizer, step, state)
    };
    let (sft, _) = run_sft(
        &mut policy,
        &config.sft,
        &train,
        Some(&dev),
        SftState::default(),
        reporter,
        &mut with_tokenizer,
    )?;
    reporter.info(&format!(
        "sft: final loss {:.4}, dev loss {:.4}, {:.0} tokens/s",
        sft.final_loss,
        sft.dev_loss.unwrap_or(f64::NAN),
        sft.tokens_per_second
    ));
    let eval = run_eval(
        &mut policy,
        &config.eval,
        config.data.prompt_rules,
        &template,
        None,
        Some(&dir.join("eval.json")),
        reporter,
    )?;
    Ok((
        DemoReport {
            sft,
            eval,
            seconds: started.elapsed().as_secs_f64(),
        },
        policy,
        tokenizer,
    ))
}
