// Decoding against a KV cache: appending each sequence's new key/value row, and one
// query per sequence attending to its cached rows with an online softmax over tiles of
// 32 keys. Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd],
// q, out [B, H*hd]; lengths [B] on the device. Heads are at most 128 wide.
//
// Each kernel is a template over how the cache holds an element (`Cache`): f32, or the
// bf16 mode's bf16 bits, rounded to nearest even as a row is appended and widened
// exactly as a tile is staged. The entries without a suffix take f32 caches, the
// `_bf16` ones bf16 caches; everything after staging is the same f32 arithmetic.

#define DECODE_TILE 32
#define DECODE_MAX_HEAD_DIM 128
#define DECODE_DIMS_PER_LANE (DECODE_MAX_HEAD_DIM / WARP_SIZE)

// k_cache[b, lengths[b], :] = k[b, :] and the same for v, one thread per element.
template <typename Cache>
__device__ __forceinline__ void append_rows(Cache* k_cache, Cache* v_cache, const float* k,
                                            const float* v, const u32* lengths, u32 batch,
                                            u32 width, u32 capacity) {
    const u64 total = (u64)batch * width;
    for (u64 t = global_index(); t < total; t += grid_stride()) {
        const u64 b = t / width;
        const u64 at = (b * capacity + lengths[b]) * width + t % width;
        store(k_cache + at, k[t]);
        store(v_cache + at, v[t]);
    }
}

extern "C" __global__ void kv_cache_append(float* k_cache, float* v_cache, const float* k,
                                           const float* v, const u32* lengths, u32 batch,
                                           u32 width, u32 capacity) {
    append_rows(k_cache, v_cache, k, v, lengths, batch, width, capacity);
}
extern "C" __global__ void kv_cache_append_bf16(bf16* k_cache, bf16* v_cache, const float* k,
                                                const float* v, const u32* lengths, u32 batch,
                                                u32 width, u32 capacity) {
    append_rows(k_cache, v_cache, k, v, lengths, batch, width, capacity);
}

// 16-byte loads of keys and of values each thread has in flight while staging a tile:
// a batch is issued whole before its first value is stored.
#define DECODE_STAGE_LOADS 4

// The values of 16 bytes of a cache row, widened exactly to f32 at `to`: 4 f32, or 8 bf16
// (each 32-bit word holds two, the lower-indexed in its low half).
__device__ __forceinline__ void widen_chunk(float* to, uint4 chunk, const float*) {
    to[0] = __uint_as_float(chunk.x);
    to[1] = __uint_as_float(chunk.y);
    to[2] = __uint_as_float(chunk.z);
    to[3] = __uint_as_float(chunk.w);
}
__device__ __forceinline__ void widen_chunk(float* to, uint4 chunk, const bf16*) {
    const u32 words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
    for (u32 i = 0; i < 4; i++) {
        to[2 * i] = from_bf16((bf16)(words[i] & 0xffffu));
        to[2 * i + 1] = from_bf16((bf16)(words[i] >> 16));
    }
}

