// Picking each row's next token where the logits are, so that only (token, log-prob)
// pairs are copied to the host: the rule of the host's sampling::choose, in f32.
//
// choices[B, 2] (token id as f32, exact below 2^24; log softmax(logits)[token]) from
// logits[B, V]; uniforms[B] (f32 bits) in [0, 1), read only when sampling. One block per
// row:
//   1. the maximum and the lowest id holding it (a tree over the block's threads), and
//      whether every logit is finite (a row that is not gets (-1, NaN));
//   2. greedy: that id. Sampling: each thread owns a contiguous chunk of ids and sums
//      its weights exp((x - max) / T) in id order; thread 0 turns the chunk sums into
//      running sums; the thread whose chunk holds uniform * total walks it to the first
//      id where the running sum passes the target (rounding past the end: the last id);
//   3. log softmax at the token from the sum of exp(x - max).
// Every sum runs in a fixed order, so a row's choice repeats run to run.

#define CHOOSE_THREADS 256
// Logits each thread loads before it uses the first of them: a row of 151,936 is then
// about 75 trips to memory per thread, not one per logit.
#define CHOOSE_LOADS 8

// Whether x is neither infinite nor NaN (its exponent bits are not all ones).
__device__ __forceinline__ bool finite_bits(float x) {
    return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

extern "C" __global__ void __launch_bounds__(CHOOSE_THREADS)
choose_tokens(float* choices, const float* logits, const u32* uniforms, u32 vocab,
              float inverse_temperature, u32 greedy) {
    __shared__ float best_value[CHOOSE_THREADS];
    __shared__ u32 best_id[CHOOSE_THREADS];
    __shared__ float chunk_sum[CHOOSE_THREADS];
    __shared__ float chunk_start[CHOOSE_THREADS];
    __shared__ float reduce_scratch[WARP_SIZE];
    __shared__ float total_weight;
    __shared__ u32 picked;
    const u32 row = blockIdx.x;
    const u32 t = threadIdx.x;
    const float* x = logits + (u64)row * vocab;

    // 1. The maximum, its lowest id, and finiteness. Ids are visited in increasing order
    // per thread, so a strict comparison keeps the lowest id.
    float best = NEG_BIG;
    u32 best_at = 0xffffffffu;
    float finite = 1.0f;
    for (u32 base = t; base < vocab; base += CHOOSE_LOADS * CHOOSE_THREADS) {
        float values[CHOOSE_LOADS];
#pragma unroll
        for (u32 k = 0; k < CHOOSE_LOADS; k++) {
            const u32 i = base + k * CHOOSE_THREADS;
            values[k] = i < vocab ? x[i] : 0.0f;
        }
#pragma unroll
        for (u32 k = 0; k < CHOOSE_LOADS; k++) {
            const u32 i = base + k * CHOOSE_THREADS;
            if (i >= vocab) {
                continue;
            }
            if (!finite_bits(values[k])) {
                finite = 0.0f;
            } else if (values[k] > best) {
                best = values[k];
                best_at = i;
            }
        }
    }
    best_value[t] = best;
    best_id[t] = best_at;
    for (u32 half = CHOOSE_THREADS / 2; half > 0; half /= 2) {
        __syncthreads();
        if (t < half) {
            const float other = best_value[t + half];
            const u32 other_at = best_id[t + half];
            if (other > best_value[t] || (other == best_value[t] && other_at < best_id[t])) {
                best_value[t] = other;
                best_id[t] = other_at;
            }
        }
    }
    const float all_finite = block_sum(finite, reduce_scratch);
    __syncthreads();
    const float max = best_value[0];
    const u32 argmax = best_id[0];
    if (all_finite < (float)CHOOSE_THREADS) {
        if (t == 0) {
            choices[2 * row] = -1.0f;
            choices[2 * row + 1] = quiet_nan();
        }
        return;
    }

    // 2. The token, and the softmax's normaliser sum(exp(x - max)) by chunks.
    const u32 chunk = (vocab + CHOOSE_THREADS - 1) / CHOOSE_THREADS;
    const u32 first = min(t * chunk, vocab);
    const u32 end = min(first + chunk, vocab);
    float normaliser = 0.0f;
    float weights = 0.0f;
    for (u32 base = first; base < end; base += CHOOSE_LOADS) {
        float values[CHOOSE_LOADS];
#pragma unroll
        for (u32 k = 0; k < CHOOSE_LOADS; k++) {
            values[k] = base + k < end ? x[base + k] : 0.0f;
        }
#pragma unroll
        for (u32 k = 0; k < CHOOSE_LOADS; k++) {
            if (base + k >= end) {
                continue;
            }
            const float shifted = values[k] - max;
            normaliser += expf(shifted);
            if (!greedy) {
                weights += expf(shifted * inverse_temperature);
            }
        }
    }
    const float total_normaliser = block_sum(normaliser, reduce_scratch);
    if (greedy) {
        if (t == 0) {
            picked = argmax;
        }
    } else {
        chunk_sum[t] = weights;
        __syncthreads();
        if (t == 0) {
            float running = 0.0f;
            for (u32 c = 0; c < CHOOSE_THREADS; c++) {
                chunk_start[c] = running;
                running += chunk_sum[c];
            }
            total_weight = running;
            // Past every running sum: the last id, as the host does.
            picked = vocab - 1;
        }
        __syncthreads();
        const float target = __uint_as_float(uniforms[row]) * total_weight;
        // The one chunk whose share of the running sum holds the target walks its ids
        // (its last id when rounding in the walk falls short of the target).
        if (first < end && chunk_start[t] <= target && target < chunk_start[t] + weights) {
            float running = chunk_start[t];
            u32 at = end - 1;
            for (u32 i = first; i < end; i++) {
                running += expf((x[i] - max) * inverse_temperature);
                if (running > target) {
                    at = i;
                    break;
                }
            }
            picked = at;
        }
    }
    __syncthreads();
    if (t == 0) {
        const u32 token = picked;
        choices[2 * row] = (float)token;
        choices[2 * row + 1] = x[token] - max - logf(total_normaliser);
    }
}
