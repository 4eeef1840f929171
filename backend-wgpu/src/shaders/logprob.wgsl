// The output head's row kernels, around the GEMMs that make one chunk of logits
// [rows, V] at a time (the host loops over chunks): the log-softmax statistics and
// log-prob of each row's target (forward), and the logits' gradient in place
// (backward). One workgroup per row; its sums are tree-reduced in a fixed order.

struct Params {
    logits: u32,  // offset of logits in its window
    targets: u32, // offset of targets in its window
    out: u32,     // offset of logp (forward) or weights (backward) in its window
    lse: u32,     // offset of lse in its window
    rows: u32,    // rows in the chunk
    vocab: u32,   // V
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> logits: array<f32>;  // [rows, V]
@group(0) @binding(1) var<storage, read_write> targets: array<u32>; // [rows]
@group(0) @binding(2) var<storage, read_write> out: array<f32>;     // logp [rows] (forward); weights [rows] (backward)
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;     // [rows]

var<workgroup> partial: array<f32, 256>;

// The maximum of `value` over the workgroup, the same in every invocation.
fn workgroup_max(lid: u32, value: f32) -> f32 {
    partial[lid] = value;
    for (var half = WORKGROUP / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if lid < half {
            partial[lid] = max(partial[lid], partial[lid + half]);
        }
    }
    return workgroupUniformLoad(&partial[0]);
}

// The sum of `value` over the workgroup, the same in every invocation.
fn workgroup_sum(lid: u32, value: f32) -> f32 {
    workgroupBarrier();
    partial[lid] = value;
    for (var half = WORKGROUP / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if lid < half {
            partial[lid] += partial[lid + half];
        }
    }
    return workgroupUniformLoad(&partial[0]);
}

// lse[n] = log sum_j exp(logits[n, j]); logp[n] = logits[n, targets[n]] - lse[n], or NaN
// when the target is not below V.
@compute @workgroup_size(256)
fn logprob_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let n = workgroup_index(wid, groups);
    if n >= p.rows {
        return;
    }
    let row = p.logits + n * p.vocab;
    var biggest = -3.0e38;
    for (var j = lid; j < p.vocab; j += WORKGROUP) {
        biggest = max(biggest, logits[row + j]);
    }
    let m = workgroup_max(lid, biggest);
    var sum = 0.0;
    for (var j = lid; j < p.vocab; j += WORKGROUP) {
        sum += exp(logits[row + j] - m);
    }
    let row_lse = m + log(workgroup_sum(lid, sum));
    if lid == 0u {
        lse[p.lse + n] = row_lse;
        let wanted = targets[p.targets + n];
        var logp = bitcast<f32>(0x7fc00000u);
        if wanted < p.vocab {
            logp = logits[row + wanted] - row_lse;
        }
        out[p.out + n] = logp;
    }
}

// logits[n, j] becomes d(w_n logp_n)/d logits[n, j] = w_n (onehot(targets[n])_j -
// exp(logits[n, j] - lse[n])), one invocation per element.
@compute @workgroup_size(256)
fn logprob_dlogits(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i >= p.rows * p.vocab {
        return;
    }
    let n = i / p.vocab;
    let w = out[p.out + n];
    var g = -w * exp(logits[p.logits + i] - lse[p.lse + n]);
    if i % p.vocab == targets[p.targets + n] {
        g += w;
    }
    logits[p.logits + i] = g;
}
