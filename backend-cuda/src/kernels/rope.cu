// Rotary position embedding in the Qwen2 / Hugging Face "rotate_half" layout: in each
// head, element i is paired with element i + hd/2 and the pair is rotated by
// pos * inv_freq[i]. The host computes inv_freq[i] = 1 / theta^(2i / hd) in f32 as the
// CPU backend does, so both use the same f32 angles. The backward pass (the transpose)
// is the rotation by the opposite angle: sign -1.

// x[N, heads * hd] rotated in place, and its bf16 copy x_copy[N, heads * hd] when not
// null; positions[N], inv_freq[hd / 2]. One thread per (row, head, pair).
extern "C" __global__ void rope(float* x, bf16* x_copy, const u32* positions,
                                const float* inv_freq, u32 rows, u32 heads, u32 head_dim,
                                float sign) {
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
        const float a = x[at];
        const float b = x[at + half];
        const float rotated_a = a * cosine - b * sine;
        const float rotated_b = b * cosine + a * sine;
        x[at] = rotated_a;
        x[at + half] = rotated_b;
        store_copy(x_copy, at, rotated_a);
        store_copy(x_copy, at + half, rotated_b);
    }
}
