//! Matrix multiplication (a tiled GEMM through workgroup memory, transposes read in
//! place) and the linear layer's bias.

use sage_transformer::{MatmulShape, Tensor};

use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::WgpuBackend;
use sage_transformer::contract::to_u32;

const MATMUL: Kernel = Kernel {
    family: Family::Matmul,
    entry: "matmul",
    bindings: 3,
};
const ADD_BIAS: Kernel = Kernel {
    family: Family::Matmul,
    entry: "add_bias",
    bindings: 2,
};

/// Rows and columns of `c` per workgroup (TILE in matmul.wgsl).
const TILE: usize = 64;

/// c[m, n] (+)= op(a)[m, k] · op(b)[k, n]: `a` holds [k, m] when `trans_a`, `b` holds
/// [n, k] when `trans_b`.
pub(crate) fn matmul(
    b: &mut WgpuBackend,
    c: Tensor,
    a: Tensor,
    bm: Tensor,
    shape: MatmulShape,
) -> Result<(), WgpuError> {
    let op = "matmul";
    let MatmulShape { m, n, k, .. } = shape;
    if c.len == 0 {
        return Ok(());
    }
    let (columns, rows) = (n.div_ceil(TILE), m.div_ceil(TILE));
    let max = b.gpu.limits.max_compute_workgroups_per_dimension as usize;
    if columns > max || rows > max {
        return Err(WgpuError::TooLarge(format!(
            "matmul: c [{m}, {n}] exceeds the adapter's workgroup grid"
        )));
    }
    b.launch(
        MATMUL,
        &[c.into(), a.into(), bm.into()],
        &[
            to_u32(op, "m", m)?,
            to_u32(op, "n", n)?,
            to_u32(op, "k", k)?,
            u32::from(shape.trans_a),
            u32::from(shape.trans_b),
            u32::from(shape.accumulate),
        ],
        [columns as u32, rows as u32, 1],
    )
}

/// out[N, C] += bias[C] on every row.
pub(crate) fn add_bias(b: &mut WgpuBackend, out: Tensor, bias: Tensor) -> Result<(), WgpuError> {
    let op = "add_bias";
    if out.len == 0 {
        return Ok(());
    }
    let grid = b.grid_for(op, out.len)?;
    b.launch(
        ADD_BIAS,
        &[out.into(), bias.into()],
        &[to_u32(op, "len", out.len)?, to_u32(op, "C", bias.len)?],
        grid,
    )
}
