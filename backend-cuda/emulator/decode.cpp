// The C entry point that runs decode.cu's decoding attention on the emulator of
// device.hpp, with the grids decode.rs launches: the one-warp kernel of the f32 mode, or
// the split-KV kernel and the merge of the bf16 mode's fast path. The e2e test
// `emulated_kernels` builds this file into a shared library and compares the results
// with the CPU backend.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/decode.cu"

// out[B, H*hd] from q[B, H*hd] and caches [B, capacity, KV*hd] filled to lengths[B];
// `partials` holds B * H * splits * (hd + 2) floats (used when `split` is set).
extern "C" void emulate_attention_decode(int split, float* out, float* partials, const float* q,
                                         const float* k_cache, const float* v_cache,
                                         const unsigned* lengths, unsigned batch,
                                         unsigned capacity, unsigned heads, unsigned group,
                                         unsigned head_dim, float scale) {
    if (!split) {
        emulator::launch(batch, heads, WARP_SIZE, [&] {
            attention_decode(out, q, k_cache, v_cache, lengths, capacity, heads, group,
                             head_dim, scale);
        });
        return;
    }
    unsigned longest = 1;
    for (unsigned b = 0; b < batch; b++) {
        longest = lengths[b] > longest ? lengths[b] : longest;
    }
    const unsigned splits = (longest + SPLIT_KEYS - 1) / SPLIT_KEYS;
    float* part_acc = partials;
    float* part_ml = partials + (size_t)batch * heads * splits * head_dim;
    emulator::launch(batch * splits, heads / group, SPLIT_THREADS, [&] {
        attention_decode_split(part_acc, part_ml, q, k_cache, v_cache, lengths, capacity, heads,
                               group, head_dim, splits, scale);
    });
    emulator::launch(batch, heads, WARP_SIZE, [&] {
        attention_decode_combine(out, part_acc, part_ml, heads, head_dim, splits);
    });
}
