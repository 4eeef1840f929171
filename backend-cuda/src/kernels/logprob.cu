// The row kernels of the fused output head. The host runs the head over chunks of
// rows: a cuBLAS GEMM makes one chunk's logits[rows, V], then logprob_rows reduces each
// row to its log-sum-exp and the target's log-prob (forward), or logprob_dlogits turns
// the logits in place into the gradient of sum_n w[n] * logp[n] (backward), which two
// more GEMMs carry into dhidden and dlm_head.
//
// A target at or above V gives a NaN log-prob and no one-hot term.

#define HEAD_THREADS 512

// One block per row (grid-stride over blocks): lse[n] = log sum_j exp(logits[n, j]),
// logp[n] = logits[n, targets[n]] - lse[n].
// logits[rows, V], targets[rows], logp[rows], lse[rows].
extern "C" __global__ void __launch_bounds__(HEAD_THREADS)
logprob_rows(const float* logits, const u32* targets, float* logp, float* lse, u32 rows,
             u32 vocab) {
    __shared__ float scratch[32];
    for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* x = logits + (u64)row * vocab;
        float m = NEG_BIG;
        for (u32 j = threadIdx.x; j < vocab; j += HEAD_THREADS) {
            m = fmaxf(m, x[j]);
        }
        m = block_max(m, scratch);
        float s = 0.0f;
        for (u32 j = threadIdx.x; j < vocab; j += HEAD_THREADS) {
            s += expf(x[j] - m);
        }
        s = block_sum(s, scratch);
        if (threadIdx.x == 0) {
            const float l = m + logf(s);
            const u32 target = targets[row];
            lse[row] = l;
            logp[row] = target < vocab ? x[target] - l : quiet_nan();
        }
    }
}

// dlogits[n, j] = w[n] * (onehot(targets[n])[j] - exp(logits[n, j] - lse[n])) from
// logits[rows, V]; rows of weight 0 become 0. weights[rows], lse[rows]. `Out` is how the
// gradient is held: f32 (in place over the logits) or bf16 (the bf16 mode's copies:
// the two GEMMs after it read nothing else, so no cast is needed).
template <typename Out>
__device__ __forceinline__ void dlogits_rows(Out* dlogits, const float* logits,
                                             const u32* targets, const float* weights,
                                             const float* lse, u32 rows, u32 vocab) {
    const u64 total = (u64)rows * vocab;
    for (u64 i = global_index(); i < total; i += grid_stride()) {
        const u32 row = (u32)(i / vocab);
        const u32 j = (u32)(i % vocab);
        const float w = weights[row];
        float d = 0.0f;
        if (w != 0.0f) {
            d = -w * expf(logits[i] - lse[row]);
            if (j == targets[row]) {
                d += w;
            }
        }
        store(dlogits + i, d);
    }
}

// dlogits[rows, V] in f32; the host passes the logits themselves, so they become dlogits
// in place.
extern "C" __global__ void logprob_dlogits(float* dlogits, const float* logits,
                                           const u32* targets, const float* weights,
                                           const float* lse, u32 rows, u32 vocab) {
    dlogits_rows(dlogits, logits, targets, weights, lse, rows, vocab);
}

// dlogits[rows, V] in bf16, rounded to nearest even, from logits[rows, V] (left as they are).
extern "C" __global__ void logprob_dlogits_bf16(bf16* dlogits, const float* logits,
                                                const u32* targets, const float* weights,
                                                const float* lse, u32 rows, u32 vocab) {
    dlogits_rows(dlogits, logits, targets, weights, lse, rows, vocab);
}
