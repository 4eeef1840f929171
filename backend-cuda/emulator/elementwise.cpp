// The C entry point that runs elementwise.cu's bf16 cast on the emulator of device.hpp,
// on the grid elementwise.rs launches it on (a thread per 4 elements, blocks of 256); the
// e2e test `emulated_kernels` builds this file into a shared library and compares what
// it writes with the host's rounding.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/elementwise.cu"

// dst[n] = bf16(src[n]).
extern "C" void emulate_cast_bf16(unsigned short* dst, const float* src, unsigned long long n,
                                  unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] { cast_bf16(dst, src, n); });
}
