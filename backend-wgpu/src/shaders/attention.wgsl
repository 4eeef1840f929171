// Causal grouped-query attention, flash-style: scores exist one block of 64 keys (or
// queries) at a time, softmax runs online, and the backward pass recomputes the
// probabilities from the saved log-sum-exp. Query head h reads key/value head
// h / group. Layouts: q, out, dout, dq [rows, H*hd]; k, v, dk, dv [key rows, KV*hd];
// lse, delta [rows, H]; heads of width hd <= 256.
//
// Which keys a query sees comes from `spans` [rows, 2] = (first key row, key count),
// built on the host: for training, the causal prefix of the query's sequence; for
// decoding against a cache [B, T, KV*hd], rows b*T .. b*T + length. The key/value
// gradient reads the transposed spans: for each key row, the queries that see it.

const BLOCK: u32 = 64u;         // keys or queries per step = invocations per workgroup
const MAX_HEAD_DIM: u32 = 256u; // each invocation owns 4 dimensions of the head
const NEG_BIG: f32 = -3.0e38;   // below every score

struct Params {
    out: u32,      // offset of out / dq / dk in its window
    aux: u32,      // offset of lse (forward) or dv (key/value gradient) in its window
    q: u32,        // offset of q in its window
    k: u32,        // offset of k in its window
    v: u32,        // offset of v in its window
    dout: u32,     // offset of dout in its window (forward binds q again)
    lse: u32,      // offset of lse in its window (forward binds its output again)
    delta: u32,    // offset of delta in its window (forward binds lse again)
    spans: u32,    // offset of spans in its window
    rows: u32,     // tasks' rows: queries (forward, dq) or keys (key/value gradient)
    heads: u32,    // query heads (H)
    group: u32,    // query heads per key/value head (H / KV)
    head_dim: u32, // hd
    scale: f32,    // 1 / sqrt(hd)
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;   // out / dq [rows, H*hd]; dk [rows, KV*hd]
@group(0) @binding(1) var<storage, read_write> aux: array<f32>;   // lse [rows, H]; dv [rows, KV*hd]
@group(0) @binding(2) var<storage, read_write> q: array<f32>;     // [query rows, H*hd]
@group(0) @binding(3) var<storage, read_write> k: array<f32>;     // [key rows, KV*hd]
@group(0) @binding(4) var<storage, read_write> v: array<f32>;     // [key rows, KV*hd]
@group(0) @binding(5) var<storage, read_write> dout: array<f32>;  // [query rows, H*hd]
@group(0) @binding(6) var<storage, read_write> lse: array<f32>;   // [query rows, H]
@group(0) @binding(7) var<storage, read_write> delta: array<f32>; // [query rows, H]
@group(0) @binding(8) var<storage, read_write> spans: array<u32>; // [rows, 2]

var<workgroup> row_a: array<f32, 256>;   // the task's query (scaled) or key row
var<workgroup> row_b: array<f32, 256>;   // the task's dout or value row
var<workgroup> weights: array<f32, 64>;  // per key/query of the block
var<workgroup> weights2: array<f32, 64>; // a second weight per key/query of the block
var<workgroup> reduce: array<f32, 64>;
var<workgroup> span: vec2<u32>;

// The maximum of `value` over the workgroup, the same in every invocation.
fn block_max(lid: u32, value: f32) -> f32 {
    reduce[lid] = value;
    for (var half = BLOCK / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if lid < half {
            reduce[lid] = max(reduce[lid], reduce[lid + half]);
        }
    }
    return workgroupUniformLoad(&reduce[0]);
}

// The sum of `value` over the workgroup, the same in every invocation.
fn block_sum(lid: u32, value: f32) -> f32 {
    workgroupBarrier();
    reduce[lid] = value;
    for (var half = BLOCK / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if lid < half {
            reduce[lid] += reduce[lid + half];
        }
    }
    return workgroupUniformLoad(&reduce[0]);
}

// The span of `row`, loaded so that loops over it are uniform.
fn load_span(lid: u32, row: u32) -> vec2<u32> {
    if lid == 0u {
        span = vec2<u32>(spans[p.spans + 2u * row], spans[p.spans + 2u * row + 1u]);
    }
    return workgroupUniformLoad(&span);
}

// Forward, one workgroup per (query row, head): out = softmax(scale q·k^T) · v over
// the query's span, and lse = its log-sum-exp. Running max m and sum l are updated
// block by block, rescaling the partial output by exp(m_old - m_new).
@compute @workgroup_size(64)
fn attention_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let task = workgroup_index(wid, groups);
    if task >= p.rows * p.heads {
        return;
    }
    let row = task / p.heads;
    let head = task % p.heads;
    let q_width = p.heads * p.head_dim;
    let kv_width = (p.heads / p.group) * p.head_dim;
    let kv_col = (head / p.group) * p.head_dim;
    let s = load_span(lid, row);
    for (var d = lid; d < p.head_dim; d += BLOCK) {
        row_a[d] = q[p.q + row * q_width + head * p.head_dim + d] * p.scale;
    }
    var m = NEG_BIG;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var start = 0u; start < s.y; start += BLOCK) {
        workgroupBarrier();
        let j = start + lid;
        var score = NEG_BIG;
        if j < s.y {
            let key = p.k + (s.x + j) * kv_width + kv_col;
            var dot = 0.0;
            for (var d = 0u; d < p.head_dim; d++) {
                dot += row_a[d] * k[key + d];
            }
            score = dot;
        }
        let m_new = max(m, block_max(lid, score));
        let w = select(0.0, exp(score - m_new), j < s.y);
        weights[lid] = w;
        let correction = exp(m - m_new);
        l = l * correction + block_sum(lid, w);
        let keys = min(BLOCK, s.y - start);
        for (var e = 0u; e < 4u; e++) {
            let d = lid + e * BLOCK;
            if d < p.head_dim {
                var a = acc[e] * correction;
                for (var jj = 0u; jj < keys; jj++) {
                    a += weights[jj] * v[p.v + (s.x + start + jj) * kv_width + kv_col + d];
                }
                acc[e] = a;
            }
        }
        m = m_new;
    }
    for (var e = 0u; e < 4u; e++) {
        let d = lid + e * BLOCK;
        if d < p.head_dim {
            out[p.out + row * q_width + head * p.head_dim + d] = acc[e] / l;
        }
    }
    if lid == 0u {
        aux[p.aux + row * p.heads + head] = m + log(l);
    }
}

