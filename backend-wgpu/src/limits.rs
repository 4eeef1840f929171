//! Whether a model fits the adapter: its parameter slab (and the gradient and moment
//! slabs of the same size) must each be one buffer within `max_buffer_size`; every
//! tensor a kernel binds whole (the largest is the embedding table [V, D]) must fit
//! `max_storage_buffer_binding_size`; and the heads must be no wider than the attention
//! kernels hold. Activations grow with the batch, so they are checked when allocated
//! and bound, with the same clear error.

use sage_transformer::{ContractError, ModelConfig, ParamLayout};

use crate::attention::MAX_HEAD_DIM;
use crate::error::WgpuError;

/// Fails with a message naming the model's size and the adapter's limit it exceeds.
pub(crate) fn check_model(limits: &wgpu::Limits, config: &ModelConfig) -> Result<(), WgpuError> {
    config
        .validate()
        .map_err(|e| WgpuError::Contract(ContractError::BadArgument(e.to_string())))?;
    let layout = ParamLayout::new(config);
    let slab = layout.total as u64 * 4;
    if slab > limits.max_buffer_size {
        return Err(WgpuError::TooLarge(format!(
            "the model's {} parameters take {slab} bytes, over the adapter's max_buffer_size \
             of {} bytes",
            layout.total, limits.max_buffer_size
        )));
    }
    let binding = u64::from(limits.max_storage_buffer_binding_size);
    let largest = layout.named().into_iter().max_by_key(|(_, slot)| slot.len);
    if let Some((name, slot)) = largest {
        let bytes = slot.len as u64 * 4;
        if bytes > binding {
            return Err(WgpuError::TooLarge(format!(
                "tensor `{name}` {:?} takes {bytes} bytes, over the adapter's \
                 max_storage_buffer_binding_size of {binding} bytes",
                slot.shape
            )));
        }
    }
    if config.head_dim() > MAX_HEAD_DIM {
        return Err(WgpuError::TooLarge(format!(
            "heads of width {}; the wgpu attention kernels hold at most {MAX_HEAD_DIM}",
            config.head_dim()
        )));
    }
    Ok(())
}
