//! The packed GEMM of the CPU backend: `c = alpha * a · b + beta * c` in f32 (or with
//! operands rounded to bf16, `Precision::Bf16`: `bf16.rs`), `a` and `b` read through
//! strided views (so transposed operands are read in place), `c` given as its rows. It
//! owns the cache blocking, the packing of operands, the split into tasks and the
//! register micro-kernel, which pulp compiles for the best vector level the CPU has at
//! run time (AVX-512, AVX2+FMA, NEON, or scalar).
//!
//! The loops, outermost first:
//! - `a` is taken in blocks of at most [`MC`] rows. A block's tasks are column ranges of
//!   `c` times groups of rows, about one per thread, run in one parallel region
//!   ([`Plan`]: a range is one column block where the packed block of `a` stays in
//!   cache, one per thread where it does not). Where there are several ranges, the
//!   whole block of `a` is packed first, in micro-panels of `MR` rows by a depth step,
//!   and shared by the tasks; where there is one, each task packs the panels of
//!   its own rows as it goes.
//! - A task walks the depth in even steps of at most [`KC`] ([`depth_steps`]: each
//!   step adds into every element of `c` once, so the fewer the better), and its range
//!   in column blocks of at most [`NC`]: it packs each block of `b` into micro-panels of
//!   `NR` columns (the block stays in L2) and runs every micro-panel of its rows of `a`
//!   against them.
//! - The micro-kernel keeps an `MR x NR` tile of `c` in registers: with 32 vector
//!   registers (AVX-512) 12 rows by 2 vectors (12 x 32 floats), with 16 (AVX2) 6 rows by
//!   2 vectors (6 x 16).
//!
//! One parallel region per block of `a` (and one more to pack it), not two per depth
//! step: on this project's 2-core VM the waits between regions cost more than a tenth of
//! a 2048^3 product.
//!
//! Every element of `c` is the same sum in the same order however the product is split
//! into tasks and whatever rows or columns are computed beside it: partial tiles run the
//! same kernel on zero-padded panels and are written through the same vector arithmetic.
//! So results do not depend on the number of threads, and a row of `c` does not depend
//! on the batch it is computed in.

use std::cell::RefCell;
use std::ops::Range;
use std::thread::LocalKey;

use ndarray::{ArrayView2, Axis, Slice};
use pulp::{bytemuck, Simd, WithSimd};
use rayon::prelude::*;

use crate::bf16::{into_pairs, into_swapped_pairs, pair, DotInstruction, TILE_COLUMNS};
use crate::Precision;

/// Most depth (k) of one packed block. A micro-panel of `a` (`MR x KC`: 36 KiB at
/// AVX-512's 12 rows) and one of `b` (`KC x NR`) stream from L2 through L1 against each
/// other; a depth of 576 or 1,536 (SmolLM2's products) takes one or two steps instead of
/// three or six of 256, each of which read and wrote every element of `c`.
const KC: usize = 768;

/// Most rows of `a` in one block; a shared packed block holds `MC x k` floats (3.5 MB per
/// [`KC`] of depth).
const MC: usize = 1152;

/// Most floats of a shared packed block of `a` (16 MiB) that every column block may read
/// over the whole depth in turn: about what the last-level cache keeps. The tests' small
/// products take both sides of it with 8,192.
const CACHED_A_FLOATS: usize = if cfg!(test) { 8192 } else { 4 << 20 };

/// Most columns of `b` in one packed block (768 KB at [`KC`], three quarters of a 1 MiB
/// L2: every micro-panel of `a` in the task's rows reads the whole block).
const NC: usize = 256;

/// A depth block's worth of zeros: the rows and depth steps past an operand's edge.
const ZEROS: [f32; KC] = [0.0; KC];

/// Packed buffers start on a 64-byte line, so that no vector load of `b` splits a line.
const ALIGN_BYTES: usize = 64;

/// Vectors per micro-kernel row: a tile is `MR` rows by two vectors.
const VECTORS: usize = 2;

thread_local! {
    /// The packed block of `a` of a product started on this thread, kept between
    /// products (at most `MC x k` floats of the deepest product so far).
    static A_BLOCK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A task's own packed micro-panels of `a`.
    static A_PANELS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The packed block of `b` of a task run on this thread.
    static B_BLOCK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// c = alpha * a[m, k] · b[k, n] + beta * c, where `c_rows` are the m rows of `c`, each n
/// long, with the operands' arithmetic of `precision`. With beta 0, `c` is not read. With
/// `parallel`, the tasks run on rayon's pool.
pub(crate) fn gemm_packed(
    c_rows: Vec<&mut [f32]>,
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    (alpha, beta): (f32, f32),
    parallel: bool,
    precision: Precision,
) {
    pulp::Arch::new().dispatch(Product {
        c_rows,
        a: a.view(),
        b: b.view(),
        alpha,
        beta,
        parallel,
        precision,
    });
}

/// One call of [`gemm_packed`], dispatched to a vector level.
struct Product<'p, 'c> {
    c_rows: Vec<&'c mut [f32]>,
    a: ArrayView2<'p, f32>,
    b: ArrayView2<'p, f32>,
    alpha: f32,
    beta: f32,
    parallel: bool,
    precision: Precision,
}

/// How a product's packed panels hold their values.
#[derive(Clone, Copy)]
enum Format {
    /// The f32 values as given.
    F32,
    /// bf16 values two depth steps to a lane, for the AVX-512 BF16 kernel.
    Pairs(DotInstruction),
    /// bf16 values as f32, each pair's depth steps swapped, for the f32 kernel.
    Swapped,
}

impl Format {
    /// The format of a product in `precision` with micro-panels `nr` columns wide: pairs
    /// where the CPU has the bf16 dot instruction and the tile is its width.
    fn of(precision: Precision, nr: usize) -> Format {
        match precision {
            Precision::F32 => Format::F32,
            Precision::Bf16 => match DotInstruction::detect() {
                Some(dot) if nr == TILE_COLUMNS => Format::Pairs(dot),
                _ => Format::Swapped,
            },
        }
    }

    /// Packs the micro-panel `a` (at most MR rows) into `dst` in this format: [`pack_a`]'s
    /// layout, rewritten as this format holds it (pairs in one pass where `a`'s rows or
    /// columns are contiguous). Inlined, so that the rewriting vectorises at the
    /// caller's vector level.
    #[inline(always)]
    fn pack_a<const MR: usize>(self, dst: &mut [f32], a: &ArrayView2<'_, f32>) {
        match self {
            Format::F32 => pack_a::<MR>(dst, a),
            Format::Pairs(_) => pack_a_pairs::<MR>(dst, a),
            Format::Swapped => {
                pack_a::<MR>(dst, a);
                into_swapped_pairs(dst, MR, a.ncols());
            }
        }
    }

    /// Packs the block `b` (`[kc, width]`) into `dst` in this format: [`pack_b`]'s
    /// layout, each panel rewritten as this format holds it (pairs in one pass where
    /// `b`'s rows or columns are contiguous). Inlined, as [`Format::pack_a`] is.
    #[inline(always)]
    fn pack_b(self, dst: &mut [f32], nr: usize, b: &ArrayView2<'_, f32>) {
        let kc = b.nrows();
        match self {
            Format::F32 => pack_b(dst, nr, b),
            Format::Pairs(_) => pack_b_pairs(dst, nr, b),
            Format::Swapped => {
                pack_b(dst, nr, b);
                dst.chunks_mut(kc * nr)
                    .for_each(|panel| into_swapped_pairs(panel, nr, kc));
            }
        }
    }
}

impl WithSimd for Product<'_, '_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        // 2 * MR accumulators, two vectors of `b` and a broadcast of `a` fit the registers.
        if S::REGISTER_COUNT >= 32 {
            drive::<S, 12>(simd, self);
        } else {
            drive::<S, 6>(simd, self);
        }
    }
}

