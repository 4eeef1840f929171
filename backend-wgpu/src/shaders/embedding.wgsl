// Token embedding: the forward gather of table rows, and its backward scatter-add
// without float atomics: a first pass links each position to the next position holding
// the same token and marks each token's first position; then the workgroup of that
// first position walks the chain, adding the gradient rows in position order into the
// token's table row, so each table row has exactly one writer.

struct Params {
    out: u32,    // offset of out in its window
    table: u32,  // offset of table in its window
    tokens: u32, // offset of tokens in its window
    n: u32,      // tokens (N)
    dim: u32,    // row width (D)
    vocab: u32,  // table rows (V); ids at or above it read zeros
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;    // forward out[N, D]; backward dtable[V, D] (+=)
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

struct LinkParams {
    links: u32,  // offset of links in its window
    tokens: u32, // offset of tokens in its window
    n: u32,      // tokens (N)
}
var<push_constant> lp: LinkParams;

@group(0) @binding(0) var<storage, read_write> links: array<u32>;       // [2, N]: next position of the same token (N if none), then 1 at a token's first position
@group(0) @binding(1) var<storage, read_write> link_tokens: array<u32>; // [N]

var<workgroup> next_same: atomic<u32>;
var<workgroup> earlier_same: atomic<u32>;

// One workgroup per position n: scans every position for n's token.
@compute @workgroup_size(256)
fn embedding_links(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let n = workgroup_index(wid, groups);
    if n >= lp.n {
        return;
    }
    let token = link_tokens[lp.tokens + n];
    if lid == 0u {
        atomicStore(&next_same, lp.n);
        atomicStore(&earlier_same, 0u);
    }
    workgroupBarrier();
    for (var m = lid; m < lp.n; m += WORKGROUP) {
        if m != n && link_tokens[lp.tokens + m] == token {
            if m < n {
                atomicStore(&earlier_same, 1u);
            } else {
                atomicMin(&next_same, m);
            }
        }
    }
    workgroupBarrier();
    if lid == 0u {
        links[lp.links + n] = atomicLoad(&next_same);
        links[lp.links + lp.n + n] = 1u - atomicLoad(&earlier_same);
    }
}

struct BackwardParams {
    dtable: u32, // offset of dtable in its window
    dout: u32,   // offset of dout in its window
    tokens: u32, // offset of tokens in its window
    links: u32,  // offset of links in its window
    n: u32,      // tokens (N)
    dim: u32,    // row width (D)
    vocab: u32,  // table rows (V); ids at or above it write nothing
}
var<push_constant> bp: BackwardParams;

@group(0) @binding(3) var<storage, read_write> chain: array<u32>; // links [2, N]

// dtable[tokens[n], :] += dout[m, :] for every position m of that token, in increasing
// m, by the workgroup of the token's first position n (the others do nothing). The
// walk is bounded by N steps.
@compute @workgroup_size(256)
fn embedding_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let n = workgroup_index(wid, groups);
    if n >= bp.n || chain[bp.links + bp.n + n] == 0u {
        return;
    }
    let token = tokens[bp.tokens + n];
    if token >= bp.vocab {
        return;
    }
    let row = bp.dtable + token * bp.dim;
    for (var d = lid; d < bp.dim; d += WORKGROUP) {
        var acc = out[row + d];
        var m = n;
        for (var steps = 0u; steps < bp.n && m < bp.n; steps++) {
            acc += table[bp.dout + m * bp.dim + d];
            m = chain[bp.links + m];
        }
        out[row + d] = acc;
    }
}
