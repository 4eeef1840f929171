// Causal grouped-query attention on tensor cores, for the bf16 precision mode. The
// mathematics, layouts and work split are attention.cu's (a forward pass with an online
// softmax that saves the log-sum-exp; dq from query blocks and dk, dv from key blocks,
// recomputing the probabilities, so every output element has one writer), but each
// product of two tiles is a warp-wide mma.sync m16n8k16 with bf16 operands and f32
// accumulation. Tensors stay f32 in global memory (the Kernels contract addresses f32
// elements); tiles are rounded to bf16 as they are staged in shared memory, softmax
// statistics and accumulators stay f32.
//
// Layouts: q, out, dout, dq [N, H*hd]; k, v, dk, dv [N, KV*hd]; lse, delta [N, H]; spans
// [N, 2] (start, end) of each row's sequence, as in attention.cu. Query head h reads
// key/value head h / group in place (no copies per query head).
//
// Fragments of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA), for lane =
// 4 * g + t, with r = g and c = 2 * t; each 32-bit register holds two bf16, the one of
// lower column (or row) index in its low half:
//   A (16 x 16, 4 registers): A[r][c..c+1], A[r+8][c..c+1], A[r][c+8..c+9], A[r+8][c+8..c+9]
//   B (16 x 8, 2 registers):  B[c..c+1][r], B[c+8..c+9][r]
//   C (16 x 8, 4 floats):     C[r][c], C[r][c+1], C[r+8][c], C[r+8][c+1]
// A kernel's products run over its widest head MAX_HEAD, whatever the model's head: the
// staged tiles hold zeros past head_dim, which add nothing to any product. The mma
// itself, `mma_bf16`, and `pack_f32`, which rounds two f32 into the bf16 pair of one
// register, are in tensor_core.cuh, which the backend prepends to this file.

#define FLASH_WARPS 4
#define FLASH_THREADS (FLASH_WARPS * WARP_SIZE)
// Rows of a warp's tile: the m of one mma.
#define WARP_ROWS 16
// Query rows per block of the forward and dq kernels, key rows per block of dk/dv.
#define FLASH_ROWS (FLASH_WARPS * WARP_ROWS)
// Keys per tile of the forward pass and of the dq kernel (dk/dv's queries per tile are
// flash_dkv's template argument).
#define FORWARD_KEYS 64
#define DQ_KEYS 32
// Widest head of every kernel. Each kernel body is a template over the widest head
// MAX_HEAD it holds (128, or 64 for narrower models), which sets the row stride of its
// staged bf16 tiles, STRIDE = MAX_HEAD + 8 (8 elements of padding put the 8 rows one
// fragment load touches in different banks), and its k-steps of 16 (STEPS) and n-tiles
// of 8 (TILES) across a head, all constants, so that no product waits on a branch; the
// staging and fragment loaders take STRIDE.
#define FLASH_MAX_HEAD_DIM 128

// Loads of 16 bytes each thread has in flight while staging a tile: a batch is issued
// whole before its first value is converted, so staging 64 rows costs one or two trips
// to memory, not one per row.
#define STAGE_LOADS 8

// Four f32 of a row from `at` (columns d .. d + 3 of a head of head_dim), zero for a row
// outside the batch (`inside` false) and for columns at or past head_dim; `vector` says
// one 16-byte load may read them (head and row widths multiples of 4, `at` aligned).
__device__ __forceinline__ float4 load_quad(const float* at, bool inside, u32 d, u32 head_dim,
                                            bool vector) {
    float4 x = {0.0f, 0.0f, 0.0f, 0.0f};
    if (inside && vector && d < head_dim) {
        x = *(const float4*)at;
    } else if (inside && !vector) {
        x.x = d < head_dim ? at[0] : 0.0f;
        x.y = d + 1 < head_dim ? at[1] : 0.0f;
        x.z = d + 2 < head_dim ? at[2] : 0.0f;
        x.w = d + 3 < head_dim ? at[3] : 0.0f;
    }
    return x;
}

