// Causal grouped-query attention, flash-style: scores exist one tile of 32 keys (or
// queries) at a time, in shared memory and registers; the forward pass keeps a running
// max and sum per query (online softmax) and saves the log-sum-exp, from which the
// backward pass recomputes the probabilities. No float atomics: every output element
// has one writer (dq from query blocks, dk and dv from key blocks).
//
// Layouts: q, out, dout, dq [N, H*hd]; k, v, dk, dv [N, KV*hd]; lse, delta [N, H].
// Query head h reads key/value head h / group (group = H / KV); scale = 1 / sqrt(hd).
// `spans` [N, 2] holds, for each row of the packed batch, the start and end (exclusive)
// of its sequence: query row i sees keys start(i) ..= i, and key row j is seen by
// queries j .. end(j). Heads are at most MAX_HEAD_DIM wide.
//
// Work split: one warp per query (or key) row at a time, each lane owning one key (or
// query) of the tile for the scores and hd / 32 dimensions of the outputs; probabilities
// reach the other lanes through warp shuffles.

#define TILE 32
#define MAX_HEAD_DIM 128
#define DIMS_PER_LANE (MAX_HEAD_DIM / WARP_SIZE)
#define ATTN_WARPS 4
#define ATTN_THREADS (ATTN_WARPS * WARP_SIZE)
#define FORWARD_ROWS_PER_WARP 4
#define FORWARD_ROWS (ATTN_WARPS * FORWARD_ROWS_PER_WARP)
#define BACKWARD_ROWS_PER_WARP 2
#define BACKWARD_ROWS (ATTN_WARPS * BACKWARD_ROWS_PER_WARP)

// Elements each thread loads before it stores any while staging a tile: loads issued one
// after another are in flight together, where a load stored before the next is issued
// waits out its own trip to memory (a 32 x 64 tile is 16 elements a thread).
#define STAGE_LOADS 8

// Loads `count` rows (from `first`, of `limit` valid ones) of `width`-strided `src`,
// columns col .. col + hd, times `factor`, into tile[TILE][stride]; rows past the
// limit read as zero.
__device__ __forceinline__ void load_rows(float* tile, u32 stride, const float* src, u32 first,
                                          u32 count, u32 limit, u64 width, u32 col, u32 head_dim,
                                          float factor) {
    const u32 total = count * head_dim;
    for (u32 base = threadIdx.x; base < total; base += ATTN_THREADS * STAGE_LOADS) {
        float values[STAGE_LOADS];
#pragma unroll
        for (u32 i = 0; i < STAGE_LOADS; i++) {
            const u32 idx = base + i * ATTN_THREADS;
            const u32 row = first + idx / head_dim;
            values[i] = idx < total && row < limit
                            ? src[(u64)row * width + col + idx % head_dim] * factor
                            : 0.0f;
        }
#pragma unroll
        for (u32 i = 0; i < STAGE_LOADS; i++) {
            const u32 idx = base + i * ATTN_THREADS;
            if (idx < total) tile[(idx / head_dim) * stride + idx % head_dim] = values[i];
        }
    }
}

