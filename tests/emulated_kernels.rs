//! The CUDA backend's training-attention, decoding (f32 and bf16 KV caches),
//! token-choice and bf16-cast kernels, and the kernels that read weights (f32 and frozen
//! bf16), run without a GPU:
//! their `.cu` sources compiled by the host's C++ compiler against
//! `backend-cuda/emulator` (each CUDA thread an OS thread, `__syncthreads` and the warp
//! shuffles collective barriers, the tensor-core mma rebuilt from every lane's registers
//! by the fragment layouts of the PTX ISA) and compared with the CPU on fresh random
//! inputs.
//!
//! The exact f32 attention kernels passed the parity tests on an H100, so agreeing with
//! them to f32 precision here checks the emulator; the tensor-core kernels of the bf16
//! mode are then checked by it (their indexing, masking, online softmax, block skipping
//! and fragment traffic), and the token choice against the host's rule. What it cannot
//! check is the hardware itself (that the GPU's mma matches its documentation), speed,
//! and races the emulator's lockstep would hide; `parity_cuda` covers those on a GPU.
//!
//! Needs a C++20 compiler (`$CXX`, else `c++`). Without one the tests say so and pass;
//! with `SAGE_REQUIRE_EMULATOR=1` (CI) they fail instead.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use libloading::Library;
use sage_backend_cpu::CpuBackend;
use sage_e2e::backend_parity::{
    assert_close, check_choices, choice_inputs, download, upload, upload_indices, Rng,
};
use sage_transformer::{AttentionShape, Kernels, ProjectedRows};

type ForwardFn = unsafe extern "C" fn(
    i32,
    *mut f32,
    *mut u16,
    *mut f32,
    *const f32,
    *const f32,
    *const f32,
    *const u32,
    u32,
    u32,
    u32,
    u32,
    f32,
);
type BackwardFn = unsafe extern "C" fn(
    i32,
    *mut f32,
    *mut f32,
    *mut f32,
    *mut f32,
    *const f32,
    *const f32,
    *const f32,
    *const f32,
    *const f32,
    *const f32,
    *const u32,
    u32,
    u32,
    u32,
    u32,
    f32,
);

type ChooseFn = unsafe extern "C" fn(*mut f32, *const f32, *const u32, u32, u32, f32, u32);
type DecodeFn = unsafe extern "C" fn(
    i32,
    i32,
    *mut f32,
    *mut u16,
    *mut f32,
    *const f32,
    *const u8,
    *const u8,
    *const u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    f32,
);

/// Held for the whole of every emulated launch: a launch owns its library's globals (the
/// running block, its shared memory).
static LAUNCH: Mutex<()> = Mutex::new(());

/// The emulator libraries, each `backend-cuda/emulator/NAME.cpp` built once per process.
static ATTENTION: OnceLock<Result<Library, String>> = OnceLock::new();
static CHOOSE: OnceLock<Result<Library, String>> = OnceLock::new();
static DECODE: OnceLock<Result<Library, String>> = OnceLock::new();
static ELEMENTWISE: OnceLock<Result<Library, String>> = OnceLock::new();
static EMBEDDING_NORM: OnceLock<Result<Library, String>> = OnceLock::new();
static SWIGLU_LOGPROB: OnceLock<Result<Library, String>> = OnceLock::new();
static ROPE: OnceLock<Result<Library, String>> = OnceLock::new();