// Stages ROWS rows from `first` of each of the SOURCES `width`-strided f32 matrices
// `srcs` (all read at columns col .. col + head_dim), as bf16 into tiles[s][ROWS][MAX_HEAD
// + 8]; rows at or past `limit` and columns head_dim .. MAX_HEAD are zero, so the products
// may run over the whole MAX_HEAD. Each thread converts 4 adjacent columns of one row per
// pass, and the block covers FLASH_THREADS / (MAX_HEAD / 4) rows a pass. The loads of all
// the sources go out in batches of STAGE_LOADS before any of a batch is converted, so
// tiles staged together (keys and values, queries and their output gradients) cost the
// trips to memory of one when their loads fit a batch; every count is a constant, so the
// loops unroll.
template <u32 ROWS, u32 MAX_HEAD, u32 SOURCES>
__device__ __forceinline__ void stage_tiles(bf16* const (&tiles)[SOURCES],
                                            const float* const (&srcs)[SOURCES], u32 first,
                                            u32 limit, u64 width, u32 col, u32 head_dim) {
    constexpr u32 STRIDE = MAX_HEAD + 8;
    constexpr u32 QUADS = MAX_HEAD / 4;
    constexpr u32 ROWS_PER_PASS = FLASH_THREADS / QUADS;
    constexpr u32 PASSES = ROWS / ROWS_PER_PASS;
    constexpr u32 LOADS = SOURCES * PASSES;
    static_assert(FLASH_THREADS % QUADS == 0 && ROWS % ROWS_PER_PASS == 0,
                  "a tile is a whole number of passes");
    const u32 d = 4 * (threadIdx.x % QUADS);
    const u32 r0 = threadIdx.x / QUADS;
    bool vector = head_dim % 4 == 0 && width % 4 == 0 && col % 4 == 0;
#pragma unroll
    for (u32 source = 0; source < SOURCES; source++) {
        vector = vector && ((u64)srcs[source] & 15) == 0;
    }
#pragma unroll
    for (u32 batch = 0; batch < LOADS; batch += STAGE_LOADS) {
        float4 x[STAGE_LOADS];
#pragma unroll
        for (u32 p = 0; p < STAGE_LOADS && batch + p < LOADS; p++) {
            const u32 source = (batch + p) / PASSES;
            const u32 row = first + r0 + (batch + p) % PASSES * ROWS_PER_PASS;
            x[p] = load_quad(srcs[source] + (u64)row * width + col + d, row < limit, d, head_dim,
                             vector);
        }
#pragma unroll
        for (u32 p = 0; p < STAGE_LOADS && batch + p < LOADS; p++) {
            const u32 source = (batch + p) / PASSES;
            const u32 row = r0 + (batch + p) % PASSES * ROWS_PER_PASS;
            u32* out = (u32*)(tiles[source] + row * STRIDE + d);
            out[0] = pack_f32(x[p].x, x[p].y);
            out[1] = pack_f32(x[p].z, x[p].w);
        }
    }
}

// One tile: stage_tiles of a single source.
template <u32 ROWS, u32 MAX_HEAD>
__device__ __forceinline__ void stage_rows(bf16* tile, const float* src, u32 first, u32 limit,
                                           u64 width, u32 col, u32 head_dim) {
    bf16* const tiles[1] = {tile};
    const float* const srcs[1] = {src};
    stage_tiles<ROWS, MAX_HEAD, 1>(tiles, srcs, first, limit, width, col, head_dim);
}

// Fragment loads are ldmatrix instructions (tensor_core.cuh): each lane points at one
// 16-byte row of one of four 8 x 8 blocks of a staged tile (lane / 8 picks the block), and
// the warp receives the four blocks in fragment order. Rows STRIDE apart fall in
// different banks, so a load is one shared-memory access.

// The A fragment of the 16 x 16 block at (row0, k0) of a staged tile T[m][k]: blocks
// (row0, k0), (row0 + 8, k0), (row0, k0 + 8), (row0 + 8, k0 + 8).
template <u32 STRIDE>
__device__ __forceinline__ void load_a(u32 a[4], const bf16* tile, u32 row0, u32 k0) {
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 block = lane / 8;
    ldmatrix_x4(a, tile + (row0 + lane % 8 + 8 * (block % 2)) * STRIDE + k0 + 8 * (block / 2));
}

// The B fragments of the 16 x 8 blocks at (k0, n0) and (k0, n0 + 8) of B = T^T, for a
// staged tile T[n][k] (B's columns are the tile's rows: keys against a query's
// dimensions), into b[0] and b[1]: blocks (n0, k0), (n0, k0 + 8), (n0 + 8, k0),
// (n0 + 8, k0 + 8) of T.
template <u32 STRIDE>
__device__ __forceinline__ void load_b_transposed_pair(u32 b[2][2], const bf16* tile, u32 k0,
                                                       u32 n0) {
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 block = lane / 8;
    u32 r[4];
    ldmatrix_x4(r, tile + (n0 + lane % 8 + 8 * (block / 2)) * STRIDE + k0 + 8 * (block % 2));
    b[0][0] = r[0];
    b[0][1] = r[1];
    b[1][0] = r[2];
    b[1][1] = r[3];
}

// The B fragments of the 16 x 8 blocks at (k0, n0) and (k0, n0 + 8) of B = T, for a
// staged tile T[k][n] (values against the output's dimensions), into b[0] and b[1]:
// blocks (k0, n0), (k0 + 8, n0), (k0, n0 + 8), (k0 + 8, n0 + 8) of T, transposed as they
// load (a B register pairs two rows of T).
template <u32 STRIDE>
__device__ __forceinline__ void load_b_pair(u32 b[2][2], const bf16* tile, u32 k0, u32 n0) {
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 block = lane / 8;
    u32 r[4];
    ldmatrix_x4_trans(r, tile + (k0 + lane % 8 + 8 * (block % 2)) * STRIDE + n0 + 8 * (block / 2));
    b[0][0] = r[0];
    b[0][1] = r[1];
    b[1][0] = r[2];
    b[1][1] = r[3];
}

// d0 += a . b[0] and d1 += a . b[1]: one A fragment against the two n-tiles a pair load
// gave.
__device__ __forceinline__ void mma_pair(float d0[4], float d1[4], const u32 a[4],
                                         const u32 b[2][2]) {
    mma_bf16(d0, a, b[0]);
    mma_bf16(d1, a, b[1]);
}