/// How a tile's sums enter `c`.
#[derive(Clone, Copy)]
enum Update {
    /// The first depth block with beta 0: c = alpha * sum.
    Store,
    /// The first depth block: c = alpha * sum + beta * c.
    Blend,
    /// Every later depth block: c += alpha * sum.
    Accumulate,
}

/// The scalars of a product and how the current depth block enters `c`.
#[derive(Clone, Copy)]
struct Scalars {
    alpha: f32,
    beta: f32,
    update: Update,
}

/// The blocking loops of one product with `MR`-row micro-panels.
fn drive<S: Simd, const MR: usize>(simd: S, product: Product<'_, '_>) {
    let Product {
        mut c_rows,
        a,
        b,
        alpha,
        beta,
        parallel,
        precision,
    } = product;
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for row in &mut c_rows {
            row.iter_mut()
                .for_each(|x| *x = if beta == 0.0 { 0.0 } else { beta * *x });
        }
        return;
    }
    let nr = VECTORS * S::F32_LANES;
    let format = Format::of(precision, nr);
    let threads = if parallel {
        rayon::current_num_threads()
    } else {
        1
    };
    let mut a_floats = take(&A_BLOCK);
    for ic in (0..m).step_by(MC) {
        let mc = MC.min(m - ic);
        let panels = mc.div_ceil(MR);
        let a_rows = block(&a, ic..ic + mc, 0..k);
        let plan = Plan::new::<MR>(n, panels, k, nr, threads);
        // With one column range, each task packs the panels of `a` it alone uses.
        let a_panels = if plan.column_ranges.len() > 1 {
            let packed = aligned(&mut a_floats, panels * MR * k);
            pack_block::<S, MR>(simd, packed, &a_rows, format, threads > 1);
            APanels::Shared { packed, panels }
        } else {
            APanels::Own(a_rows)
        };
        let tasks = plan.tasks::<MR>(&mut c_rows[ic..ic + mc]);
        let run = |task: Task<'_>| {
            simd.vectorize(TaskRun::<MR> {
                task,
                a_panels: &a_panels,
                b: &b,
                alpha,
                beta,
                format,
            })
        };
        if threads > 1 {
            tasks.into_par_iter().for_each(run);
        } else {
            tasks.into_iter().for_each(run);
        }
    }
    put_back(&A_BLOCK, a_floats);
}

/// Packs every micro-panel of `a` (`[mc, k]`) into `packed`, laid out
/// `[depth step][panels][step's depth][MR]` ([`depth_steps`]) in `format`, on
/// rayon's threads with `parallel`, each panel's rewriting compiled for `simd`'s level.
fn pack_block<S: Simd, const MR: usize>(
    simd: S,
    packed: &mut [f32],
    a: &ArrayView2<'_, f32>,
    format: Format,
    parallel: bool,
) {
    let (mc, k) = a.dim();
    let panels = mc.div_ceil(MR);
    let mut jobs = Vec::with_capacity(panels * k.div_ceil(KC));
    let mut rest = packed;
    for depth in depth_steps(k) {
        let (pc, kc) = (depth.start, depth.len());
        let (depth_block, tail) = rest.split_at_mut(panels * MR * kc);
        rest = tail;
        for (p, dst) in depth_block.chunks_mut(MR * kc).enumerate() {
            let rows = p * MR..mc.min((p + 1) * MR);
            jobs.push((dst, block(a, rows, pc..pc + kc)));
        }
    }
    let pack = |(dst, panel): (&mut [f32], ArrayView2<'_, f32>)| {
        simd.vectorize(
            #[inline(always)]
            || {
                format.pack_a::<MR>(dst, &panel);
            },
        )
    };
    if parallel {
        jobs.into_par_iter().with_min_len(8).for_each(pack);
    } else {
        jobs.into_iter().for_each(pack);
    }
}

