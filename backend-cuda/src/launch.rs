//! Launching a kernel: the compiled functions by name, argument lists of device
//! addresses and scalars, and grid sizes. This is the one place kernels are launched,
//! and so the one `unsafe` launch in the crate.

use std::collections::HashMap;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

use crate::compile::{compiled, Family};
use crate::device::Gpu;
use crate::error::CudaError;
use crate::CudaBackend;

/// Threads per block of the elementwise kernels.
pub(crate) const THREADS: u32 = 256;
/// Most blocks a grid-stride kernel is launched with.
const MAX_BLOCKS: u64 = 65_535;

/// One kernel argument: a device address or a scalar, passed by value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg {
    /// A device pointer (`float*`, `const u32*`, ...).
    Ptr(u64),
    /// A `u32` scalar.
    U32(u32),
    /// A `u64` scalar (element counts of whole tensors).
    U64(u64),
    /// An `f32` scalar.
    F32(f32),
}

impl Arg {
    /// The argument's bits as one word: a kernel's signature fixes the kind of each
    /// argument, so the bits alone tell two launches of one kernel apart.
    fn word(&self) -> u64 {
        match *self {
            Arg::Ptr(value) | Arg::U64(value) => value,
            Arg::U32(value) => u64::from(value),
            Arg::F32(value) => u64::from(value.to_bits()),
        }
    }
}

/// The kernels of every family, loaded into the device's context.
pub(crate) struct Functions {
    by_name: HashMap<&'static str, CudaFunction>,
}

impl Functions {
    /// Compiles (through the per-process cache) and loads every family.
    pub(crate) fn load(gpu: &Gpu) -> Result<Functions, CudaError> {
        let mut by_name = HashMap::new();
        for family in Family::ALL {
            let compiled = compiled(family, &gpu.arch)?;
            let module = gpu.ctx.load_module(Ptx::from_src(compiled.ptx))?;
            for &entry in family.entries() {
                by_name.insert(entry, module.load_function(entry)?);
            }
        }
        Ok(Functions { by_name })
    }

    /// The function named `entry`.
    fn get(&self, entry: &str) -> Result<&CudaFunction, CudaError> {
        self.by_name
            .get(entry)
            .ok_or_else(|| CudaError::Driver(format!("no kernel named `{entry}` was loaded")))
    }
}

/// The entry that takes bf16 operands (`bf16_form`) or f32 ones (`f32_form`): a kernel
/// with a bf16 KV cache or bf16 frozen weights has a `_bf16` form.
pub(crate) fn kernel_for(
    bf16: bool,
    f32_form: &'static str,
    bf16_form: &'static str,
) -> &'static str {
    if bf16 {
        bf16_form
    } else {
        f32_form
    }
}

/// Blocks of [`THREADS`] for a grid-stride loop over `n` elements (at least one).
pub(crate) fn blocks_for(n: u64) -> u32 {
    n.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS) as u32
}

/// Blocks for a kernel that loops over `tasks` rows with one block each.
pub(crate) fn blocks_per_task(tasks: usize) -> u32 {
    (tasks as u64).clamp(1, MAX_BLOCKS) as u32
}

impl CudaBackend {
    /// Queues kernel `entry` on the stream with `grid` blocks of `block` threads (while
    /// a step is traced, only writes it down: `record`). Callers pass addresses from
    /// the store or the scratch slots, which are live and hold the ranges the kernel
    /// touches (each op checks the sizes first).
    pub(crate) fn launch(
        &self,
        entry: &str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        let function = self.functions.get(entry)?;
        let words = [grid.0, grid.1, block].map(u64::from);
        let words = words.into_iter().chain(args.iter().map(Arg::word));
        if self.gpu.recorder.skips(entry, words) {
            return Ok(());
        }
        let mut builder = self.gpu.stream.launch_builder(function);
        for arg in args {
            match arg {
                Arg::Ptr(value) | Arg::U64(value) => builder.arg(value),
                Arg::U32(value) => builder.arg(value),
                Arg::F32(value) => builder.arg(value),
            };
        }
        let config = LaunchConfig {
            grid_dim: (grid.0, grid.1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument list matches the kernel's parameters (each op passes
        // them in the order of its `.cu` signature); every pointer is a live device
        // address whose range was checked against the sizes the kernel is given.
        unsafe { builder.launch(config) }.map_err(|e| self.gpu.recorder.failed(entry, e))?;
        Ok(())
    }
}
