// The C entry points that run decode.cu's kernels on the emulator of device.hpp, with
// the grids decode.rs launches: appending rows to the caches, and decoding attention by
// the one-warp kernel of the f32 mode or the split-KV kernel and the merge of the bf16
// mode's fast path, each on f32 caches or on the bf16 mode's bf16 caches (`bf16_cache`
// set: the cache pointers then hold bf16 bits). The e2e test `emulated_kernels` builds
// this file into a shared library and compares the results with the CPU backend.
#include "device.hpp"

#include "../src/kernels/common.cuh"
#include "../src/kernels/decode.cu"

// k_cache, v_cache [B, capacity, width] take k, v [B, width] at row lengths[b].
extern "C" void emulate_kv_cache_append(int bf16_cache, void* k_cache, void* v_cache,
                                        const float* k, const float* v,
                                        const unsigned* lengths, unsigned batch,
                                        unsigned width, unsigned capacity) {
    const unsigned long long total = (unsigned long long)batch * width;
    const unsigned blocks = (unsigned)((total + 255) / 256);
    emulator::launch(blocks, 1, 256, [&] {
        if (bf16_cache) {
            kv_cache_append_bf16((bf16*)k_cache, (bf16*)v_cache, k, v, lengths, batch, width,
                                 capacity);
        } else {
            kv_cache_append((float*)k_cache, (float*)v_cache, k, v, lengths, batch, width,
                            capacity);
        }
    });
}

// out[B, H*hd] from q[B, H*hd] and caches [B, capacity, KV*hd] filled to lengths[B], and
// out's bf16 copy when `out_copy` is not null; `partials` holds B * H * splits * (hd + 2)
// floats (used when `split` is set).
extern "C" void emulate_attention_decode(int split, int bf16_cache, float* out,
                                         unsigned short* out_copy, float* partials,
                                         const float* q, const void* k_cache,
                                         const void* v_cache, const unsigned* lengths,
                                         unsigned batch, unsigned capacity, unsigned heads,
                                         unsigned group, unsigned head_dim, float scale) {
    const float* k32 = (const float*)k_cache;
    const float* v32 = (const float*)v_cache;
    const bf16* k16 = (const bf16*)k_cache;
    const bf16* v16 = (const bf16*)v_cache;
    if (!split) {
        emulator::launch(batch, heads, WARP_SIZE, [&] {
            if (bf16_cache) {
                attention_decode_bf16(out, out_copy, q, k16, v16, lengths, capacity, heads,
                                      group, head_dim, scale);
            } else {
                attention_decode(out, out_copy, q, k32, v32, lengths, capacity, heads, group,
                                 head_dim, scale);
            }
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
        if (bf16_cache) {
            attention_decode_split_bf16(part_acc, part_ml, q, k16, v16, lengths, capacity,
                                        heads, group, head_dim, splits, scale);
        } else {
            attention_decode_split(part_acc, part_ml, q, k32, v32, lengths, capacity, heads,
                                   group, head_dim, splits, scale);
        }
    });
    emulator::launch(batch, heads, WARP_SIZE, [&] {
        attention_decode_combine(out, out_copy, part_acc, part_ml, heads, head_dim, splits);
    });
}
