// Rotary position embedding in the Qwen2 / Hugging Face "rotate_half" layout: in each
// head, element i is paired with element i + hd/2 and the pair is rotated by
// pos * inv_freq[i]. The host computes inv_freq[i] = 1 / theta^(2i / hd) in f32 as the
// CPU backend does, so both use the same f32 angles. The backward pass (the transpose)
// is the rotation by the opposite angle: sign -1.

// x[N, heads * hd] rotated in place, after adding bias[heads * hd] to every row when
// `bias` is not null (the query and key projections' bias, added as `add_bias` adds it:
// the same f32 sums, without a pass of its own), and its bf16 copy x_copy[N, heads * hd]
// when not null; positions[N], inv_freq[hd / 2]. One thread per (row, head, pair). The
// bias is f32, or bf16 for the bf16 mode's frozen weights (`rope_bias_bf16`).
template <typename Bias>
__device__ __forceinline__ void rope_pairs(float* x, bf16* x_copy, const Bias* bias,
                                           const u32* positions, const float* inv_freq,
                                           u32 rows, u32 heads, u32 head_dim, float sign) {
    const u32 half = head_dim / 2;
    const u64 total = (u64)rows * heads * half;
    for (u64 t = global_index(); t < total; t += grid_stride()) {
        const u32 i = (u32)(t % half);
        const u64 head_row = t / half;  // row * heads + head
        const u32 row = (u32)(head_row / heads);
        const float angle = (float)positions[row] * inv_freq[i];
        float sine, cosine;
        sincosf(angle, &sine, &cosine);
        sine *= sign;
        const u64 at = head_row * head_dim + i;
        float a = x[at];
        float b = x[at + half];
        if (bias != nullptr) {
            const u32 column = (u32)(head_row % heads) * head_dim + i;
            a += to_f32(bias[column]);
            b += to_f32(bias[column + half]);
        }
        const float rotated_a = a * cosine - b * sine;
        const float rotated_b = b * cosine + a * sine;
        x[at] = rotated_a;
        x[at + half] = rotated_b;
        store_copy(x_copy, at, rotated_a);
        store_copy(x_copy, at + half, rotated_b);
    }
}

extern "C" __global__ void rope(float* x, bf16* x_copy, const float* bias, const u32* positions,
                                const float* inv_freq, u32 rows, u32 heads, u32 head_dim,
                                float sign) {
    rope_pairs(x, x_copy, bias, positions, inv_freq, rows, heads, head_dim, sign);
}
extern "C" __global__ void rope_bias_bf16(float* x, bf16* x_copy, const bf16* bias,
                                          const u32* positions, const float* inv_freq, u32 rows,
                                          u32 heads, u32 head_dim, float sign) {
    rope_pairs(x, x_copy, bias, positions, inv_freq, rows, heads, head_dim, sign);
}
