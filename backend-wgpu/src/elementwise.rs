//! Whole-tensor elementwise operations (fill, copy, `+=`, scale) and the sum of
//! squares behind the global gradient norm. Tensors larger than one binding are
//! processed in pieces.

use sage_transformer::Tensor;

use crate::error::WgpuError;
use crate::launch::pieces;
use crate::pipelines::{Family, Kernel};
use crate::scratch::Scratch;
use crate::store::Operand;
use crate::WgpuBackend;
use sage_transformer::contract::to_u32;

const FILL: Kernel = Kernel {
    family: Family::Elementwise,
    entry: "fill",
    bindings: 2,
};
const COPY: Kernel = Kernel {
    family: Family::Elementwise,
    entry: "copy",
    bindings: 2,
};
const ADD_ASSIGN: Kernel = Kernel {
    family: Family::Elementwise,
    entry: "add_assign",
    bindings: 2,
};
const SCALE: Kernel = Kernel {
    family: Family::Elementwise,
    entry: "scale",
    bindings: 2,
};
const SUM_BLOCKS: Kernel = Kernel {
    family: Family::Elementwise,
    entry: "sum_blocks",
    bindings: 2,
};

/// Elements one workgroup of `sum_blocks` folds (BLOCK in elementwise.wgsl).
const SUM_BLOCK: usize = 4096;

/// Runs `kernel` over dst[len] (and src[len]) piece by piece: Params {dst, src, len, value}.
fn run(
    b: &mut WgpuBackend,
    op: &str,
    kernel: Kernel,
    dst: Tensor,
    src: Tensor,
    value: f32,
) -> Result<(), WgpuError> {
    b.store.locate(Operand::F32(dst))?;
    b.store.locate(Operand::F32(src))?;
    for (start, len) in pieces(dst.len, b.chunk_elements(1)) {
        let (d, s) = (dst.slice(start, len), src.slice(start, len));
        let grid = b.grid_for(op, len)?;
        b.launch(
            kernel,
            &[d.into(), s.into()],
            &[to_u32(op, "len", len)?, value.to_bits()],
            grid,
        )?;
    }
    Ok(())
}

/// dst[n] = value.
pub(crate) fn fill(b: &mut WgpuBackend, dst: Tensor, value: f32) -> Result<(), WgpuError> {
    run(b, "fill", FILL, dst, dst, value)
}

/// dst[n] = src[n].
pub(crate) fn copy(b: &mut WgpuBackend, dst: Tensor, src: Tensor) -> Result<(), WgpuError> {
    run(b, "copy", COPY, dst, src, 0.0)
}

/// dst[n] += src[n].
pub(crate) fn add_assign(b: &mut WgpuBackend, dst: Tensor, src: Tensor) -> Result<(), WgpuError> {
    run(b, "add_assign", ADD_ASSIGN, dst, src, 0.0)
}

/// dst[n] *= factor.
pub(crate) fn scale(b: &mut WgpuBackend, dst: Tensor, factor: f32) -> Result<(), WgpuError> {
    run(b, "scale", SCALE, dst, dst, factor)
}

/// sum of src[n]^2 in f32, read back: blocks of 4096 elements are summed in a fixed
/// tree, then the block sums the same way, level after level, until one remains.
pub(crate) fn sum_squares(b: &mut WgpuBackend, src: Tensor) -> Result<f32, WgpuError> {
    let op = "sum_squares";
    b.store.locate(Operand::F32(src))?;
    if src.len == 0 {
        return Ok(0.0);
    }
    // Level sizes: src.len elements, then ceil(len / 4096) sums, ... down to 1.
    let mut levels = vec![src.len.div_ceil(SUM_BLOCK)];
    while let Some(&last) = levels.last().filter(|&&l| l > 1) {
        levels.push(last.div_ceil(SUM_BLOCK));
    }
    let sums = b.scratch(Scratch::Sums, levels.iter().sum())?;
    let mut input = src;
    let mut square = 1;
    let mut at = 0;
    for &blocks in &levels {
        let output = sums.slice(at, blocks);
        for (start, len) in pieces(input.len, b.chunk_elements(SUM_BLOCK)) {
            let out = output.slice(start / SUM_BLOCK, len.div_ceil(SUM_BLOCK));
            let grid = b.grid(op, out.len)?;
            b.launch(
                SUM_BLOCKS,
                &[out.into(), input.slice(start, len).into()],
                &[to_u32(op, "len", len)?, square],
                grid,
            )?;
        }
        input = output;
        square = 0;
        at += blocks;
    }
    let mut total = [0.0];
    sage_transformer::Kernels::read(b, input, &mut total)?;
    Ok(total[0])
}