/// Builds `backend-cuda/emulator/{name}.cpp` into a shared library and loads it; `Err`
/// says why it could not.
fn build(name: &str) -> Result<Library, String> {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../backend-cuda/emulator/{name}.cpp"));
    let library = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-emulator.so"));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let output = Command::new(&compiler)
        .args([
            "-std=c++20",
            "-O2",
            "-shared",
            "-fPIC",
            "-pthread",
            "-Wall",
            "-Wno-unknown-pragmas",
            // As the backend defines it for NVRTC (norm.cu's column sums).
            &format!("-DROWS_PER_BLOCK={}", sage_transformer::COLUMN_SUM_ROWS),
            "-o",
        ])
        .arg(&library)
        .arg(&source)
        .output()
        .map_err(|e| format!("no C++ compiler `{compiler}`: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`{compiler}` could not build {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // SAFETY: the library is ours, built just above; its initialisers only set up
    // function-local statics.
    unsafe { Library::new(&library).map_err(|e| e.to_string()) }
}

/// The library `name` of `cell`, built on first use.
fn library(
    cell: &'static OnceLock<Result<Library, String>>,
    name: &str,
) -> Result<&'static Library, String> {
    cell.get_or_init(|| build(name))
        .as_ref()
        .map_err(Clone::clone)
}

/// The function `symbol` of an emulator library, as `F`.
fn function<F: Copy>(library: &Library, symbol: &str) -> F {
    // SAFETY: each caller names `F` as the `extern "C"` signature `symbol` has in its
    // `.cpp` file; the library stays loaded for the process (a static).
    unsafe {
        *library
            .get::<F>(symbol.as_bytes())
            .unwrap_or_else(|e| panic!("{symbol}: {e}"))
    }
}

/// `emulated`, or `None` (after saying why) when it cannot be built and
/// `SAGE_REQUIRE_EMULATOR` is not `1`.
fn available(emulated: Result<&'static Library, String>) -> Option<&'static Library> {
    match emulated {
        Ok(emulated) => Some(emulated),
        Err(why) if std::env::var("SAGE_REQUIRE_EMULATOR").as_deref() == Ok("1") => {
            panic!("SAGE_REQUIRE_EMULATOR=1 but the kernel emulator cannot be built: {why}")
        }
        Err(why) => {
            eprintln!(
                "SKIPPED: emulated CUDA kernels: {why}; set SAGE_REQUIRE_EMULATOR=1 to make \
                 this a failure"
            );
            None
        }
    }
}

/// `x` rounded to the nearest bf16 (ties to even), as an f32.
fn to_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// The bits of each of `values`, to compare results to the bit.
fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// The bits of each of `values` rounded to the nearest bf16 (ties to even), as the host
/// rounds: what a kernel's bf16 copy of them must hold.
fn rounded_bits(values: &[f32]) -> Vec<u16> {
    values
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_bits())
        .collect()
}

/// The f32 values of bf16 `bits` (exact).
fn widened(bits: &[u16]) -> Vec<f32> {
    bits.iter()
        .map(|&b| half::bf16::from_bits(b).to_f32())
        .collect()
}

/// `copy`'s address, or null for none: the emulator's entries write a kernel's bf16 copy
/// only where given one.
fn copy_address(copy: Option<&mut [u16]>) -> *mut u16 {
    copy.map_or(std::ptr::null_mut(), |c| c.as_mut_ptr())
}

/// One attention problem: packed sequences, head shape, inputs.
struct Case {
    seq_starts: Vec<u32>,
    shape: AttentionShape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    dout: Vec<f32>,
}

impl Case {
    /// Random inputs uniform in [-1.5, 1.5) (v and dout [-1, 1)) for sequences of the given
    /// lengths; `bf16_inputs` rounds them to bf16 first.
    fn new(seed: u64, lengths: &[u32], shape: AttentionShape, bf16_inputs: bool) -> Case {
        let mut seq_starts = vec![0];
        for len in lengths {
            seq_starts.push(seq_starts.last().unwrap() + len);
        }
        let n = *seq_starts.last().unwrap() as usize;
        let (qw, kvw) = (
            shape.heads * shape.head_dim,
            shape.kv_heads * shape.head_dim,
        );
        let mut rng = Rng::new(seed);
        let mut draw = |len: usize, scale: f32| -> Vec<f32> {
            let values = rng.vec(len, scale);
            if bf16_inputs {
                values.into_iter().map(to_bf16).collect()
            } else {
                values
            }
        };
        Case {
            q: draw(n * qw, 1.5),
            k: draw(n * kvw, 1.5),
            v: draw(n * kvw, 1.0),
            dout: draw(n * qw, 1.0),
            seq_starts,
            shape,
        }
    }

    fn rows(&self) -> usize {
        *self.seq_starts.last().unwrap() as usize
    }

    /// (start, end) of each row's sequence, as the CUDA backend uploads them.
    fn spans(&self) -> Vec<u32> {
        self.seq_starts
            .windows(2)
            .flat_map(|w| (w[0]..w[1]).flat_map(move |_| [w[0], w[1]]))
            .collect()
    }

    /// [out, lse, dq, dk, dv] from the CPU backend.
    fn on_cpu(&self) -> [Vec<f32>; 5] {
        let mut cpu = CpuBackend::new();
        let n = self.rows();
        let (qw, kvw) = (
            self.shape.heads * self.shape.head_dim,
            self.shape.kv_heads * self.shape.head_dim,
        );
        let [q, k, v, dout] = [&self.q, &self.k, &self.v, &self.dout].map(|x| upload(&mut cpu, x));
        let zeros = |cpu: &mut CpuBackend, len: usize| upload(cpu, &vec![0.0; len]);
        let (out, lse) = (
            zeros(&mut cpu, n * qw),
            zeros(&mut cpu, n * self.shape.heads),
        );
        let (dq, dk, dv) = (
            zeros(&mut cpu, n * qw),
            zeros(&mut cpu, n * kvw),
            zeros(&mut cpu, n * kvw),
        );
        cpu.attention_forward(out, lse, q, k, v, &self.seq_starts, self.shape)
            .expect("cpu forward");
        cpu.attention_backward(
            dq,
            dk,
            dv,
            dout,
            q,
            k,
            v,
            out,
            lse,
            &self.seq_starts,
            self.shape,
        )
        .expect("cpu backward");
        [out, lse, dq, dk, dv].map(|t| download(&mut cpu, t))
    }

    /// [out, lse, dq, dk, dv] from the emulated CUDA kernels: the exact ones
    /// (`kernels` 0), the tensor-core ones (1), or those with dk/dv over tiles of 32
    /// queries (2). Fails unless the forward's bf16 copy of `out` is `out` rounded.
    fn emulated(&self, library: &Library, kernels: i32) -> [Vec<f32>; 5] {
        let n = self.rows();
        let AttentionShape {
            heads,
            kv_heads,
            head_dim,
        } = self.shape;
        let (qw, kvw) = (heads * head_dim, kv_heads * head_dim);
        let (mut out, mut lse) = (vec![f32::NAN; n * qw], vec![f32::NAN; n * heads]);
        let mut out_copy = vec![0xdead_u16; n * qw];
        let (mut dq, mut dk, mut dv) = (
            vec![f32::NAN; n * qw],
            vec![f32::NAN; n * kvw],
            vec![f32::NAN; n * kvw],
        );
        let mut delta = vec![f32::NAN; n * heads];
        let spans = self.spans();
        let sizes = (
            n as u32,
            heads as u32,
            (heads / kv_heads) as u32,
            head_dim as u32,
        );
        let scale = 1.0 / (head_dim as f32).sqrt();
        let forward: ForwardFn = function(library, "emulate_attention_forward");
        let backward: BackwardFn = function(library, "emulate_attention_backward");
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every buffer holds the [N, ...] extents attention.cu documents for these
        // sizes, and outlives the call, which returns after its kernels finish; no other
        // launch runs meanwhile (the lock above).
        unsafe {
            forward(
                kernels.min(1),
                out.as_mut_ptr(),
                out_copy.as_mut_ptr(),
                lse.as_mut_ptr(),
                self.q.as_ptr(),
                self.k.as_ptr(),
                self.v.as_ptr(),
                spans.as_ptr(),
                sizes.0,
                sizes.1,
                sizes.2,
                sizes.3,
                scale,
            );
            backward(
                kernels,
                dq.as_mut_ptr(),
                dk.as_mut_ptr(),
                dv.as_mut_ptr(),
                delta.as_mut_ptr(),
                self.q.as_ptr(),
                self.k.as_ptr(),
                self.v.as_ptr(),
                self.dout.as_ptr(),
                out.as_ptr(),
                lse.as_ptr(),
                spans.as_ptr(),
                sizes.0,
                sizes.1,
                sizes.2,
                sizes.3,
                scale,
            );
        }
        // The forward's bf16 copy of its output (the bf16 mode's input of the output
        // projection) is that output rounded as the host rounds, to the bit.
        assert_eq!(
            out_copy,
            rounded_bits(&out),
            "attention forward: the bf16 copy"
        );
        [out, lse, dq, dk, dv]
    }

    /// Fails unless the emulated kernels agree with the CPU within `tolerances` (relative
    /// to the largest reference value) for [out, lse, dq, dk, dv].
    fn check(&self, what: &str, library: &Library, kernels: i32, tolerances: [f32; 5]) {
        self.check_results(what, &self.emulated(library, kernels), tolerances);
    }

    /// Fails unless `got` ([out, lse, dq, dk, dv], from emulated kernels) agrees with the
    /// CPU within `tolerances`, as [`Case::check`].
    fn check_results(&self, what: &str, got: &[Vec<f32>; 5], tolerances: [f32; 5]) {
        let want = self.on_cpu();
        for (((name, got), want), tol) in ["out", "lse", "dq", "dk", "dv"]
            .iter()
            .zip(got)
            .zip(&want)
            .zip(tolerances)
        {
            assert_close(&format!("{what} {name}"), got, want, tol);
        }
    }

    /// The tensor-core tests' case: sequences of 9, 150, 1 and 37 (bf16-exact inputs) of
    /// 4 query heads `head_dim` wide on `kv_heads` key/value heads.
    fn tensor_core(head_dim: usize, kv_heads: usize) -> Case {
        let shape = AttentionShape {
            heads: 4,
            kv_heads,
            head_dim,
        };
        Case::new(21, &[9, 150, 1, 37], shape, true)
    }
}

/// The tensor-core kernels' bounds against the CPU for [out, lse, dq, dk, dv]
/// ([`the_tensor_core_kernels_match_the_cpu_to_bf16_precision`] says why).
const TENSOR_CORE_TOLERANCES: [f32; 5] = [1e-2, 1e-5, 1e-2, 1e-2, 1e-2];

/// The exact kernels (attention.cu) agree with the CPU as on a GPU: outputs to 1e-5,
/// gradients to 1e-4 (the parity tests' bounds: two chained f32 sums in another order),
/// over sequences of 70, 1 and 9 with 4 query heads on 2 key/value heads. Heads of 8 and
/// 40: a tile of 32 rows of 40 columns takes each thread two batches of staged loads,
/// the second one partial.
#[test]
fn the_emulator_runs_the_exact_kernels_as_the_gpu_did() {
    let Some(emulator) = available(library(&ATTENTION, "attention")) else {
        return;
    };
    for head_dim in [8, 40] {
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim,
        };
        let case = Case::new(8, &[70, 1, 9], shape, false);
        let what = format!("exact, head {head_dim}");
        case.check(&what, emulator, 0, [1e-5, 1e-5, 1e-4, 1e-4, 1e-4]);
    }
}

/// The tensor-core kernels (flash.cu) on inputs that bf16 holds exactly, so what is
/// left is the kernels' own rounding: probabilities and score gradients rounded to bf16
/// before their products (8 bits of mantissa, sums of up to 150 terms). Measured: lse to
/// 1e-7 (the scores are exact), out 1e-3, gradients 2-3e-3; the bound is 1e-2 (a wrong
/// mask, tile or fragment gives errors of the order of the values). Sequences of 9,
/// 150, 1 and 37 cross the 64-row blocks and the 64-, 32- and 16-row tiles at lengths
/// that are not multiples of them, and the long one starts at row 9, so its key tiles
/// (which start at a sequence's start) straddle warps' rows: a tile is unmasked only if
/// every row of the warp sees every key of it, and a bound off by a few rows fails here; head widths 40 (the products run over all 64 columns of
/// the staged tiles, so columns 40-63 must be staged as zeros), 64, 30 (not a multiple of
/// 4: staged without 16-byte loads), all through the kernels for heads of at most 64,
/// and 96 through those for heads of up to 128; GQA 4 on 2 (dk, dv summed over each group's per-head shares)
/// and 4 on 4 (written directly).
#[test]
fn the_tensor_core_kernels_match_the_cpu_to_bf16_precision() {
    let shapes = [(40, 2), (64, 2), (40, 4), (30, 2), (96, 2)];
    check_tensor_cores("tensor cores", 1, &shapes);
}

/// The dk/dv kernel over tiles of 32 queries (`DkvTile::Queries32`, heads of at most
/// 64) on the cases above and to the same bounds: the tile size changes only which
/// queries share a barrier.
#[test]
fn the_wide_dkv_tile_matches_the_cpu_to_bf16_precision() {
    check_tensor_cores("dk/dv over 32 queries", 2, &[(64, 2), (40, 4)]);
}

