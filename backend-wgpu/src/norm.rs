//! RMSNorm forward and backward over rows, and the fixed-order column sums that their
//! weight gradient and the bias gradient use (two passes: blocks of 64 rows, then the
//! blocks in order), so no result depends on scheduling.

use sage_transformer::Tensor;

use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::scratch::Scratch;
use crate::WgpuBackend;
use sage_transformer::contract::{to_u32, Rows};

const FORWARD: Kernel = Kernel {
    family: Family::Norm,
    entry: "rmsnorm_forward",
    bindings: 5,
};
const BACKWARD: Kernel = Kernel {
    family: Family::Norm,
    entry: "rmsnorm_backward",
    bindings: 5,
};
const COLUMN_PARTIALS: Kernel = Kernel {
    family: Family::Columns,
    entry: "column_partials",
    bindings: 4,
};
const COLUMN_FINISH: Kernel = Kernel {
    family: Family::Columns,
    entry: "column_finish",
    bindings: 2,
};

/// Rows summed per partial (ROWS_PER_BLOCK in columns.wgsl, defined from it when the
/// shader is built).
const ROWS_PER_BLOCK: usize = sage_transformer::COLUMN_SUM_ROWS;

/// Columns one workgroup of the column kernels covers.
const COLUMNS_PER_GROUP: usize = 256;

/// out[N, D] = x[N, D] * rstd[n] * weight[D], with rstd[N] = 1 / sqrt(mean(x[n]^2) + eps).
pub(crate) fn rmsnorm_forward(
    b: &mut WgpuBackend,
    out: Tensor,
    rstd: Tensor,
    x: Tensor,
    weight: Tensor,
    rows: Rows,
    eps: f32,
) -> Result<(), WgpuError> {
    let op = "rmsnorm_forward";
    let Rows { rows, width: dim } = rows;
    if rows == 0 {
        return Ok(());
    }
    let grid = b.grid(op, rows)?;
    b.launch(
        FORWARD,
        &[out.into(), rstd.into(), x.into(), weight.into(), x.into()],
        &[to_u32(op, "N", rows)?, to_u32(op, "D", dim)?, eps.to_bits()],
        grid,
    )
}

/// dx[N, D] += r * w * dout - x * r^3 / D * sum(dout * w * x) and dweight[D] += sum over
/// rows of dout * x * r, from dout[N, D], x[N, D], weight[D] and rstd (r) [N].
#[allow(clippy::too_many_arguments)]
pub(crate) fn rmsnorm_backward(
    b: &mut WgpuBackend,
    dx: Tensor,
    dweight: Tensor,
    dout: Tensor,
    x: Tensor,
    weight: Tensor,
    rstd: Tensor,
    rows: Rows,
) -> Result<(), WgpuError> {
    let op = "rmsnorm_backward";
    if rows.rows == 0 {
        return Ok(());
    }
    let grid = b.grid(op, rows.rows)?;
    b.launch(
        BACKWARD,
        &[dx.into(), rstd.into(), x.into(), weight.into(), dout.into()],
        &[to_u32(op, "N", rows.rows)?, to_u32(op, "D", rows.width)?, 0],
        grid,
    )?;
    column_sums(b, op, dweight, dout, Some((x, rstd)), rows)
}

/// dbias[C] += sum over rows of dout[N, C].
pub(crate) fn bias_backward(
    b: &mut WgpuBackend,
    dbias: Tensor,
    dout: Tensor,
    rows: Rows,
) -> Result<(), WgpuError> {
    column_sums(b, "bias_backward", dbias, dout, None, rows)
}

/// grad[C] += sum over the `rows` of dout[N, C] of dout, or of dout * x * rstd[n] when
/// `scaled` is (x [N, C], rstd [N]).
fn column_sums(
    b: &mut WgpuBackend,
    op: &str,
    grad: Tensor,
    dout: Tensor,
    scaled: Option<(Tensor, Tensor)>,
    rows: Rows,
) -> Result<(), WgpuError> {
    let Rows { rows, width } = rows;
    if rows == 0 {
        return Ok(());
    }
    let blocks = rows.div_ceil(ROWS_PER_BLOCK);
    let column_groups = width.div_ceil(COLUMNS_PER_GROUP);
    let max = b.gpu.limits.max_compute_workgroups_per_dimension as usize;
    if blocks > max || column_groups > max {
        return Err(WgpuError::TooLarge(format!(
            "{op}: [{rows}, {width}] exceeds the adapter's workgroup grid"
        )));
    }
    let partials = b.scratch(Scratch::ColumnPartials, blocks * width)?;
    let (x, rstd, flag) = match scaled {
        Some((x, rstd)) => (x, rstd, 1),
        None => (dout, dout, 0),
    };
    let sizes = [to_u32(op, "N", rows)?, to_u32(op, "C", width)?];
    b.launch(
        COLUMN_PARTIALS,
        &[partials.into(), dout.into(), x.into(), rstd.into()],
        &[sizes[0], sizes[1], flag],
        [column_groups as u32, blocks as u32, 1],
    )?;
    b.launch(
        COLUMN_FINISH,
        &[grad.into(), partials.into()],
        &[blocks as u32, sizes[1]],
        [column_groups as u32, 1, 1],
    )
}