// The A fragment of k-step `step` (columns 16 step .. 16 step + 15) of a 16-row matrix
// held as C fragments, one per 8 columns: probabilities or score gradients fed back in.
__device__ __forceinline__ void c_to_a(u32 a[4], const float left[4], const float right[4]) {
    a[0] = pack_f32(left[0], left[1]);
    a[1] = pack_f32(left[2], left[3]);
    a[2] = pack_f32(right[0], right[1]);
    a[3] = pack_f32(right[2], right[3]);
}

// The sum and maximum over the 4 lanes that hold one row of a C fragment.
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(FULL_MASK, v, 1);
    return v + __shfl_xor_sync(FULL_MASK, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 1));
    return fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 2));
}

// The widths every flash kernel derives from its arguments: the rows of q and of k, v.
struct FlashShape {
    u64 q_width;
    u64 kv_width;
};

__device__ __forceinline__ FlashShape flash_shape(u32 heads, u32 group, u32 head_dim) {
    return FlashShape{(u64)heads * head_dim, (u64)(heads / group) * head_dim};
}

// This warp's 16 rows of a staged tile as A fragments, one per k-step of the head.
template <u32 STEPS, u32 STRIDE>
__device__ __forceinline__ void load_warp_rows(u32 frags[STEPS][4], const bf16* tile) {
    const u32 warp = threadIdx.x / WARP_SIZE;
#pragma unroll
    for (u32 s = 0; s < STEPS; s++) {
        load_a<STRIDE>(frags[s], tile, warp * WARP_ROWS, 16 * s);
    }
}

// The keys a warp's query rows (from `warp_first`, below `end`) can see, for skipping
// whole tiles and masking only where needed: none when the warp has no rows, else from
// its first row's sequence start to its last row, with the last row's sequence start.
struct KeyWindow {
    bool any;
    u32 start;
    u32 first;
    u32 last;
    u32 last_start;
};

__device__ __forceinline__ KeyWindow key_window(u32 warp_first, u32 end, const u32* spans) {
    const bool any = warp_first < end;
    const u32 last = min(warp_first + WARP_ROWS, end) - 1;
    return KeyWindow{any,
                     any ? spans[2 * warp_first] : 0,
                     warp_first,
                     last,
                     any ? spans[2 * last] : 0};
}

// Whether no row of the window sees a key of the tile of `keys` keys from `tile`.
__device__ __forceinline__ bool outside(KeyWindow w, u32 tile, u32 keys) {
    return !w.any || tile > w.last || tile + keys <= w.start;
}

// Whether every one of the warp's 16 rows sees every key of the tile: the rows are all in
// the batch, the tile starts at or after the last row's sequence start, and it ends at
// or before the first row (each row sees the keys up to itself). Such a tile needs no mask.
__device__ __forceinline__ bool sees_whole_tile(KeyWindow w, u32 tile, u32 keys) {
    return w.last == w.first + WARP_ROWS - 1 && tile >= w.last_start && tile + keys <= w.first + 1;
}

// The keys lo ..= hi that query row `row` sees; a row at or past `end` sees none (lo > hi).
__device__ __forceinline__ void visible_keys(u32 row, u32 end, const u32* spans, u32& lo,
                                             u32& hi) {
    const bool valid = row < end;
    lo = valid ? spans[2 * row] : 1;
    hi = valid ? row : 0;
}

// Sets to NEG_BIG the scores of a warp's rows (a lane's two, r and r + 8) against a tile
// of KEYS keys from `tile` that the rows do not see (keys outside lo ..= hi): a score of
// NEG_BIG has probability 0, scaled or not.
template <u32 KEYS>
__device__ __forceinline__ void mask_scores(float s[KEYS / 8][4], u32 tile, u32 c,
                                            const u32 lo[2], const u32 hi[2]) {
#pragma unroll
    for (u32 j = 0; j < KEYS / 8; j++) {
#pragma unroll
        for (u32 e = 0; e < 4; e++) {
            const u32 half = e / 2;
            const u32 key = tile + 8 * j + c + e % 2;
            if (key < lo[half] || key > hi[half]) {
                s[j][e] = NEG_BIG;
            }
        }
    }
}