/// The tensor-core `kernels` (as [`Case::emulated`] numbers them) against the CPU on
/// bf16-exact inputs, 4 query heads of each (head width, key/value heads) in `shapes`.
fn check_tensor_cores(what: &str, kernels: i32, shapes: &[(usize, usize)]) {
    let Some(emulator) = available(library(&ATTENTION, "attention")) else {
        return;
    };
    for &(head_dim, kv_heads) in shapes {
        Case::tensor_core(head_dim, kv_heads).check(
            &format!("{what}, hd {head_dim}, {kv_heads} key/value heads"),
            emulator,
            kernels,
            TENSOR_CORE_TOLERANCES,
        );
    }
}

/// On inputs bf16 does not hold, the rounding of q, k, v and dout adds to it: still
/// within 1e-2 at the Qwen2.5-0.5B head width of 64, 2 query heads on one key/value head
/// (measured 3-7e-3).
#[test]
fn the_tensor_core_kernels_round_f32_inputs_within_one_percent() {
    let Some(emulator) = available(library(&ATTENTION, "attention")) else {
        return;
    };
    let shape = AttentionShape {
        heads: 2,
        kv_heads: 1,
        head_dim: 64,
    };
    let case = Case::new(5, &[100, 29], shape, false);
    case.check(
        "tensor cores, f32 inputs",
        emulator,
        1,
        [1e-2, 1e-2, 1e-2, 1e-2, 1e-2],
    );
}

/// The token-choice kernel (choose.cu) picks the token the host's rule
/// (`sampling::choose`) picks, greedy and sampled, over vocabularies that are and are not
/// multiples of its 256 threads: the same token, and the log-probability to 1e-5 of its
/// size (f32 sums against f64). The uniform numbers are exact in f32, so both sides draw
/// at the same point; a draw within f32 rounding of a boundary could still differ, which
/// these seeds do not hit. Row 1 holds two equal maxima (greedy takes the lower id) and
/// row 5 a NaN (no choice: token -1).
#[test]
fn the_token_choice_kernel_picks_as_the_host_does() {
    let Some(emulated) = available(library(&CHOOSE, "choose")) else {
        return;
    };
    let mut rng = Rng::new(13);
    let rows = 6;
    for (vocab, temperature) in [(1000, 0.0), (1000, 1.0), (5003, 0.7), (300, 1.3)] {
        let (logits, uniforms) = choice_inputs(&mut rng, rows, vocab);
        let bits: Vec<u32> = uniforms.iter().map(|&u| (u as f32).to_bits()).collect();
        let greedy = temperature == 0.0;
        let inverse_temperature = if greedy { 0.0 } else { 1.0 / temperature };
        let mut choices = vec![f32::NAN; 2 * rows];
        {
            let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: choices holds 2 per row, logits `rows` rows of `vocab`, bits one
            // per row; the call returns after its kernel finishes.
            unsafe {
                function::<ChooseFn>(emulated, "emulate_choose_tokens")(
                    choices.as_mut_ptr(),
                    logits.as_ptr(),
                    bits.as_ptr(),
                    rows as u32,
                    vocab as u32,
                    inverse_temperature,
                    u32::from(greedy),
                );
            }
        }
        let sampled_off_the_maximum =
            check_choices(&choices, &logits, vocab, temperature, &uniforms);
        assert_eq!(
            greedy, !sampled_off_the_maximum,
            "vocab {vocab}, temperature {temperature}"
        );
        if greedy {
            assert_eq!(choices[2], 3.0, "the lower of two equal maxima");
        }
    }
}

/// Elements as the emulator's entries take them: f32, or bf16 bits (a bf16 KV cache,
/// frozen bf16 weights), with the flag that says which.
#[derive(Clone, Copy)]
enum Elements<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

impl Elements<'_> {
    /// The flag and pointer the emulator's entries take.
    fn raw(self) -> (i32, *const u8) {
        match self {
            Elements::F32(x) => (0, x.as_ptr().cast()),
            Elements::Bf16(x) => (1, x.as_ptr().cast()),
        }
    }
}

/// Decoding attention on the emulator: out[B, H*hd] for queries `q` over the key and value
/// `caches` (both held alike) filled to `lengths`, by the one-warp kernel or (`split`) the
/// split-KV kernels and their merge. Fails unless the bf16 copy of `out` they write (the
/// bf16 mode's input of the output projection) is `out` rounded as the host rounds.
fn emulate_decode(
    emulated: &Library,
    split: bool,
    caches: [Elements; 2],
    q: &[f32],
    lengths: &[u32],
    capacity: usize,
    shape: AttentionShape,
) -> Vec<f32> {
    let batch = lengths.len();
    let mut got = vec![f32::NAN; batch * shape.heads * shape.head_dim];
    let mut copy = vec![0xdead_u16; got.len()];
    let splits = capacity.div_ceil(256);
    let mut partials = vec![f32::NAN; batch * shape.heads * splits * (shape.head_dim + 2)];
    let [(bf16, k_cache), (_, v_cache)] = caches.map(Elements::raw);
    let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: every buffer holds the extents decode.cu documents for these sizes
    // (partials for the most splits `capacity` needs), the caches hold elements of the
    // kind the flag names, and the call returns after its kernels finish.
    unsafe {
        function::<DecodeFn>(emulated, "emulate_attention_decode")(
            split.into(),
            bf16,
            got.as_mut_ptr(),
            copy.as_mut_ptr(),
            partials.as_mut_ptr(),
            q.as_ptr(),
            k_cache,
            v_cache,
            lengths.as_ptr(),
            batch as u32,
            capacity as u32,
            shape.heads as u32,
            (shape.heads / shape.kv_heads) as u32,
            shape.head_dim as u32,
            1.0 / (shape.head_dim as f32).sqrt(),
        );
    }
    assert_eq!(
        copy,
        rounded_bits(&got),
        "decoding attention: the bf16 copy"
    );
    got
}

/// The CPU's decoding attention of `q` over f32 caches filled to `lengths`.
fn cpu_decode(
    k_cache: &[f32],
    v_cache: &[f32],
    q: &[f32],
    lengths: &[u32],
    capacity: usize,
    shape: AttentionShape,
) -> Vec<f32> {
    let mut cpu = CpuBackend::new();
    let [kc, vc, qt] = [k_cache, v_cache, q].map(|x| upload(&mut cpu, x));
    let out = upload(&mut cpu, &vec![0.0; q.len()]);
    cpu.attention_decode(out, qt, kc, vc, lengths, capacity, shape)
        .expect("cpu decode");
    download(&mut cpu, out)
}

/// Qwen2.5-0.5B's group of 7 query heads per key/value head at width 64, 16 heads on one
/// (the widest group the split kernel holds, 4 heads per warp) at width 40, and 4 on 2 at
/// width 30. The first two stage their tiles in 16-byte chunks (8 bf16 or 4 f32); 30 is
/// neither, so its tiles are staged one element at a time.
const DECODE_SHAPES: [AttentionShape; 3] = [
    AttentionShape {
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
    },
    AttentionShape {
        heads: 16,
        kv_heads: 1,
        head_dim: 40,
    },
    AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 30,
    },
];

/// Decoding attention against KV caches filled to 1, 300 and 600 rows: the f32 mode's
/// one-warp kernel and the fast path (split-KV in splits of 256 rows, one to three of
/// them, the last ones partial, then the merge), which share their tile code, both agree
/// with the CPU to 1e-5 (f32 sums over up to 600 keys in another order) for each of
/// [`DECODE_SHAPES`].
#[test]
fn the_decoding_kernels_match_the_cpu() {
    let Some(emulated) = available(library(&DECODE, "decode")) else {
        return;
    };
    let mut rng = Rng::new(17);
    let (batch, capacity) = (3, 600);
    let lengths = [1u32, 300, 600];
    for shape in DECODE_SHAPES {
        let kv_len = batch * capacity * shape.kv_heads * shape.head_dim;
        let k_cache = rng.vec(kv_len, 1.0);
        let v_cache = rng.vec(kv_len, 1.0);
        let q = rng.vec(batch * shape.heads * shape.head_dim, 1.5);
        let want = cpu_decode(&k_cache, &v_cache, &q, &lengths, capacity, shape);
        for split in [false, true] {
            let caches = [Elements::F32(&k_cache), Elements::F32(&v_cache)];
            let got = emulate_decode(emulated, split, caches, &q, &lengths, capacity, shape);
            assert_close(
                &format!("decode {shape:?}, split {split}"),
                &got,
                &want,
                1e-5,
            );
        }
    }
}