// Stages rows tile .. tile + DECODE_TILE of key/value head column kv_col of sequence
// `cache` (its first row) into ks, vs as f32; rows at or past `limit` read as zero. All
// threads of the block take part. Where a head's rows are whole 16-byte chunks (the
// widths multiples of 4 f32 or 8 bf16, the caches 16-byte aligned), each thread loads
// DECODE_STAGE_LOADS chunks of keys and of values before it stores any, so a tile is
// one or two trips to memory; otherwise one element at a time.
template <typename Cache>
__device__ __forceinline__ void stage_decode_tile(float (*ks)[DECODE_MAX_HEAD_DIM + 1],
                                                  float (*vs)[DECODE_MAX_HEAD_DIM],
                                                  const Cache* k_cache, const Cache* v_cache,
                                                  u64 cache, u32 tile, u32 limit, u64 kv_width,
                                                  u32 kv_col, u32 head_dim) {
    constexpr u32 ELEMS = 16 / sizeof(Cache);
    const bool chunked = head_dim % ELEMS == 0 && kv_width % ELEMS == 0 && kv_col % ELEMS == 0 &&
                         ((u64)k_cache & 15) == 0 && ((u64)v_cache & 15) == 0;
    if (!chunked) {
        for (u32 idx = threadIdx.x; idx < DECODE_TILE * head_dim; idx += blockDim.x) {
            const u32 j = idx / head_dim;
            const u32 d = idx % head_dim;
            const bool inside = tile + j < limit;
            const u64 at = (cache + tile + j) * kv_width + kv_col + d;
            ks[j][d] = inside ? to_f32(k_cache[at]) : 0.0f;
            vs[j][d] = inside ? to_f32(v_cache[at]) : 0.0f;
        }
        return;
    }
    const u32 per_row = head_dim / ELEMS;
    const u32 chunks = DECODE_TILE * per_row;
    for (u32 first = threadIdx.x; first < chunks; first += DECODE_STAGE_LOADS * blockDim.x) {
        uint4 k_chunk[DECODE_STAGE_LOADS];
        uint4 v_chunk[DECODE_STAGE_LOADS];
#pragma unroll
        for (u32 i = 0; i < DECODE_STAGE_LOADS; i++) {
            const u32 idx = first + i * blockDim.x;
            const u32 j = idx / per_row;
            k_chunk[i] = v_chunk[i] = uint4{0u, 0u, 0u, 0u};
            if (idx < chunks && tile + j < limit) {
                const u64 at = (cache + tile + j) * kv_width + kv_col + (idx % per_row) * ELEMS;
                k_chunk[i] = *(const uint4*)(k_cache + at);
                v_chunk[i] = *(const uint4*)(v_cache + at);
            }
        }
#pragma unroll
        for (u32 i = 0; i < DECODE_STAGE_LOADS; i++) {
            const u32 idx = first + i * blockDim.x;
            if (idx < chunks) {
                const u32 j = idx / per_row;
                const u32 d = (idx % per_row) * ELEMS;
                widen_chunk(&ks[j][d], k_chunk[i], k_cache);
                widen_chunk(&vs[j][d], v_chunk[i], v_cache);
            }
        }
    }
}

