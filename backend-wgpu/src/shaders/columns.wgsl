// Column sums over rows, the reduction behind the weight gradient of RMSNorm and the
// bias gradient, in two fixed-order passes (no atomics): partial sums of blocks of 64
// rows, then the blocks in order added into the gradient.

// ROWS_PER_BLOCK, the rows one invocation of column_partials sums, is defined before this
// file when the shader is built: sage_transformer::COLUMN_SUM_ROWS (64), as on every backend.

struct Params {
    partials: u32, // offset of partials in its window
    dout: u32,     // offset of dout in its window
    x: u32,        // offset of x in its window (bias: dout again)
    rstd: u32,     // offset of rstd in its window (bias: dout again)
    rows: u32,     // rows (N)
    width: u32,    // columns (C)
    scaled: u32,   // 1: term dout * x * rstd (RMSNorm weight), 0: term dout (bias)
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> partials: array<f32>; // [ceil(N / 64), C]
@group(0) @binding(1) var<storage, read_write> dout: array<f32>;     // [N, C]
@group(0) @binding(2) var<storage, read_write> x: array<f32>;        // [N, C]
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;     // [N]

// partials[b, c] = sum over rows n of block b of the term at (n, c); the grid is
// (ceil(C / 256), blocks).
@compute @workgroup_size(256)
fn column_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wid.x * WORKGROUP + lid;
    let block = wid.y;
    if c >= p.width {
        return;
    }
    let end = min((block + 1u) * ROWS_PER_BLOCK, p.rows);
    var acc = 0.0;
    for (var n = block * ROWS_PER_BLOCK; n < end; n++) {
        let i = n * p.width + c;
        if p.scaled == 1u {
            acc += dout[p.dout + i] * x[p.x + i] * rstd[p.rstd + n];
        } else {
            acc += dout[p.dout + i];
        }
    }
    partials[p.partials + block * p.width + c] = acc;
}

struct FinishParams {
    grad: u32,     // offset of grad in its window
    partials: u32, // offset of partials in its window
    blocks: u32,   // row blocks (ceil(N / 64))
    width: u32,    // columns (C)
}
var<push_constant> f: FinishParams;

@group(0) @binding(0) var<storage, read_write> grad: array<f32>;          // [C] (+=)
@group(0) @binding(1) var<storage, read_write> block_sums: array<f32>;    // [blocks, C]

// grad[c] += the partial sums of column c, block after block.
@compute @workgroup_size(256)
fn column_finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wid.x * WORKGROUP + lid;
    if c >= f.width {
        return;
    }
    var acc = 0.0;
    for (var b = 0u; b < f.blocks; b++) {
        acc += block_sums[f.partials + b * f.width + c];
    }
    grad[f.grad + c] += acc;
}