// Query gradient, one workgroup per (query row, head): with P = exp(scale q·k - lse)
// and dS = P (dout·v - delta): dq = scale * sum over the span of dS k.
@compute @workgroup_size(64)
fn attention_backward_dq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    let task = workgroup_index(wid, groups);
    if task >= p.rows * p.heads {
        return;
    }
    let row = task / p.heads;
    let head = task % p.heads;
    let q_width = p.heads * p.head_dim;
    let kv_width = (p.heads / p.group) * p.head_dim;
    let kv_col = (head / p.group) * p.head_dim;
    let s = load_span(lid, row);
    let at = row * q_width + head * p.head_dim;
    for (var d = lid; d < p.head_dim; d += BLOCK) {
        row_a[d] = q[p.q + at + d] * p.scale;
        row_b[d] = dout[p.dout + at + d];
    }
    let row_lse = lse[p.lse + row * p.heads + head];
    let row_delta = delta[p.delta + row * p.heads + head];
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var start = 0u; start < s.y; start += BLOCK) {
        workgroupBarrier();
        let j = start + lid;
        var ds = 0.0;
        if j < s.y {
            let key = (s.x + j) * kv_width + kv_col;
            var score = 0.0;
            var dp = 0.0;
            for (var d = 0u; d < p.head_dim; d++) {
                score += row_a[d] * k[p.k + key + d];
                dp += row_b[d] * v[p.v + key + d];
            }
            ds = exp(score - row_lse) * (dp - row_delta);
        }
        weights[lid] = ds;
        workgroupBarrier();
        let keys = min(BLOCK, s.y - start);
        for (var e = 0u; e < 4u; e++) {
            let d = lid + e * BLOCK;
            if d < p.head_dim {
                var a = acc[e];
                for (var jj = 0u; jj < keys; jj++) {
                    a += weights[jj] * k[p.k + (s.x + start + jj) * kv_width + kv_col + d];
                }
                acc[e] = a;
            }
        }
    }
    for (var e = 0u; e < 4u; e++) {
        let d = lid + e * BLOCK;
        if d < p.head_dim {
            out[p.out + at + d] = acc[e] * p.scale;
        }
    }
}

