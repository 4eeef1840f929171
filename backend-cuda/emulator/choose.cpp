// The C entry point that runs choose.cu's kernel on the emulator of device.hpp, one
// block per row as choose.rs launches it; the e2e test `emulated_kernels` builds this
// file into a shared library and compares its choices with the host's rule.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/choose.cu"

// choices[rows, 2] from logits[rows, vocab]; uniforms[rows] as f32 bits.
extern "C" void emulate_choose_tokens(float* choices, const float* logits,
                                      const unsigned* uniforms, unsigned rows, unsigned vocab,
                                      float inverse_temperature, unsigned greedy) {
    emulator::launch(rows, 1, CHOOSE_THREADS, [&] {
        choose_tokens(choices, logits, uniforms, vocab, inverse_temperature, greedy);
    });
}
