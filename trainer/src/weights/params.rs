//! Where each Hugging Face Qwen2 tensor lives in a [`Transformer`]'s parameter slab,
//! with the shape it has on disk, and moving one tensor between the slab and the host.

use std::path::Path;

use sage_transformer::{Kernels, ParamLayout, Slot, Transformer};

use super::error::WeightsError;

/// One parameter tensor: its Hugging Face name, its slot in the slab, and its shape
/// on disk (`[out, in]` for a linear weight, `[n]` for a bias or a norm weight).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamTensor {
    pub(crate) name: String,
    pub(crate) slot: Slot,
    pub(crate) shape: Vec<usize>,
}

/// Every distinct parameter tensor of `layout`, in slab order (a tied `lm_head` is
/// not listed: it is `model.embed_tokens.weight`).
pub(crate) fn param_tensors(layout: &ParamLayout) -> Vec<ParamTensor> {
    layout
        .named()
        .into_iter()
        .map(|(name, slot)| {
            let is_vector = name.ends_with("norm.weight") || name.ends_with(".bias");
            let shape = if is_vector {
                vec![slot.len]
            } else {
                slot.shape.to_vec()
            };
            ParamTensor { name, slot, shape }
        })
        .collect()
}

/// Name of the output projection, absent from checkpoints with tied embeddings.
pub(crate) const LM_HEAD: &str = "lm_head.weight";

/// Name of the input embedding table.
pub(crate) const EMBED: &str = "model.embed_tokens.weight";

/// Buffers some checkpoints carry that are not parameters (recomputed from the config).
pub(crate) fn is_ignored_buffer(name: &str) -> bool {
    name.ends_with("rotary_emb.inv_freq")
}

/// Checks that `shape` (of tensor `param` in `file`) is the expected one.
pub(crate) fn check_shape(
    param: &ParamTensor,
    shape: &[usize],
    file: &Path,
) -> Result<(), WeightsError> {
    if shape == param.shape.as_slice() {
        return Ok(());
    }
    Err(WeightsError::Shape {
        tensor: param.name.clone(),
        file: file.to_path_buf(),
        expected: param.shape.clone(),
        found: shape.to_vec(),
    })
}

/// Copies `values` into `param`'s slot of `model`'s parameters.
pub(crate) fn write_param<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    param: &ParamTensor,
    values: &[f32],
) -> Result<(), WeightsError> {
    let dst = model.params().slice(param.slot.offset, param.slot.len);
    k.write(dst, values)
        .map_err(|e| WeightsError::backend(format_args!("writing `{}`", param.name), e))
}

/// The values of `param`'s slot of `model`'s parameters.
pub(crate) fn read_param<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    param: &ParamTensor,
) -> Result<Vec<f32>, WeightsError> {
    let src = model.params().slice(param.slot.offset, param.slot.len);
    let mut values = vec![0.0; param.slot.len];
    k.read(src, &mut values)
        .map_err(|e| WeightsError::backend(format_args!("reading `{}`", param.name), e))?;
    Ok(values)
}