// Forward. Grid (ceil(N / 16), H); block 4 warps, each owning 4 query rows of head h.
// out[n, h] = softmax_j(scale q[n, h] . k[j, g]) . v[j, g] over the visible keys j,
// lse[n, h] = the log-sum-exp of those scaled scores; out's bf16 copy too when `out_copy`
// is not null.
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
attention_forward(float* out, bf16* out_copy, float* lse, const float* q, const float* k,
                  const float* v, const u32* spans, u32 rows, u32 heads, u32 group,
                  u32 head_dim, float scale) {
    __shared__ float ks[TILE][MAX_HEAD_DIM + 1];
    __shared__ float vs[TILE][MAX_HEAD_DIM];
    __shared__ float qs[FORWARD_ROWS][MAX_HEAD_DIM];
    const u32 head = blockIdx.y;
    const u32 first = blockIdx.x * FORWARD_ROWS;
    if (first >= rows) {
        return;
    }
    const u32 end = min(first + FORWARD_ROWS, rows);
    const u64 q_width = (u64)heads * head_dim;
    const u64 kv_width = (u64)(heads / group) * head_dim;
    const u32 kv_col = (head / group) * head_dim;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    load_rows(&qs[0][0], MAX_HEAD_DIM, q, first, FORWARD_ROWS, end, q_width, head * head_dim,
              head_dim, scale);

    float m[FORWARD_ROWS_PER_WARP];
    float l[FORWARD_ROWS_PER_WARP];
    float acc[FORWARD_ROWS_PER_WARP][DIMS_PER_LANE];
    u32 start[FORWARD_ROWS_PER_WARP];
#pragma unroll
    for (u32 i = 0; i < FORWARD_ROWS_PER_WARP; i++) {
        const u32 row = first + warp * FORWARD_ROWS_PER_WARP + i;
        m[i] = NEG_BIG;
        l[i] = 0.0f;
        start[i] = row < end ? spans[2 * row] : 0;
#pragma unroll
        for (u32 e = 0; e < DIMS_PER_LANE; e++) {
            acc[i][e] = 0.0f;
        }
    }

    // Keys from the first row's sequence start to the last row (inclusive).
    for (u32 tile = spans[2 * first]; tile < end; tile += TILE) {
        __syncthreads();
        load_rows(&ks[0][0], MAX_HEAD_DIM + 1, k, tile, TILE, end, kv_width, kv_col, head_dim,
                  1.0f);
        load_rows(&vs[0][0], MAX_HEAD_DIM, v, tile, TILE, end, kv_width, kv_col, head_dim, 1.0f);
        __syncthreads();
#pragma unroll
        for (u32 i = 0; i < FORWARD_ROWS_PER_WARP; i++) {
            const u32 r = warp * FORWARD_ROWS_PER_WARP + i;
            const u32 row = first + r;
            // Warp-uniform: the row exists and sees some key of this tile.
            if (row >= end || tile > row || tile + TILE <= start[i]) {
                continue;
            }
            const u32 key = tile + lane;
            const bool visible = key >= start[i] && key <= row;
            float score = NEG_BIG;
            if (visible) {
                float dot = 0.0f;
                for (u32 d = 0; d < head_dim; d++) {
                    dot += qs[r][d] * ks[lane][d];
                }
                score = dot;
            }
            const float m_new = fmaxf(m[i], warp_max(score));
            const float p = visible ? expf(score - m_new) : 0.0f;
            const float correction = expf(m[i] - m_new);
            l[i] = l[i] * correction + warp_sum(p);
#pragma unroll
            for (u32 e = 0; e < DIMS_PER_LANE; e++) {
                acc[i][e] *= correction;
            }
            for (u32 j = 0; j < TILE; j++) {
                const float pj = __shfl_sync(FULL_MASK, p, j);
#pragma unroll
                for (u32 e = 0; e < DIMS_PER_LANE; e++) {
                    const u32 d = lane + e * WARP_SIZE;
                    if (d < head_dim) {
                        acc[i][e] += pj * vs[j][d];
                    }
                }
            }
            m[i] = m_new;
        }
    }

#pragma unroll
    for (u32 i = 0; i < FORWARD_ROWS_PER_WARP; i++) {
        const u32 row = first + warp * FORWARD_ROWS_PER_WARP + i;
        if (row >= end) {
            continue;
        }
        const u64 at = (u64)row * q_width + head * head_dim;
#pragma unroll
        for (u32 e = 0; e < DIMS_PER_LANE; e++) {
            const u32 d = lane + e * WARP_SIZE;
            if (d < head_dim) {
                const float o = acc[i][e] / l[i];
                out[at + d] = o;
                store_copy(out_copy, at + d, o);
            }
        }
        if (lane == 0) {
            lse[(u64)row * heads + head] = m[i] + logf(l[i]);
        }
    }
}

// delta[n, h] = dout[n, h, :] . out[n, h, :], one warp per (row, head).
// delta[N, H], dout and out [N, H*hd].
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
attention_delta(float* delta, const float* dout, const float* out, u32 rows, u32 heads,
                u32 head_dim) {
    const u64 tasks = (u64)rows * heads;
    const u64 task = (u64)blockIdx.x * ATTN_WARPS + threadIdx.x / WARP_SIZE;
    if (task >= tasks) {
        return;
    }
    const u64 at = task * head_dim;
    float acc = 0.0f;
    for (u32 d = threadIdx.x % WARP_SIZE; d < head_dim; d += WARP_SIZE) {
        acc += dout[at + d] * out[at + d];
    }
    acc = warp_sum(acc);
    if (threadIdx.x % WARP_SIZE == 0) {
        delta[task] = acc;
    }
}

