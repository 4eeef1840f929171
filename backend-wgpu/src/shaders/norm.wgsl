// RMSNorm over rows: the forward pass, and the backward pass's input gradient. One
// workgroup per row; its sums are tree-reduced in a fixed order. The weight gradient
// is a column sum (columns.wgsl).

struct Params {
    out: u32,    // offset of out (forward) or dx (backward) in its window
    rstd: u32,   // offset of rstd in its window
    x: u32,      // offset of x in its window
    weight: u32, // offset of weight in its window
    dout: u32,   // offset of dout in its window (backward; forward binds x again)
    rows: u32,   // rows (N)
    dim: u32,    // row width (D)
    eps: f32,    // added to the mean square
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;    // forward out[N, D]; backward dx[N, D] (+=)
@group(0) @binding(1) var<storage, read_write> rstd: array<f32>;   // [N]
@group(0) @binding(2) var<storage, read_write> x: array<f32>;      // [N, D]
@group(0) @binding(3) var<storage, read_write> weight: array<f32>; // [D]
@group(0) @binding(4) var<storage, read_write> dout: array<f32>;   // [N, D]

var<workgroup> partial: array<f32, 256>;

// The sum of `value` over the workgroup, the same in every invocation.
fn workgroup_sum(lid: u32, value: f32) -> f32 {
    partial[lid] = value;
    for (var half = WORKGROUP / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if lid < half {
            partial[lid] += partial[lid + half];
        }
    }
    workgroupBarrier();
    let total = partial[0];
    workgroupBarrier();
    return total;
}

// rstd[n] = 1 / sqrt(mean(x[n]^2) + eps); out[n, d] = x[n, d] * rstd[n] * weight[d].
@compute @workgroup_size(256)
fn rmsnorm_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let n = workgroup_index(wid, groups);
    if n >= p.rows {
        return;
    }
    let row = n * p.dim;
    var squares = 0.0;
    for (var d = lid; d < p.dim; d += WORKGROUP) {
        let v = x[p.x + row + d];
        squares += v * v;
    }
    let r = 1.0 / sqrt(workgroup_sum(lid, squares) / f32(p.dim) + p.eps);
    if lid == 0u {
        rstd[p.rstd + n] = r;
    }
    for (var d = lid; d < p.dim; d += WORKGROUP) {
        out[p.out + row + d] = x[p.x + row + d] * r * weight[p.weight + d];
    }
}

// dx[n, d] += r w[d] dout[n, d] - x[n, d] r^3 / D * sum_e(dout[n, e] w[e] x[n, e]),
// with r = rstd[n].
@compute @workgroup_size(256)
fn rmsnorm_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let n = workgroup_index(wid, groups);
    if n >= p.rows {
        return;
    }
    let row = n * p.dim;
    var weighted = 0.0;
    for (var d = lid; d < p.dim; d += WORKGROUP) {
        weighted += dout[p.dout + row + d] * weight[p.weight + d] * x[p.x + row + d];
    }
    let r = rstd[p.rstd + n];
    let correction = workgroup_sum(lid, weighted) * r * r * r / f32(p.dim);
    for (var d = lid; d < p.dim; d += WORKGROUP) {
        let i = row + d;
        out[p.out + i] += r * weight[p.weight + d] * dout[p.dout + i] - x[p.x + i] * correction;
    }
}
