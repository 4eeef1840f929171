// The C entry points that run embedding.cu's and norm.cu's kernels on the emulator of
// device.hpp, on the grids embedding.rs and norm.rs launch: the embedding gather and its
// backward scatter (links pass, then the walk of each token's positions), and the
// RMSNorm forward and its input gradient (each with or without the bf16 copy of its
// output) and bias add. The forward
// kernels that read weights take them in f32 or (`bf16` set) as frozen bf16 weights, whose
// pointers then hold bf16 bits. The e2e test
// `emulated_kernels` builds this file into a shared library and compares each bf16 form
// with its f32 form on the same values widened, and the f32 forms with the CPU backend.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/embedding.cu"
#include "../src/kernels/norm.cu"

// out[N, D] = table[tokens[n], :] with table [V, D]; `blocks` of 256 threads.
extern "C" void emulate_embedding_forward(int bf16_table, float* out, const void* table,
                                          const unsigned* tokens, unsigned n, unsigned dim,
                                          unsigned vocab, unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] {
        if (bf16_table) {
            embedding_forward_bf16(out, (const bf16*)table, tokens, n, dim, vocab);
        } else {
            embedding_forward(out, (const float*)table, tokens, n, dim, vocab);
        }
    });
}

// out[N, D] = x / rms(x) * weight, rstd[N], and out's bf16 copy when `out_copy` is not
// null; one block per row.
extern "C" void emulate_rmsnorm_forward(int bf16_weight, float* out, unsigned short* out_copy,
                                        float* rstd, const float* x, const void* weight,
                                        unsigned rows, unsigned dim, float eps) {
    emulator::launch(rows, 1, ROW_THREADS, [&] {
        if (bf16_weight) {
            rmsnorm_forward_bf16(out, out_copy, rstd, x, (const bf16*)weight, rows, dim, eps);
        } else {
            rmsnorm_forward(out, out_copy, rstd, x, (const float*)weight, rows, dim, eps);
        }
    });
}

// dx[N, D] += the RMSNorm input gradient, and the sum's bf16 copy when `dx_copy` is not
// null; one block per row.
extern "C" void emulate_rmsnorm_backward_dx(float* dx, unsigned short* dx_copy,
                                            const float* dout, const float* x,
                                            const float* weight, const float* rstd,
                                            unsigned rows, unsigned dim) {
    emulator::launch(rows, 1, ROW_THREADS,
                     [&] { rmsnorm_backward_dx(dx, dx_copy, dout, x, weight, rstd, rows, dim); });
}

// out[N, C] += bias[C]; `blocks` of 256 threads.
extern "C" void emulate_add_bias(int bf16_bias, float* out, const void* bias,
                                 unsigned long long total, unsigned width, unsigned blocks) {
    emulator::launch(blocks, 1, 256, [&] {
        if (bf16_bias) {
            add_bias_bf16(out, (const bf16*)bias, total, width);
        } else {
            add_bias(out, (const float*)bias, total, width);
        }
    });
}

// dtable[V, D] += dout[N, D] scattered by tokens[N]; `links` holds 2 * N ids of scratch;
// one block per position, as for every position of the batch on the GPU.
extern "C" void emulate_embedding_backward(float* dtable, const float* dout,
                                           const unsigned* tokens, unsigned* links,
                                           unsigned n, unsigned dim, unsigned vocab) {
    emulator::launch(n, 1, LINK_THREADS, [&] { embedding_links(links, tokens, n); });
    emulator::launch(n, 1, SCATTER_THREADS,
                     [&] { embedding_backward(dtable, dout, tokens, links, n, dim, vocab); });
}