/// `emulate_kv_cache_append` of emulator/decode.cpp.
type AppendFn =
    unsafe extern "C" fn(i32, *mut u8, *mut u8, *const f32, *const f32, *const u32, u32, u32, u32);

/// The bf16 mode's KV cache (`alloc_kv_cache`). Appending rows at 0, 299 and 599 of
/// three sequences rounds each new key and value to bf16 as the host does (to the bit)
/// and changes no other element. Decoding attention over the bf16 caches then, by both
/// kernels and for each of [`DECODE_SHAPES`], agrees to 1e-5 with the CPU's f32
/// attention over the same bf16 values widened to f32: the same numbers and arithmetic,
/// only the order of the sums differs.
#[test]
fn the_bf16_cache_rounds_what_it_appends_and_decodes_what_it_holds() {
    let Some(emulated) = available(library(&DECODE, "decode")) else {
        return;
    };
    let append: AppendFn = function(emulated, "emulate_kv_cache_append");
    let mut rng = Rng::new(29);
    let (batch, capacity) = (3, 600);
    let filled = [0u32, 299, 599];
    for shape in DECODE_SHAPES {
        let width = shape.kv_heads * shape.head_dim;
        let before = [(); 2].map(|_| rounded_bits(&rng.vec(batch * capacity * width, 1.0)));
        let (k, v) = (rng.vec(batch * width, 1.0), rng.vec(batch * width, 1.0));
        let [mut k_cache, mut v_cache] = before.clone();
        {
            let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the caches hold batch * capacity * width bf16 elements, k and v
            // batch * width f32, every row in `filled` is below capacity; the call
            // returns after the kernel finishes.
            unsafe {
                append(
                    1,
                    k_cache.as_mut_ptr().cast(),
                    v_cache.as_mut_ptr().cast(),
                    k.as_ptr(),
                    v.as_ptr(),
                    filled.as_ptr(),
                    batch as u32,
                    width as u32,
                    capacity as u32,
                )
            };
        }
        for (name, got, old, new) in [
            ("k", &k_cache, &before[0], &k),
            ("v", &v_cache, &before[1], &v),
        ] {
            let mut want = old.clone();
            for (b, &row) in filled.iter().enumerate() {
                let at = (b * capacity + row as usize) * width;
                want[at..at + width]
                    .copy_from_slice(&rounded_bits(&new[b * width..(b + 1) * width]));
            }
            assert!(got == &want, "{shape:?}: the {name} cache after the append");
        }
        let attended = filled.map(|l| l + 1);
        let q = rng.vec(batch * shape.heads * shape.head_dim, 1.5);
        let want = cpu_decode(
            &widened(&k_cache),
            &widened(&v_cache),
            &q,
            &attended,
            capacity,
            shape,
        );
        for split in [false, true] {
            let caches = [Elements::Bf16(&k_cache), Elements::Bf16(&v_cache)];
            let got = emulate_decode(emulated, split, caches, &q, &attended, capacity, shape);
            assert_close(
                &format!("bf16 cache {shape:?}, split {split}"),
                &got,
                &want,
                1e-5,
            );
        }
    }
}

/// `emulate_embedding_forward` of emulator/embedding_norm.cpp.
type EmbeddingFn = unsafe extern "C" fn(i32, *mut f32, *const u8, *const u32, u32, u32, u32, u32);
/// `emulate_rmsnorm_forward` of emulator/embedding_norm.cpp.
type RmsnormFn =
    unsafe extern "C" fn(i32, *mut f32, *mut u16, *mut f32, *const f32, *const u8, u32, u32, f32);
/// `emulate_add_bias` of emulator/embedding_norm.cpp.
type BiasFn = unsafe extern "C" fn(i32, *mut f32, *const u8, u64, u32, u32);

/// The kernels that read weights (embedding gather, RMSNorm forward, bias add), on
/// shapes that leave partial blocks and token ids past the vocabulary. Each one's bf16
/// form on frozen bf16 weights writes, to the bit, what its f32 form writes on the same
/// weights widened to f32 (widening is exact and the arithmetic after it the same); the
/// f32 form agrees with the CPU backend exactly for the gather and the bias add, and to
/// 1e-6 for RMSNorm (its row sum of squares in another order). RMSNorm's bf16 copy of its
/// output (the bf16 mode's GEMM input) is its output rounded as the host rounds, to the
/// bit, and asking for it changes nothing else.
#[test]
fn the_kernels_that_read_frozen_bf16_weights_widen_them_exactly() {
    let Some(emulated) = available(library(&EMBEDDING_NORM, "embedding_norm")) else {
        return;
    };
    let mut rng = Rng::new(0xf0);
    let rounded = |x: Vec<f32>| -> (Vec<u16>, Vec<f32>) {
        let bits = rounded_bits(&x);
        let values = widened(&bits);
        (bits, values)
    };
    let blocks = |n: usize| n.div_ceil(256).max(1) as u32;
    let on_both =
        |run: &dyn Fn(Elements<'_>) -> Vec<f32>, held: &[u16], values: &[f32], what: &str| {
            let (from_bf16, from_f32) = (run(Elements::Bf16(held)), run(Elements::F32(values)));
            let same = bits(&from_bf16) == bits(&from_f32);
            assert!(same, "{what}: the bf16 form differs from the f32 form");
            from_f32
        };
    let mut cpu = CpuBackend::new();

    // Embedding: V 300, D 96, 37 tokens, two of them outside the vocabulary.
    let (vocab, dim) = (300usize, 96usize);
    let (table_bits, table) = rounded(rng.vec(vocab * dim, 1.0));
    let mut tokens = rng.ints(37, vocab);
    tokens[5] = vocab as u32;
    tokens[20] = u32::MAX;
    let gather = |table: Elements<'_>| {
        let mut out = vec![f32::NAN; tokens.len() * dim];
        let (bf16, table) = table.raw();
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `table` holds V x D elements of the kind the flag names, `tokens` N ids
        // and `out` N x D floats; the call returns after the kernel finishes.
        unsafe {
            function::<EmbeddingFn>(emulated, "emulate_embedding_forward")(
                bf16,
                out.as_mut_ptr(),
                table,
                tokens.as_ptr(),
                tokens.len() as u32,
                dim as u32,
                vocab as u32,
                blocks(out.len()),
            )
        };
        out
    };
    let got = on_both(&gather, &table_bits, &table, "embedding_forward");
    // The CPU refuses ids past the vocabulary, which the kernel gathers as zeros.
    let valid: Vec<u32> = tokens
        .iter()
        .copied()
        .filter(|&t| (t as usize) < vocab)
        .collect();
    let (t, ids) = (upload(&mut cpu, &table), upload_indices(&mut cpu, &valid));
    let out = upload(&mut cpu, &vec![0.0; valid.len() * dim]);
    cpu.embedding_forward(out, t, ids, dim)
        .expect("cpu embedding");
    let mut valid_rows = download(&mut cpu, out).into_iter();
    let want: Vec<f32> = tokens
        .iter()
        .flat_map(|&t| match (t as usize) < vocab {
            true => valid_rows.by_ref().take(dim).collect::<Vec<f32>>(),
            false => vec![0.0; dim],
        })
        .collect();
    assert_close("embedding_forward", &got, &want, 0.0);

    // RMSNorm: 5 rows of 300 (more than a block's 256 threads).
    let (rows, width) = (5usize, 300usize);
    let x = rng.vec(rows * width, 2.0);
    let (weight_bits, weight) = rounded(rng.vec(width, 1.5));
    let norm = |weight: Elements<'_>| {
        let (bf16, weight) = weight.raw();
        let run = |copy: Option<&mut [u16]>| {
            let (mut out, mut rstd) = (vec![f32::NAN; rows * width], vec![f32::NAN; rows]);
            let copy = copy_address(copy);
            let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: x and out hold rows x width floats, rstd rows, `weight` width
            // elements of the kind the flag names, `copy` (if not null) rows x width
            // bf16 slots; the call returns after the kernel.
            unsafe {
                function::<RmsnormFn>(emulated, "emulate_rmsnorm_forward")(
                    bf16,
                    out.as_mut_ptr(),
                    copy,
                    rstd.as_mut_ptr(),
                    x.as_ptr(),
                    weight,
                    rows as u32,
                    width as u32,
                    1e-6,
                )
            };
            out
        };
        let mut copy = vec![0xdead_u16; rows * width];
        let (plain, out) = (run(None), run(Some(&mut copy)));
        assert_eq!(
            bits(&plain),
            bits(&out),
            "rmsnorm_forward: the copy changed the output"
        );
        assert_eq!(copy, rounded_bits(&out), "rmsnorm_forward: the bf16 copy");
        out
    };
    let got = on_both(&norm, &weight_bits, &weight, "rmsnorm_forward");
    let [xt, wt] = [&x, &weight].map(|v| upload(&mut cpu, v));
    let (out, rstd) = (
        upload(&mut cpu, &vec![0.0; rows * width]),
        upload(&mut cpu, &vec![0.0; rows]),
    );
    cpu.rmsnorm_forward(out, rstd, xt, wt, width, 1e-6)
        .expect("cpu rmsnorm");
    assert_close("rmsnorm_forward", &got, &download(&mut cpu, out), 1e-6);

    // Bias: 7 rows of 130.
    let (rows, width) = (7usize, 130usize);
    let start = rng.vec(rows * width, 1.0);
    let (bias_bits, bias) = rounded(rng.vec(width, 1.0));
    let add = |bias: Elements<'_>| {
        let mut out = start.clone();
        let (bf16, bias) = bias.raw();
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `out` holds rows x width floats and `bias` width elements of the kind
        // the flag names; the call returns after the kernel finishes.
        unsafe {
            function::<BiasFn>(emulated, "emulate_add_bias")(
                bf16,
                out.as_mut_ptr(),
                bias,
                out.len() as u64,
                width as u32,
                blocks(out.len()),
            )
        };
        out
    };
    let got = on_both(&add, &bias_bits, &bias, "add_bias");
    let (out, b) = (upload(&mut cpu, &start), upload(&mut cpu, &bias));
    cpu.add_bias(out, b).expect("cpu bias");
    assert_close("add_bias", &got, &download(&mut cpu, out), 0.0);
}

