// Rotary position embedding in the Qwen2 / Hugging Face "rotate_half" layout: in each
// head, element i is paired with element i + hd/2 and the pair is rotated by
// pos * inv_freq[i]. The host computes inv_freq[i] = 1 / theta^(2i / hd) in f32 as the
// CPU backend does, so both use the same f32 angles. The backward pass (the transpose)
// is the rotation by the opposite angle: sign -1. A decoding step's keys are rotated
// straight into the KV cache (`rope_append_kv`).

// The pair (a, b) rotated by `angle` (by -angle when `sign` is -1): every kernel here
// rotates through this one function, so their rotations agree to the bit.
__device__ __forceinline__ void rotate_pair(float& a, float& b, float angle, float sign) {
    float sine, cosine;
    sincosf(angle, &sine, &cosine);
    sine *= sign;
    const float rotated_a = a * cosine - b * sine;
    const float rotated_b = b * cosine + a * sine;
    a = rotated_a;
    b = rotated_b;
}

// x[N, heads * hd] rotated in place, after adding bias[heads * hd] to every row when
// `bias` is not null (the query and key projections' bias, added as `add_bias` adds it:
// the same f32 sums, without a pass of its own), and its bf16 copy x_copy[N, heads * hd]
// when not null; positions[N], inv_freq[hd / 2]. One thread per (row, head, pair). The
// bias is f32, or bf16 for the bf16 mode's frozen weights (`rope_bias_bf16`).
template <typename Bias>
__device__ __forceinline__ void rope_pairs(float* x, bf16* x_copy, const Bias* bias,
                                           const u32* positions, const float* inv_freq,
                                           u32 rows, u32 heads, u32 head_dim, float sign) {
    const u32 half = head_dim / 2;
    const u64 total = (u64)rows * heads * half;
    for (u64 t = global_index(); t < total; t += grid_stride()) {
        const u32 i = (u32)(t % half);
        const u64 head_row = t / half;  // row * heads + head
        const u32 row = (u32)(head_row / heads);
        const u64 at = head_row * head_dim + i;
        float a = x[at];
        float b = x[at + half];
        if (bias != nullptr) {
            const u32 column = (u32)(head_row % heads) * head_dim + i;
            a += to_f32(bias[column]);
            b += to_f32(bias[column + half]);
        }
        rotate_pair(a, b, (float)positions[row] * inv_freq[i], sign);
        x[at] = a;
        x[at + half] = b;
        store_copy(x_copy, at, a);
        store_copy(x_copy, at + half, b);
    }
}

extern "C" __global__ void rope(float* x, bf16* x_copy, const float* bias, const u32* positions,
                                const float* inv_freq, u32 rows, u32 heads, u32 head_dim,
                                float sign) {
    rope_pairs(x, x_copy, bias, positions, inv_freq, rows, heads, head_dim, sign);
}
extern "C" __global__ void rope_bias_bf16(float* x, bf16* x_copy, const bf16* bias,
                                          const u32* positions, const float* inv_freq, u32 rows,
                                          u32 heads, u32 head_dim, float sign) {
    rope_pairs(x, x_copy, bias, positions, inv_freq, rows, heads, head_dim, sign);
}

// One decoding step's new rows between their projections and attention
// (`rope_append_kv`), in one pass: q[B, H*hd] += q_bias and rotated in place (with its
// bf16 copy q_copy when not null); k[B, KV*hd] + k_bias rotated, and v[B, KV*hd] + v_bias,
// written into the caches [B, capacity, KV*hd] at row lengths[b] (k and v themselves are
// left as they were). The same sums, rotation and cache rounding as `rope` then
// `kv_cache_append`. A null bias is none; positions[B], lengths[B], inv_freq[hd / 2]. One
// thread per (row, head, pair) over a row's H + 2 KV heads: queries, keys, values.
template <typename Cache, typename Bias>
__device__ __forceinline__ void rope_append_rows(float* q, bf16* q_copy, Cache* k_cache,
                                                 Cache* v_cache, const float* k, const float* v,
                                                 const Bias* q_bias, const Bias* k_bias,
                                                 const Bias* v_bias, const u32* positions,
                                                 const u32* lengths, const float* inv_freq,
                                                 u32 batch, u32 heads, u32 kv_heads,
                                                 u32 head_dim, u32 capacity) {
    const u32 half = head_dim / 2;
    const u32 row_heads = heads + 2 * kv_heads;
    const u64 total = (u64)batch * row_heads * half;
    for (u64 t = global_index(); t < total; t += grid_stride()) {
        const u32 i = (u32)(t % half);
        const u64 head_row = t / half;  // row * row_heads + head
        const u32 row = (u32)(head_row / row_heads);
        const u32 head = (u32)(head_row % row_heads);
        if (head < heads) {
            const u64 at = ((u64)row * heads + head) * head_dim + i;
            float a = q[at];
            float b = q[at + half];
            if (q_bias != nullptr) {
                a += to_f32(q_bias[head * head_dim + i]);
                b += to_f32(q_bias[head * head_dim + i + half]);
            }
            rotate_pair(a, b, (float)positions[row] * inv_freq[i], 1.0f);
            q[at] = a;
            q[at + half] = b;
            store_copy(q_copy, at, a);
            store_copy(q_copy, at + half, b);
            continue;
        }
        const bool is_key = head < heads + kv_heads;
        const u32 kv_head = is_key ? head - heads : head - heads - kv_heads;
        const u32 column = kv_head * head_dim + i;
        const u64 from = (u64)row * kv_heads * head_dim + column;
        const u64 to = ((u64)row * capacity + lengths[row]) * kv_heads * head_dim + column;
        const float* source = is_key ? k : v;
        const Bias* bias = is_key ? k_bias : v_bias;
        float a = source[from];
        float b = source[from + half];
        if (bias != nullptr) {
            a += to_f32(bias[column]);
            b += to_f32(bias[column + half]);
        }
        if (is_key) {
            rotate_pair(a, b, (float)positions[row] * inv_freq[i], 1.0f);
        }
        Cache* cache = is_key ? k_cache : v_cache;
        store(cache + to, a);
        store(cache + to + half, b);
    }
}

#define ROPE_APPEND_PARAMS(CACHE, BIAS)                                                       \
    float *q, bf16 *q_copy, CACHE *k_cache, CACHE *v_cache, const float *k, const float *v,   \
        const BIAS *q_bias, const BIAS *k_bias, const BIAS *v_bias, const u32 *positions,      \
        const u32 *lengths, const float *inv_freq, u32 batch, u32 heads, u32 kv_heads,         \
        u32 head_dim, u32 capacity
#define ROPE_APPEND_ARGS                                                                       \
    q, q_copy, k_cache, v_cache, k, v, q_bias, k_bias, v_bias, positions, lengths, inv_freq,   \
        batch, heads, kv_heads, head_dim, capacity

// f32 caches and biases (the f32 mode).
extern "C" __global__ void rope_append_kv(ROPE_APPEND_PARAMS(float, float)) {
    rope_append_rows(ROPE_APPEND_ARGS);
}
// bf16 caches, f32 biases (the bf16 mode with trainable weights).
extern "C" __global__ void rope_append_kv_bf16(ROPE_APPEND_PARAMS(bf16, float)) {
    rope_append_rows(ROPE_APPEND_ARGS);
}
// bf16 caches and biases (the bf16 mode with frozen bf16 weights).
extern "C" __global__ void rope_append_kv_bf16_bias_bf16(ROPE_APPEND_PARAMS(bf16, bf16)) {
    rope_append_rows(ROPE_APPEND_ARGS);
}