/// Where a task finds the micro-panels of `a`.
enum APanels<'p, 'v> {
    /// Packed once for every task ([`pack_block`]'s layout, `panels` per depth block).
    Shared { packed: &'p [f32], panels: usize },
    /// The rows of the block of `a` (`[mc, k]`): each task packs its own panels.
    Own(ArrayView2<'v, f32>),
}

/// How one block of `a` is split into tasks: column ranges of `c` times groups of `a`'s
/// micro-panels. A task walks its range in blocks of at most [`NC`] columns at every
/// depth step, so each depth step of `a` is read by every block of the range while it is
/// in cache.
struct Plan {
    /// (first column, width) of each column range; widths are whole micro-panels but
    /// the last.
    column_ranges: Vec<(usize, usize)>,
    /// Micro-panels of `a` per row group.
    group_panels: usize,
}

impl Plan {
    /// About one task per thread, for a block of `panels` micro-panels of `MR` rows of
    /// `a`, `k` deep. Where `n` fits one block of [`NC`] columns, a group of rows per
    /// thread. Otherwise, where the packed block of `a` stays in cache
    /// ([`CACHED_A_FLOATS`]), ranges of one column block each, as many as a multiple of
    /// the threads: the smaller a task's piece of `c`, the more of it the caches keep
    /// between depth steps. Where it does not, one range per thread: a task per column
    /// block would read all of `a` from memory once per block.
    fn new<const MR: usize>(n: usize, panels: usize, k: usize, nr: usize, threads: usize) -> Plan {
        let column_panels = n.div_ceil(nr);
        let blocks = n.div_ceil(NC);
        let ranges = if blocks == 1 {
            1
        } else if panels * MR * k <= CACHED_A_FLOATS {
            blocks.max(threads).next_multiple_of(threads)
        } else {
            threads
        };
        let column_ranges = even_split(column_panels, ranges)
            .map(|panels| {
                let start = panels.start * nr;
                (start, (panels.len() * nr).min(n - start))
            })
            .collect::<Vec<_>>();
        let groups = threads.div_ceil(column_ranges.len()).min(panels);
        Plan {
            column_ranges,
            group_panels: panels.div_ceil(groups),
        }
    }

    /// The tasks over `rows` (the rows of `c` of the current block of `a`), each lent
    /// its own pieces of them.
    fn tasks<'r, const MR: usize>(&self, rows: &'r mut [&mut [f32]]) -> Vec<Task<'r>> {
        let mut tasks = Vec::new();
        for (group, group_rows) in rows.chunks_mut(self.group_panels * MR).enumerate() {
            let mut pieces: Vec<Vec<&mut [f32]>> = self
                .column_ranges
                .iter()
                .map(|_| Vec::with_capacity(group_rows.len()))
                .collect();
            for row in group_rows.iter_mut() {
                let mut rest: &mut [f32] = row;
                for (&(_, width), block_pieces) in self.column_ranges.iter().zip(&mut pieces) {
                    let (piece, tail) = std::mem::take(&mut rest).split_at_mut(width);
                    block_pieces.push(piece);
                    rest = tail;
                }
            }
            for (&(first_column, _), rows) in self.column_ranges.iter().zip(pieces) {
                tasks.push(Task {
                    rows,
                    first_panel: group * self.group_panels,
                    first_column,
                });
            }
        }
        tasks
    }
}

/// One task: a group of rows of `c` restricted to one column range.
struct Task<'r> {
    /// The task's piece of each of its rows of `c`, all the same width.
    rows: Vec<&'r mut [f32]>,
    /// Index of the task's first micro-panel in the packed block of `a`.
    first_panel: usize,
    /// Column of `c` (and `b`) where the task's pieces start.
    first_column: usize,
}

/// A task's work over the whole depth, run inside the vector level's target features.
struct TaskRun<'t, 'p, 'v, const MR: usize> {
    task: Task<'t>,
    a_panels: &'t APanels<'p, 'v>,
    /// [k, n]
    b: &'t ArrayView2<'v, f32>,
    alpha: f32,
    beta: f32,
    format: Format,
}

impl<const MR: usize> WithSimd for TaskRun<'_, '_, '_, MR> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let TaskRun {
            mut task,
            a_panels,
            b,
            alpha,
            beta,
            format,
        } = self;
        let nr = VECTORS * S::F32_LANES;
        let Some(width) = task.rows.first().map(|row| row.len()) else {
            return;
        };
        let k = b.nrows();
        let column_panels = width.div_ceil(nr);
        let columns = task.first_column..task.first_column + width;
        let first_row = task.first_panel * MR;
        let own_rows = first_row..first_row + task.rows.len();
        let mut b_floats = take(&B_BLOCK);
        let mut a_floats = take(&A_PANELS);
        for depth in depth_steps(k) {
            let (pc, kc) = (depth.start, depth.len());
            let update = match (pc, beta == 0.0) {
                (0, true) => Update::Store,
                (0, false) => Update::Blend,
                _ => Update::Accumulate,
            };
            let scalars = Scalars {
                alpha,
                beta,
                update,
            };
            // The task's panels of `a`, [panels][kc][MR].
            let a_depth_block: &[f32] = match a_panels {
                APanels::Shared { packed, panels } => {
                    let depth_block = &packed[panels * MR * pc..panels * MR * (pc + kc)];
                    &depth_block[first_row * kc..]
                }
                APanels::Own(rows) => {
                    let own = block(rows, own_rows.clone(), pc..pc + kc);
                    let panels = own.nrows().div_ceil(MR);
                    let packed = aligned(&mut a_floats, panels * MR * kc);
                    for (p, dst) in packed.chunks_mut(MR * kc).enumerate() {
                        let panel_rows = p * MR..own.nrows().min((p + 1) * MR);
                        format.pack_a::<MR>(dst, &block(&own, panel_rows, 0..kc));
                    }
                    packed
                }
            };
            for block_panels in even_split(column_panels, column_panels.div_ceil(NC / nr)) {
                let start = block_panels.start * nr;
                let end = width.min(block_panels.end * nr);
                // b_packed[block_panels][kc][nr]
                let b_packed = aligned(&mut b_floats, block_panels.len() * kc * nr);
                let b_columns = columns.start + start..columns.start + end;
                format.pack_b(b_packed, nr, &block(b, pc..pc + kc, b_columns));
                let panels = Panels {
                    a: a_depth_block,
                    b: b_packed,
                    depth: kc,
                    format,
                };
                panels.multiply::<S, MR>(simd, &mut task.rows, start, scalars);
            }
        }
        put_back(&A_PANELS, a_floats);
        put_back(&B_BLOCK, b_floats);
    }
}

/// One depth step's packed panels: the task's micro-panels of `a` (`[panels][depth][MR]`)
/// and one column block's of `b` (`[panels][depth][NR]`), in `format`.
struct Panels<'p> {
    a: &'p [f32],
    b: &'p [f32],
    depth: usize,
    format: Format,
}

impl Panels<'_> {
    /// Every micro-panel of `a` against every micro-panel of `b`, each tile's sums
    /// entering `rows` (the task's rows of `c`) from column `column` on.
    #[inline(always)]
    fn multiply<S: Simd, const MR: usize>(
        &self,
        simd: S,
        rows: &mut [&mut [f32]],
        column: usize,
        scalars: Scalars,
    ) {
        let Panels {
            a,
            b,
            depth,
            format,
        } = *self;
        let nr = VECTORS * S::F32_LANES;
        for (rows, a_panel) in rows.chunks_mut(MR).zip(a.chunks(MR * depth)) {
            let a_panel = a_panel.as_chunks::<MR>().0;
            for (panel, b_panel) in b.chunks(depth * nr).enumerate() {
                let tile = match format {
                    Format::Pairs(dot) => pair_tile::<S, MR>(simd, dot, a_panel, b_panel, depth),
                    Format::F32 | Format::Swapped => {
                        let b_panel = S::as_simd_f32s(b_panel).0.as_chunks::<VECTORS>().0;
                        micro_kernel::<S, MR>(simd, a_panel, b_panel)
                    }
                };
                write_tile(simd, &tile, rows, column + panel * nr, scalars);
            }
        }
    }
}

