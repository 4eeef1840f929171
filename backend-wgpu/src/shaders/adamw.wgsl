// One AdamW step (decoupled weight decay, bias-corrected moments) in the order of
// PyTorch's torch.optim.AdamW; the host folds the bias corrections into step_size and
// correction2_sqrt. One invocation per parameter.

struct Params {
    params: u32,           // offset of params in its window
    m: u32,                // offset of m in its window
    v: u32,                // offset of v in its window
    grads: u32,            // offset of grads in its window
    len: u32,              // parameters (P)
    beta1: f32,
    beta2: f32,
    eps: f32,
    step_size: f32,        // lr / (1 - beta1^t)
    correction2_sqrt: f32, // sqrt(1 - beta2^t)
    decay: f32,            // 1 - lr * weight_decay
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> params: array<f32>; // [P]
@group(0) @binding(1) var<storage, read_write> m: array<f32>;      // [P]
@group(0) @binding(2) var<storage, read_write> v: array<f32>;      // [P]
@group(0) @binding(3) var<storage, read_write> grads: array<f32>;  // [P]

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p = p decay - step_size m / (sqrt(v) / correction2_sqrt + eps)
@compute @workgroup_size(256)
fn adamw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i >= p.len {
        return;
    }
    let g = grads[p.grads + i];
    let m_i = p.beta1 * m[p.m + i] + (1.0 - p.beta1) * g;
    let v_i = p.beta2 * v[p.v + i] + (1.0 - p.beta2) * g * g;
    m[p.m + i] = m_i;
    v[p.v + i] = v_i;
    let denominator = sqrt(v_i) / p.correction2_sqrt + p.eps;
    params[p.params + i] = params[p.params + i] * p.decay - p.step_size * m_i / denominator;
}
