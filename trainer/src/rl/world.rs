//! [`world_chains`]: the training chains of the built-in world.

use sage_core::TaskChain;
use sage_envs::scenarios::{Catalog, Split};

/// Every chain of `chain_len` consecutive tasks of every scenario of `split` in
/// `catalog`, scenario by scenario.
pub fn world_chains(catalog: &Catalog, split: Split, chain_len: usize) -> Vec<TaskChain> {
    catalog
        .split(split)
        .iter()
        .flat_map(|built| built.scenario.chains(chain_len).collect::<Vec<_>>())
        .collect()
}