/// The depth steps of a product `k` deep: as few as keep each at most [`KC`], of even
/// lengths.
fn depth_steps(k: usize) -> impl Iterator<Item = Range<usize>> {
    even_split(k, k.div_ceil(KC))
}

/// `items` split into `parts` consecutive ranges whose lengths differ by at most one
/// (empty ones left out).
fn even_split(items: usize, parts: usize) -> impl Iterator<Item = Range<usize>> {
    let parts = parts.clamp(1, items.max(1));
    (0..parts)
        .map(move |part| part * items / parts..(part + 1) * items / parts)
        .filter(|range| !range.is_empty())
}

/// The sums of one tile: tile[r][v] = sum over p of a[p][r] * b[p][v], in order of p.
/// `a` is kc rows of MR values, `b` kc rows of two vectors.
#[inline(always)]
fn micro_kernel<S: Simd, const MR: usize>(
    simd: S,
    a: &[[f32; MR]],
    b: &[[S::f32s; VECTORS]],
) -> [[S::f32s; VECTORS]; MR] {
    let mut tile = [[simd.splat_f32s(0.0); VECTORS]; MR];
    for (a_p, b_p) in a.iter().zip(b) {
        for (tile_row, &a_pr) in tile.iter_mut().zip(a_p) {
            let a_pr = simd.splat_f32s(a_pr);
            for (sum, &b_pv) in tile_row.iter_mut().zip(b_p) {
                *sum = simd.mul_add_f32s(a_pr, b_pv, *sum);
            }
        }
    }
    tile
}

/// The sums of one tile from panels of bf16 pairs ([`Format::Pairs`], `depth` steps),
/// by the AVX-512 BF16 kernel, as [`micro_kernel`] returns them.
#[inline(always)]
fn pair_tile<S: Simd, const MR: usize>(
    simd: S,
    dot: DotInstruction,
    a: &[[f32; MR]],
    b: &[f32],
    depth: usize,
) -> [[S::f32s; VECTORS]; MR] {
    let lanes = depth.div_ceil(2);
    let b_lanes = b[..lanes * TILE_COLUMNS].as_chunks::<TILE_COLUMNS>().0;
    let sums = dot.tile(&a[..lanes], b_lanes);
    let mut tile = [[simd.splat_f32s(0.0); VECTORS]; MR];
    for (row, sums) in tile.iter_mut().zip(&sums) {
        // Pairs are chosen only where a tile row is TILE_COLUMNS floats.
        bytemuck::cast_slice_mut::<S::f32s, f32>(row).copy_from_slice(sums);
    }
    tile
}

/// Writes a tile's sums into the rows of `c` from column `column` on, clipped to the
/// rows and columns there are. A clipped row goes through a vector copy, so that every
/// element gets the same arithmetic as in a whole tile.
#[inline(always)]
fn write_tile<S: Simd, const MR: usize>(
    simd: S,
    tile: &[[S::f32s; VECTORS]; MR],
    rows: &mut [&mut [f32]],
    column: usize,
    scalars: Scalars,
) {
    let nr = VECTORS * S::F32_LANES;
    let Scalars {
        alpha,
        beta,
        update,
    } = scalars;
    let (alpha, beta) = (simd.splat_f32s(alpha), simd.splat_f32s(beta));
    let apply = |sum: S::f32s, c: S::f32s| match update {
        Update::Store => simd.mul_f32s(alpha, sum),
        Update::Blend => simd.mul_add_f32s(alpha, sum, simd.mul_f32s(beta, c)),
        Update::Accumulate => simd.mul_add_f32s(alpha, sum, c),
    };
    for (sums, row) in tile.iter().zip(rows.iter_mut()) {
        let end = (column + nr).min(row.len());
        let out = &mut row[column..end];
        if out.len() == nr {
            for (c, &sum) in S::as_mut_simd_f32s(out).0.iter_mut().zip(sums) {
                *c = apply(sum, *c);
            }
        } else {
            let mut staged = [simd.splat_f32s(0.0); VECTORS];
            let staged_floats: &mut [f32] = bytemuck::cast_slice_mut(&mut staged);
            staged_floats[..out.len()].copy_from_slice(out);
            for (c, &sum) in staged.iter_mut().zip(sums) {
                *c = apply(sum, *c);
            }
            let staged_floats: &[f32] = bytemuck::cast_slice(&staged);
            out.copy_from_slice(&staged_floats[..out.len()]);
        }
    }
}

/// The block of `matrix` at `rows` and `columns`.
fn block<'v>(
    matrix: &ArrayView2<'v, f32>,
    rows: Range<usize>,
    columns: Range<usize>,
) -> ArrayView2<'v, f32> {
    (*matrix)
        .slice_axis_move(Axis(0), Slice::from(rows))
        .slice_axis_move(Axis(1), Slice::from(columns))
}

/// dst[p][r] = a[r, p] for the (at most MR) rows of `a`, zero for rows past them.
fn pack_a<const MR: usize>(dst: &mut [f32], a: &ArrayView2<'_, f32>) {
    let dst = dst.as_chunks_mut::<MR>().0;
    let rows = a.nrows();
    if rows < MR {
        dst.iter_mut().for_each(|d| d[rows..].fill(0.0));
    }
    if a.ncols() > 1 && a.strides()[0] == 1 {
        // Columns contiguous (a transposed operand): one copy per depth step, of a
        // fixed size for a whole panel (moves, not a call to memcpy per MR values).
        for (d, column) in dst.iter_mut().zip(a.columns()) {
            match column.to_slice() {
                Some(column) => match <&[f32; MR]>::try_from(column) {
                    Ok(whole) => *d = *whole,
                    Err(_) => d[..rows].copy_from_slice(column),
                },
                None => d.iter_mut().zip(column).for_each(|(d, &x)| *d = x),
            }
        }
    } else if let Some(rows) = row_slices::<MR>(a) {
        // Rows contiguous: each depth step gathers one value from every row.
        let depth = dst.len();
        let rows = rows.map(|row| &row[..depth]);
        for (p, d) in dst.iter_mut().enumerate() {
            *d = std::array::from_fn(|r| rows[r][p]);
        }
    } else {
        for (r, row) in a.rows().into_iter().enumerate() {
            dst.iter_mut().zip(row).for_each(|(d, &x)| d[r] = x);
        }
    }
}

