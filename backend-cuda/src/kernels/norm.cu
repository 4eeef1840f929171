// RMSNorm forward and backward over rows, the bias add, and the fixed-order column
// reduction that the RMSNorm weight gradient and the bias gradient share: partial sums
// over blocks of 64 rows (column_partials), then the blocks' sums in block order
// (column_finish), as the CPU backend does, with no float atomics.

#define ROW_THREADS 256

// One block per row (grid-stride over blocks): rstd[n] = 1 / sqrt(mean(x[n]^2) + eps),
// out[n, :] = x[n, :] * rstd[n] * weight.
// out[N, D], rstd[N], x[N, D], weight[D] in f32 or, as frozen weights of the bf16 mode,
// bf16 (`rmsnorm_forward_bf16`); out_copy[N, D], out's bf16 copy, when not null.
template <typename Weight>
__device__ __forceinline__ void rmsnorm_rows(float* out, bf16* out_copy, float* rstd,
                                             const float* x, const Weight* weight, u32 rows,
                                             u32 dim, float eps) {
    __shared__ float scratch[32];
    for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* x_row = x + (u64)row * dim;
        float acc = 0.0f;
        for (u32 d = threadIdx.x; d < dim; d += ROW_THREADS) {
            acc += x_row[d] * x_row[d];
        }
        const float r = 1.0f / sqrtf(block_sum(acc, scratch) / (float)dim + eps);
        if (threadIdx.x == 0) {
            rstd[row] = r;
        }
        const u64 at = (u64)row * dim;
        for (u32 d = threadIdx.x; d < dim; d += ROW_THREADS) {
            const float o = x_row[d] * r * to_f32(weight[d]);
            out[at + d] = o;
            store_copy(out_copy, at + d, o);
        }
    }
}

extern "C" __global__ void __launch_bounds__(ROW_THREADS)
rmsnorm_forward(float* out, bf16* out_copy, float* rstd, const float* x, const float* weight,
                u32 rows, u32 dim, float eps) {
    rmsnorm_rows(out, out_copy, rstd, x, weight, rows, dim, eps);
}
extern "C" __global__ void __launch_bounds__(ROW_THREADS)
rmsnorm_forward_bf16(float* out, bf16* out_copy, float* rstd, const float* x,
                     const bf16* weight, u32 rows, u32 dim, float eps) {
    rmsnorm_rows(out, out_copy, rstd, x, weight, rows, dim, eps);
}

// The input gradient, one block per row: with r = rstd[n],
// dx[n, :] += r * w * dout - x * r^3 / D * sum(dout * w * x).
// dx[N, D] (+=), its bf16 copy dx_copy[N, D] (the sum) when not null, dout[N, D],
// x[N, D], weight[D], rstd[N].
extern "C" __global__ void __launch_bounds__(ROW_THREADS)
rmsnorm_backward_dx(float* dx, bf16* dx_copy, const float* dout, const float* x,
                    const float* weight, const float* rstd, u32 rows, u32 dim) {
    __shared__ float scratch[32];
    for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 at = (u64)row * dim;
        float acc = 0.0f;
        for (u32 d = threadIdx.x; d < dim; d += ROW_THREADS) {
            acc += dout[at + d] * weight[d] * x[at + d];
        }
        const float r = rstd[row];
        const float correction = block_sum(acc, scratch) * r * r * r / (float)dim;
        for (u32 d = threadIdx.x; d < dim; d += ROW_THREADS) {
            const float sum = dx[at + d] + (r * weight[d] * dout[at + d] - x[at + d] * correction);
            dx[at + d] = sum;
            store_copy(dx_copy, at + d, sum);
        }
    }
}

#define COLUMN_THREADS 256
// ROWS_PER_BLOCK comes from the compiler options: sage_transformer::COLUMN_SUM_ROWS, the
// blocks every backend sums in (64).

// partial[b, c] = sum over rows n of block b (64 rows) of a[n, c] * b[n, c] * rstd[n],
// or of a[n, c] alone when `b` is null (the bias gradient). Grid: (ceil(C / 256),
// ceil(N / 64)); one thread per column, reading rows in order.
// partial[ceil(N / 64), C], a[N, C], b[N, C] or null, rstd[N] (with b).
extern "C" __global__ void __launch_bounds__(COLUMN_THREADS)
column_partials(float* partial, const float* a, const float* b, const float* rstd, u32 rows,
                u32 width) {
    const u32 c = blockIdx.x * COLUMN_THREADS + threadIdx.x;
    if (c >= width) {
        return;
    }
    const u32 first = blockIdx.y * ROWS_PER_BLOCK;
    const u32 end = min(first + ROWS_PER_BLOCK, rows);
    float acc = 0.0f;
    for (u32 n = first; n < end; n++) {
        const u64 at = (u64)n * width + c;
        acc += b ? a[at] * b[at] * rstd[n] : a[at];
    }
    partial[(u64)blockIdx.y * width + c] = acc;
}

// dst[c] += sum over blocks b, in order, of partial[b, c]: the first partial sums into
// a zero and that sum is added to dst, as the CPU backend does.
// dst[C] (+=), partial[blocks, C].
extern "C" __global__ void __launch_bounds__(COLUMN_THREADS)
column_finish(float* dst, const float* partial, u32 blocks, u32 width) {
    const u32 c = blockIdx.x * COLUMN_THREADS + threadIdx.x;
    if (c >= width) {
        return;
    }
    float acc = dst[c];
    for (u32 b = 0; b < blocks; b++) {
        acc += partial[(u64)b * width + c];
    }
    dst[c] = acc;
}

// out[N, C] += bias[C] on every row; the bias in f32 or, as frozen weights of the bf16
// mode, bf16 (`add_bias_bf16`).
template <typename Weight>
__device__ __forceinline__ void add_bias_rows(float* out, const Weight* bias, u64 total,
                                              u32 width) {
    for (u64 i = global_index(); i < total; i += grid_stride()) {
        out[i] += to_f32(bias[i % width]);
    }
}

extern "C" __global__ void add_bias(float* out, const float* bias, u64 total, u32 width) {
    add_bias_rows(out, bias, total, width);
}
extern "C" __global__ void add_bias_bf16(float* out, const bf16* bias, u64 total, u32 width) {
    add_bias_rows(out, bias, total, width);
}