/// `emulate_embedding_backward` of emulator/embedding_norm.cpp.
type EmbeddingBackwardFn =
    unsafe extern "C" fn(*mut f32, *const f32, *const u32, *mut u32, u32, u32, u32);

/// The embedding's backward scatter (a links pass over the positions, with `atomicMin`
/// and `__syncthreads_or`, then each token's first position walking its chain) adds the
/// gradient rows of every position into its token's table row in position order, as the
/// CPU does: equal to the bit, on 300 positions of 40 tokens (so most repeat, up to a
/// dozen times) onto a table already holding values; rows of tokens never met are
/// unchanged and ids past the vocabulary scatter nothing.
#[test]
fn the_embedding_scatter_adds_in_position_order() {
    let Some(emulated) = available(library(&EMBEDDING_NORM, "embedding_norm")) else {
        return;
    };
    let mut rng = Rng::new(0xe3b);
    let (vocab, dim, n) = (50usize, 24usize, 300usize);
    let mut tokens = rng.ints(n, 40);
    tokens[7] = vocab as u32;
    let start = rng.vec(vocab * dim, 1.0);
    let dout = rng.vec(n * dim, 1.0);
    let mut got = start.clone();
    let mut links = vec![u32::MAX; 2 * n];
    {
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: dtable holds V x D floats, dout N x D, tokens N ids and links 2 N; the
        // call returns after both kernels finish.
        unsafe {
            function::<EmbeddingBackwardFn>(emulated, "emulate_embedding_backward")(
                got.as_mut_ptr(),
                dout.as_ptr(),
                tokens.as_ptr(),
                links.as_mut_ptr(),
                n as u32,
                dim as u32,
                vocab as u32,
            )
        };
    }
    // The CPU refuses ids past the vocabulary: its position's row is left out.
    let kept: Vec<usize> = (0..n).filter(|&p| (tokens[p] as usize) < vocab).collect();
    let valid: Vec<u32> = kept.iter().map(|&p| tokens[p]).collect();
    let rows: Vec<f32> = kept
        .iter()
        .flat_map(|&p| dout[p * dim..(p + 1) * dim].to_vec())
        .collect();
    let mut cpu = CpuBackend::new();
    let (table, grads) = (upload(&mut cpu, &start), upload(&mut cpu, &rows));
    let ids = upload_indices(&mut cpu, &valid);
    cpu.embedding_backward(table, grads, ids, dim)
        .expect("cpu scatter");
    assert_close("embedding_backward", &got, &download(&mut cpu, table), 0.0);
    let untouched =
        (40..vocab).all(|t| got[t * dim..(t + 1) * dim] == start[t * dim..(t + 1) * dim]);
    assert!(untouched, "rows of tokens never met changed");
}

/// `emulate_cast_bf16` of emulator/elementwise.cpp.
type CastFn = unsafe extern "C" fn(*mut u16, *const f32, u64, u32);