/// The rows of `a` (at most MR, at most [`KC`] long) as slices, zeros past them; None
/// where a row is not contiguous.
fn row_slices<'v, const MR: usize>(a: &ArrayView2<'v, f32>) -> Option<[&'v [f32]; MR]> {
    let mut rows = [&ZEROS[..a.ncols()]; MR];
    for (r, slot) in rows.iter_mut().enumerate().take(a.nrows()) {
        *slot = (*a).index_axis_move(Axis(0), r).to_slice()?;
    }
    Some(rows)
}

/// [`pack_a`] then [`into_pairs`]: in one pass where the rows or the columns of `a` are
/// contiguous, in two elsewhere.
#[inline(always)]
fn pack_a_pairs<const MR: usize>(dst: &mut [f32], a: &ArrayView2<'_, f32>) {
    if a_pairs_in_one_pass::<MR>(dst, a).is_none() {
        pack_a::<MR>(dst, a);
        into_pairs(dst, MR, a.ncols());
    }
}

/// [`pack_a_pairs`]' one pass: dst[q][r] = [`pair`]`(a[r, 2q], a[r, 2q + 1])`, zero past
/// the rows and the depth. None, with `dst` partly written, where neither the rows nor
/// the columns of `a` are contiguous.
#[inline(always)]
fn a_pairs_in_one_pass<const MR: usize>(dst: &mut [f32], a: &ArrayView2<'_, f32>) -> Option<()> {
    let (rows, depth) = a.dim();
    let lanes = &mut dst.as_chunks_mut::<MR>().0[..depth.div_ceil(2)];
    if rows > 1 && a.strides()[0] == 1 {
        // Columns contiguous (a transposed operand): each lane row reads two columns.
        let column = |p: usize| (*a).index_axis_move(Axis(1), p).to_slice();
        for (q, lane) in lanes.iter_mut().enumerate() {
            let low = column(2 * q)?;
            let high = if 2 * q + 1 < depth {
                column(2 * q + 1)?
            } else {
                &ZEROS[..rows]
            };
            lane[rows..].fill(0.0);
            for ((d, &low), &high) in lane.iter_mut().zip(low).zip(high) {
                *d = pair(low, high);
            }
        }
    } else {
        // Rows contiguous: each lane takes two neighbouring values of every row.
        let rows = row_slices::<MR>(a)?;
        for (q, lane) in lanes.iter_mut().enumerate() {
            *lane = std::array::from_fn(|r| {
                let high = rows[r].get(2 * q + 1).copied().unwrap_or(0.0);
                pair(rows[r][2 * q], high)
            });
        }
    }
    Some(())
}

/// dst[panel][p][j] = b[p, panel * nr + j] for the columns of `b` (`[kc, width]`), in
/// panels of `nr` columns, zero for columns past the last.
fn pack_b(dst: &mut [f32], nr: usize, b: &ArrayView2<'_, f32>) {
    let (kc, columns) = b.dim();
    let panels = dst.chunks_mut(kc * nr);
    let tail = columns % nr;
    if tail != 0 {
        if let Some(last) = panels.last() {
            last.chunks_mut(nr).for_each(|d| d[tail..].fill(0.0));
        }
    }
    if kc > 1 && b.strides()[0] == 1 {
        // Columns contiguous (a weight stored [n, k]): one pass per column.
        for (j, column) in b.columns().into_iter().enumerate() {
            let panel = &mut dst[j / nr * kc * nr..];
            let at = panel.iter_mut().skip(j % nr).step_by(nr);
            at.zip(column).for_each(|(d, &x)| *d = x);
        }
    } else {
        // Rows contiguous: each row of `b` is read once, front to back, into every panel.
        for (p, row) in b.rows().into_iter().enumerate() {
            let to = |panel: usize| panel * kc * nr + p * nr;
            match row.to_slice() {
                Some(row) => match nr {
                    16 => pack_b_row::<16>(dst, row, to),
                    32 => pack_b_row::<32>(dst, row, to),
                    _ => {
                        for (panel, values) in row.chunks(nr).enumerate() {
                            dst[to(panel)..][..values.len()].copy_from_slice(values);
                        }
                    }
                },
                None => {
                    for (j, &x) in row.iter().enumerate() {
                        dst[to(j / nr) + j % nr] = x;
                    }
                }
            }
        }
    }
}

/// [`pack_b`] then [`into_pairs`] on each panel: in one pass where the rows or the
/// columns of `b` are contiguous, in two elsewhere.
#[inline(always)]
fn pack_b_pairs(dst: &mut [f32], nr: usize, b: &ArrayView2<'_, f32>) {
    if b_pairs_in_one_pass(dst, nr, b).is_none() {
        let kc = b.nrows();
        pack_b(dst, nr, b);
        dst.chunks_mut(kc * nr)
            .for_each(|panel| into_pairs(panel, nr, kc));
    }
}

/// [`pack_b_pairs`]' one pass: dst[panel][q][j] = [`pair`]`(b[2q, c], b[2q + 1, c])` for
/// column c = panel * nr + j, zero past the columns and the depth (each panel `kc * nr`
/// floats, its lanes at the front). None, with `dst` partly written, where neither the
/// rows nor the columns of `b` are contiguous.
#[inline(always)]
fn b_pairs_in_one_pass(dst: &mut [f32], nr: usize, b: &ArrayView2<'_, f32>) -> Option<()> {
    let (kc, columns) = b.dim();
    let lanes = kc.div_ceil(2);
    let tail = columns % nr;
    if tail != 0 {
        if let Some(last) = dst.chunks_mut(kc * nr).nth(columns / nr) {
            last[..lanes * nr]
                .chunks_mut(nr)
                .for_each(|d| d[tail..].fill(0.0));
        }
    }
    if kc > 1 && b.strides()[0] == 1 {
        // Columns contiguous (a weight stored [n, k]): each column's neighbouring depth
        // steps make its lanes.
        for j in 0..columns {
            let column = (*b).index_axis_move(Axis(1), j).to_slice()?;
            let panel = &mut dst[j / nr * kc * nr + j % nr..];
            for (d, two) in panel.iter_mut().step_by(nr).zip(column.chunks(2)) {
                *d = pair(two[0], two.get(1).copied().unwrap_or(0.0));
            }
        }
    } else {
        // Rows contiguous: each lane row pairs two rows of `b`, front to back.
        let row = |p: usize| (*b).index_axis_move(Axis(0), p).to_slice();
        for q in 0..lanes {
            let low = row(2 * q)?;
            let high = if 2 * q + 1 < kc {
                Some(row(2 * q + 1)?)
            } else {
                None
            };
            for (panel, low) in low.chunks(nr).enumerate() {
                let d = &mut dst[panel * kc * nr + q * nr..][..low.len()];
                match high {
                    Some(high) => {
                        let high = &high[panel * nr..];
                        for ((d, &low), &high) in d.iter_mut().zip(low).zip(high) {
                            *d = pair(low, high);
                        }
                    }
                    None => d
                        .iter_mut()
                        .zip(low)
                        .for_each(|(d, &low)| *d = pair(low, 0.0)),
                }
            }
        }
    }
    Some(())
}

