// Rotary position embedding in the Qwen2 / Hugging Face "rotate_half" layout: in each
// head, element i is paired with element i + hd/2 and the pair is rotated by
// pos * inv_freq[i]. The host computes inv_freq[i] = 1 / theta^(2i / hd) in f32 as the
// CPU backend does, so both use the same f32 angles. The backward pass (the transpose)
// is the rotation by the opposite angle: sign -1.

// x[N, heads * hd] rotated in place; positions[N], inv_freq[hd / 2]. One thread per
// (row, head, pair).
extern "C" __global__ void rope(float* x, const u32* positions, const float* inv_freq, u32 rows,
                                u32 heads, u32 head_dim, float sign) {
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
        float* pair = x + head_row * head_dim + i;
        const float a = pair[0];
        const float b = pair[half];
        pair[0] = a * cosine - b * sine;
        pair[half] = b * cosine + a * sine;
    }
}
