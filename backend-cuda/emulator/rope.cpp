// The C entry points that run rope.cu's kernels on the emulator of device.hpp, on the
// grids rope.rs launches them on (a thread per pair, blocks of 256): the rotation, and a
// decoding step's rotation and cache append in one pass; the e2e test `emulated_kernels`
// builds this file into a shared library and compares it with the CPU backend, its bias
// with the host's sums, its bf16 copy and cache with the host's rounding, and the one-pass
// kernel with the rotation it stands for.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/rope.cu"

// x[N, heads * hd] rotated in place by positions[n] * inv_freq (by the opposite angles
// when `sign` is -1), after adding bias[heads * hd] to every row when `bias` is not null,
// and its bf16 copy when `x_copy` is not null.
extern "C" void emulate_rope(float* x, unsigned short* x_copy, const float* bias,
                             const unsigned* positions, const float* inv_freq, unsigned rows,
                             unsigned heads, unsigned head_dim, float sign, unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] {
        rope(x, x_copy, bias, positions, inv_freq, rows, heads, head_dim, sign);
    });
}

// The same with a bias held as bf16 (the bf16 mode's frozen weights).
extern "C" void emulate_rope_bias_bf16(float* x, unsigned short* x_copy,
                                       const unsigned short* bias, const unsigned* positions,
                                       const float* inv_freq, unsigned rows, unsigned heads,
                                       unsigned head_dim, float sign, unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] {
        rope_bias_bf16(x, x_copy, bias, positions, inv_freq, rows, heads, head_dim, sign);
    });
}

// A decoding step's biases, rotations and cache append in one pass (rope_append_kv), on
// the grid rope.rs launches it on: the caches hold f32 or, when `bf16_cache`, bf16 bits;
// the biases f32 or, when `bf16_bias`, bf16 bits (a null bias is none).
extern "C" void emulate_rope_append_kv(int bf16_cache, int bf16_bias, float* q,
                                       unsigned short* q_copy, void* k_cache, void* v_cache,
                                       const float* k, const float* v, const void* q_bias,
                                       const void* k_bias, const void* v_bias,
                                       const unsigned* positions, const unsigned* lengths,
                                       const float* inv_freq, unsigned batch, unsigned heads,
                                       unsigned kv_heads, unsigned head_dim, unsigned capacity) {
    const unsigned long long pairs =
        (unsigned long long)batch * (heads + 2 * kv_heads) * (head_dim / 2);
    const unsigned blocks = (unsigned)((pairs + 255) / 256);
    emulator::launch(blocks, 1, 256, [&] {
        if (!bf16_cache) {
            rope_append_kv(q, q_copy, (float*)k_cache, (float*)v_cache, k, v,
                           (const float*)q_bias, (const float*)k_bias, (const float*)v_bias,
                           positions, lengths, inv_freq, batch, heads, kv_heads, head_dim,
                           capacity);
        } else if (!bf16_bias) {
            rope_append_kv_bf16(q, q_copy, (bf16*)k_cache, (bf16*)v_cache, k, v,
                                (const float*)q_bias, (const float*)k_bias,
                                (const float*)v_bias, positions, lengths, inv_freq, batch,
                                heads, kv_heads, head_dim, capacity);
        } else {
            rope_append_kv_bf16_bias_bf16(q, q_copy, (bf16*)k_cache, (bf16*)v_cache, k, v,
                                          (const bf16*)q_bias, (const bf16*)k_bias,
                                          (const bf16*)v_bias, positions, lengths, inv_freq,
                                          batch, heads, kv_heads, head_dim, capacity);
        }
    });
}