// Key and value gradients, one workgroup per (key row, key/value head), over the
// queries that see the key (its span) in each query head of the group:
// dk = scale * sum dS q, dv = sum P dout.
@compute @workgroup_size(64)
fn attention_backward_dkv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
    let kv_heads = p.heads / p.group;
    let task = workgroup_index(wid, groups);
    if task >= p.rows * kv_heads {
        return;
    }
    let row = task / kv_heads;
    let g = task % kv_heads;
    let q_width = p.heads * p.head_dim;
    let kv_width = kv_heads * p.head_dim;
    let at = row * kv_width + g * p.head_dim;
    let s = load_span(lid, row);
    for (var d = lid; d < p.head_dim; d += BLOCK) {
        row_a[d] = k[p.k + at + d];
        row_b[d] = v[p.v + at + d];
    }
    var dk = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    var dv = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var hh = 0u; hh < p.group; hh++) {
        let head = g * p.group + hh;
        for (var start = 0u; start < s.y; start += BLOCK) {
            workgroupBarrier();
            let i = start + lid;
            var prob = 0.0;
            var ds = 0.0;
            if i < s.y {
                let query = (s.x + i) * q_width + head * p.head_dim;
                var score = 0.0;
                var dp = 0.0;
                for (var d = 0u; d < p.head_dim; d++) {
                    score += q[p.q + query + d] * row_a[d];
                    dp += dout[p.dout + query + d] * row_b[d];
                }
                let stat = (s.x + i) * p.heads + head;
                prob = exp(score * p.scale - lse[p.lse + stat]);
                ds = prob * (dp - delta[p.delta + stat]);
            }
            weights[lid] = ds;
            weights2[lid] = prob;
            workgroupBarrier();
            let queries = min(BLOCK, s.y - start);
            for (var e = 0u; e < 4u; e++) {
                let d = lid + e * BLOCK;
                if d < p.head_dim {
                    var a = dk[e];
                    var b = dv[e];
                    for (var ii = 0u; ii < queries; ii++) {
                        let query = (s.x + start + ii) * q_width + head * p.head_dim + d;
                        a += weights[ii] * q[p.q + query];
                        b += weights2[ii] * dout[p.dout + query];
                    }
                    dk[e] = a;
                    dv[e] = b;
                }
            }
        }
    }
    for (var e = 0u; e < 4u; e++) {
        let d = lid + e * BLOCK;
        if d < p.head_dim {
            out[p.out + at + d] = dk[e] * p.scale;
            aux[p.aux + at + d] = dv[e];
        }
    }
}

// ---- small kernels -----------------------------------------------------------------

struct DeltaParams {
    delta: u32, // offset of delta in its window
    dout: u32,  // offset of dout in its window
    out: u32,   // offset of out in its window
    rows: u32,  // rows (N)
    heads: u32, // H
    width: u32, // hd
}
var<push_constant> dp: DeltaParams;

@group(0) @binding(0) var<storage, read_write> delta_out: array<f32>;  // delta [N, H]
@group(0) @binding(1) var<storage, read_write> delta_dout: array<f32>; // [N, H*hd]
@group(0) @binding(2) var<storage, read_write> delta_o: array<f32>;    // out [N, H*hd]

// delta[n, h] = sum over the head's dimensions of dout * out, one invocation each.
@compute @workgroup_size(256)
fn attention_delta(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let t = invocation_index(wid, groups, lid);
    if t >= dp.rows * dp.heads {
        return;
    }
    let at = t * dp.width;
    var sum = 0.0;
    for (var d = 0u; d < dp.width; d++) {
        sum += delta_dout[dp.dout + at + d] * delta_o[dp.out + at + d];
    }
    delta_out[dp.delta + t] = sum;
}

struct AppendParams {
    k_cache: u32,  // offset of k_cache in its window
    v_cache: u32,  // offset of v_cache in its window
    k: u32,        // offset of k in its window
    v: u32,        // offset of v in its window
    lengths: u32,  // offset of lengths in its window
    batch: u32,    // sequences (B)
    width: u32,    // KV*hd
    capacity: u32, // rows per sequence (T)
}
var<push_constant> ap: AppendParams;

@group(0) @binding(0) var<storage, read_write> k_cache: array<f32>; // [B, T, KV*hd]
@group(0) @binding(1) var<storage, read_write> v_cache: array<f32>; // [B, T, KV*hd]
@group(0) @binding(2) var<storage, read_write> k_new: array<f32>;   // [B, KV*hd]
@group(0) @binding(3) var<storage, read_write> v_new: array<f32>;   // [B, KV*hd]
@group(0) @binding(4) var<storage, read_write> lengths: array<u32>; // [B]

// k_cache[b, lengths[b], :] = k[b, :] and the same for v, one invocation per element.
@compute @workgroup_size(256)
fn kv_cache_append(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let t = invocation_index(wid, groups, lid);
    if t >= ap.batch * ap.width {
        return;
    }
    let b = t / ap.width;
    let at = (b * ap.capacity + lengths[ap.lengths + b]) * ap.width + t % ap.width;
    k_cache[ap.k_cache + at] = k_new[ap.k + t];
    v_cache[ap.v_cache + at] = v_new[ap.v + t];
}
