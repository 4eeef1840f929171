// Decoding against a KV cache: appending each sequence's new key/value row, and one
// query per sequence attending to its cached rows with an online softmax over tiles of
// 32 keys. Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd],
// q, out [B, H*hd]; lengths [B] on the device. Heads are at most 128 wide.

#define DECODE_TILE 32
#define DECODE_MAX_HEAD_DIM 128
#define DECODE_DIMS_PER_LANE (DECODE_MAX_HEAD_DIM / WARP_SIZE)

// k_cache[b, lengths[b], :] = k[b, :] and the same for v, one thread per element.
extern "C" __global__ void kv_cache_append(float* k_cache, float* v_cache, const float* k,
                                           const float* v, const u32* lengths, u32 batch,
                                           u32 width, u32 capacity) {
    const u64 total = (u64)batch * width;
    for (u64 t = global_index(); t < total; t += grid_stride()) {
        const u64 b = t / width;
        const u64 at = (b * capacity + lengths[b]) * width + t % width;
        k_cache[at] = k[t];
        v_cache[at] = v[t];
    }
}

// One warp per (sequence b, head h): grid (B, H), block 32. The query attends to rows
// 0 .. lengths[b] of its caches: out[b, h] = softmax(scale q . k) . v.
extern "C" __global__ void __launch_bounds__(WARP_SIZE)
attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                 const u32* lengths, u32 capacity, u32 heads, u32 group, u32 head_dim,
                 float scale) {
    __shared__ float ks[DECODE_TILE][DECODE_MAX_HEAD_DIM + 1];
    __shared__ float vs[DECODE_TILE][DECODE_MAX_HEAD_DIM];
    __shared__ float qs[DECODE_MAX_HEAD_DIM];
    const u32 b = blockIdx.x;
    const u32 head = blockIdx.y;
    const u32 lane = threadIdx.x;
    const u64 q_width = (u64)heads * head_dim;
    const u64 kv_width = (u64)(heads / group) * head_dim;
    const u32 kv_col = (head / group) * head_dim;
    const u32 length = lengths[b];
    const float* q_row = q + b * q_width + head * head_dim;
    for (u32 d = lane; d < head_dim; d += WARP_SIZE) {
        qs[d] = q_row[d] * scale;
    }
    const u64 cache = (u64)b * capacity;
    float m = NEG_BIG;
    float l = 0.0f;
    float acc[DECODE_DIMS_PER_LANE];
#pragma unroll
    for (u32 e = 0; e < DECODE_DIMS_PER_LANE; e++) {
        acc[e] = 0.0f;
    }
    for (u32 tile = 0; tile < length; tile += DECODE_TILE) {
        __syncwarp();
        for (u32 idx = lane; idx < DECODE_TILE * head_dim; idx += WARP_SIZE) {
            const u32 j = idx / head_dim;
            const u32 d = idx % head_dim;
            const bool inside = tile + j < length;
            const u64 at = (cache + tile + j) * kv_width + kv_col + d;
            ks[j][d] = inside ? k_cache[at] : 0.0f;
            vs[j][d] = inside ? v_cache[at] : 0.0f;
        }
        __syncwarp();
        const bool visible = tile + lane < length;
        float score = NEG_BIG;
        if (visible) {
            float dot = 0.0f;
            for (u32 d = 0; d < head_dim; d++) {
                dot += qs[d] * ks[lane][d];
            }
            score = dot;
        }
        const float m_new = fmaxf(m, warp_max(score));
        const float p = visible ? expf(score - m_new) : 0.0f;
        const float correction = expf(m - m_new);
        l = l * correction + warp_sum(p);
#pragma unroll
        for (u32 e = 0; e < DECODE_DIMS_PER_LANE; e++) {
            acc[e] *= correction;
        }
        for (u32 j = 0; j < DECODE_TILE; j++) {
            const float pj = __shfl_sync(FULL_MASK, p, j);
#pragma unroll
            for (u32 e = 0; e < DECODE_DIMS_PER_LANE; e++) {
                const u32 d = lane + e * WARP_SIZE;
                if (d < head_dim) {
                    acc[e] += pj * vs[j][d];
                }
            }
        }
        m = m_new;
    }
    float* out_row = out + b * q_width + head * head_dim;
#pragma unroll
    for (u32 e = 0; e < DECODE_DIMS_PER_LANE; e++) {
        const u32 d = lane + e * WARP_SIZE;
        if (d < head_dim) {
            out_row[d] = acc[e] / l;
        }
    }
}
