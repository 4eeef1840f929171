// Rotary position embedding in the Qwen2 "rotate_half" layout, in place: in each head,
// element i and element i + hd/2 are rotated by pos * inv_freq[i]. The backward pass
// is the same kernel with sign -1 (the inverse rotation). inv_freq is computed on the
// host exactly as the CPU backend computes it.

struct Params {
    x: u32,         // offset of x in its window
    positions: u32, // offset of positions in its window
    inv_freq: u32,  // offset of inv_freq in its window
    rows: u32,      // rows (N)
    heads: u32,     // heads per row
    half: u32,      // hd / 2
    sign: f32,      // 1: forward rotation, -1: backward
}
var<push_constant> p: Params;

@group(0) @binding(0) var<storage, read_write> x: array<f32>;         // [N, heads * hd], rotated in place
@group(0) @binding(1) var<storage, read_write> positions: array<u32>; // [N]
@group(0) @binding(2) var<storage, read_write> inv_freq: array<f32>;  // [hd / 2]

// pi / 2 in three parts: the first two have few bits, so q * part is exact for the
// quadrant counts q of any angle below 2^15.
const PIO2_1: f32 = 1.5703125;
const PIO2_2: f32 = 4.8351287841796875e-4;
const PIO2_3: f32 = 3.1391647326017846e-7;
const TWO_OVER_PI: f32 = 0.6366197466850281;

// (sin t, cos t) to within a few ulp on every GPU, where the builtin sin and cos may be
// coarse for large arguments: t = q pi/2 + r with |r| <= pi/4, then Taylor series of r
// (the first omitted terms are below 2e-9).
fn sin_cos(t: f32) -> vec2<f32> {
    let q = round(t * TWO_OVER_PI);
    let r = ((t - q * PIO2_1) - q * PIO2_2) - q * PIO2_3;
    let r2 = r * r;
    let s = r + r * r2 * (-1.0 / 6.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 5040.0 + r2 / 362880.0)));
    let c = 1.0 + r2 * (-0.5 + r2 * (1.0 / 24.0 + r2 * (-1.0 / 720.0 + r2 * (1.0 / 40320.0 - r2 / 3628800.0))));
    switch (i32(q) & 3) {
        case 0: { return vec2<f32>(s, c); }
        case 1: { return vec2<f32>(c, -s); }
        case 2: { return vec2<f32>(-s, -c); }
        default: { return vec2<f32>(-c, s); }
    }
}

// One invocation per (row, head, i < hd/2): the pair (x1, x2) = (x[i], x[i + hd/2]) of
// that head becomes (x1 cos - x2 sin, x2 cos + x1 sin), sin taken with `sign`.
@compute @workgroup_size(256)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = invocation_index(wid, groups, lid);
    if t >= p.rows * p.heads * p.half {
        return;
    }
    let i = t % p.half;
    let head = (t / p.half) % p.heads;
    let n = t / (p.half * p.heads);
    let angle = f32(positions[p.positions + n]) * inv_freq[p.inv_freq + i];
    let sc = sin_cos(angle);
    let sine = p.sign * sc.x;
    let at = p.x + n * p.heads * 2u * p.half + head * 2u * p.half + i;
    let x1 = x[at];
    let x2 = x[at + p.half];
    x[at] = x1 * sc.y - x2 * sine;
    x[at + p.half] = x2 * sc.y + x1 * sine;
}
