// Helpers every kernel source shares; the backend prepends this file to each source
// before NVRTC compiles it (NVRTC sees no include files and no standard headers).
// Reductions run in a fixed order (shuffles and shared-memory trees), never with float
// atomics, so results are the same from run to run.

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

typedef unsigned int u32;
typedef unsigned long long u64;

// Below every finite score; stands for minus infinity in running maxima.
#define NEG_BIG (-3.0e38f)

// A quiet NaN, for results that have no value (a target outside the vocabulary).
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

// A bf16 value as its 16 bits.
typedef unsigned short bf16;

// bf16 bits of x, rounded to nearest even (NaN stays NaN).
__device__ __forceinline__ unsigned short to_bf16(float x) {
    u32 bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((bits >> 16) | 0x40u);
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (unsigned short)(bits >> 16);
}

// The f32 value of bf16 bits (exact).
__device__ __forceinline__ float from_bf16(bf16 x) { return __uint_as_float((u32)x << 16); }

// An operand element as f32, whether the buffer holds f32 or bf16 (the bf16 mode's KV
// caches and frozen weights): for kernels templated over how an operand is held.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return from_bf16(x); }

// Writes x to an element held as f32, or as bf16 rounded to nearest even: for kernels
// templated over how an output is held.
__device__ __forceinline__ void store(float* at, float x) { *at = x; }
__device__ __forceinline__ void store(bf16* at, float x) { *at = to_bf16(x); }

// Writes x to copy[i] when the caller asked for a bf16 copy of a kernel's output
// (`copy` not null): the bf16 mode's GEMM input, written as the f32 tensor is, so no
// cast kernel has to read it again. The same rounding as `cast_bf16`.
__device__ __forceinline__ void store_copy(bf16* copy, u64 i, float x) {
    if (copy != nullptr) {
        store(copy + i, x);
    }
}

// The index of this thread in a one-dimensional grid, and the grid's width, in 64 bits
// (tensors may exceed 2^32 elements).
__device__ __forceinline__ u64 global_index() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u64 grid_stride() { return (u64)gridDim.x * blockDim.x; }

// Sum and maximum over a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    }
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    return v;
}

// Sum and maximum over a block whose size is a multiple of 32 (at most 1024); every
// thread gets the result. `scratch` holds 32 floats of shared memory; the leading
// barrier lets callers reuse it back to back.
__device__ float block_sum(float v, float* scratch) {
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 warps = blockDim.x / WARP_SIZE;
    __syncthreads();
    v = warp_sum(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ float block_max(float v, float* scratch) {
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 warps = blockDim.x / WARP_SIZE;
    __syncthreads();
    v = warp_max(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    v = lane < warps ? scratch[lane] : NEG_BIG;
    return warp_max(v);
}
