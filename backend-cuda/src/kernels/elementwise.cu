// Whole-tensor elementwise kernels (fill, +=, scale), the two-stage sum of squares
// behind the global gradient norm, and the f32 -> bf16 cast of the bf16 GEMM mode.
// All take a length in 64 bits and walk the tensor with a grid-stride loop.

// dst[n] = value.
extern "C" __global__ void fill_f32(float* dst, float value, u64 n) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        dst[i] = value;
    }
}

// dst[n] += src[n].
extern "C" __global__ void add_assign_f32(float* dst, const float* src, u64 n) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        dst[i] += src[i];
    }
}

// dst[n] *= factor.
extern "C" __global__ void scale_f32(float* dst, float factor, u64 n) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        dst[i] *= factor;
    }
}

#define SUM_THREADS 256

// Stage 1 of the sum of squares: partial[block] = sum of src[n]^2 over the elements
// this block visits, in f64. The grid size is fixed by the host from n alone, so the
// partials (and the result) do not depend on scheduling.
// partial[gridDim.x] (f64), src[n].
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
sum_squares_partial(double* partial, const float* src, u64 n) {
    __shared__ double tree[SUM_THREADS];
    double acc = 0.0;
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        const double x = (double)src[i];
        acc += x * x;
    }
    tree[threadIdx.x] = acc;
    for (u32 half = SUM_THREADS / 2; half > 0; half /= 2) {
        __syncthreads();
        if (threadIdx.x < half) {
            tree[threadIdx.x] += tree[threadIdx.x + half];
        }
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = tree[0];
    }
}

// Stage 2, one block: out[0] = the sum of partial[blocks], rounded to f32.
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
sum_squares_finish(float* out, const double* partial, u32 blocks) {
    __shared__ double tree[SUM_THREADS];
    double acc = 0.0;
    for (u32 i = threadIdx.x; i < blocks; i += SUM_THREADS) {
        acc += partial[i];
    }
    tree[threadIdx.x] = acc;
    for (u32 half = SUM_THREADS / 2; half > 0; half /= 2) {
        __syncthreads();
        if (threadIdx.x < half) {
            tree[threadIdx.x] += tree[threadIdx.x + half];
        }
    }
    if (threadIdx.x == 0) {
        out[0] = (float)tree[0];
    }
}

// dst[n] = bf16(src[n]): the GEMM operands of the bf16 mode. Where src is 16-byte and
// dst 8-byte aligned, each thread converts 4 elements a pass (one 16-byte load, one
// 8-byte store) and the last n % 4 follow one by one; elsewhere every element goes one
// by one. The host launches a thread per 4 elements.
extern "C" __global__ void cast_bf16(unsigned short* dst, const float* src, u64 n) {
    u64 done = 0;
    if (((u64)src & 15) == 0 && ((u64)dst & 7) == 0) {
        const u64 quads = n / 4;
        for (u64 i = global_index(); i < quads; i += grid_stride()) {
            const float4 x = ((const float4*)src)[i];
            uint2 packed;
            packed.x = (u32)to_bf16(x.x) | ((u32)to_bf16(x.y) << 16);
            packed.y = (u32)to_bf16(x.z) | ((u32)to_bf16(x.w) << 16);
            ((uint2*)dst)[i] = packed;
        }
        done = 4 * quads;
    }
    for (u64 i = done + global_index(); i < n; i += grid_stride()) {
        dst[i] = to_bf16(src[i]);
    }
}
