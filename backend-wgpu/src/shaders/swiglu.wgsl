// The SwiGLU activation of the MLP, silu(gate) * up, and its backward; one invocation
// per element.

struct Params {
    out: u32,  // offset of out (forward) or dgate (backward) in its window
    dup: u32,  // offset of dup in its window (forward binds out again)
    dout: u32, // offset of dout in its window (forward binds gate again)
    gate: u32, // offset of gate in its window
    up: u32,   // offset of up in its window
    len: u32,  // elements (N * I)
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;  // forward out[N, I]; backward dgate[N, I]
@group(0) @binding(1) var<storage, read_write> dup: array<f32>;  // [N, I]
@group(0) @binding(2) var<storage, read_write> dout: array<f32>; // [N, I]
@group(0) @binding(3) var<storage, read_write> gate: array<f32>; // [N, I]
@group(0) @binding(4) var<storage, read_write> up: array<f32>;   // [N, I]

fn sigmoid(g: f32) -> f32 {
    return 1.0 / (1.0 + exp(-g));
}

// out = gate * sigmoid(gate) * up
@compute @workgroup_size(256)
fn swiglu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < p.len {
        let g = gate[p.gate + i];
        out[p.out + i] = g * sigmoid(g) * up[p.up + i];
    }
}

// dgate = dout * up * s * (1 + g (1 - s)), dup = dout * g * s, with s = sigmoid(g)
@compute @workgroup_size(256)
fn swiglu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < p.len {
        let g = gate[p.gate + i];
        let d = dout[p.dout + i];
        let s = sigmoid(g);
        dup[p.dup + i] = d * g * s;
        out[p.out + i] = d * up[p.up + i] * s * (1.0 + g * (1.0 - s));
    }
}
