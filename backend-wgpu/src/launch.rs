//! Launching one kernel: each operand checked and turned into a binding window, the
//! windows' element offsets prepended to the kernel's sizes as push constants, the
//! pipeline fetched, and the launch recorded; and the grids launches run on.

use sage_transformer::ContractError;

use crate::device::{PARAM_BYTES, WORKGROUP};
use crate::error::WgpuError;
use crate::pipelines::Kernel;
use crate::store::Operand;
use crate::WgpuBackend;

impl WgpuBackend {
    /// Records `kernel` over `grid` with `operands` bound in order; its push constants are
    /// the operands' offsets in their windows followed by `params`.
    pub(crate) fn launch(
        &mut self,
        kernel: Kernel,
        operands: &[Operand],
        params: &[u32],
        grid: [u32; 3],
    ) -> Result<(), WgpuError> {
        if operands.len() != kernel.bindings as usize
            || (operands.len() + params.len()) * 4 > PARAM_BYTES as usize
        {
            return Err(WgpuError::Contract(ContractError::BadArgument(format!(
                "kernel `{}` binds {} buffers, was given {} operands and {} parameters",
                kernel.entry,
                kernel.bindings,
                operands.len(),
                params.len()
            ))));
        }
        let windows = operands
            .iter()
            .map(|&operand| self.store.window(operand, &self.gpu.limits))
            .collect::<Result<Vec<_>, _>>()?;
        let words: Vec<u32> = windows
            .iter()
            .map(|w| w.shift)
            .chain(params.iter().copied())
            .collect();
        let (pipeline, layout) = self.pipelines.get(&self.gpu, kernel)?;
        self.recorder
            .launch(&self.gpu, &pipeline, &layout, &windows, &words, grid)
    }

    /// A grid of `count` workgroups, folded into rows of at most the adapter's
    /// workgroups per dimension (kernels flatten it back).
    pub(crate) fn grid(&self, op: &str, count: usize) -> Result<[u32; 3], WgpuError> {
        let max = self.gpu.limits.max_compute_workgroups_per_dimension as usize;
        let x = count.clamp(1, max);
        let y = count.div_ceil(x).max(1);
        if y > max {
            return Err(WgpuError::TooLarge(format!(
                "{op}: {count} workgroups exceed the adapter's grid of {max} x {max}"
            )));
        }
        Ok([x as u32, y as u32, 1])
    }

    /// The grid of one invocation per element of `len` elements.
    pub(crate) fn grid_for(&self, op: &str, len: usize) -> Result<[u32; 3], WgpuError> {
        self.grid(op, len.div_ceil(WORKGROUP as usize))
    }

    /// Most elements an elementwise launch binds per operand: what the binding size
    /// limit allows after alignment, in whole blocks of `multiple`.
    pub(crate) fn chunk_elements(&self, multiple: usize) -> usize {
        let limits = &self.gpu.limits;
        let bytes = u64::from(limits.max_storage_buffer_binding_size)
            .saturating_sub(u64::from(limits.min_storage_buffer_offset_alignment));
        let elements = (bytes / 4).min(u64::from(u32::MAX / 2)) as usize;
        (elements / multiple * multiple).max(multiple)
    }
}

/// Splits `len` elements into consecutive `(start, len)` pieces of at most `chunk`.
pub(crate) fn pieces(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(chunk.max(1))
        .map(move |start| (start, chunk.min(len - start)))
}
