// The C entry points that run rope.cu's rotation on the emulator of device.hpp, on the
// grid rope.rs launches it on (a thread per pair, blocks of 256); the e2e test
// `emulated_kernels` builds this file into a shared library and compares it with the CPU
// backend, its bias with the host's sums, and its bf16 copy with the host's rounding.
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