/// One row of `b` into its place in every panel (`to(panel)`), `NR` values a panel: whole
/// panels as fixed-size copies (vector moves, where a copy of a run-time length is a call
/// to `memcpy` per panel: 5% of a 2048^3 product on one thread), the last as it comes.
#[inline(always)]
fn pack_b_row<const NR: usize>(dst: &mut [f32], row: &[f32], to: impl Fn(usize) -> usize) {
    let (whole, tail) = row.as_chunks::<NR>();
    // Every panel's place is a multiple of NR floats into `dst`.
    let slots = dst.as_chunks_mut::<NR>().0;
    for (panel, values) in whole.iter().enumerate() {
        slots[to(panel) / NR] = *values;
    }
    if !tail.is_empty() {
        dst[to(whole.len())..][..tail.len()].copy_from_slice(tail);
    }
}

/// This thread's `buffer`, taken out while a product or task uses it, so that a product
/// nested inside on the same thread (rayon may run another task there while this one
/// waits) gets a buffer of its own. [`put_back`] returns it.
fn take(buffer: &'static LocalKey<RefCell<Vec<f32>>>) -> Vec<f32> {
    buffer.with(RefCell::take)
}

/// Returns a buffer taken by [`take`].
fn put_back(buffer: &'static LocalKey<RefCell<Vec<f32>>>, floats: Vec<f32>) {
    buffer.with(|cell| cell.replace(floats));
}

