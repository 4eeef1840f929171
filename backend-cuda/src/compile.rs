//! The kernel sources and their run-time compilation with NVRTC. Each family's `.cu`
//! file is embedded with `include_str!`, prefixed with `common.cuh`, and compiled to PTX
//! for the device's architecture once per process: the PTX is cached by (family,
//! architecture), so every backend a process opens after the first loads it without
//! compiling. NVRTC needs no driver, so [`compile_kernels`] also works on a machine
//! without a GPU (the crate's NVRTC test uses it).

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, OnceLock};

use cudarc::nvrtc::{result, sys};

use crate::error::CudaError;

/// Prepended to every kernel source: typedefs, reductions, the grid-stride helpers.
const COMMON: &str = include_str!("kernels/common.cuh");

/// A family of kernels: one `.cu` file, compiled into one module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// fill, +=, scale, sum of squares, the bf16 cast.
    Elementwise,
    /// Embedding gather and its deterministic scatter.
    Embedding,
    /// RMSNorm, bias add, column sums.
    Norm,
    /// Rotary position embedding.
    Rope,
    /// Training attention: forward, delta, dq, dk/dv.
    Attention,
    /// Training attention on tensor cores (the bf16 mode): forward, dq, dk/dv.
    Flash,
    /// KV-cache append and decoding attention.
    Decode,
    /// SwiGLU forward and backward.
    Swiglu,
    /// The output head's row kernels.
    Logprob,
    /// Token choice from logits.
    Choose,
    /// The AdamW step.
    Adamw,
}

impl Family {
    /// Every family, in the order the backend loads them.
    pub(crate) const ALL: [Family; 11] = [
        Family::Elementwise,
        Family::Embedding,
        Family::Norm,
        Family::Rope,
        Family::Attention,
        Family::Flash,
        Family::Decode,
        Family::Swiglu,
        Family::Logprob,
        Family::Choose,
        Family::Adamw,
    ];

    /// The file name of the family's source.
    pub(crate) fn file(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise.cu",
            Family::Embedding => "embedding.cu",
            Family::Norm => "norm.cu",
            Family::Rope => "rope.cu",
            Family::Attention => "attention.cu",
            Family::Flash => "flash.cu",
            Family::Decode => "decode.cu",
            Family::Swiglu => "swiglu.cu",
            Family::Logprob => "logprob.cu",
            Family::Choose => "choose.cu",
            Family::Adamw => "adamw.cu",
        }
    }

    /// The kernels (`extern "C" __global__` functions) the family defines.
    pub(crate) fn entries(self) -> &'static [&'static str] {
        match self {
            Family::Elementwise => &[
                "fill_f32",
                "add_assign_f32",
                "scale_f32",
                "sum_squares_partial",
                "sum_squares_finish",
                "cast_bf16",
            ],
            Family::Embedding => &[
                "embedding_forward",
                "embedding_forward_bf16",
                "embedding_links",
                "embedding_backward",
            ],
            Family::Norm => &[
                "rmsnorm_forward",
                "rmsnorm_forward_bf16",
                "rmsnorm_backward_dx",
                "column_partials",
                "column_finish",
                "add_bias",
                "add_bias_bf16",
            ],
            Family::Rope => &[
                "rope",
                "rope_bias_bf16",
                "rope_append_kv",
                "rope_append_kv_bf16",
                "rope_append_kv_bf16_bias_bf16",
            ],
            Family::Attention => &[
                "attention_forward",
                "attention_delta",
                "attention_backward_dq",
                "attention_backward_dkv",
            ],
            Family::Flash => &[
                "flash_forward",
                "flash_forward64",
                "flash_backward_dq",
                "flash_backward_dq64",
                "flash_backward_dkv",
                "flash_backward_dkv64",
                "flash_backward_dkv64_wide",
                "flash_dkv_group_sum",
            ],
            Family::Decode => &[
                "kv_cache_append",
                "kv_cache_append_bf16",
                "attention_decode",
                "attention_decode_bf16",
                "attention_decode_split",
                "attention_decode_split_bf16",
                "attention_decode_combine",
            ],
            Family::Swiglu => &["swiglu_forward", "swiglu_backward"],
            Family::Logprob => &["logprob_rows", "logprob_dlogits", "logprob_dlogits_bf16"],
            Family::Choose => &["choose_tokens"],
            Family::Adamw => &["adamw"],
        }
    }

    /// The family's source, without the common prelude.
    fn source(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("kernels/elementwise.cu"),
            Family::Embedding => include_str!("kernels/embedding.cu"),
            Family::Norm => include_str!("kernels/norm.cu"),
            Family::Rope => include_str!("kernels/rope.cu"),
            Family::Attention => include_str!("kernels/attention.cu"),
            // The mma wrapper first: the emulator supplies its own.
            Family::Flash => concat!(
                include_str!("kernels/tensor_core.cuh"),
                include_str!("kernels/flash.cu")
            ),
            Family::Decode => include_str!("kernels/decode.cu"),
            Family::Swiglu => include_str!("kernels/swiglu.cu"),
            Family::Logprob => include_str!("kernels/logprob.cu"),
            Family::Choose => include_str!("kernels/choose.cu"),
            Family::Adamw => include_str!("kernels/adamw.cu"),
        }
    }
}