// Forward. Grid (ceil(N / 64), H); block 4 warps, each owning 16 query rows of head h.
// out[n, h] = softmax_j(scale q[n, h] . k[j, g]) . v[j, g] over the visible keys j,
// lse[n, h] = the log-sum-exp of those scaled scores, and out's bf16 copy when `out_copy`
// is not null. Each lane holds two rows of the warp (r and r + 8) and, of every 8 keys or
// dimensions, columns c and c + 1.
template <u32 MAX_HEAD>
__device__ __forceinline__ void flash_forward_body(float* out, bf16* out_copy, float* lse,
                                                   const float* q, const float* k, const float* v,
                                                   const u32* spans, u32 rows, u32 heads,
                                                   u32 group, u32 head_dim, float scale) {
    constexpr u32 STRIDE = MAX_HEAD + 8;
    constexpr u32 STEPS = MAX_HEAD / 16;
    constexpr u32 TILES = MAX_HEAD / 8;
    __shared__ __align__(16) bf16 ks[FORWARD_KEYS * STRIDE];
    __shared__ __align__(16) bf16 vs[FORWARD_KEYS * STRIDE];
    const u32 head = blockIdx.y;
    const u32 first = blockIdx.x * FLASH_ROWS;
    if (first >= rows) {
        return;
    }
    const u32 end = min(first + FLASH_ROWS, rows);
    const FlashShape shape = flash_shape(heads, group, head_dim);
    const u32 kv_col = (head / group) * head_dim;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 c = 2 * (lane % 4);

    // This warp's query rows as A fragments, staged through the key buffer.
    stage_rows<FLASH_ROWS, MAX_HEAD>(ks, q, first, end, shape.q_width, head * head_dim, head_dim);
    __syncthreads();
    u32 qa[STEPS][4];
    load_warp_rows<STEPS, STRIDE>(qa, ks);

    // The lane's two rows.
    const u32 warp_first = first + warp * WARP_ROWS;
    u32 row[2], lo[2], hi[2];
    float m[2], l[2];
#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        row[half] = warp_first + lane / 4 + 8 * half;
        visible_keys(row[half], end, spans, lo[half], hi[half]);
        m[half] = NEG_BIG;
        l[half] = 0.0f;
    }
    const KeyWindow window = key_window(warp_first, end, spans);
    float o[TILES][4];
#pragma unroll
    for (u32 t = 0; t < TILES; t++) {
        o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    }

    // Keys from the first row's sequence start to the last row (inclusive), each tile's
    // keys and values staged together.
    bf16* const kv_tiles[2] = {ks, vs};
    const float* const kv[2] = {k, v};
    for (u32 tile = spans[2 * first]; tile < end; tile += FORWARD_KEYS) {
        __syncthreads();
        stage_tiles<FORWARD_KEYS, MAX_HEAD, 2>(kv_tiles, kv, tile, end, shape.kv_width, kv_col,
                                               head_dim);
        __syncthreads();
        // Warp-uniform: skip a tile no row of the warp sees a key of.
        if (outside(window, tile, FORWARD_KEYS)) {
            continue;
        }
        // s[16 rows][64 keys] = q . k^T, as 8 C fragments of 8 keys.
        float s[FORWARD_KEYS / 8][4];
#pragma unroll
        for (u32 j = 0; j < FORWARD_KEYS / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        }
#pragma unroll
        for (u32 j = 0; j < FORWARD_KEYS / 8; j += 2) {
#pragma unroll
            for (u32 st = 0; st < STEPS; st++) {
                u32 b[2][2];
                load_b_transposed_pair<STRIDE>(b, ks, 16 * st, 8 * j);
                mma_pair(s[j], s[j + 1], qa[st], b);
            }
        }
        // Scale, and mask where some row of the warp does not see every key of the tile,
        // then the online softmax update per row.
#pragma unroll
        for (u32 j = 0; j < FORWARD_KEYS / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                s[j][e] *= scale;
            }
        }
        if (!sees_whole_tile(window, tile, FORWARD_KEYS)) {
            mask_scores<FORWARD_KEYS>(s, tile, c, lo, hi);
        }
        float tile_max[2] = {NEG_BIG, NEG_BIG};
#pragma unroll
        for (u32 j = 0; j < FORWARD_KEYS / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j][e]);
            }
        }
        float correction[2];
        float m_new[2];
        // The maximum the probabilities are taken against: a row that has seen no key
        // yet (maximum NEG_BIG) takes 0, so its masked scores still give exp(NEG_BIG) = 0.
        float m_exp[2];
#pragma unroll
        for (u32 half = 0; half < 2; half++) {
            m_new[half] = fmaxf(m[half], quad_max(tile_max[half]));
            correction[half] = __expf(m[half] - m_new[half]);
            m_exp[half] = m_new[half] == NEG_BIG ? 0.0f : m_new[half];
        }
        float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (u32 j = 0; j < FORWARD_KEYS / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                const u32 half = e / 2;
                const float p = __expf(s[j][e] - m_exp[half]);
                s[j][e] = p;
                tile_sum[half] += p;
            }
        }
#pragma unroll
        for (u32 half = 0; half < 2; half++) {
            l[half] = l[half] * correction[half] + quad_sum(tile_sum[half]);
            m[half] = m_new[half];
        }
#pragma unroll
        for (u32 t = 0; t < TILES; t++) {
            o[t][0] *= correction[0];
            o[t][1] *= correction[0];
            o[t][2] *= correction[1];
            o[t][3] *= correction[1];
        }
        // o[16 rows][hd] += p . v, 16 keys per k-step.
#pragma unroll
        for (u32 kk = 0; kk < FORWARD_KEYS / 16; kk++) {
            u32 pa[4];
            c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (u32 t = 0; t < TILES; t += 2) {
                u32 b[2][2];
                load_b_pair<STRIDE>(b, vs, 16 * kk, 8 * t);
                mma_pair(o[t], o[t + 1], pa, b);
            }
        }
    }

