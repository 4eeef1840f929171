//! [`Backend`]: the compute backends a run can name (`[run] backend`, `--backend`), and
//! which of them cargo features compiled into this build; [`Precision`]: the arithmetic
//! a backend runs in (`[run] precision`, `--precision`).

use sage_envs::names::Named;

/// A compute backend, named `cpu`, `cuda` or `wgpu` in settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The CPU (feature `cpu`, on by default): the reference every backend is tested against.
    #[default]
    Cpu,
    /// NVIDIA GPUs through CUDA (feature `cuda`).
    Cuda,
    /// Vulkan, Metal or DX12 GPUs through wgpu (feature `wgpu`).
    Wgpu,
}

impl Backend {
    /// `cpu`, `cuda` or `wgpu`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
            Backend::Wgpu => "wgpu",
        }
    }

    /// Whether this build has the backend (its cargo feature was on).
    pub fn is_compiled(self) -> bool {
        match self {
            Backend::Cpu => cfg!(feature = "cpu"),
            Backend::Cuda => cfg!(feature = "cuda"),
            Backend::Wgpu => cfg!(feature = "wgpu"),
        }
    }

    /// The backends compiled into this build.
    pub fn compiled() -> Vec<Backend> {
        <Backend as Named>::ALL
            .iter()
            .copied()
            .filter(|b| b.is_compiled())
            .collect()
    }
}

impl Named for Backend {
    const WHAT: &'static str = "backend";
    const ALL: &'static [Backend] = &[Backend::Cpu, Backend::Cuda, Backend::Wgpu];
    fn name(self) -> &'static str {
        Backend::name(self)
    }
}

sage_envs::impl_named_text!(Backend);

/// The arithmetic of a run's GEMMs and training attention, named `f32` or `bf16` in
/// settings. The CUDA and CPU backends have a bf16 mode; wgpu computes in f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 everywhere: the reference arithmetic, the default.
    #[default]
    F32,
    /// bf16 operands with f32 accumulation: for the GEMMs and training attention on
    /// tensor cores (CUDA), for the products of more than 32 rows (CPU: with AVX-512
    /// BF16's dot instruction where the CPU has it); weights, gradients and optimizer
    /// state stay f32.
    Bf16,
}

impl Named for Precision {
    const WHAT: &'static str = "precision";
    const ALL: &'static [Precision] = &[Precision::F32, Precision::Bf16];
    fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

sage_envs::impl_named_text!(Precision);