// Query gradient. Grid (ceil(N / 8), H); block 4 warps, each owning 2 query rows. With
// P = exp(scale q.k - lse) and dS = P (dout.v - delta): dq = scale * sum_j dS_j k_j.
// dq[N, H*hd] (overwritten).
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
attention_backward_dq(float* dq, const float* q, const float* k, const float* v,
                      const float* dout, const float* lse, const float* delta, const u32* spans,
                      u32 rows, u32 heads, u32 group, u32 head_dim, float scale) {
    __shared__ float ks[TILE][MAX_HEAD_DIM + 1];
    __shared__ float vs[TILE][MAX_HEAD_DIM + 1];
    __shared__ float qs[BACKWARD_ROWS][MAX_HEAD_DIM];
    __shared__ float dos[BACKWARD_ROWS][MAX_HEAD_DIM];
    const u32 head = blockIdx.y;
    const u32 first = blockIdx.x * BACKWARD_ROWS;
    if (first >= rows) {
        return;
    }
    const u32 end = min(first + BACKWARD_ROWS, rows);
    const u64 q_width = (u64)heads * head_dim;
    const u64 kv_width = (u64)(heads / group) * head_dim;
    const u32 kv_col = (head / group) * head_dim;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    load_rows(&qs[0][0], MAX_HEAD_DIM, q, first, BACKWARD_ROWS, end, q_width, head * head_dim,
              head_dim, scale);
    load_rows(&dos[0][0], MAX_HEAD_DIM, dout, first, BACKWARD_ROWS, end, q_width,
              head * head_dim, head_dim, 1.0f);

    float acc[BACKWARD_ROWS_PER_WARP][DIMS_PER_LANE];
    float row_lse[BACKWARD_ROWS_PER_WARP];
    float row_delta[BACKWARD_ROWS_PER_WARP];
    u32 start[BACKWARD_ROWS_PER_WARP];
#pragma unroll
    for (u32 i = 0; i < BACKWARD_ROWS_PER_WARP; i++) {
        const u32 row = first + warp * BACKWARD_ROWS_PER_WARP + i;
        const bool valid = row < end;
        start[i] = valid ? spans[2 * row] : 0;
        row_lse[i] = valid ? lse[(u64)row * heads + head] : 0.0f;
        row_delta[i] = valid ? delta[(u64)row * heads + head] : 0.0f;
#pragma unroll
        for (u32 e = 0; e < DIMS_PER_LANE; e++) {
            acc[i][e] = 0.0f;
        }
    }

    for (u32 tile = spans[2 * first]; tile < end; tile += TILE) {
        __syncthreads();
        load_rows(&ks[0][0], MAX_HEAD_DIM + 1, k, tile, TILE, end, kv_width, kv_col, head_dim,
                  1.0f);
        load_rows(&vs[0][0], MAX_HEAD_DIM + 1, v, tile, TILE, end, kv_width, kv_col, head_dim,
                  1.0f);
        __syncthreads();
#pragma unroll
        for (u32 i = 0; i < BACKWARD_ROWS_PER_WARP; i++) {
            const u32 r = warp * BACKWARD_ROWS_PER_WARP + i;
            const u32 row = first + r;
            if (row >= end || tile > row || tile + TILE <= start[i]) {
                continue;
            }
            const u32 key = tile + lane;
            float ds = 0.0f;
            if (key >= start[i] && key <= row) {
                float score = 0.0f;
                float dp = 0.0f;
                for (u32 d = 0; d < head_dim; d++) {
                    score += qs[r][d] * ks[lane][d];
                    dp += dos[r][d] * vs[lane][d];
                }
                ds = expf(score - row_lse[i]) * (dp - row_delta[i]);
            }
            for (u32 j = 0; j < TILE; j++) {
                const float dsj = __shfl_sync(FULL_MASK, ds, j);
#pragma unroll
                for (u32 e = 0; e < DIMS_PER_LANE; e++) {
                    const u32 d = lane + e * WARP_SIZE;
                    if (d < head_dim) {
                        acc[i][e] += dsj * ks[j][d];
                    }
                }
            }
        }
    }

#pragma unroll
    for (u32 i = 0; i < BACKWARD_ROWS_PER_WARP; i++) {
        const u32 row = first + warp * BACKWARD_ROWS_PER_WARP + i;
        if (row >= end) {
            continue;
        }
        float* dq_row = dq + row * q_width + head * head_dim;
#pragma unroll
        for (u32 e = 0; e < DIMS_PER_LANE; e++) {
            const u32 d = lane + e * WARP_SIZE;
            if (d < head_dim) {
                dq_row[d] = acc[i][e] * scale;
            }
        }
    }
}