#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        if (row[half] >= end) {
            continue;
        }
        const float inverse = 1.0f / l[half];
        const u64 at = (u64)row[half] * shape.q_width + head * head_dim;
#pragma unroll
        for (u32 t = 0; t < TILES; t++) {
#pragma unroll
            for (u32 e = 0; e < 2; e++) {
                const u32 d = 8 * t + c + e;
                if (d < head_dim) {
                    const float value = o[t][2 * half + e] * inverse;
                    out[at + d] = value;
                    store_copy(out_copy, at + d, value);
                }
            }
        }
        if (lane % 4 == 0) {
            lse[(u64)row[half] * heads + head] = m[half] + logf(l[half]);
        }
    }
}

// Query gradient. Grid (ceil(N / 64), H); block 4 warps, each owning 16 query rows. With
// P = exp(scale q.k - lse) and dS = P (dout.v - delta): dq = scale * sum_j dS_j k_j.
// dq[N, H*hd] (overwritten).
template <u32 MAX_HEAD>
__device__ __forceinline__ void flash_dq(float* dq, const float* q, const float* k,
                                         const float* v, const float* dout, const float* lse,
                                         const float* delta, const u32* spans, u32 rows,
                                         u32 heads, u32 group, u32 head_dim, float scale) {
    constexpr u32 STRIDE = MAX_HEAD + 8;
    constexpr u32 STEPS = MAX_HEAD / 16;
    constexpr u32 TILES = MAX_HEAD / 8;
    __shared__ __align__(16) bf16 rows_tile[FLASH_ROWS * STRIDE];
    __shared__ __align__(16) bf16 ks[DQ_KEYS * STRIDE];
    __shared__ __align__(16) bf16 vs[DQ_KEYS * STRIDE];
    const u32 head = blockIdx.y;
    const u32 first = blockIdx.x * FLASH_ROWS;
    if (first >= rows) {
        return;
    }
    const u32 end = min(first + FLASH_ROWS, rows);
    const FlashShape shape = flash_shape(heads, group, head_dim);
    const u32 kv_col = (head / group) * head_dim;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 c = 2 * (lane % 4);

    // This warp's rows of q and of dout as A fragments.
    u32 qa[STEPS][4];
    u32 da[STEPS][4];
    stage_rows<FLASH_ROWS, MAX_HEAD>(rows_tile, q, first, end, shape.q_width, head * head_dim,
                                     head_dim);
    __syncthreads();
    load_warp_rows<STEPS, STRIDE>(qa, rows_tile);
    __syncthreads();
    stage_rows<FLASH_ROWS, MAX_HEAD>(rows_tile, dout, first, end, shape.q_width, head * head_dim,
                                     head_dim);
    __syncthreads();
    load_warp_rows<STEPS, STRIDE>(da, rows_tile);

    const u32 warp_first = first + warp * WARP_ROWS;
    u32 lo[2], hi[2];
    float row_lse[2], row_delta[2];
#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        const u32 row = warp_first + lane / 4 + 8 * half;
        visible_keys(row, end, spans, lo[half], hi[half]);
        const bool valid = row < end;
        row_lse[half] = valid ? lse[(u64)row * heads + head] : 0.0f;
        row_delta[half] = valid ? delta[(u64)row * heads + head] : 0.0f;
    }
    const KeyWindow window = key_window(warp_first, end, spans);
    float acc[TILES][4];
#pragma unroll
    for (u32 t = 0; t < TILES; t++) {
        acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    }

    // Each tile's keys and values staged together: at Qwen2.5-0.5B's heads of 64, one
    // batch of loads.
    bf16* const kv_tiles[2] = {ks, vs};
    const float* const kv[2] = {k, v};
    for (u32 tile = spans[2 * first]; tile < end; tile += DQ_KEYS) {
        __syncthreads();
        stage_tiles<DQ_KEYS, MAX_HEAD, 2>(kv_tiles, kv, tile, end, shape.kv_width, kv_col,
                                          head_dim);
        __syncthreads();
        if (outside(window, tile, DQ_KEYS)) {
            continue;
        }
        // s = q . k^T and dp = dout . v^T, [16 rows][32 keys] each.
        float s[DQ_KEYS / 8][4];
        float dp[DQ_KEYS / 8][4];
#pragma unroll
        for (u32 j = 0; j < DQ_KEYS / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                s[j][e] = 0.0f;
                dp[j][e] = 0.0f;
            }
        }
#pragma unroll
        for (u32 j = 0; j < DQ_KEYS / 8; j += 2) {
#pragma unroll
            for (u32 st = 0; st < STEPS; st++) {
                u32 b[2][2];
                load_b_transposed_pair<STRIDE>(b, ks, 16 * st, 8 * j);
                mma_pair(s[j], s[j + 1], qa[st], b);
                load_b_transposed_pair<STRIDE>(b, vs, 16 * st, 8 * j);
                mma_pair(dp[j], dp[j + 1], da[st], b);
            }
        }
        // Scores no row may see become NEG_BIG, whose probability is 0; then s becomes
        // dS = P (dp - delta).
        if (!sees_whole_tile(window, tile, DQ_KEYS)) {
            mask_scores<DQ_KEYS>(s, tile, c, lo, hi);
        }
