//! Whether a model fits the device: its parameters with their gradients and AdamW's two
//! moments (four f32 copies) must leave room in device memory, and its heads must be no
//! wider than the attention kernels hold. Activations grow with the batch, so they are
//! checked when allocated (an allocation failure is a driver error naming the size).

use sage_transformer::{ContractError, ModelConfig, ParamLayout};

use crate::attention::MAX_HEAD_DIM;
use crate::error::CudaError;

/// Fails with a message naming the model's size and the limit it exceeds.
pub(crate) fn check_model(total_memory: usize, config: &ModelConfig) -> Result<(), CudaError> {
    config
        .validate()
        .map_err(|e| CudaError::Contract(ContractError::BadArgument(e.to_string())))?;
    let layout = ParamLayout::new(config);
    let training = layout.total as u64 * 4 * 4;
    if training > total_memory as u64 {
        return Err(CudaError::TooLarge(format!(
            "the model's {} parameters need {training} bytes for weights, gradients and AdamW \
             moments, over the device's {total_memory} bytes of memory",
            layout.total
        )));
    }
    let head_dim = config.head_dim();
    if head_dim > MAX_HEAD_DIM || head_dim % 2 != 0 {
        return Err(CudaError::TooLarge(format!(
            "heads of width {head_dim}; the CUDA kernels take even widths up to {MAX_HEAD_DIM}"
        )));
    }
    Ok(())
}
