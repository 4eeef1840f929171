// The AdamW optimizer step (decoupled weight decay, bias-corrected moments) in the
// order PyTorch's torch.optim.AdamW applies it; the host folds the bias corrections
// into step_size = lr / (1 - beta1^t) and correction2_sqrt = sqrt(1 - beta2^t), and the
// decay into decay = 1 - lr * weight_decay.

// params, m, v [P] updated from grads [P]:
// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p = p * decay - step_size * m / (sqrt(v) / correction2_sqrt + eps).
extern "C" __global__ void adamw(float* params, const float* grads, float* m, float* v, u64 n,
                                 float beta1, float beta2, float eps, float step_size,
                                 float correction2_sqrt, float decay) {
    for (u64 i = global_index(); i < n; i += grid_stride()) {
        const float g = grads[i];
        const float m_new = beta1 * m[i] + (1.0f - beta1) * g;
        const float v_new = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = m_new;
        v[i] = v_new;
        const float denominator = sqrtf(v_new) / correction2_sqrt + eps;
        params[i] = params[i] * decay - step_size * m_new / denominator;
    }
}