#pragma unroll
        for (u32 j = 0; j < DQ_KEYS / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                const u32 half = e / 2;
                const float p = __expf(s[j][e] * scale - row_lse[half]);
                s[j][e] = p * (dp[j][e] - row_delta[half]);
            }
        }
        // acc[16 rows][hd] += dS . k, 16 keys per k-step.
#pragma unroll
        for (u32 kk = 0; kk < DQ_KEYS / 16; kk++) {
            u32 dsa[4];
            c_to_a(dsa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (u32 t = 0; t < TILES; t += 2) {
                u32 b[2][2];
                load_b_pair<STRIDE>(b, ks, 16 * kk, 8 * t);
                mma_pair(acc[t], acc[t + 1], dsa, b);
            }
        }
    }

#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        const u32 row = warp_first + lane / 4 + 8 * half;
        if (row >= end) {
            continue;
        }
        float* dq_row = dq + (u64)row * shape.q_width + head * head_dim;
#pragma unroll
        for (u32 t = 0; t < TILES; t++) {
            const u32 d = 8 * t + c;
            if (d < head_dim) {
                dq_row[d] = acc[t][2 * half] * scale;
            }
            if (d + 1 < head_dim) {
                dq_row[d + 1] = acc[t][2 * half + 1] * scale;
            }
        }
    }
}

// Key and value gradients of one query head, for heads of at most MAX_HEAD. Grid
// (ceil(N / 64), H); block 4 warps, each owning 16 key rows of key/value head
// g = h / group, walking QUERIES queries of head h at a time (16 or 32: a wider tile
// does twice the products per barrier and per staging, for 16 more registers of
// scores) over those that see them: dv_h = sum_i P_i dout_i, dk_h = scale * sum_i dS_i
// q_i. Here the C fragments are transposed scores: rows are keys, columns queries. One
// block per query head (not per key/value head) gives the grid H blocks per row block,
// as the forward and dq kernels have, instead of serialising the group's heads in each
// block. dk_heads, dv_heads [N, H*hd] (overwritten): head h's share at columns h*hd.
// With group 1 these are dk and dv themselves; otherwise flash_dkv_group_sum adds the
// group's shares into dk, dv [N, KV*hd].
template <u32 QUERIES, u32 MAX_HEAD>
__device__ __forceinline__ void flash_dkv(float* dk_heads, float* dv_heads, const float* q,
                                          const float* k, const float* v, const float* dout,
                                          const float* lse, const float* delta,
                                          const u32* spans, u32 rows, u32 heads, u32 group,
                                          u32 head_dim, float scale) {
    constexpr u32 STRIDE = MAX_HEAD + 8;
    constexpr u32 STEPS = MAX_HEAD / 16;
    constexpr u32 TILES = MAX_HEAD / 8;
    __shared__ __align__(16) bf16 ks[FLASH_ROWS * STRIDE];
    __shared__ __align__(16) bf16 vs[FLASH_ROWS * STRIDE];
    __shared__ __align__(16) bf16 qs[QUERIES * STRIDE];
    __shared__ __align__(16) bf16 dos[QUERIES * STRIDE];
    __shared__ float tile_lse[QUERIES];
    __shared__ float tile_delta[QUERIES];
    const u32 head = blockIdx.y;
    const u32 g = head / group;
    const u32 first = blockIdx.x * FLASH_ROWS;
    if (first >= rows) {
        return;
    }
    const u32 end = min(first + FLASH_ROWS, rows);
    const FlashShape shape = flash_shape(heads, group, head_dim);
    const u32 kv_col = g * head_dim;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 c = 2 * (lane % 4);
    {
        bf16* const kv_tiles[2] = {ks, vs};
        const float* const kv[2] = {k, v};
        stage_tiles<FLASH_ROWS, MAX_HEAD, 2>(kv_tiles, kv, first, end, shape.kv_width, kv_col,
                                             head_dim);
    }

    // The lane's two key rows and the end of each one's sequence; a key outside the
    // batch is seen by no query.
    const u32 warp_first = first + warp * WARP_ROWS;
    u32 key[2], stop[2];
#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        key[half] = warp_first + lane / 4 + 8 * half;
        stop[half] = key[half] < end ? spans[2 * key[half] + 1] : 0;
    }
    const bool warp_has_rows = warp_first < end;
    const u32 warp_stop = warp_has_rows ? spans[2 * (min(warp_first + WARP_ROWS, end) - 1) + 1] : 0;
    const u32 stop_first = warp_has_rows ? spans[2 * warp_first + 1] : 0;
    float dk_acc[TILES][4];
    float dv_acc[TILES][4];
