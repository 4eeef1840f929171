// Matrix multiplication c[m, n] (+)= op(a)[m, k] · op(b)[k, n], tiled through
// workgroup memory, and the linear layer's bias. op transposes when asked: with
// trans_a, a holds [k, m]; with trans_b, b holds [n, k] (a weight [out, in]).
//
// A workgroup computes a 64 x 64 tile of c: 8 x 8 invocations of 8 x 8 outputs,
// walking k in steps of 16 with a [16, 64] slice of op(a) and of op(b) staged in
// workgroup memory as vec4s of 4 rows (or 4 columns). Each step of k costs an
// invocation four vec4 reads and four 4 x 4 outer products, accumulated in 4 x 4
// matrices whose column j holds one row of outputs. Each output sums its k products
// in increasing k.

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

var<workgroup> a_tile: array<vec4<f32>, 256>; // op(a) slice [DEPTH, TILE / 4]: rows 4r..4r+3
var<workgroup> b_tile: array<vec4<f32>, 256>; // op(b) slice [DEPTH, TILE / 4]: columns 4c..4c+3

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

// The outer product of a column a[4] and a row b[4]: column j is a[j] * b.
fn outer(a4: vec4<f32>, b4: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(a4.x * b4, a4.y * b4, a4.z * b4, a4.w * b4);
}

// The grid is (ceil(n / 64), ceil(m / 64)).
@compute @workgroup_size(64)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    // This invocation's outputs: rows row0 + 8 ty .. + 7, columns col0 + 8 tx .. + 7,
    // as 4 x 4 blocks (upper or lower rows, left or right columns).
    let ty = lid / 8u;
    let tx = lid % 8u;
    var upper_left = mat4x4<f32>();
    var upper_right = mat4x4<f32>();
    var lower_left = mat4x4<f32>();
    var lower_right = mat4x4<f32>();
    for (var k0 = 0u; k0 < p.k; k0 += DEPTH) {
        // Each invocation stages 4 vec4s of each slice: op(a) at depth ka, rows
        // 4 ra .. + 3 and op(b) at depth kb, columns 4 cb .. + 3, chosen so that
        // neighbouring invocations read neighbouring addresses of the stored layout.
        for (var s = 0u; s < 4u; s++) {
            let e = lid + 64u * s;
            let major = e / 16u;
            let minor = e % 16u;
            let ka = select(minor, major, p.trans_a == 1u);
            let ra = select(major, minor, p.trans_a == 1u);
            let kb = select(major, minor, p.trans_b == 1u);
            let cb = select(minor, major, p.trans_b == 1u);
            let row = row0 + 4u * ra;
            let col = col0 + 4u * cb;
            let kra = k0 + ka;
            let krb = k0 + kb;
            a_tile[ka * 16u + ra] = vec4<f32>(load_a(row, kra), load_a(row + 1u, kra),
                                              load_a(row + 2u, kra), load_a(row + 3u, kra));
            b_tile[kb * 16u + cb] = vec4<f32>(load_b(krb, col), load_b(krb, col + 1u),
                                              load_b(krb, col + 2u), load_b(krb, col + 3u));
        }
        workgroupBarrier();
        for (var d = 0u; d < DEPTH; d++) {
            let a_upper = a_tile[d * 16u + 2u * ty];
            let a_lower = a_tile[d * 16u + 2u * ty + 1u];
            let b_left = b_tile[d * 16u + 2u * tx];
            let b_right = b_tile[d * 16u + 2u * tx + 1u];
            upper_left += outer(a_upper, b_left);
            upper_right += outer(a_upper, b_right);
            lower_left += outer(a_lower, b_left);
            lower_right += outer(a_lower, b_right);
        }
        workgroupBarrier();
    }
    let row = row0 + 8u * ty;
    let col = col0 + 8u * tx;
    for (var j = 0u; j < 4u; j++) {
        store_row(row + j, col, upper_left[j]);
        store_row(row + j, col + 4u, upper_right[j]);
        store_row(row + 4u + j, col, lower_left[j]);
        store_row(row + 4u + j, col + 4u, lower_right[j]);
    }
}

// c[row, col .. col + 3] (+)= values, the parts inside the matrix.
fn store_row(row: u32, col: u32, values: vec4<f32>) {
    if row >= p.m {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if col + j < p.n {
            let at = p.c + row * p.n + col + j;
            if p.accumulate == 1u {
                c[at] += values[j];
            } else {
                c[at] = values[j];
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