// One staged tile's update of a query's online softmax, by one warp: lane j scores key j
// (when `visible`) against the scaled query `q`; the running max m, sum l and the lane's
// dimensions of acc take the tile in.
__device__ __forceinline__ void attend_tile(const float* q,
                                            const float (*ks)[DECODE_MAX_HEAD_DIM + 1],
                                            const float (*vs)[DECODE_MAX_HEAD_DIM],
                                            bool visible, u32 head_dim, float& m, float& l,
                                            float acc[DECODE_DIMS_PER_LANE]) {
    const u32 lane = threadIdx.x % WARP_SIZE;
    float score = NEG_BIG;
    if (visible) {
        float dot = 0.0f;
        for (u32 d = 0; d < head_dim; d++) {
            dot += q[d] * ks[lane][d];
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

// One warp per (sequence b, head h): grid (B, H), block 32. The query attends to rows
// 0 .. lengths[b] of its caches: out[b, h] = softmax(scale q . k) . v, and out's bf16 copy
// when `out_copy` is not null.
template <typename Cache>
__device__ __forceinline__ void attend_one_warp(float* out, bf16* out_copy, const float* q,
                                                const Cache* k_cache, const Cache* v_cache,
                                                const u32* lengths, u32 capacity, u32 heads,
                                                u32 group, u32 head_dim, float scale) {
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
        stage_decode_tile(ks, vs, k_cache, v_cache, cache, tile, length, kv_width, kv_col,
                          head_dim);
        __syncwarp();
        attend_tile(qs, ks, vs, tile + lane < length, head_dim, m, l, acc);
    }
    const u64 at = b * q_width + head * head_dim;
#pragma unroll
    for (u32 e = 0; e < DECODE_DIMS_PER_LANE; e++) {
        const u32 d = lane + e * WARP_SIZE;
        if (d < head_dim) {
            const float o = acc[e] / l;
            out[at + d] = o;
            store_copy(out_copy, at + d, o);
        }
    }
}

extern "C" __global__ void __launch_bounds__(WARP_SIZE)
attention_decode(float* out, bf16* out_copy, const float* q, const float* k_cache,
                 const float* v_cache, const u32* lengths, u32 capacity, u32 heads, u32 group,
                 u32 head_dim, float scale) {
    attend_one_warp(out, out_copy, q, k_cache, v_cache, lengths, capacity, heads, group,
                    head_dim, scale);
}
extern "C" __global__ void __launch_bounds__(WARP_SIZE)
attention_decode_bf16(float* out, bf16* out_copy, const float* q, const bf16* k_cache,
                      const bf16* v_cache, const u32* lengths, u32 capacity, u32 heads,
                      u32 group, u32 head_dim, float scale) {
    attend_one_warp(out, out_copy, q, k_cache, v_cache, lengths, capacity, heads, group,
                    head_dim, scale);
}

// Split-KV decoding for the bf16 mode's fast path, in two kernels. Each block owns one
// (sequence b, key/value head g) and one split of up to SPLIT_KEYS cached rows: it
// stages each tile of keys and values once for all the group's query heads (its 4
// warps take the heads in turn) and leaves per-head partial results; a second kernel
// merges the splits. The arithmetic is the kernel above's, f32 throughout; only the
// order of the sums differs.
//
// Partials, for split s of sequence b and query head h: acc[B, H, S, hd] = the
// unnormalised sum of p_j v_j, and ml[B, H, S, 2] = (running max m, sum of exp l). A
// split with no rows leaves (NEG_BIG, 0) and zeros.

#define SPLIT_KEYS 256
#define SPLIT_WARPS 4
#define SPLIT_THREADS (SPLIT_WARPS * WARP_SIZE)
// The widest group (query heads per key/value head) the split kernel holds.
#define SPLIT_MAX_GROUP 16
#define SPLIT_HEADS_PER_WARP (SPLIT_MAX_GROUP / SPLIT_WARPS)

// Grid (B * S, KV); block 4 warps. Block x covers sequence x / S, split x % S.
template <typename Cache>
__device__ __forceinline__ void attend_split(float* part_acc, float* part_ml, const float* q,
                                             const Cache* k_cache, const Cache* v_cache,
                                             const u32* lengths, u32 capacity, u32 heads,
                                             u32 group, u32 head_dim, u32 splits,
                                             float scale) {
    __shared__ float ks[DECODE_TILE][DECODE_MAX_HEAD_DIM + 1];
    __shared__ float vs[DECODE_TILE][DECODE_MAX_HEAD_DIM];
    __shared__ float qs[SPLIT_MAX_GROUP][DECODE_MAX_HEAD_DIM];
    const u32 b = blockIdx.x / splits;
    const u32 split = blockIdx.x % splits;
    const u32 g = blockIdx.y;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u64 q_width = (u64)heads * head_dim;
    const u64 kv_width = (u64)(heads / group) * head_dim;
    const u32 kv_col = g * head_dim;
    const u32 length = lengths[b];
    const u32 first = split * SPLIT_KEYS;
    const u32 end = min(first + SPLIT_KEYS, length);
    for (u32 idx = threadIdx.x; idx < group * head_dim; idx += SPLIT_THREADS) {
        const u32 i = idx / head_dim;
        const u32 d = idx % head_dim;
        qs[i][d] = q[b * q_width + (g * group + i) * head_dim + d] * scale;
    }
    const u64 cache = (u64)b * capacity;
    float m[SPLIT_HEADS_PER_WARP];
    float l[SPLIT_HEADS_PER_WARP];
    float acc[SPLIT_HEADS_PER_WARP][DECODE_DIMS_PER_LANE];
#pragma unroll
    for (u32 r = 0; r < SPLIT_HEADS_PER_WARP; r++) {
        m[r] = NEG_BIG;
        l[r] = 0.0f;
#pragma unroll
        for (u32 e = 0; e < DECODE_DIMS_PER_LANE; e++) {
            acc[r][e] = 0.0f;
        }
    }
    for (u32 tile = first; tile < end; tile += DECODE_TILE) {
        __syncthreads();
        stage_decode_tile(ks, vs, k_cache, v_cache, cache, tile, end, kv_width, kv_col,
                          head_dim);
        __syncthreads();
#pragma unroll
        for (u32 r = 0; r < SPLIT_HEADS_PER_WARP; r++) {
            const u32 i = warp + r * SPLIT_WARPS;
            if (i < group) {
                attend_tile(qs[i], ks, vs, tile + lane < end, head_dim, m[r], l[r], acc[r]);
            }
        }
    }
#pragma unroll
    for (u32 r = 0; r < SPLIT_HEADS_PER_WARP; r++) {
        const u32 i = warp + r * SPLIT_WARPS;
        if (i >= group) {
            continue;
        }
        const u64 part = ((u64)b * heads + g * group + i) * splits + split;
#pragma unroll
        for (u32 e = 0; e < DECODE_DIMS_PER_LANE; e++) {
            const u32 d = lane + e * WARP_SIZE;
            if (d < head_dim) {
                part_acc[part * head_dim + d] = acc[r][e];
            }
        }
        if (lane == 0) {
            part_ml[2 * part] = m[r];
            part_ml[2 * part + 1] = l[r];
        }
    }
}

extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
attention_decode_split(float* part_acc, float* part_ml, const float* q, const float* k_cache,
                       const float* v_cache, const u32* lengths, u32 capacity, u32 heads,
                       u32 group, u32 head_dim, u32 splits, float scale) {
    attend_split(part_acc, part_ml, q, k_cache, v_cache, lengths, capacity, heads, group,
                 head_dim, splits, scale);
}
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
attention_decode_split_bf16(float* part_acc, float* part_ml, const float* q,
                            const bf16* k_cache, const bf16* v_cache, const u32* lengths,
                            u32 capacity, u32 heads, u32 group, u32 head_dim, u32 splits,
                            float scale) {
    attend_split(part_acc, part_ml, q, k_cache, v_cache, lengths, capacity, heads, group,
                 head_dim, splits, scale);
}

// Merges the splits: grid (B, H), one warp. With M the largest running max of the
// splits, out[b, h] = sum_s acc_s exp(m_s - M) / sum_s l_s exp(m_s - M), and out's bf16
// copy when `out_copy` is not null.
extern "C" __global__ void __launch_bounds__(WARP_SIZE)
attention_decode_combine(float* out, bf16* out_copy, const float* part_acc,
                         const float* part_ml, u32 heads, u32 head_dim, u32 splits) {
    const u32 b = blockIdx.x;
    const u32 head = blockIdx.y;
    const u64 base = ((u64)b * heads + head) * splits;
    float max = NEG_BIG;
    for (u32 s = 0; s < splits; s++) {
        max = fmaxf(max, part_ml[2 * (base + s)]);
    }
    float total = 0.0f;
    for (u32 s = 0; s < splits; s++) {
        total += part_ml[2 * (base + s) + 1] * expf(part_ml[2 * (base + s)] - max);
    }
    const u64 at = ((u64)b * heads + head) * head_dim;
    for (u32 d = threadIdx.x; d < head_dim; d += WARP_SIZE) {
        float sum = 0.0f;
        for (u32 s = 0; s < splits; s++) {
            sum += part_acc[(base + s) * head_dim + d] * expf(part_ml[2 * (base + s)] - max);
        }
        const float o = sum / total;
        out[at + d] = o;
        store_copy(out_copy, at + d, o);
    }
}