#pragma unroll
    for (u32 t = 0; t < TILES; t++) {
#pragma unroll
        for (u32 e = 0; e < 4; e++) {
            dk_acc[t][e] = 0.0f;
            dv_acc[t][e] = 0.0f;
        }
    }
    // Queries from the first key row to the end of the last key row's sequence.
    const u32 query_end = spans[2 * (end - 1) + 1];

    // Each tile's queries, output gradients and their rows' lse and delta are loaded
    // together: at heads of 64, one batch of loads, one trip to memory a tile.
    bf16* const query_tiles[2] = {qs, dos};
    const float* const queries[2] = {q, dout};
    for (u32 tile = first; tile < query_end; tile += QUERIES) {
        const u32 query = tile + threadIdx.x;
        const bool stats = threadIdx.x < QUERIES && query < query_end;
        const float query_lse = stats ? lse[(u64)query * heads + head] : 0.0f;
        const float query_delta = stats ? delta[(u64)query * heads + head] : 0.0f;
        __syncthreads();
        stage_tiles<QUERIES, MAX_HEAD, 2>(query_tiles, queries, tile, query_end, shape.q_width,
                                          head * head_dim, head_dim);
        if (threadIdx.x < QUERIES) {
            tile_lse[threadIdx.x] = query_lse;
            tile_delta[threadIdx.x] = query_delta;
        }
        __syncthreads();
        // Warp-uniform: some key of the warp is seen by some query of the tile.
        if (!warp_has_rows || tile >= warp_stop || tile + QUERIES <= warp_first) {
            continue;
        }
        // s = k . q^T and dp = v . dout^T, [16 keys][16 queries] each.
        float s[QUERIES / 8][4];
        float dp[QUERIES / 8][4];
#pragma unroll
        for (u32 j = 0; j < QUERIES / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                s[j][e] = 0.0f;
                dp[j][e] = 0.0f;
            }
        }
#pragma unroll
        for (u32 st = 0; st < STEPS; st++) {
            u32 ka[4];
            u32 va[4];
            load_a<STRIDE>(ka, ks, warp * WARP_ROWS, 16 * st);
            load_a<STRIDE>(va, vs, warp * WARP_ROWS, 16 * st);
#pragma unroll
            for (u32 j = 0; j < QUERIES / 8; j += 2) {
                u32 b[2][2];
                load_b_transposed_pair<STRIDE>(b, qs, 16 * st, 8 * j);
                mma_pair(s[j], s[j + 1], ka, b);
                load_b_transposed_pair<STRIDE>(b, dos, 16 * st, 8 * j);
                mma_pair(dp[j], dp[j + 1], va, b);
            }
        }
        // Scores of queries a key is not seen by become NEG_BIG, whose probability is 0;
        // then s becomes P and dp becomes dS = P (dp - delta). Every key of the warp is
        // seen by every query of the tile when the tile starts at or after the warp's
        // last key and ends before its first key's sequence does.
        const bool whole = warp_first + WARP_ROWS <= end && tile >= warp_first + WARP_ROWS - 1 &&
                           tile + QUERIES <= stop_first;
        if (!whole) {
#pragma unroll
            for (u32 j = 0; j < QUERIES / 8; j++) {
#pragma unroll
                for (u32 e = 0; e < 4; e++) {
                    const u32 half = e / 2;
                    const u32 query = tile + 8 * j + c + e % 2;
                    const bool visible = query >= key[half] && query < stop[half];
                    s[j][e] = visible ? s[j][e] : NEG_BIG;
                }
            }
        }
#pragma unroll
        for (u32 j = 0; j < QUERIES / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                const u32 column = 8 * j + c + e % 2;
                const float p = __expf(s[j][e] * scale - tile_lse[column]);
                s[j][e] = p;
                dp[j][e] = p * (dp[j][e] - tile_delta[column]);
            }
        }
        // dv += P . dout and dk += dS . q over the tile's queries, 16 per k-step.
#pragma unroll
        for (u32 kk = 0; kk < QUERIES / 16; kk++) {
            u32 pa[4];
            u32 dsa[4];
            c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
            c_to_a(dsa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
            for (u32 t = 0; t < TILES; t += 2) {
                u32 b[2][2];
                load_b_pair<STRIDE>(b, dos, 16 * kk, 8 * t);
                mma_pair(dv_acc[t], dv_acc[t + 1], pa, b);
                load_b_pair<STRIDE>(b, qs, 16 * kk, 8 * t);
                mma_pair(dk_acc[t], dk_acc[t + 1], dsa, b);
            }
        }
    }

#pragma unroll
    for (u32 half = 0; half < 2; half++) {
        if (key[half] >= end) {
            continue;
        }
        const u64 at = (u64)key[half] * shape.q_width + (u64)head * head_dim;
#pragma unroll
        for (u32 t = 0; t < TILES; t++) {
            const u32 d = 8 * t + c;
            if (d < head_dim) {
                dk_heads[at + d] = dk_acc[t][2 * half] * scale;
                dv_heads[at + d] = dv_acc[t][2 * half];
            }
            if (d + 1 < head_dim) {
                dk_heads[at + d + 1] = dk_acc[t][2 * half + 1] * scale;
                dv_heads[at + d + 1] = dv_acc[t][2 * half + 1];
            }
        }
    }
}


