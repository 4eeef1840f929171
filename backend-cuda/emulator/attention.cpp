// C entry points that run the training-attention kernels of ../src/kernels (the exact
// f32 ones of attention.cu and the tensor-core ones of flash.cu) on the emulator of
// device.hpp, with the grids attention.rs launches them on. The e2e test
// `emulated_kernels` builds this file into a shared library and compares what it
// computes with the CPU backend's attention.
#include "device.hpp"

#include <vector>

#include "../src/kernels/common.cuh"
#include "../src/kernels/attention.cu"
#include "../src/kernels/flash.cu"

namespace {

// Blocks of `per_block` rows (the kernels' FORWARD_ROWS, BACKWARD_ROWS and FLASH_ROWS,
// as attention.rs launches them) covering `rows`.
unsigned blocks(unsigned rows, unsigned per_block) { return (rows + per_block - 1) / per_block; }

}  // namespace

// out[N, H*hd] and lse[N, H] from q[N, H*hd], k, v[N, KV*hd]; spans[N, 2] as in
// attention.cu; out's bf16 copy when `out_copy` is not null. `tensor_cores` picks
// flash_forward over attention_forward.
extern "C" void emulate_attention_forward(int tensor_cores, float* out,
                                          unsigned short* out_copy, float* lse, const float* q,
                                          const float* k, const float* v,
                                          const unsigned* spans, unsigned rows,
                                          unsigned heads, unsigned group, unsigned head_dim,
                                          float scale) {
    if (tensor_cores) {
        emulator::launch(blocks(rows, FLASH_ROWS), heads, FLASH_THREADS, [&] {
            if (head_dim <= 64) {
                flash_forward64(out, out_copy, lse, q, k, v, spans, rows, heads, group,
                                head_dim, scale);
            } else {
                flash_forward(out, out_copy, lse, q, k, v, spans, rows, heads, group, head_dim,
                              scale);
            }
        });
    } else {
        emulator::launch(blocks(rows, FORWARD_ROWS), heads, ATTN_THREADS, [&] {
            attention_forward(out, out_copy, lse, q, k, v, spans, rows, heads, group, head_dim,
                              scale);
        });
    }
}

// dq, dk, dv of the forward above, given dout, out and lse; delta[N, H] is scratch.
// The tensor-core kernels are picked as attention.rs picks them: the `64` ones for heads
// of at most 64; `tensor_cores` 2 runs dk/dv over tiles of 32 queries there.
extern "C" void emulate_attention_backward(int tensor_cores, float* dq, float* dk, float* dv,
                                           float* delta, const float* q, const float* k,
                                           const float* v, const float* dout,
                                           const float* out, const float* lse,
                                           const unsigned* spans, unsigned rows,
                                           unsigned heads, unsigned group, unsigned head_dim,
                                           float scale) {
    emulator::launch(blocks(rows * heads, ATTN_WARPS), 1, ATTN_THREADS,
                     [&] { attention_delta(delta, dout, out, rows, heads, head_dim); });
    const unsigned per_block = tensor_cores ? FLASH_ROWS : BACKWARD_ROWS;
    emulator::launch(blocks(rows, per_block), heads, ATTN_THREADS, [&] {
        if (tensor_cores && head_dim <= 64) {
            flash_backward_dq64(dq, q, k, v, dout, lse, delta, spans, rows, heads, group,
                                head_dim, scale);
        } else if (tensor_cores) {
            flash_backward_dq(dq, q, k, v, dout, lse, delta, spans, rows, heads, group,
                              head_dim, scale);
        } else {
            attention_backward_dq(dq, q, k, v, dout, lse, delta, spans, rows, heads, group,
                                  head_dim, scale);
        }
    });
    if (!tensor_cores) {
        emulator::launch(blocks(rows, per_block), heads / group, ATTN_THREADS, [&] {
            attention_backward_dkv(dk, dv, q, k, v, dout, lse, delta, spans, rows, heads,
                                   group, head_dim, scale);
        });
        return;
    }
    // One block per query head: with group 1 straight into dk, dv; otherwise into the
    // heads' shares, then their sums per group.
    const size_t shares = group == 1 ? 0 : (size_t)rows * heads * head_dim;
    std::vector<float> dk_heads(shares), dv_heads(shares);
    float* dk_out = group == 1 ? dk : dk_heads.data();
    float* dv_out = group == 1 ? dv : dv_heads.data();
    emulator::launch(blocks(rows, per_block), heads, ATTN_THREADS, [&] {
        if (head_dim > 64) {
            flash_backward_dkv(dk_out, dv_out, q, k, v, dout, lse, delta, spans, rows, heads,
                               group, head_dim, scale);
        } else if (tensor_cores == 2) {
            flash_backward_dkv64_wide(dk_out, dv_out, q, k, v, dout, lse, delta, spans, rows,
                                      heads, group, head_dim, scale);
        } else {
            flash_backward_dkv64(dk_out, dv_out, q, k, v, dout, lse, delta, spans, rows, heads,
                                 group, head_dim, scale);
        }
    });
    if (group > 1) {
        const unsigned elements = rows * (heads / group) * head_dim;
        emulator::launch(blocks(elements, FLASH_SUM_THREADS), 1, FLASH_SUM_THREADS, [&] {
            flash_dkv_group_sum(dk, dv, dk_heads.data(), dv_heads.data(), rows, heads, group,
                                head_dim);
        });
    }
}