/// One family compiled: its PTX and NVRTC's log (warnings; empty when clean).
#[derive(Clone, Debug)]
pub struct CompiledFamily {
    /// The `.cu` file.
    pub file: &'static str,
    /// The kernels the backend loads from it.
    pub entries: &'static [&'static str],
    /// The PTX text.
    pub ptx: String,
    /// What NVRTC printed while compiling (warnings), trimmed.
    pub log: String,
}

/// True when the NVRTC library can be loaded (by the names cudarc tries; see the
/// crate documentation), without panicking when it cannot.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to load the library and resolve its symbols.
    unsafe { sys::is_culib_present() }
}

/// Compiles every kernel family for `arch` (a virtual architecture such as
/// `"compute_90"`), through the per-process cache. Fails with [`CudaError::NoLibrary`]
/// when NVRTC cannot be loaded and with [`CudaError::Compile`] (carrying NVRTC's log)
/// when a source does not compile.
pub fn compile_kernels(arch: &str) -> Result<Vec<CompiledFamily>, CudaError> {
    Family::ALL
        .iter()
        .map(|&family| compiled(family, arch))
        .collect()
}

/// The compiled PTX of `family` for `arch`, compiling it on first use in this process.
pub(crate) fn compiled(family: Family, arch: &str) -> Result<CompiledFamily, CudaError> {
    static CACHE: OnceLock<Mutex<HashMap<(Family, String), CompiledFamily>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = (family, arch.to_owned());
    if let Some(hit) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(hit);
    }
    let fresh = compile(family, arch)?;
    if let Ok(mut c) = cache.lock() {
        c.insert(key, fresh.clone());
    }
    Ok(fresh)
}

/// The NVRTC options: the architecture, full-precision division and square roots, no
/// flush-to-zero (the parity tests compare with the CPU in f32), and the constants the
/// kernels share with the other backends.
fn options(arch: &str) -> Vec<String> {
    vec![
        format!(
            "--define-macro=ROWS_PER_BLOCK={}",
            sage_transformer::COLUMN_SUM_ROWS
        ),
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--ftz=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--fmad=true".into(),
        "--extra-device-vectorization".into(),
    ]
}

/// Compiles one family to PTX with NVRTC, keeping the log.
fn compile(family: Family, arch: &str) -> Result<CompiledFamily, CudaError> {
    let (ptx, log) = run_nvrtc(family, &options(arch), Output::Ptx)?;
    Ok(CompiledFamily {
        file: family.file(),
        entries: family.entries(),
        ptx: text_of(&ptx),
        log,
    })
}

/// One family compiled and assembled to machine code for a real architecture.
#[derive(Clone, Debug)]
pub struct AssembledFamily {
    /// The `.cu` file.
    pub file: &'static str,
    /// Its machine code (a cubin, which `nvdisasm` reads).
    pub cubin: Vec<u8>,
    /// What NVRTC and ptxas printed: per kernel, registers, shared memory and spills.
    pub report: String,
}

/// Compiles every kernel family for `arch` (a real architecture such as `"sm_90"`) and
/// assembles it to a cubin, through NVRTC's built-in ptxas, with its resource report.
/// Unlike a compile to PTX this reads inline PTX (the tensor-core `mma` of `flash.cu`),
/// so a malformed instruction fails here; no GPU or driver is needed.
pub fn assemble_kernels(arch: &str) -> Result<Vec<AssembledFamily>, CudaError> {
    let mut options = options(arch);
    options.push("--ptxas-options=-v".into());
    // Where a driver is installed, NVRTC hands back a cubin from the driver's compute
    // cache without running ptxas, and so without its report: always assemble afresh.
    options.push("--no-cache".into());
    Family::ALL
        .iter()
        .map(|&family| {
            let (cubin, report) = run_nvrtc(family, &options, Output::Cubin)?;
            Ok(AssembledFamily {
                file: family.file(),
                cubin: cubin.into_iter().map(|byte| byte as u8).collect(),
                report,
            })
        })
        .collect()
}