// The entry points: each body for heads of up to 128 (the plain names) and, with the
// same arithmetic in the same order, for heads of at most 64 (`...64`): half the
// accumulator registers and shared memory, so more blocks share a multiprocessor; and
// dk/dv over tiles of 32 queries for heads of at most 64 (`flash_backward_dkv64_wide`).
// The narrow forward, dq and dk/dv kernels are held to 128 registers, so that
// FLASH_NARROW_BLOCKS blocks share a multiprocessor (left free, ptxas gives the forward
// 164 registers, for 3 blocks); the wide dk/dv kernel would spill at that bound.
#define FLASH_NARROW_BLOCKS 4
extern "C" __global__ void __launch_bounds__(FLASH_THREADS)
flash_forward(float* out, bf16* out_copy, float* lse, const float* q, const float* k,
    const float* v, const u32* spans, u32 rows, u32 heads, u32 group, u32 head_dim, float scale) {
    flash_forward_body<FLASH_MAX_HEAD_DIM>(out, out_copy, lse, q, k, v, spans, rows, heads, group,
                                           head_dim, scale);
}
extern "C" __global__ void __launch_bounds__(FLASH_THREADS, FLASH_NARROW_BLOCKS)
flash_forward64(float* out, bf16* out_copy, float* lse, const float* q, const float* k,
    const float* v, const u32* spans, u32 rows, u32 heads, u32 group, u32 head_dim, float scale) {
    flash_forward_body<64>(out, out_copy, lse, q, k, v, spans, rows, heads, group, head_dim,
                           scale);
}
extern "C" __global__ void __launch_bounds__(FLASH_THREADS)
flash_backward_dq(float* dq, const float* q, const float* k, const float* v, const float* dout,
    const float* lse, const float* delta, const u32* spans, u32 rows, u32 heads, u32 group,
    u32 head_dim, float scale) {
    flash_dq<FLASH_MAX_HEAD_DIM>(dq, q, k, v, dout, lse, delta, spans, rows, heads, group, head_dim, scale);
}
extern "C" __global__ void __launch_bounds__(FLASH_THREADS, FLASH_NARROW_BLOCKS)
flash_backward_dq64(float* dq, const float* q, const float* k, const float* v, const float* dout,
    const float* lse, const float* delta, const u32* spans, u32 rows, u32 heads, u32 group,
    u32 head_dim, float scale) {
    flash_dq<64>(dq, q, k, v, dout, lse, delta, spans, rows, heads, group, head_dim, scale);
}
extern "C" __global__ void __launch_bounds__(FLASH_THREADS)
flash_backward_dkv(float* dk_heads, float* dv_heads, const float* q, const float* k, const float* v,
    const float* dout, const float* lse, const float* delta, const u32* spans, u32 rows,
    u32 heads, u32 group, u32 head_dim, float scale) {
    flash_dkv<16, FLASH_MAX_HEAD_DIM>(dk_heads, dv_heads, q, k, v, dout, lse, delta, spans, rows, heads, group, head_dim, scale);
}
extern "C" __global__ void __launch_bounds__(FLASH_THREADS, FLASH_NARROW_BLOCKS)
flash_backward_dkv64(float* dk_heads, float* dv_heads, const float* q, const float* k, const float* v,
    const float* dout, const float* lse, const float* delta, const u32* spans, u32 rows,
    u32 heads, u32 group, u32 head_dim, float scale) {
    flash_dkv<16, 64>(dk_heads, dv_heads, q, k, v, dout, lse, delta, spans, rows, heads, group, head_dim, scale);
}
extern "C" __global__ void __launch_bounds__(FLASH_THREADS)
flash_backward_dkv64_wide(float* dk_heads, float* dv_heads, const float* q, const float* k, const float* v,
    const float* dout, const float* lse, const float* delta, const u32* spans, u32 rows,
    u32 heads, u32 group, u32 head_dim, float scale) {
    flash_dkv<32, 64>(dk_heads, dv_heads, q, k, v, dout, lse, delta, spans, rows, heads, group, head_dim, scale);
}

// Threads per block of flash_dkv_group_sum.
#define FLASH_SUM_THREADS 256

// dk, dv [N, KV*hd] = the sums over each group of query heads of flash_backward_dkv's
// shares dk_heads, dv_heads [N, H*hd], in head order. Grid ceil(N * KV*hd / 256); one
// thread per element of dk (and of dv).
extern "C" __global__ void __launch_bounds__(FLASH_SUM_THREADS) flash_dkv_group_sum(float* dk, float* dv, const float* dk_heads,
                                               const float* dv_heads, u32 rows, u32 heads,
                                               u32 group, u32 head_dim) {
    const u64 kv_width = (u64)(heads / group) * head_dim;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)rows * kv_width) {
        return;
    }
    const u64 row = i / kv_width;
    const u64 column = i % kv_width;
    // Head g's dimension d is column g*hd + d; its first query head's share sits at
    // (g*group)*hd + d, and the group's next heads follow hd apart.
    const u64 first = row * heads * head_dim + (column / head_dim) * group * head_dim +
                      column % head_dim;
    float k_sum = 0.0f;
    float v_sum = 0.0f;
    for (u32 h = 0; h < group; h++) {
        k_sum += dk_heads[first + (u64)h * head_dim];
        v_sum += dv_heads[first + (u64)h * head_dim];
    }
    dk[i] = k_sum;
    dv[i] = v_sum;
}
