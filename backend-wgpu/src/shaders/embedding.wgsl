// Token embedding: the forward gather of table rows, and its backward scatter-add
// without float atomics: the first position of each distinct token sums the gradient
// rows of every position holding that token, in position order, into its table row,
// so each table row has exactly one writer.

struct Params {
    out: u32,    // offset of out (forward) or dtable (backward) in its window
    table: u32,  // offset of table (forward) or dout (backward) in its window
    tokens: u32, // offset of tokens in its window
    n: u32,      // tokens (N)
    dim: u32,    // row width (D)
    vocab: u32,  // table rows (V); ids at or above it read zeros and write nothing
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;    // forward out[N, D]; backward dtable[V, D]
@group(0) @binding(1) var<storage, read_write> table: array<f32>;  // forward table[V, D]; backward dout[N, D]
@group(0) @binding(2) var<storage, read_write> tokens: array<u32>; // [N]

// out[n, d] = table[tokens[n], d], one invocation per element.
@compute @workgroup_size(256)
fn embedding_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < p.n * p.dim {
        let token = tokens[p.tokens + i / p.dim];
        var value = 0.0;
        if token < p.vocab {
            value = table[p.table + token * p.dim + i % p.dim];
        }
        out[p.out + i] = value;
    }
}

// Set when an earlier position holds this workgroup's token.
var<workgroup> seen_earlier: atomic<u32>;

// dtable[tokens[n], :] += sum of dout[m, :] over m >= n with tokens[m] == tokens[n],
// by the workgroup of position n when n is the token's first position (else nothing).
@compute @workgroup_size(256)
fn embedding_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let n = workgroup_index(wid, groups);
    if n >= p.n {
        return;
    }
    let token = tokens[p.tokens + n];
    if lid == 0u {
        atomicStore(&seen_earlier, 0u);
    }
    workgroupBarrier();
    for (var m = lid; m < n; m += WORKGROUP) {
        if tokens[p.tokens + m] == token {
            atomicStore(&seen_earlier, 1u);
        }
    }
    workgroupBarrier();
    if atomicLoad(&seen_earlier) != 0u || token >= p.vocab {
        return;
    }
    let row = p.out + token * p.dim;
    for (var d = lid; d < p.dim; d += WORKGROUP) {
        var acc = out[row + d];
        for (var m = n; m < p.n; m++) {
            if tokens[p.tokens + m] == token {
                acc += table[p.table + m * p.dim + d];
            }
        }
        out[row + d] = acc;
    }
}
