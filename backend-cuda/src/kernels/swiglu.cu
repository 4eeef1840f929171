// The SwiGLU activation of the MLP, silu(gate) * up, and its backward; elementwise,
// with the CPU backend's formulas and evaluation order.

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out[N, I] = silu(gate) * up, silu(g) = g * sigmoid(g).
extern "C" __global__ void swiglu_forward(float* out, const float* gate, const float* up, u64 n) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        const float g = gate[i];
        out[i] = g * sigmoid(g) * up[i];
    }
}

// dgate[N, I] = dout * up * s * (1 + g * (1 - s)) and dup[N, I] = dout * g * s, with
// s = sigmoid(g), from dout, gate (g) and up [N, I].
extern "C" __global__ void swiglu_backward(float* dgate, float* dup, const float* dout,
                                           const float* gate, const float* up, u64 n) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        const float d = dout[i];
        const float g = gate[i];
        const float s = sigmoid(g);
        dup[i] = d * g * s;
        dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
    }
}
