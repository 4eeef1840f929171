// The C entry points that run swiglu.cu's and logprob.cu's elementwise kernels on the
// emulator of device.hpp, on the grids swiglu.rs and logprob.rs launch (blocks of 256
// threads, grid-stride): the SwiGLU forward and backward, each with or without the bf16
// copies of its outputs, and the output head's logit gradient in f32 (in place) or bf16.
// The e2e test `emulated_kernels` builds this file into a shared library and compares
// the f32 results with the CPU backend and each bf16 copy with the host's rounding.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/swiglu.cu"
#include "../src/kernels/logprob.cu"

// out[n] = silu(gate) * up, and its copy when `out_copy` is not null.
extern "C" void emulate_swiglu_forward(float* out, unsigned short* out_copy, const float* gate,
                                       const float* up, unsigned long long n, unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] { swiglu_forward(out, out_copy, gate, up, n); });
}

// dgate[n], dup[n] from dout, gate and up, and their copies where not null.
extern "C" void emulate_swiglu_backward(float* dgate, float* dup, unsigned short* dgate_copy,
                                        unsigned short* dup_copy, const float* dout,
                                        const float* gate, const float* up,
                                        unsigned long long n, unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] {
        swiglu_backward(dgate, dup, dgate_copy, dup_copy, dout, gate, up, n);
    });
}

// dlogits[rows, V] from logits[rows, V]: in f32 (`dlogits` may be `logits`, in place) or,
// with `bf16` set, as bf16 bits.
extern "C" void emulate_logprob_dlogits(int bf16_out, void* dlogits, const float* logits,
                                        const unsigned* targets, const float* weights,
                                        const float* lse, unsigned rows, unsigned vocab,
                                        unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] {
        if (bf16_out) {
            logprob_dlogits_bf16((bf16*)dlogits, logits, targets, weights, lse, rows, vocab);
        } else {
            logprob_dlogits((float*)dlogits, logits, targets, weights, lse, rows, vocab);
        }
    });
}
