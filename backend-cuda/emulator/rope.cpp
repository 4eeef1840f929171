// The C entry point that runs rope.cu's rotation on the emulator of device.hpp, on the
// grid rope.rs launches it on (a thread per pair, blocks of 256); the e2e test
// `emulated_kernels` builds this file into a shared library and compares it with the CPU
// backend, and its bf16 copy with the host's rounding.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/rope.cu"

// x[N, heads * hd] rotated in place by positions[n] * inv_freq (by the opposite angles
// when `sign` is -1), and its bf16 copy when `x_copy` is not null.
extern "C" void emulate_rope(float* x, unsigned short* x_copy, const unsigned* positions,
                             const float* inv_freq, unsigned rows, unsigned heads,
                             unsigned head_dim, float sign, unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] {
        rope(x, x_copy, positions, inv_freq, rows, heads, head_dim, sign);
    });
}
