// Matrix multiplication c[m, n] (+)= op(a)[m, k] · op(b)[k, n], tiled through
// workgroup memory, and the linear layer's bias. op transposes when asked: with
// trans_a, a holds [k, m]; with trans_b, b holds [n, k] (a weight [out, in]).
//
// A workgroup computes a 64 x 64 tile of c: 16 x 16 invocations of 4 x 4 outputs,
// walking k in steps of 16 with a [16, 64] slice of op(a) and of op(b) staged in
// workgroup memory. Each output sums its k products in increasing k.

const TILE: u32 = 64u;  // rows and columns of c per workgroup
const DEPTH: u32 = 16u; // k per step

struct Params {
    c: u32,          // offset of c in its window
    a: u32,          // offset of a in its window
    b: u32,          // offset of b in its window
    m: u32,          // rows of c
    n: u32,          // columns of c
    k: u32,          // the contracted dimension
    trans_a: u32,    // 1: a holds [k, m]
    trans_b: u32,    // 1: b holds [n, k]
    accumulate: u32, // 1: c += product
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> c: array<f32>; // [m, n]
@group(0) @binding(1) var<storage, read_write> a: array<f32>; // [m, k], or [k, m] with trans_a
@group(0) @binding(2) var<storage, read_write> b: array<f32>; // [k, n], or [n, k] with trans_b

var<workgroup> a_tile: array<f32, 1024>; // op(a) slice, [DEPTH, TILE] (k-major)
var<workgroup> b_tile: array<f32, 1024>; // op(b) slice, [DEPTH, TILE]

// op(a)[row, kk], or 0 outside the matrix.
fn load_a(row: u32, kk: u32) -> f32 {
    if row >= p.m || kk >= p.k {
        return 0.0;
    }
    if p.trans_a == 1u {
        return a[p.a + kk * p.m + row];
    }
    return a[p.a + row * p.k + kk];
}

// op(b)[kk, col], or 0 outside the matrix.
fn load_b(kk: u32, col: u32) -> f32 {
    if col >= p.n || kk >= p.k {
        return 0.0;
    }
    if p.trans_b == 1u {
        return b[p.b + col * p.k + kk];
    }
    return b[p.b + kk * p.n + col];
}

// The grid is (ceil(n / 64), ceil(m / 64)).
@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let ty = lid / 16u;
    let tx = lid % 16u;
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += DEPTH) {
        // Each invocation stages 4 elements of each slice; consecutive invocations
        // read consecutive addresses of the stored layout.
        for (var r = 0u; r < 4u; r++) {
            let e = lid + r * WORKGROUP;
            var row = e / DEPTH;
            var kk = e % DEPTH;
            if p.trans_a == 1u {
                row = e % TILE;
                kk = e / TILE;
            }
            a_tile[kk * TILE + row] = load_a(row0 + row, k0 + kk);
            var col = e % TILE;
            var kb = e / TILE;
            if p.trans_b == 1u {
                col = e / DEPTH;
                kb = e % DEPTH;
            }
            b_tile[kb * TILE + col] = load_b(k0 + kb, col0 + col);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < DEPTH; kk++) {
            var a_col: array<f32, 4>;
            var b_row: array<f32, 4>;
            for (var r = 0u; r < 4u; r++) {
                a_col[r] = a_tile[kk * TILE + ty * 4u + r];
                b_row[r] = b_tile[kk * TILE + tx * 4u + r];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] += a_col[i] * b_row[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row = row0 + ty * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + tx * 4u + j;
            if row < p.m && col < p.n {
                let at = p.c + row * p.n + col;
                if p.accumulate == 1u {
                    c[at] += acc[i][j];
                } else {
                    c[at] = acc[i][j];
                }
            }
        }
    }
}

struct BiasParams {
    out: u32,   // offset of out in its window
    bias: u32,  // offset of bias in its window
    len: u32,   // elements of out (N * C)
    width: u32, // columns (C)
}
var<push_constant> q: BiasParams;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;  // [N, C]
@group(0) @binding(1) var<storage, read_write> bias: array<f32>; // [C]

// out[n, c] += bias[c], one invocation per element.
@compute @workgroup_size(256)
fn add_bias(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = invocation_index(wid, groups, lid);
    if i < q.len {
        out[q.out + i] += bias[q.bias + i % q.width];
    }
}