// Key and value gradients. Grid (ceil(N / 8), KV); block 4 warps, each owning 2 key rows
// of key/value head g, walking the queries that see them in every query head of the
// group: dv = sum_i P_i dout_i, dk = sum_i dS_i (scale q_i).
// dk, dv [N, KV*hd] (overwritten).
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
attention_backward_dkv(float* dk, float* dv, const float* q, const float* k, const float* v,
                       const float* dout, const float* lse, const float* delta,
                       const u32* spans, u32 rows, u32 heads, u32 group, u32 head_dim,
                       float scale) {
    __shared__ float qs[TILE][MAX_HEAD_DIM + 1];
    __shared__ float dos[TILE][MAX_HEAD_DIM + 1];
    __shared__ float ks[BACKWARD_ROWS][MAX_HEAD_DIM];
    __shared__ float vs[BACKWARD_ROWS][MAX_HEAD_DIM];
    __shared__ float tile_lse[TILE];
    __shared__ float tile_delta[TILE];
    const u32 g = blockIdx.y;
    const u32 first = blockIdx.x * BACKWARD_ROWS;
    if (first >= rows) {
        return;
    }
    const u32 end = min(first + BACKWARD_ROWS, rows);
    const u64 q_width = (u64)heads * head_dim;
    const u64 kv_width = (u64)(heads / group) * head_dim;
    const u32 kv_col = g * head_dim;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    load_rows(&ks[0][0], MAX_HEAD_DIM, k, first, BACKWARD_ROWS, end, kv_width, kv_col, head_dim,
              1.0f);
    load_rows(&vs[0][0], MAX_HEAD_DIM, v, first, BACKWARD_ROWS, end, kv_width, kv_col, head_dim,
              1.0f);

    float dk_acc[BACKWARD_ROWS_PER_WARP][DIMS_PER_LANE];
    float dv_acc[BACKWARD_ROWS_PER_WARP][DIMS_PER_LANE];
    u32 stop[BACKWARD_ROWS_PER_WARP];
#pragma unroll
    for (u32 i = 0; i < BACKWARD_ROWS_PER_WARP; i++) {
        const u32 row = first + warp * BACKWARD_ROWS_PER_WARP + i;
        stop[i] = row < end ? spans[2 * row + 1] : 0;
#pragma unroll
        for (u32 e = 0; e < DIMS_PER_LANE; e++) {
            dk_acc[i][e] = 0.0f;
            dv_acc[i][e] = 0.0f;
        }
    }
    // Queries from the first key row to the end of the last key row's sequence.
    const u32 query_end = spans[2 * (end - 1) + 1];

    for (u32 hh = 0; hh < group; hh++) {
        const u32 head = g * group + hh;
        for (u32 tile = first; tile < query_end; tile += TILE) {
            __syncthreads();
            load_rows(&qs[0][0], MAX_HEAD_DIM + 1, q, tile, TILE, query_end, q_width,
                      head * head_dim, head_dim, scale);
            load_rows(&dos[0][0], MAX_HEAD_DIM + 1, dout, tile, TILE, query_end, q_width,
                      head * head_dim, head_dim, 1.0f);
            if (threadIdx.x < TILE) {
                const u32 query = tile + threadIdx.x;
                const bool inside = query < query_end;
                tile_lse[threadIdx.x] = inside ? lse[(u64)query * heads + head] : 0.0f;
                tile_delta[threadIdx.x] = inside ? delta[(u64)query * heads + head] : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (u32 i = 0; i < BACKWARD_ROWS_PER_WARP; i++) {
                const u32 r = warp * BACKWARD_ROWS_PER_WARP + i;
                const u32 row = first + r;
                if (row >= end || tile >= stop[i] || tile + TILE <= row) {
                    continue;
                }
                const u32 query = tile + lane;
                float p = 0.0f;
                float ds = 0.0f;
                if (query >= row && query < stop[i]) {
                    float score = 0.0f;
                    float dp = 0.0f;
                    for (u32 d = 0; d < head_dim; d++) {
                        score += qs[lane][d] * ks[r][d];
                        dp += dos[lane][d] * vs[r][d];
                    }
                    p = expf(score - tile_lse[lane]);
                    ds = p * (dp - tile_delta[lane]);
                }
                for (u32 j = 0; j < TILE; j++) {
                    const float pj = __shfl_sync(FULL_MASK, p, j);
                    const float dsj = __shfl_sync(FULL_MASK, ds, j);
#pragma unroll
                    for (u32 e = 0; e < DIMS_PER_LANE; e++) {
                        const u32 d = lane + e * WARP_SIZE;
                        if (d < head_dim) {
                            dv_acc[i][e] += pj * dos[j][d];
                            dk_acc[i][e] += dsj * qs[j][d];
                        }
                    }
                }
            }
        }
    }

#pragma unroll
    for (u32 i = 0; i < BACKWARD_ROWS_PER_WARP; i++) {
        const u32 row = first + warp * BACKWARD_ROWS_PER_WARP + i;
        if (row >= end) {
            continue;
        }
        const u64 at = row * kv_width + kv_col;
#pragma unroll
        for (u32 e = 0; e < DIMS_PER_LANE; e++) {
            const u32 d = lane + e * WARP_SIZE;
            if (d < head_dim) {
                dk[at + d] = dk_acc[i][e];
                dv[at + d] = dv_acc[i][e];
            }
        }
    }
}