/// `len` floats of `floats` starting on a 64-byte line, growing it where needed.
fn aligned(floats: &mut Vec<f32>, len: usize) -> &mut [f32] {
    let slack = ALIGN_BYTES / size_of::<f32>();
    if floats.len() < len + slack {
        floats.resize(len + slack, 0.0);
    }
    let misalignment = floats.as_ptr() as usize % ALIGN_BYTES;
    let offset = (ALIGN_BYTES - misalignment) % ALIGN_BYTES / size_of::<f32>();
    &mut floats[offset..offset + len]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bf16::round_to_bf16;
    use crate::test_inputs::random;
    use ndarray::ShapeBuilder;

    /// One product's operands: `a` [m, k] (stored [k, m] when transposed), `b` [k, n]
    /// (stored [n, k]), `c` [m, n] with rows `stride` apart.
    struct Case {
        m: usize,
        n: usize,
        k: usize,
        trans_a: bool,
        trans_b: bool,
        stride: usize,
    }

    impl Case {
        fn views<'a>(
            &self,
            a: &'a [f32],
            b: &'a [f32],
        ) -> (ArrayView2<'a, f32>, ArrayView2<'a, f32>) {
            let Case { m, n, k, .. } = *self;
            // ndarray refuses custom strides on an empty view.
            let a = if self.trans_a && k > 0 {
                ArrayView2::from_shape((m, k).strides((1, m)), a)
            } else {
                ArrayView2::from_shape((m, k), a)
            };
            let b = if self.trans_b && k > 0 {
                ArrayView2::from_shape((k, n).strides((1, k)), b)
            } else {
                ArrayView2::from_shape((k, n), b)
            };
            (a.expect("a view"), b.expect("b view"))
        }
    }

    /// The rows of `c` ([m, stride], n used per row).
    fn rows(c: &mut [f32], n: usize, stride: usize) -> Vec<&mut [f32]> {
        c.chunks_mut(stride).map(|row| &mut row[..n]).collect()
    }

    /// Runs the product at a given vector level.
    fn run_at<S: Simd>(
        simd: S,
        c: &mut [f32],
        case: &Case,
        (a, b): (&[f32], &[f32]),
        (alpha, beta): (f32, f32),
        parallel: bool,
        precision: Precision,
    ) {
        let (a, b) = case.views(a, b);
        simd.vectorize(Product {
            c_rows: rows(c, case.n, case.stride),
            a,
            b,
            alpha,
            beta,
            parallel,
            precision,
        });
    }

    /// Largest |c - reference| over the largest sum of |terms| of an element, the
    /// reference in f64.
    fn error(
        c: &[f32],
        c0: &[f32],
        case: &Case,
        a: &[f32],
        b: &[f32],
        alpha: f32,
        beta: f32,
    ) -> f64 {
        let (av, bv) = case.views(a, b);
        let (mut worst, mut scale) = (0.0f64, 1e-30f64);
        for i in 0..case.m {
            for j in 0..case.n {
                let (mut sum, mut magnitude) = (0.0f64, 0.0f64);
                for p in 0..case.k {
                    let term = f64::from(av[[i, p]]) * f64::from(bv[[p, j]]);
                    sum += term;
                    magnitude += term.abs();
                }
                let at = i * case.stride + j;
                let old = if beta == 0.0 {
                    0.0
                } else {
                    f64::from(beta) * f64::from(c0[at])
                };
                let reference = f64::from(alpha) * sum + old;
                worst = worst.max((f64::from(c[at]) - reference).abs());
                scale = scale.max(f64::from(alpha.abs()) * magnitude + old.abs());
            }
        }
        worst / scale
    }

    /// One product's case with its operands and the `c` it starts from.
    struct Inputs {
        case: Case,
        a: Vec<f32>,
        b: Vec<f32>,
        c0: Vec<f32>,
    }

    impl Inputs {
        /// `c` after the product at vector level `simd` (or dispatched, with `None`).
        fn product<S: Simd>(
            &self,
            simd: Option<S>,
            scalars: (f32, f32),
            parallel: bool,
            precision: Precision,
        ) -> Vec<f32> {
            let mut c = self.c0.clone();
            let operands = (&self.a[..], &self.b[..]);
            match simd {
                Some(simd) => run_at(
                    simd, &mut c, &self.case, operands, scalars, parallel, precision,
                ),
                None => {
                    let (a, b) = self.case.views(operands.0, operands.1);
                    let c_rows = rows(&mut c, self.case.n, self.case.stride);
                    gemm_packed(c_rows, &a, &b, scalars, parallel, precision);
                }
            }
            c
        }
    }

    /// Every shape of `shapes` on every layout (each operand transposed or not), with
    /// rows of `c` `padding` floats longer than n, and random operands and `c` drawn
    /// from seeds counted from `first_seed`.
    fn on_every_layout(
        shapes: &[(usize, usize, usize)],
        padding: usize,
        first_seed: u64,
    ) -> Vec<Inputs> {
        let layouts = [(false, false), (false, true), (true, false), (true, true)];
        let mut all = Vec::new();
        for (s, &(m, n, k)) in shapes.iter().enumerate() {
            for (t, (trans_a, trans_b)) in layouts.into_iter().enumerate() {
                let case = Case {
                    m,
                    n,
                    k,
                    trans_a,
                    trans_b,
                    stride: n + padding,
                };
                let seed = (s * 4 + t) as u64 + first_seed;
                all.push(Inputs {
                    a: random(m * k, seed),
                    b: random(k * n, seed + 100),
                    c0: random(m * case.stride, seed + 200),
                    case,
                });
            }
        }
        all
    }

    /// Every layout, edge tiles in both directions, more than one depth block, more than
    /// one block of rows and of columns (a task's range of one or of several column
    /// blocks: [`CACHED_A_FLOATS`] on either side), and every update rule, at every
    /// vector level this CPU has: within 1e-6 of an f64 product, relative to the
    /// element's sum of |terms| (f32 rounding over a few hundred sums is near 1e-7 of it;
    /// a wrong index or a lost block is of order 1).
    #[test]
    fn matches_a_float64_product_on_every_layout_and_edge() {
        let shapes = [
            (1, 1, 1),
            (5, 17, 7),
            (13, 33, 256),
            (25, 70, KC + 1),
            (MC + 13, 40, 300),
            (30, 2 * NC + 50, 2 * KC + 5),
            (20, NC + 40, 100),
            (12, 32, 0),
        ];
        let mut checked = 0;
        for inputs in on_every_layout(&shapes, 3, 1) {
            let Inputs { case, a, b, c0 } = &inputs;
            let Case {
                m,
                n,
                k,
                trans_a,
                trans_b,
                stride,
            } = *case;
            for (alpha, beta) in [(1.0, 0.0), (0.5, 1.0), (-1.25, 0.75)] {
                let mut check = |level: &str, c: &[f32]| {
                    let e = error(c, c0, case, a, b, alpha, beta);
                    assert!(e < 1e-6, "{level} {m}x{n}x{k} ({trans_a},{trans_b}) alpha {alpha} beta {beta}: error {e:e}");
                    // Padding between rows is never written.
                    for row in c.chunks(stride).zip(c0.chunks(stride)) {
                        assert_eq!(row.0[n..], row.1[n..], "{level}: wrote past a row");
                    }
                    checked += 1;
                };
                let scalars = (alpha, beta);
                let f32_at =
                    |simd, parallel| inputs.product(simd, scalars, parallel, Precision::F32);
                check("dispatched", &f32_at(None::<pulp::Scalar>, true));
                check("scalar", &f32_at(Some(pulp::Scalar::new()), false));
                #[cfg(target_arch = "x86_64")]
                if let Some(simd) = pulp::x86::V3::try_new() {
                    check(
                        "avx2",
                        &inputs.product(Some(simd), scalars, true, Precision::F32),
                    );
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(simd) = pulp::x86::V4::try_new() {
                    check(
                        "avx512",
                        &inputs.product(Some(simd), scalars, false, Precision::F32),
                    );
                }
            }
        }
        assert!(checked >= shapes.len() * 4 * 3 * 2);
    }

    /// bf16 operands, at every vector level this CPU has (the AVX-512 BF16 kernel
    /// where it has one) and on every layout: the same bits at every level, within 1e-6
    /// of the f64 product of the operands rounded to bf16 (relative to the element's sum
    /// of |terms|: f32 sums, as above), and within 1e-2 of the f32 product but not
    /// equal to it (bf16 keeps 8 bits of mantissa: a relative error of up to 2^-9 an
    /// operand).
    #[test]
    fn bf16_products_are_those_of_the_rounded_operands_at_every_level() {
        // Depth steps of 384 and 385, and three of 513: odd depths end in a half pair.
        let shapes = [(5, 17, 7), (25, 70, KC + 1), (30, 2 * NC + 50, 2 * KC + 3)];
        let scalars = (0.5, 1.0);
        for inputs in on_every_layout(&shapes, 1, 300) {
            let Inputs { case, a, b, c0 } = &inputs;
            let Case {
                m,
                n,
                k,
                trans_a,
                trans_b,
                ..
            } = *case;
            let dispatched = inputs.product(None::<pulp::Scalar>, scalars, true, Precision::Bf16);
            let scalar = inputs.product(Some(pulp::Scalar::new()), scalars, false, Precision::Bf16);
            assert_eq!(
                dispatched, scalar,
                "{m}x{n}x{k}: scalar and dispatched differ"
            );
            #[cfg(target_arch = "x86_64")]
            if let Some(simd) = pulp::x86::V3::try_new() {
                let avx2 = inputs.product(Some(simd), scalars, true, Precision::Bf16);
                assert_eq!(dispatched, avx2, "{m}x{n}x{k}: avx2 and dispatched differ");
            }
            let rounded = |x: &[f32]| -> Vec<f32> { x.iter().map(|&v| round_to_bf16(v)).collect() };
            let (a16, b16) = (rounded(a), rounded(b));
            let e = error(&dispatched, c0, case, &a16, &b16, scalars.0, scalars.1);
            assert!(
                e < 1e-6,
                "{m}x{n}x{k} ({trans_a},{trans_b}): error {e:e} against the rounded operands"
            );
            let e = error(&dispatched, c0, case, a, b, scalars.0, scalars.1);
            assert!(
                e < 1e-2 && e > 1e-5,
                "{m}x{n}x{k} ({trans_a},{trans_b}): error {e:e} against f32"
            );
        }
    }

    /// Packing straight into bf16 pairs gives, to the bit, the panels that packing in
    /// f32 and then rewriting them gives: on every layout, on strided operands (the
    /// two-pass fallback), for odd and even depths, partial panels of rows and columns.
    /// Plain code, so checked whatever the CPU.
    #[test]
    fn packing_into_pairs_equals_packing_then_rewriting() {
        const MR: usize = 12;
        let nr = TILE_COLUMNS;
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        let check_a = |panel: &ArrayView2<'_, f32>| {
            let (rows, k) = panel.dim();
            let (mut fused, mut two) = (vec![f32::NAN; MR * k], vec![f32::NAN; MR * k]);
            pack_a_pairs::<MR>(&mut fused, panel);
            pack_a::<MR>(&mut two, panel);
            into_pairs(&mut two, MR, k);
            let lanes = k.div_ceil(2) * MR;
            let strides = panel.strides();
            assert_eq!(
                bits(&fused[..lanes]),
                bits(&two[..lanes]),
                "a {rows}x{k} {strides:?}"
            );
        };
        let check_b = |b: &ArrayView2<'_, f32>| {
            let (k, n) = b.dim();
            let len = n.div_ceil(nr) * k * nr;
            let (mut fused, mut two) = (vec![f32::NAN; len], vec![f32::NAN; len]);
            pack_b_pairs(&mut fused, nr, b);
            pack_b(&mut two, nr, b);
            let lanes = k.div_ceil(2) * nr;
            for (f, t) in fused.chunks(k * nr).zip(two.chunks_mut(k * nr)) {
                into_pairs(t, nr, k);
                let strides = b.strides();
                assert_eq!(
                    bits(&f[..lanes]),
                    bits(&t[..lanes]),
                    "b {k}x{n} {strides:?}"
                );
            }
        };
        let shapes = [(5, 17, 7), (12, 70, 256), (25, 33, 9), (1, 40, 2)];
        for inputs in on_every_layout(&shapes, 0, 400) {
            let (a, b) = inputs.case.views(&inputs.a, &inputs.b);
            let (m, k) = a.dim();
            for first in (0..m).step_by(MR) {
                check_a(&block(&a, first..m.min(first + MR), 0..k));
            }
            check_b(&b);
        }
        // Every other element of a twice-as-wide matrix: neither rows nor columns
        // contiguous.
        let (k, n, m) = (9, 45, 7);
        let data = random(k * 2 * n, 9);
        let strided = |rows: usize, columns: usize| {
            ArrayView2::from_shape((rows, columns).strides((2 * columns, 2)), &data).expect("view")
        };
        check_b(&strided(k, n));
        check_a(&strided(m, k));
    }

    /// A row of `c` is the same to the bit whether it is computed alone, in a batch
    /// that puts it at another offset in the tiles, serially or on every thread.
    #[test]
    fn rows_do_not_depend_on_their_batch_or_the_threads() {
        let (m, n, k) = (50, 2 * NC + 9, KC + 300);
        let case = Case {
            m,
            n,
            k,
            trans_a: false,
            trans_b: true,
            stride: n,
        };
        let (a, b) = (random(m * k, 7), random(k * n, 8));
        let mut parallel = vec![f32::NAN; m * n];
        run_at_arch(&mut parallel, &case, &a, &b, true);
        let mut serial = vec![0.0; m * n];
        run_at_arch(&mut serial, &case, &a, &b, false);
        assert_eq!(parallel, serial, "threads changed the result");
        assert!(parallel.iter().all(|x| x.is_finite()), "beta 0 read c");
        let (first, rows_of_part) = (7, 13);
        let part = Case {
            m: rows_of_part,
            ..case
        };
        let mut c = vec![0.0; rows_of_part * n];
        run_at_arch(
            &mut c,
            &part,
            &a[first * k..(first + rows_of_part) * k],
            &b,
            true,
        );
        assert_eq!(
            c,
            parallel[first * n..(first + rows_of_part) * n],
            "a row depends on its batch"
        );
    }

    /// The dispatched product, beta 0.
    fn run_at_arch(c: &mut [f32], case: &Case, a: &[f32], b: &[f32], parallel: bool) {
        let (av, bv) = case.views(a, b);
        gemm_packed(
            rows(c, case.n, case.stride),
            &av,
            &bv,
            (1.0, 0.0),
            parallel,
            Precision::F32,
        );
    }

    /// Depth steps cover the depth once, in order, as few as keep each at most [`KC`],
    /// their lengths at most one apart.
    #[test]
    fn depth_steps_are_few_and_even() {
        for (k, steps) in [
            (1, 1),
            (576, 1),
            (KC, 1),
            (KC + 1, 2),
            (1536, 2),
            (8192, 11),
        ] {
            let ranges = depth_steps(k).collect::<Vec<_>>();
            assert_eq!(ranges.len(), steps, "{k}");
            let mut next = 0;
            for range in &ranges {
                assert_eq!(range.start, next, "{k}: a gap or an overlap");
                assert!(range.len() <= KC, "{k}: {range:?}");
                next = range.end;
            }
            assert_eq!(next, k);
            let lengths = ranges.iter().map(Range::len);
            let spread = lengths.clone().max().unwrap_or(0) - lengths.min().unwrap_or(0);
            assert!(spread <= 1, "{k}: {ranges:?}");
        }
    }

    /// Plans give every thread work and every column to exactly one range; a packed
    /// block of `a` too large to stay in cache is read by one range per thread.
    #[test]
    fn plans_cover_every_column_once() {
        const MR: usize = 12;
        for (n, panels, threads) in [
            (2048, 96, 2),
            (256, 96, 2),
            (768, 96, 2),
            (40, 3, 8),
            (5000, 1, 16),
            (33, 96, 1),
            (2048, 96, 1),
        ] {
            for k in [256, 8192] {
                let plan = Plan::new::<MR>(n, panels, k, 32, threads);
                let mut next = 0;
                for &(first, width) in &plan.column_ranges {
                    assert_eq!(first, next, "{n} {threads}: a gap or an overlap");
                    assert!(width > 0 && (width % 32 == 0 || first + width == n));
                    next = first + width;
                }
                assert_eq!(next, n);
                let groups = panels.div_ceil(plan.group_panels);
                let ranges = plan.column_ranges.len();
                let tasks = groups * ranges;
                assert!(
                    tasks >= threads.min(panels),
                    "{n} {panels} {threads}: {tasks} tasks"
                );
                let cached = panels * MR * k <= CACHED_A_FLOATS;
                if n > NC && !cached {
                    assert_eq!(ranges, threads, "{n} {panels} {k} {threads}");
                } else if n > NC {
                    assert!(ranges >= n.div_ceil(NC), "{n} {panels} {k} {threads}");
                }
            }
        }
    }
}