/// The bf16 cast (elementwise.cu) rounds every element as the host does (to nearest,
/// ties to even; `half`), on the grid the backend launches (a thread per 4 elements):
/// where source and destination are aligned for its 16-byte loads and 8-byte stores,
/// where either is not (one element off), and with lengths that leave 1 to 3 elements
/// after the last group of 4. Inputs include ties, subnormals, infinities and a NaN
/// (which must stay a NaN).
#[test]
fn the_bf16_cast_rounds_as_the_host_does() {
    let Some(emulated) = available(library(&ELEMENTWISE, "elementwise")) else {
        return;
    };
    let cast: CastFn = function(emulated, "emulate_cast_bf16");
    let mut source = Rng::new(0xca57).vec(1100, 3.0);
    // A tie that rounds down to even, one that rounds up, the smallest subnormal,
    // infinities, a NaN.
    source[..6].copy_from_slice(&[
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::from_bits(1),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    for (src_offset, dst_offset, n) in [
        (0, 0, 1031),
        (1, 0, 517),
        (0, 1, 1026),
        (4, 4, 1),
        (0, 0, 0),
    ] {
        let mut dst = vec![0xdead_u16; n + 8];
        let src = &source[src_offset..src_offset + n];
        let blocks = (n as u64).div_ceil(4).div_ceil(256).max(1) as u32;
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `src` holds n elements and `dst` n from `dst_offset`, both outlive
        // the call, which returns after the kernel finishes.
        unsafe {
            cast(
                dst[dst_offset..].as_mut_ptr(),
                src.as_ptr(),
                n as u64,
                blocks,
            )
        };
        for (i, (&x, &got)) in src.iter().zip(&dst[dst_offset..]).enumerate() {
            let want = half::bf16::from_f32(x);
            if x.is_nan() {
                assert!(
                    half::bf16::from_bits(got).is_nan(),
                    "element {i}: NaN became {got:#x}"
                );
            } else {
                assert_eq!(
                    got,
                    want.to_bits(),
                    "offsets ({src_offset}, {dst_offset}), n {n}, element {i}: {x:e}"
                );
            }
        }
        assert!(
            dst[..dst_offset]
                .iter()
                .chain(&dst[dst_offset + n..])
                .all(|&d| d == 0xdead),
            "offsets ({src_offset}, {dst_offset}), n {n}: wrote outside its range"
        );
    }
}

/// `emulate_swiglu_forward` of emulator/swiglu_logprob.cpp.
type SwigluForwardFn = unsafe extern "C" fn(*mut f32, *mut u16, *const f32, *const f32, u64, u32);
/// `emulate_swiglu_backward` of emulator/swiglu_logprob.cpp.
type SwigluBackwardFn = unsafe extern "C" fn(
    *mut f32,
    *mut f32,
    *mut u16,
    *mut u16,
    *const f32,
    *const f32,
    *const f32,
    u64,
    u32,
);

/// The SwiGLU forward and backward (swiglu.cu) match the CPU backend to 1e-6 relative
/// (the same formulas in the same order; only `expf` may differ in its last bit between
/// the host's two libraries), on 1,000 elements over 3 blocks with a partial last one;
/// their bf16 copies (the bf16 mode's GEMM inputs: `out` for the down projection,
/// `dgate` and `dup` for the gate and up projections' backward GEMMs) are their f32
/// outputs rounded as the host rounds, to the bit, and asking for them changes nothing
/// else.
#[test]
fn the_swiglu_kernels_match_the_cpu_and_write_exact_bf16_copies() {
    let Some(emulated) = available(library(&SWIGLU_LOGPROB, "swiglu_logprob")) else {
        return;
    };
    let mut rng = Rng::new(0x5e1);
    let n = 1000usize;
    let (gate, up, dout) = (rng.vec(n, 3.0), rng.vec(n, 2.0), rng.vec(n, 1.0));
    let blocks = n.div_ceil(256) as u32;

    let forward = |copy: Option<&mut [u16]>| {
        let mut out = vec![f32::NAN; n];
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every array holds n elements (the copy too, when given); the call
        // returns after the kernel finishes.
        unsafe {
            function::<SwigluForwardFn>(emulated, "emulate_swiglu_forward")(
                out.as_mut_ptr(),
                copy_address(copy),
                gate.as_ptr(),
                up.as_ptr(),
                n as u64,
                blocks,
            )
        };
        out
    };
    let mut out_copy = vec![0xdead_u16; n];
    let (plain, out) = (forward(None), forward(Some(&mut out_copy)));
    assert_eq!(
        bits(&plain),
        bits(&out),
        "swiglu_forward: the copy changed the output"
    );
    assert_eq!(
        out_copy,
        rounded_bits(&out),
        "swiglu_forward: the bf16 copy"
    );

    let backward = |copies: Option<(&mut Vec<u16>, &mut Vec<u16>)>| {
        let (mut dgate, mut dup) = (vec![f32::NAN; n], vec![f32::NAN; n]);
        let (dgate_copy, dup_copy) = match copies {
            Some((g, u)) => (copy_address(Some(g)), copy_address(Some(u))),
            None => (std::ptr::null_mut(), std::ptr::null_mut()),
        };
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: as above.
        unsafe {
            function::<SwigluBackwardFn>(emulated, "emulate_swiglu_backward")(
                dgate.as_mut_ptr(),
                dup.as_mut_ptr(),
                dgate_copy,
                dup_copy,
                dout.as_ptr(),
                gate.as_ptr(),
                up.as_ptr(),
                n as u64,
                blocks,
            )
        };
        (dgate, dup)
    };
    let (mut dgate_copy, mut dup_copy) = (vec![0xdead_u16; n], vec![0xdead_u16; n]);
    let plain = backward(None);
    let (dgate, dup) = backward(Some((&mut dgate_copy, &mut dup_copy)));
    assert_eq!(
        bits(&plain.0),
        bits(&dgate),
        "swiglu_backward: the copies changed dgate"
    );
    assert_eq!(
        bits(&plain.1),
        bits(&dup),
        "swiglu_backward: the copies changed dup"
    );
    assert_eq!(
        dgate_copy,
        rounded_bits(&dgate),
        "swiglu_backward: dgate's bf16 copy"
    );
    assert_eq!(
        dup_copy,
        rounded_bits(&dup),
        "swiglu_backward: dup's bf16 copy"
    );

    let mut cpu = CpuBackend::new();
    let [g, u, d] = [&gate, &up, &dout].map(|v| upload(&mut cpu, v));
    let [o, dg, du] = [0; 3].map(|_| upload(&mut cpu, &vec![0.0; n]));
    cpu.swiglu_forward(o, g, u).expect("cpu swiglu");
    cpu.swiglu_backward(dg, du, d, g, u)
        .expect("cpu swiglu backward");
    assert_close("swiglu_forward", &out, &download(&mut cpu, o), 1e-6);
    assert_close(
        "swiglu_backward dgate",
        &dgate,
        &download(&mut cpu, dg),
        1e-6,
    );
    assert_close("swiglu_backward dup", &dup, &download(&mut cpu, du), 1e-6);
}

/// `emulate_logprob_dlogits` of emulator/swiglu_logprob.cpp.
type DlogitsFn = unsafe extern "C" fn(
    i32,
    *mut u8,
    *const f32,
    *const u32,
    *const f32,
    *const f32,
    u32,
    u32,
    u32,
);

/// The output head's logit gradient (logprob.cu), w[n] * (onehot(target) - softmax), on 6
/// rows of a 1,001-token vocabulary: in f32, in place over the logits, it matches a
/// float64 reference to 1e-6 (one `expf` and a product per element); a row of weight 0
/// is all zeros and a target past the vocabulary adds no one-hot term. The bf16 form,
/// which the bf16 mode's two GEMMs after it read instead of casting, is the f32 form
/// rounded as the host rounds, to the bit, and leaves the logits as they were.
#[test]
fn the_logit_gradient_in_bf16_is_the_f32_gradient_rounded() {
    let Some(emulated) = available(library(&SWIGLU_LOGPROB, "swiglu_logprob")) else {
        return;
    };
    let mut rng = Rng::new(0xd1);
    let (rows, vocab) = (6usize, 1001usize);
    let logits = rng.vec(rows * vocab, 4.0);
    let mut targets = rng.ints(rows, vocab);
    targets[4] = vocab as u32;
    let mut weights = rng.vec(rows, 1.0);
    weights[2] = 0.0;
    // Each row's log-sum-exp, in f64.
    let lse: Vec<f32> = logits
        .chunks(vocab)
        .map(|row| {
            let max = row.iter().fold(f64::MIN, |m, &x| m.max(f64::from(x)));
            (max + row
                .iter()
                .map(|&x| (f64::from(x) - max).exp())
                .sum::<f64>()
                .ln()) as f32
        })
        .collect();
    let blocks = (rows * vocab).div_ceil(256) as u32;
    let run = |bf16: i32, out: *mut u8, logits: *const f32| {
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `logits` and `out` hold rows x vocab elements (f32, or bf16 with the
        // flag set), targets, weights and lse `rows`; the call returns after the kernel.
        unsafe {
            function::<DlogitsFn>(emulated, "emulate_logprob_dlogits")(
                bf16,
                out,
                logits,
                targets.as_ptr(),
                weights.as_ptr(),
                lse.as_ptr(),
                rows as u32,
                vocab as u32,
                blocks,
            )
        };
    };
    let mut in_place = logits.clone();
    let at = in_place.as_mut_ptr();
    run(0, at.cast(), at);
    let want: Vec<f32> = (0..rows * vocab)
        .map(|i| {
            let (row, j) = (i / vocab, i % vocab);
            let w = f64::from(weights[row]);
            let p = (f64::from(logits[i]) - f64::from(lse[row])).exp();
            let onehot = if j == targets[row] as usize { 1.0 } else { 0.0 };
            (w * (onehot - p)) as f32
        })
        .collect();
    assert_close("logprob_dlogits", &in_place, &want, 1e-6);
    assert!(in_place[2 * vocab..3 * vocab].iter().all(|&d| d == 0.0));

    let mut copy = vec![0xdead_u16; rows * vocab];
    let source = logits.clone();
    run(1, copy.as_mut_ptr().cast(), source.as_ptr());
    assert_eq!(copy, rounded_bits(&in_place), "logprob_dlogits_bf16");
    assert_eq!(
        bits(&source),
        bits(&logits),
        "the bf16 form wrote over the logits"
    );
}

/// `emulate_rmsnorm_backward_dx` of emulator/embedding_norm.cpp.
type RmsnormBackwardFn = unsafe extern "C" fn(
    *mut f32,
    *mut u16,
    *const f32,
    *const f32,
    *const f32,
    *const f32,
    u32,
    u32,
);

/// RMSNorm's input gradient (norm.cu), added into a gradient already holding values, on
/// 5 rows of 300 (more than a block's 256 threads): it matches the CPU backend to 1e-6
/// relative (the row's sum of dout * w * x in another order); its bf16 copy (the
/// residual stream's gradient, which the bf16 mode's projection GEMMs read next) is the
/// sum rounded as the host rounds, to the bit, and asking for it changes nothing else.
#[test]
fn the_rmsnorm_input_gradient_matches_the_cpu_and_writes_an_exact_bf16_copy() {
    let Some(emulated) = available(library(&EMBEDDING_NORM, "embedding_norm")) else {
        return;
    };
    let mut rng = Rng::new(0xb0);
    let (rows, width) = (5usize, 300usize);
    let (dout, x, weight) = (
        rng.vec(rows * width, 1.0),
        rng.vec(rows * width, 2.0),
        rng.vec(width, 1.5),
    );
    let start = rng.vec(rows * width, 0.5);
    let rstd: Vec<f32> = x
        .chunks(width)
        .map(|row| 1.0 / (row.iter().map(|v| v * v).sum::<f32>() / width as f32 + 1e-6).sqrt())
        .collect();
    let run = |copy: Option<&mut [u16]>| {
        let mut dx = start.clone();
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: dx, dout and x hold rows x width floats (the copy too, when given),
        // weight width and rstd rows; the call returns after the kernel finishes.
        unsafe {
            function::<RmsnormBackwardFn>(emulated, "emulate_rmsnorm_backward_dx")(
                dx.as_mut_ptr(),
                copy_address(copy),
                dout.as_ptr(),
                x.as_ptr(),
                weight.as_ptr(),
                rstd.as_ptr(),
                rows as u32,
                width as u32,
            )
        };
        dx
    };
    let mut copy = vec![0xdead_u16; rows * width];
    let (plain, dx) = (run(None), run(Some(&mut copy)));
    assert_eq!(
        bits(&plain),
        bits(&dx),
        "rmsnorm_backward_dx: the copy changed dx"
    );
    assert_eq!(
        copy,
        rounded_bits(&dx),
        "rmsnorm_backward_dx: the bf16 copy"
    );

    let mut cpu = CpuBackend::new();
    let [d, xt, wt, rt, dxt] = [&dout, &x, &weight, &rstd, &start].map(|v| upload(&mut cpu, v));
    let dweight = upload(&mut cpu, &vec![0.0; width]);
    cpu.rmsnorm_backward(dxt, dweight, d, xt, wt, rt, width)
        .expect("cpu rmsnorm backward");
    assert_close("rmsnorm_backward dx", &dx, &download(&mut cpu, dxt), 1e-6);
}

/// `emulate_rope` of emulator/rope.cpp (the bias f32 or null).
type RopeFn = unsafe extern "C" fn(
    *mut f32,
    *mut u16,
    *const f32,
    *const u32,
    *const f32,
    u32,
    u32,
    u32,
    f32,
    u32,
);
/// `emulate_rope_bias_bf16` of emulator/rope.cpp.
type RopeBiasBf16Fn = unsafe extern "C" fn(
    *mut f32,
    *mut u16,
    *const u16,
    *const u32,
    *const f32,
    u32,
    u32,
    u32,
    f32,
    u32,
);

/// The bias a rotation adds first: none, f32, or bf16 bits (frozen weights).
#[derive(Clone, Copy)]
enum RopeBias<'a> {
    None,
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

/// The rows, angles and heads of an emulated rotation (rope.cu's `rope`).
struct Rotation<'a> {
    positions: &'a [u32],
    inv_freq: &'a [f32],
    heads: usize,
    head_dim: usize,
}

impl Rotation<'_> {
    /// `input` [rows, heads * hd] plus `bias`, rotated by the angles times `sign`, by the
    /// emulated kernel; `copy`, when given, gets its bf16 copy.
    fn emulated(
        &self,
        emulated: &Library,
        input: &[f32],
        sign: f32,
        bias: RopeBias,
        copy: Option<&mut [u16]>,
    ) -> Vec<f32> {
        let mut rotated = input.to_vec();
        let (x_at, copy_at) = (rotated.as_mut_ptr(), copy_address(copy));
        let (pos_at, freq_at) = (self.positions.as_ptr(), self.inv_freq.as_ptr());
        let (rows, heads, hd) = (self.positions.len(), self.heads, self.head_dim);
        assert_eq!(input.len(), rows * heads * hd);
        let sizes = (rows as u32, heads as u32, hd as u32);
        let blocks = (input.len() / 2).div_ceil(256) as u32;
        let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `rotated` holds rows x heads x hd floats (the copy too, when given), the
        // bias heads x hd, positions rows, inv_freq hd / 2; the call returns after the
        // kernel finishes.
        unsafe {
            match bias {
                RopeBias::None | RopeBias::F32(_) => {
                    let bias_at = match bias {
                        RopeBias::F32(bias) => bias.as_ptr(),
                        _ => std::ptr::null(),
                    };
                    function::<RopeFn>(emulated, "emulate_rope")(
                        x_at, copy_at, bias_at, pos_at, freq_at, sizes.0, sizes.1, sizes.2, sign,
                        blocks,
                    )
                }
                RopeBias::Bf16(bias) => {
                    function::<RopeBiasBf16Fn>(emulated, "emulate_rope_bias_bf16")(
                        x_at,
                        copy_at,
                        bias.as_ptr(),
                        pos_at,
                        freq_at,
                        sizes.0,
                        sizes.1,
                        sizes.2,
                        sign,
                        blocks,
                    )
                }
            }
        };
        rotated
    }
}

/// The rotary embedding (rope.cu), forward and backward (the opposite angles), on 7 rows
/// of 3 heads of width 10 at positions up to 4,000: it matches the CPU backend to 1e-5
/// relative (both rotate by the same f32 angles; `sincosf` of large angles may differ in
/// the last bits between the host's libraries); its bf16 copy (the query or key
/// gradient, which the bf16 mode's projection GEMMs read next) is the rotated tensor
/// rounded as the host rounds, to the bit, and asking for it changes nothing else. With a
/// bias (the projections' forward, `add_bias_rope_forward`), f32 or bf16, the result is
/// the rotation of the host's `x + bias` to the bit (the same f32 sums `add_bias` makes),
/// and the CPU backend's `add_bias_rope_forward` to 1e-5.
#[test]
fn the_rotary_embedding_matches_the_cpu_and_writes_an_exact_bf16_copy() {
    let Some(emulated) = available(library(&ROPE, "rope")) else {
        return;
    };
    let mut rng = Rng::new(0x20e);
    let (rows, heads, head_dim, theta) = (7usize, 3usize, 10usize, 10_000.0f32);
    let x = rng.vec(rows * heads * head_dim, 1.0);
    let positions = rng.ints(rows, 4000);
    let inv_freq: Vec<f32> = (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32))
        .collect();
    let rotation = Rotation {
        positions: &positions,
        inv_freq: &inv_freq,
        heads,
        head_dim,
    };
    let run = |input: &[f32], sign: f32, bias: RopeBias, copy: Option<&mut [u16]>| {
        rotation.emulated(emulated, input, sign, bias, copy)
    };
    let mut cpu = CpuBackend::new();
    for (sign, what) in [(1.0, "rope_forward"), (-1.0, "rope_backward")] {
        let mut copy = vec![0xdead_u16; x.len()];
        let (plain, rotated) = (
            run(&x, sign, RopeBias::None, None),
            run(&x, sign, RopeBias::None, Some(&mut copy)),
        );
        assert_eq!(
            bits(&plain),
            bits(&rotated),
            "{what}: the copy changed the rotation"
        );
        assert_eq!(copy, rounded_bits(&rotated), "{what}: the bf16 copy");
        let (t, p) = (upload(&mut cpu, &x), upload_indices(&mut cpu, &positions));
        match sign > 0.0 {
            true => cpu.rope_forward(t, p, heads, head_dim, theta),
            false => cpu.rope_backward(t, p, heads, head_dim, theta),
        }
        .expect("cpu rope");
        assert_close(what, &rotated, &download(&mut cpu, t), 1e-5);
    }

    let bias = rng.vec(heads * head_dim, 1.0);
    let bias_bf16 = rounded_bits(&rng.vec(heads * head_dim, 1.0));
    let plus = |bias: &[f32]| -> Vec<f32> {
        x.iter()
            .enumerate()
            .map(|(i, v)| v + bias[i % bias.len()])
            .collect()
    };
    for (held, what, summed) in [
        (RopeBias::F32(&bias), "f32 bias", plus(&bias)),
        (
            RopeBias::Bf16(&bias_bf16),
            "bf16 bias",
            plus(&widened(&bias_bf16)),
        ),
    ] {
        let mut copy = vec![0xdead_u16; x.len()];
        let fused = run(&x, 1.0, held, Some(&mut copy));
        let separate = run(&summed, 1.0, RopeBias::None, None);
        assert_eq!(
            bits(&fused),
            bits(&separate),
            "add_bias_rope_forward ({what}): not the rotation of x + bias"
        );
        assert_eq!(
            copy,
            rounded_bits(&fused),
            "add_bias_rope_forward ({what}): the bf16 copy"
        );
        let bias_f32 = match held {
            RopeBias::Bf16(bits) => widened(bits),
            _ => bias.clone(),
        };
        let (t, bt) = (upload(&mut cpu, &x), upload(&mut cpu, &bias_f32));
        let p = upload_indices(&mut cpu, &positions);
        cpu.add_bias_rope_forward(t, bt, p, heads, head_dim, theta)
            .expect("cpu add_bias_rope_forward");
        assert_close(what, &fused, &download(&mut cpu, t), 1e-5);
    }
}

