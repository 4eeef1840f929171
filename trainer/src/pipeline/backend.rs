//! Running a job on the backend a run names: [`run_on_backend`] opens the backend
//! ([`Backend`], compiled in by cargo feature) in the run's [`Precision`] and hands it
//! to a [`BackendJob`], whose
//! `run` is generic over the backend, so the job is compiled once per backend. The CLI
//! and the example programs pick their backend here and nowhere else.

use sage_transformer::Kernels;

use super::PipelineError;
use crate::backend::{Backend, Precision};

/// Work that runs on any backend.
pub trait BackendJob {
    /// What the job returns.
    type Output;

    /// Runs on `kernels`; `another` opens a second instance of the same backend (a
    /// frozen reference model shares nothing mutable with the trained one).
    fn run<K: Kernels>(
        self,
        kernels: K,
        another: &dyn Fn() -> Result<K, PipelineError>,
    ) -> Result<Self::Output, PipelineError>;
}

/// Opens `backend` in `precision` and runs `job` on it; fails naming the backend when
/// this build does not have it or it cannot start (no driver, no adapter), and when it
/// has no such precision (wgpu computes in f32 alone).
pub fn run_on_backend<J: BackendJob>(
    backend: Backend,
    precision: Precision,
    job: J,
) -> Result<J::Output, PipelineError> {
    if precision != Precision::F32 && backend == Backend::Wgpu {
        return Err(PipelineError::new(
            "backend",
            format!("the {backend} backend computes in f32 only, not {precision}"),
        ));
    }
    match backend {
        #[cfg(feature = "cpu")]
        Backend::Cpu => {
            let precision = match precision {
                Precision::F32 => sage_backend_cpu::Precision::F32,
                Precision::Bf16 => sage_backend_cpu::Precision::Bf16,
            };
            if precision == sage_backend_cpu::Precision::Bf16
                && !sage_backend_cpu::CpuBackend::has_bf16_dot_instruction()
            {
                tracing::warn!(
                    "this CPU has no AVX-512 BF16: the bf16 precision rounds the products' \
                     operands and multiplies them with f32 instructions, slower than f32"
                );
            }
            let open = || Ok(sage_backend_cpu::CpuBackend::with_precision(precision));
            job.run(open()?, &open)
        }
        #[cfg(feature = "cuda")]
        Backend::Cuda => {
            let precision = match precision {
                Precision::F32 => sage_backend_cuda::Precision::F32,
                Precision::Bf16 => sage_backend_cuda::Precision::Bf16,
            };
            let open = || {
                sage_backend_cuda::CudaBackend::with_precision(precision)
                    .map_err(super::failed("backend"))
            };
            let kernels = open()?;
            tracing::info!("cuda device: {}", kernels.description());
            job.run(kernels, &open)
        }
        #[cfg(feature = "wgpu")]
        Backend::Wgpu => {
            let open = || sage_backend_wgpu::WgpuBackend::new().map_err(super::failed("backend"));
            let kernels = open()?;
            tracing::info!("wgpu adapter: {}", kernels.description());
            job.run(kernels, &open)
        }
        #[allow(unreachable_patterns)]
        other => Err(PipelineError::new(
            "backend",
            format!(
                "backend {other} is not compiled into this build (compiled: {}); rebuild \
                 with `--features {other}`",
                compiled_names()
            ),
        )),
    }
}

/// The compiled backends' names, comma-separated.
fn compiled_names() -> String {
    let names: Vec<&str> = Backend::compiled().into_iter().map(Backend::name).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::failed;
    use sage_transformer::Tensor;

    /// Writes and reads back one buffer on the backend it is given.
    struct RoundTrip;

    impl BackendJob for RoundTrip {
        type Output = Vec<f32>;

        fn run<K: Kernels>(
            self,
            mut kernels: K,
            another: &dyn Fn() -> Result<K, PipelineError>,
        ) -> Result<Vec<f32>, PipelineError> {
            another()?;
            let buffer = kernels.alloc(3).map_err(failed("test"))?;
            let tensor = Tensor::whole(buffer, 3);
            kernels
                .write(tensor, &[1.0, 2.0, 3.0])
                .map_err(failed("test"))?;
            let mut out = vec![0.0; 3];
            kernels.read(tensor, &mut out).map_err(failed("test"))?;
            Ok(out)
        }
    }

    #[test]
    fn a_job_runs_on_the_cpu_and_a_missing_backend_is_named() {
        assert_eq!(
            run_on_backend(Backend::Cpu, Precision::F32, RoundTrip).unwrap(),
            vec![1.0, 2.0, 3.0]
        );
        assert_eq!(
            run_on_backend(Backend::Cpu, Precision::Bf16, RoundTrip).unwrap(),
            vec![1.0, 2.0, 3.0]
        );
        let error = run_on_backend(Backend::Wgpu, Precision::Bf16, RoundTrip).unwrap_err();
        assert!(error.to_string().contains("f32 only, not bf16"), "{error}");
        if !Backend::Cuda.is_compiled() {
            let error = run_on_backend(Backend::Cuda, Precision::F32, RoundTrip).unwrap_err();
            assert!(
                error.to_string().contains("not compiled into this build"),
                "{error}"
            );
        }
    }
}
