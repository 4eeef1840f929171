// Token embedding: the forward gather of table rows, and its backward scatter-add
// without float atomics. The backward pass links each position to the next position
// holding the same token and marks each token's first position (embedding_links); the
// block of that first position then walks the chain, adding the gradient rows in
// position order into the token's table row (embedding_backward). Each table row has
// one writer, and the sums run in the CPU backend's order, so the result is exact and
// deterministic. The links pass compares every pair of positions: O(N^2) integer loads
// from a small, cached array, cheap next to the layers for N up to tens of thousands.
//
// Token ids at or above V gather zeros and scatter nothing.

// out[N, D] = table[tokens[n], :] with table[V, D], tokens[N]; the table in f32 or, as
// frozen weights of the bf16 mode, bf16 (`embedding_forward_bf16`).
template <typename Weight>
__device__ __forceinline__ void gather_rows(float* out, const Weight* table, const u32* tokens,
                                            u32 n, u32 dim, u32 vocab) {
    const u64 total = (u64)n * dim;
    for (u64 i = global_index(); i < total; i += grid_stride()) {
        const u32 token = tokens[i / dim];
        out[i] = token < vocab ? to_f32(table[(u64)token * dim + i % dim]) : 0.0f;
    }
}

extern "C" __global__ void embedding_forward(float* out, const float* table, const u32* tokens,
                                             u32 n, u32 dim, u32 vocab) {
    gather_rows(out, table, tokens, n, dim, vocab);
}
extern "C" __global__ void embedding_forward_bf16(float* out, const bf16* table,
                                                  const u32* tokens, u32 n, u32 dim,
                                                  u32 vocab) {
    gather_rows(out, table, tokens, n, dim, vocab);
}

#define LINK_THREADS 256

// One block per position p (grid-stride over blocks): links[p] = the next position with
// p's token (n if none), links[n + p] = 1 if no earlier position holds it, else 0.
// links[2, N], tokens[N].
extern "C" __global__ void __launch_bounds__(LINK_THREADS)
embedding_links(u32* links, const u32* tokens, u32 n) {
    __shared__ u32 next_same;
    for (u32 p = blockIdx.x; p < n; p += gridDim.x) {
        const u32 token = tokens[p];
        if (threadIdx.x == 0) {
            next_same = n;
        }
        __syncthreads();
        int earlier = 0;
        u32 next = n;
        for (u32 m = threadIdx.x; m < n; m += LINK_THREADS) {
            if (m != p && tokens[m] == token) {
                if (m < p) {
                    earlier = 1;
                } else if (m < next) {
                    next = m;
                }
            }
        }
        if (next < n) {
            atomicMin(&next_same, next);
        }
        const int any_earlier = __syncthreads_or(earlier);
        if (threadIdx.x == 0) {
            links[p] = next_same;
            links[n + p] = any_earlier ? 0u : 1u;
        }
        __syncthreads();
    }
}

#define SCATTER_THREADS 256

// dtable[tokens[p], :] += dout[m, :] for every position m of that token, in increasing
// m, by the block of the token's first position p (the other blocks return).
// dtable[V, D] (+=), dout[N, D], tokens[N], links[2, N].
extern "C" __global__ void __launch_bounds__(SCATTER_THREADS)
embedding_backward(float* dtable, const float* dout, const u32* tokens, const u32* links,
                   u32 n, u32 dim, u32 vocab) {
    for (u32 p = blockIdx.x; p < n; p += gridDim.x) {
        const u32 token = tokens[p];
        if (links[n + p] == 0u || token >= vocab) {
            continue;
        }
        float* row = dtable + (u64)token * dim;
        for (u32 d = threadIdx.x; d < dim; d += SCATTER_THREADS) {
            float acc = row[d];
            u32 m = p;
            for (u32 steps = 0; steps < n && m < n; steps++) {
                acc += dout[(u64)m * dim + d];
                m = links[m];
            }
            row[d] = acc;
        }
    }
}