/// `emulate_rope_append_kv` of emulator/rope.cpp.
type RopeAppendFn = unsafe extern "C" fn(
    i32,
    i32,
    *mut f32,
    *mut u16,
    *mut u8,
    *mut u8,
    *const f32,
    *const f32,
    *const u8,
    *const u8,
    *const u8,
    *const u32,
    *const u32,
    *const f32,
    u32,
    u32,
    u32,
    u32,
    u32,
);

/// How a case of the one-pass decoding kernel holds its biases.
#[derive(Clone, Copy, Debug)]
enum BiasForm {
    F32,
    Bf16,
}

/// A decoding step's biases, rotations and cache append in one pass (rope.cu's
/// `rope_append_kv`, what the CUDA backend runs for `Kernels::rope_append_kv`), on 3
/// sequences of 4 query heads and 2 key/value heads of width 10, filled to 0, 4 and 8 rows
/// of 9, at positions up to 4,000. For f32 caches and biases, and bf16 caches beside f32
/// and bf16 biases, with all three biases, none, and some, it writes to the bit what the
/// separate kernels write: the emulated `rope` of q + bias and of k + bias, v + bias as
/// `add_bias` sums it, each appended row rounded as the append rounds it (the same device
/// functions, so a difference is a wrong index or a bias taken from the wrong place),
/// and q's bf16 copy exactly; no other cache row changes. With f32 caches it agrees with
/// the CPU backend's `Kernels::rope_append_kv` (its separate calls) to 1e-5 relative, as
/// the rotation alone does (`sincos` of large angles may differ in the last bits between
/// the host's libraries).
#[test]
fn the_decoding_rotation_and_append_in_one_pass_match_the_separate_kernels() {
    let Some(emulated) = available(library(&ROPE, "rope")) else {
        return;
    };
    let mut rng = Rng::new(0x5a9e);
    let shape = AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 10,
    };
    let (batch, capacity, theta) = (3usize, 9usize, 1_000_000.0f32);
    let lengths = [0u32, 4, 8];
    let positions = rng.ints(batch, 4000);
    let (q_width, kv_width) = (
        shape.heads * shape.head_dim,
        shape.kv_heads * shape.head_dim,
    );
    let inv_freq: Vec<f32> = (0..shape.head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / shape.head_dim as f32))
        .collect();
    let (q, k, v) = (
        rng.vec(batch * q_width, 1.0),
        rng.vec(batch * kv_width, 1.0),
        rng.vec(batch * kv_width, 1.0),
    );
    let caches_before = [(); 2].map(|_| rng.vec(batch * capacity * kv_width, 1.0));
    let biases = [
        rng.vec(q_width, 0.5),
        rng.vec(kv_width, 0.5),
        rng.vec(kv_width, 0.5),
    ];
    let biases_bf16 = biases.each_ref().map(|bias| rounded_bits(bias));
    let rotation = |heads| Rotation {
        positions: &positions,
        inv_freq: &inv_freq,
        heads,
        head_dim: shape.head_dim,
    };
    let mut cpu = CpuBackend::new();
    let all = [true; 3];
    let cases = [
        (false, BiasForm::F32, all),
        (false, BiasForm::F32, [false; 3]),
        (false, BiasForm::F32, [true, false, true]),
        (true, BiasForm::F32, all),
        (true, BiasForm::Bf16, all),
        (true, BiasForm::Bf16, [false, true, false]),
        (true, BiasForm::Bf16, [false; 3]),
    ];
    for (bf16_cache, form, present) in cases {
        let what = format!("bf16 cache {bf16_cache}, {form:?} biases {present:?}");
        // The biases as the kernel reads them, as `rope` takes them, and as f32 values.
        let bias_at = |i: usize| -> *const u8 {
            match (present[i], form) {
                (false, _) => std::ptr::null(),
                (true, BiasForm::F32) => biases[i].as_ptr().cast(),
                (true, BiasForm::Bf16) => biases_bf16[i].as_ptr().cast(),
            }
        };
        let rope_bias = |i: usize| match (present[i], form) {
            (false, _) => RopeBias::None,
            (true, BiasForm::F32) => RopeBias::F32(&biases[i]),
            (true, BiasForm::Bf16) => RopeBias::Bf16(&biases_bf16[i]),
        };
        let bias_f32 = |i: usize| match form {
            BiasForm::F32 => biases[i].clone(),
            BiasForm::Bf16 => widened(&biases_bf16[i]),
        };

        let mut got_q = q.clone();
        let mut q_copy = vec![0xdead_u16; q.len()];
        let mut f32_caches = caches_before.clone();
        let mut bf16_caches = caches_before.each_ref().map(|c| rounded_bits(c));
        let [k_at, v_at]: [*mut u8; 2] = match bf16_cache {
            true => bf16_caches.each_mut().map(|c| c.as_mut_ptr().cast()),
            false => f32_caches.each_mut().map(|c| c.as_mut_ptr().cast()),
        };
        {
            let _launch = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: q and its copy hold batch x q_width elements, k and v batch x
            // kv_width, the caches batch x capacity x kv_width, each present bias one row
            // of its tensor in the form the flags name, positions and lengths batch
            // (every length below capacity), inv_freq hd / 2; the call returns after the
            // kernel finishes.
            unsafe {
                function::<RopeAppendFn>(emulated, "emulate_rope_append_kv")(
                    i32::from(bf16_cache),
                    i32::from(matches!(form, BiasForm::Bf16)),
                    got_q.as_mut_ptr(),
                    q_copy.as_mut_ptr(),
                    k_at,
                    v_at,
                    k.as_ptr(),
                    v.as_ptr(),
                    bias_at(0),
                    bias_at(1),
                    bias_at(2),
                    positions.as_ptr(),
                    lengths.as_ptr(),
                    inv_freq.as_ptr(),
                    batch as u32,
                    shape.heads as u32,
                    shape.kv_heads as u32,
                    shape.head_dim as u32,
                    capacity as u32,
                )
            };
        }

        let want_q = rotation(shape.heads).emulated(emulated, &q, 1.0, rope_bias(0), None);
        assert_eq!(bits(&got_q), bits(&want_q), "{what}: q");
        assert_eq!(q_copy, rounded_bits(&got_q), "{what}: q's bf16 copy");
        let want_k = rotation(shape.kv_heads).emulated(emulated, &k, 1.0, rope_bias(1), None);
        let want_v: Vec<f32> = match present[2] {
            true => {
                let bias = bias_f32(2);
                (v.iter().enumerate())
                    .map(|(i, x)| x + bias[i % kv_width])
                    .collect()
            }
            false => v.clone(),
        };
        for (c, new) in [&want_k, &want_v].into_iter().enumerate() {
            let mut want = caches_before[c].clone();
            for (b, &row) in lengths.iter().enumerate() {
                let at = (b * capacity + row as usize) * kv_width;
                want[at..at + kv_width].copy_from_slice(&new[b * kv_width..(b + 1) * kv_width]);
            }
            let name = ["k", "v"][c];
            match bf16_cache {
                true => assert!(
                    bf16_caches[c] == rounded_bits(&want),
                    "{what}: {name} cache"
                ),
                false => assert_eq!(bits(&f32_caches[c]), bits(&want), "{what}: {name} cache"),
            }
        }

        if bf16_cache {
            continue;
        }
        let tensors = [&q, &k, &v].map(|x| upload(&mut cpu, x));
        let caches = caches_before.each_ref().map(|c| upload(&mut cpu, c));
        let bias_tensors = [0, 1, 2].map(|i| present[i].then(|| upload(&mut cpu, &bias_f32(i))));
        let p = upload_indices(&mut cpu, &positions);
        let rows = ProjectedRows {
            q: tensors[0],
            k: tensors[1],
            v: tensors[2],
            biases: bias_tensors,
        };
        cpu.rope_append_kv(
            rows, p, caches[0], caches[1], &lengths, capacity, shape, theta,
        )
        .expect("cpu rope_append_kv");
        assert_close(&what, &got_q, &download(&mut cpu, tensors[0]), 1e-5);
        for (c, name) in ["k cache", "v cache"].into_iter().enumerate() {
            let on_cpu = download(&mut cpu, caches[c]);
            assert_close(&format!("{what}: {name}"), &f32_caches[c], &on_cpu, 1e-5);
        }
    }
}
