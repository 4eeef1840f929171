//! What skill bookkeeping both environments share: loading a library into a fresh
//! sandbox session (reporting the skills that fail), and reading one executed turn for
//! the skills it used (library functions whose body ran, unless the episode redefined
//! them) and the skills it saved (this episode's functions that ran without error, in a
//! turn that hit no limit, with only literal default values).

use std::collections::BTreeSet;

use crate::sandbox::{literal_defaults, ExecErrorKind, ExecOutcome, FunctionOrigin, Sandbox};
use sage_core::env::DroppedSkill;
use sage_core::skill::{parse_code, Origin, Skill};

/// Loads `library` into `sandbox`'s session; returns the names loaded and the skills
/// dropped with why.
pub(crate) fn load_library(
    sandbox: &mut Sandbox,
    library: &[Skill],
) -> (Vec<String>, Vec<DroppedSkill>) {
    let mut loaded = Vec::with_capacity(library.len());
    let mut dropped = Vec::new();
    for skill in library {
        match sandbox.load_skill(&skill.source) {
            Ok(name) if name == skill.name => loaded.push(name),
            Ok(name) => dropped.push(DroppedSkill {
                name: skill.name.clone(),
                reason: format!("its source defines `{name}`, not `{}`", skill.name),
            }),
            Err(error) => dropped.push(DroppedSkill {
                name: skill.name.clone(),
                reason: error.message,
            }),
        }
    }
    (loaded, dropped)
}

/// The library skills `outcome` used and the skills it saved. Library names the turn
/// redefines join `redefined` first and no longer count as used.
pub(crate) fn used_and_saved(
    sandbox: &mut Sandbox,
    outcome: &ExecOutcome,
    library: &[String],
    redefined: &mut BTreeSet<String>,
    origin: &Origin,
) -> (Vec<String>, Vec<Skill>) {
    for name in &outcome.defined {
        if library.contains(name) {
            redefined.insert(name.clone());
        }
    }
    let mut used: Vec<String> = Vec::new();
    for function in &outcome.called {
        let library_skill = function.origin == FunctionOrigin::Library;
        if library_skill && !redefined.contains(&function.name) && !used.contains(&function.name) {
            used.push(function.name.clone());
        }
    }
    // A turn stopped by a limit saves nothing: its functions may be what hit it.
    let hit_limit = outcome
        .error
        .as_ref()
        .is_some_and(|e| matches!(e.kind, ExecErrorKind::Limit(_)));
    let saved = outcome
        .completed
        .iter()
        .filter(|f| !hit_limit && matches!(f.origin, FunctionOrigin::Execution(_)))
        .filter_map(|f| {
            let source = sandbox.function_source(f)?;
            // A default that computes would run again whenever the skill is loaded.
            literal_defaults(&source).ok()?;
            let analysis = parse_code(&source);
            let def = analysis.def(&f.name)?;
            Some(Skill::from_def(def, &source, origin.clone()))
        })
        .collect();
    (used, saved)
}
