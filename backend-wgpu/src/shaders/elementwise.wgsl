// Whole-tensor elementwise kernels (fill, copy, +=, scale), one invocation per
// element, and the blockwise sum of squares behind the global gradient norm.

struct Params {
    dst: u32,   // offset of dst in its window
    src: u32,   // offset of src in its window (fill and scale bind dst again)
    len: u32,   // elements
    value: f32, // fill value or scale factor
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> dst: array<f32>; // [len]
@group(0) @binding(1) var<storage, read_write> src: array<f32>; // [len]

// dst[i] = value
@compute @workgroup_size(256)
fn fill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < p.len {
        dst[p.dst + i] = p.value;
    }
}

// dst[i] = src[i]
@compute @workgroup_size(256)
fn copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < p.len {
        dst[p.dst + i] = src[p.src + i];
    }
}

// dst[i] += src[i]
@compute @workgroup_size(256)
fn add_assign(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < p.len {
        dst[p.dst + i] += src[p.src + i];
    }
}

// dst[i] *= value
@compute @workgroup_size(256)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < p.len {
        dst[p.dst + i] *= p.value;
    }
}

// ---- sum of squares ----------------------------------------------------------------

// Elements one workgroup of sum_blocks folds: 16 per invocation.
const BLOCK: u32 = 4096u;

struct SumParams {
    sums: u32,   // offset of sums in its window
    x: u32,      // offset of x in its window
    len: u32,    // elements of x
    square: u32, // 1: sum x^2 (the first pass), 0: sum x (the passes over partial sums)
}
var<push_constant> s: SumParams;

@group(0) @binding(0) var<storage, read_write> sums: array<f32>; // [ceil(len / BLOCK)]
@group(0) @binding(1) var<storage, read_write> x: array<f32>;    // [len]

var<workgroup> partial: array<f32, 256>;

// sums[w] = sum over block w of x of x^2 (or x): each invocation adds 16 elements
// 256 apart, then a tree halves the 256 partial sums. The order is fixed.
@compute @workgroup_size(256)
fn sum_blocks(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = workgroup_index(wid, groups);
    let start = w * BLOCK;
    var acc = 0.0;
    for (var j = 0u; j < BLOCK / WORKGROUP; j++) {
        let i = start + j * WORKGROUP + lid;
        if i < s.len {
            let v = x[s.x + i];
            acc += select(v, v * v, s.square == 1u);
        }
    }
    partial[lid] = acc;
    for (var half = WORKGROUP / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if lid < half {
            partial[lid] += partial[lid + half];
        }
    }
    if lid == 0u && start < s.len {
        sums[s.sums + w] = partial[0];
    }
}
