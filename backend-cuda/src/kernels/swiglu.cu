// The SwiGLU activation of the MLP, silu(gate) * up, and its backward; elementwise,
// with the CPU backend's formulas and evaluation order.

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out[N, I] = silu(gate) * up, silu(g) = g * sigmoid(g); its bf16 copy too when
// `out_copy` is not null.
extern "C" __global__ void swiglu_forward(float* out, bf16* out_copy, const float* gate,
                                          const float* up, u64 n) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        const float g = gate[i];
        const float o = g * sigmoid(g) * up[i];
        out[i] = o;
        store_copy(out_copy, i, o);
    }
}

// dgate[N, I] = dout * up * s * (1 + g * (1 - s)) and dup[N, I] = dout * g * s, with
// s = sigmoid(g), from dout, gate (g) and up [N, I]; their bf16 copies too where
// `dgate_copy` or `dup_copy` is not null.
extern "C" __global__ void swiglu_backward(float* dgate, float* dup, bf16* dgate_copy,
                                           bf16* dup_copy, const float* dout, const float* gate,
                                           const float* up, u64 n) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        const float d = dout[i];
        const float g = gate[i];
        const float s = sigmoid(g);
        const float du = d * g * s;
        const float dg = d * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] = du;
        dgate[i] = dg;
        store_copy(dup_copy, i, du);
        store_copy(dgate_copy, i, dg);
    }
}