/// What an NVRTC run hands back.
#[derive(Clone, Copy)]
enum Output {
    /// PTX text (for a virtual architecture).
    Ptx,
    /// Machine code (for a real architecture).
    Cubin,
}

/// Compiles `family` with `options`, returning the requested output and NVRTC's log
/// (trimmed; empty when clean).
fn run_nvrtc(
    family: Family,
    options: &[String],
    output: Output,
) -> Result<(Vec<c_char>, String), CudaError> {
    if !nvrtc_available() {
        return Err(CudaError::NoLibrary(
            "no NVRTC found (libnvrtc.so.13): the library could not be loaded; install CUDA \
             13.0's NVRTC (e.g. the nvidia-cuda-nvrtc==13.0.* wheel) and put its directory on \
             LD_LIBRARY_PATH"
                .into(),
        ));
    }
    let file = family.file();
    let text = format!("{COMMON}\n// ---- {file} ----\n{}", family.source());
    let source = CString::new(text)
        .map_err(|_| CudaError::Compile(format!("{file}: the source holds a NUL byte")))?;
    let name = CString::new(file)
        .map_err(|_| CudaError::Compile(format!("{file}: the name holds a NUL byte")))?;
    let nvrtc = |what: &str, e: result::NvrtcError| {
        CudaError::Compile(format!("{file}: NVRTC {what} failed: {e:?}"))
    };
    let program = result::create_program(&source, Some(&name)).map_err(|e| nvrtc("create", e))?;
    // SAFETY: `program` is a live program from `create_program`; it is destroyed once,
    // below, after its log and output are copied out.
    let outcome = unsafe {
        let compiled = result::compile_program(program, options);
        let log = result::get_program_log(program)
            .map(|raw| text_of(&raw))
            .unwrap_or_default();
        let produced = match (compiled, output) {
            (Ok(()), Output::Ptx) => result::get_ptx(program),
            (Ok(()), Output::Cubin) => cubin_of(program),
            (Err(e), _) => Err(e),
        };
        let destroyed = result::destroy_program(program);
        (produced, log, destroyed)
    };
    match outcome {
        (Ok(bytes), log, Ok(())) => Ok((bytes, log.trim().to_owned())),
        (Err(e), log, _) => Err(CudaError::Compile(format!(
            "{file} with {}: {e:?}\n{}",
            options.join(" "),
            log.trim()
        ))),
        (Ok(_), _, Err(e)) => Err(nvrtc("destroy", e)),
    }
}

/// The cubin of a program compiled for a real architecture.
///
/// # Safety
/// `program` is live and compiled.
unsafe fn cubin_of(program: sys::nvrtcProgram) -> Result<Vec<c_char>, result::NvrtcError> {
    let mut size = 0usize;
    sys::nvrtcGetCUBINSize(program, &mut size).result()?;
    let mut cubin: Vec<c_char> = vec![0; size];
    sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr()).result()?;
    Ok(cubin)
}

/// A NUL-terminated C buffer as text.
fn text_of(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(text) => text.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::Family;

    /// The names of the `extern "C" __global__` functions `source` defines, in order:
    /// the identifier before the first `(` after `void` and any `__launch_bounds__(..)`.
    fn kernels_defined(source: &str) -> Vec<&str> {
        source
            .split("extern \"C\" __global__")
            .skip(1)
            .map(|rest| {
                let rest = rest.trim_start().trim_start_matches("void").trim_start();
                let rest = match rest.strip_prefix("__launch_bounds__(") {
                    Some(bounds) => &bounds[bounds.find(')').map_or(0, |end| end + 1)..],
                    None => rest,
                };
                rest[..rest.find('(').unwrap_or(rest.len())].trim()
            })
            .collect()
    }

    /// A kernel missing from `entries` is never loaded, and its first launch fails
    /// with "no kernel named ... was loaded" on a GPU only (it happened to
    /// `flash_dkv_group_sum`): every family loads exactly what its source defines.
    #[test]
    fn every_family_loads_every_kernel_its_source_defines() {
        for family in Family::ALL {
            let mut defined = kernels_defined(family.source());
            let mut loaded = family.entries().to_vec();
            assert!(!defined.is_empty(), "{} defines no kernel", family.file());
            defined.sort_unstable();
            loaded.sort_unstable();
            assert_eq!(defined, loaded, "{}", family.file());
        }
    }

    /// The reader of kernel names itself, on both declaration forms.
    #[test]
    fn kernel_names_are_read_with_and_without_launch_bounds() {
        let source = "extern \"C\" __global__ void fill(float* x) {}\n\
                      extern \"C\" __global__ void __launch_bounds__(THREADS)\nsum(float* x) {}";
        assert_eq!(kernels_defined(source), ["fill", "sum"]);
    }
}
