//! RMSNorm forward and backward, the linear layer's bias add and bias gradient, and the
//! fixed-order column sums that both gradients use (partials over blocks of 64 rows,
//! then the blocks in order). Kernels in `kernels/norm.cu`.

use sage_transformer::Tensor;

use crate::error::CudaError;
use crate::launch::{blocks_for, blocks_per_task, kernel_for, Arg, THREADS};
use crate::matmul::copy_out;
use crate::scratch::Scratch;
use crate::CudaBackend;
use sage_transformer::contract::{to_u32, Rows};

/// Rows per block of the column sums (ROWS_PER_BLOCK in norm.cu, defined from it at
/// compile time).
const ROWS_PER_BLOCK: usize = sage_transformer::COLUMN_SUM_ROWS;
/// Columns per block of the column sums (COLUMN_THREADS in norm.cu).
const COLUMNS_PER_BLOCK: usize = 256;

/// out[N, D] = x / rms(x) * weight[D]; rstd[N] = 1 / sqrt(mean(x^2) + eps). The weight
/// may be frozen bf16 weights; out's bf16 copy is written too where GEMMs read it
/// ([`copy_out`]).
pub(crate) fn rmsnorm_forward(
    b: &mut CudaBackend,
    out: Tensor,
    rstd: Tensor,
    x: Tensor,
    weight: Tensor,
    rows: Rows,
    eps: f32,
) -> Result<(), CudaError> {
    let op = "rmsnorm_forward";
    let Rows { rows, width: dim } = rows;
    let (weight, bf16) = b.store.weight_address(weight)?;
    let (out_at, rstd, x) = (
        b.store.address(out)?,
        b.store.address(rstd)?,
        b.store.address(x)?,
    );
    let (n, d) = (to_u32(op, "N", rows)?, to_u32(op, "D", dim)?);
    if rows == 0 {
        return Ok(());
    }
    let args = [
        Arg::Ptr(out_at),
        Arg::Ptr(copy_out(b, out)?),
        Arg::Ptr(rstd),
        Arg::Ptr(x),
        Arg::Ptr(weight),
        Arg::U32(n),
        Arg::U32(d),
        Arg::F32(eps),
    ];
    let kernel = kernel_for(bf16, op, "rmsnorm_forward_bf16");
    b.launch(kernel, (blocks_per_task(rows), 1), THREADS, &args)
}

/// dx[N, D] += r * w * dout - x * r^3 / D * sum(dout * w * x) and dweight[D] += column
/// sums of dout * x * r, from dout[N, D], x[N, D], weight[D] and rstd (r) [N]; dx's bf16
/// copy too where GEMMs read it ([`copy_out`]: the residual stream's gradient, which the
/// output and down projections' backward GEMMs read next).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rmsnorm_backward(
    b: &mut CudaBackend,
    dx: Tensor,
    dweight: Tensor,
    dout: Tensor,
    x: Tensor,
    weight: Tensor,
    rstd: Tensor,
    rows: Rows,
) -> Result<(), CudaError> {
    let op = "rmsnorm_backward";
    let Rows { rows, width: dim } = rows;
    let (d, xs, r) = (
        b.store.address(dout)?,
        b.store.address(x)?,
        b.store.address(rstd)?,
    );
    let (dx_at, weight) = (b.store.address(dx)?, b.store.address(weight)?);
    let (n, width) = (to_u32(op, "N", rows)?, to_u32(op, "D", dim)?);
    let dw = b.store.address(dweight)?;
    if rows == 0 {
        return Ok(());
    }
    let args = [
        Arg::Ptr(dx_at),
        Arg::Ptr(copy_out(b, dx)?),
        Arg::Ptr(d),
        Arg::Ptr(xs),
        Arg::Ptr(weight),
        Arg::Ptr(r),
        Arg::U32(n),
        Arg::U32(width),
    ];
    b.launch(
        "rmsnorm_backward_dx",
        (blocks_per_task(rows), 1),
        THREADS,
        &args,
    )?;
    column_sums(b, op, dw, dim, rows, d, Some((xs, r)))
}

/// out[N, C] += bias[C] on every row; the bias may be frozen bf16 weights.
pub(crate) fn add_bias(b: &mut CudaBackend, out: Tensor, bias: Tensor) -> Result<(), CudaError> {
    let op = "add_bias";
    let (bias_at, bf16) = b.store.weight_address(bias)?;
    let args = [
        Arg::Ptr(b.store.address(out)?),
        Arg::Ptr(bias_at),
        Arg::U64(out.len as u64),
        Arg::U32(to_u32(op, "C", bias.len)?),
    ];
    if out.len == 0 {
        return Ok(());
    }
    let kernel = kernel_for(bf16, op, "add_bias_bf16");
    b.launch(kernel, (blocks_for(out.len as u64), 1), THREADS, &args)
}

/// dbias[C] += column sums of dout[N, C].
pub(crate) fn bias_backward(
    b: &mut CudaBackend,
    dbias: Tensor,
    dout: Tensor,
    rows: Rows,
) -> Result<(), CudaError> {
    let op = "bias_backward";
    let Rows { rows, width } = rows;
    // dout is only read: its bf16 copy (the projection's backward GEMMs read it next)
    // stays current.
    let (db, d) = (b.store.address(dbias)?, b.store.address_read(dout)?);
    if rows == 0 {
        return Ok(());
    }
    column_sums(b, op, db, width, rows, d, None)
}

/// grad[C] += the column sums over `rows` rows of a[N, C], or of a * x * rstd[n] when
/// `scaled` holds the addresses of (x [N, C], rstd [N]).
fn column_sums(
    b: &mut CudaBackend,
    op: &str,
    grad: u64,
    width: usize,
    rows: usize,
    a: u64,
    scaled: Option<(u64, u64)>,
) -> Result<(), CudaError> {
    let blocks = rows.div_ceil(ROWS_PER_BLOCK);
    let partials = b.scratch_space(Scratch::Columns, blocks * width)?;
    let (x, rstd) = scaled.unwrap_or((0, 0));
    let column_blocks = to_u32(op, "column blocks", width.div_ceil(COLUMNS_PER_BLOCK))?;
    let row_blocks = to_u32(op, "row blocks", blocks)?;
    if row_blocks > 65_535 {
        return Err(CudaError::TooLarge(format!(
            "{op}: {rows} rows exceed the grid of the column sums"
        )));
    }
    let (rows, width) = (to_u32(op, "N", rows)?, to_u32(op, "C", width)?);
    b.launch(
        "column_partials",
        (column_blocks, row_blocks),
        THREADS,
        &[
            Arg::Ptr(partials),
            Arg::Ptr(a),
            Arg::Ptr(x),
            Arg::Ptr(rstd),
            Arg::U32(rows),
            Arg::U32(width),
        ],
    )?;
    b.launch(
        "column_finish",
        (column_blocks, 1),
        THREADS,
        &[
            Arg::Ptr(grad),
            Arg::Ptr(partials),
            Arg::U32(row_blocks),
            Arg::U32(width),
        ],
    )
}
