//! The device: the CUDA context and the one stream every call runs on (with the
//! recorder that says whether its calls are queued, traced or captured), the cuBLAS
//! handle bound to that stream and its workspace, and what the device is (name, compute capability,
//! memory). Opening it checks first that the driver and cuBLAS libraries can be loaded,
//! so that a missing library is an error rather than cudarc's panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{result as driver_result, CudaContext, CudaSlice, CudaStream, DevicePtr};

use crate::error::CudaError;
use crate::record::Recorder;

/// Bytes of cuBLAS's workspace, set once so that a GEMM captured into a graph does not
/// allocate (32 MiB, what NVIDIA advises for Hopper).
const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// A CUDA device ready for work.
pub(crate) struct Gpu {
    /// The primary context of the device.
    pub(crate) ctx: Arc<CudaContext>,
    /// The stream every kernel, copy and GEMM is ordered on.
    pub(crate) stream: Arc<CudaStream>,
    /// cuBLAS, on `stream`.
    pub(crate) blas: CudaBlas,
    /// cuBLAS's workspace (it outlives the handle's last GEMM: freed after it on the
    /// stream).
    _blas_workspace: CudaSlice<u8>,
    /// Whether the stream's calls are queued, traced or captured (`record`).
    pub(crate) recorder: Recorder,
    /// The NVRTC target: `compute_XY` for compute capability X.Y.
    pub(crate) arch: String,
    /// Device name, compute capability, memory and driver version, in words.
    pub(crate) description: String,
    /// Bytes of device memory.
    pub(crate) total_memory: usize,
}

/// Starts an attached profiler's recording (Nsight Compute run with
/// `--profile-from-start off`), so that a benchmark's profile can leave its warm-up out;
/// without a profiler it does nothing. It holds the device's context rather than the
/// backend, so a benchmark can call it while the backend is lent to the measurement.
#[derive(Clone)]
pub struct ProfilerStart(pub(crate) Arc<CudaContext>);

impl ProfilerStart {
    /// Records from here on.
    pub fn start(&self) -> Result<(), CudaError> {
        self.0.bind_to_thread()?;
        cudarc::driver::profiler_start()?;
        Ok(())
    }
}

/// Runs `f`, turning a panic inside cudarc (its loaders panic when a library or symbol
/// is missing) into [`CudaError::NoLibrary`].
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "unknown panic".to_owned());
        CudaError::NoLibrary(format!("{what}: {message}"))
    })
}

/// Fails with [`CudaError::NoLibrary`] naming `what` unless `present` finds it.
fn require(what: &str, present: unsafe fn() -> bool) -> Result<(), CudaError> {
    // SAFETY: the check only loads the library and resolves its symbols.
    if guarded(what, || unsafe { present() })? {
        Ok(())
    } else {
        Err(CudaError::NoLibrary(format!(
            "{what}: the library could not be loaded; install the NVIDIA driver (580 or later) \
             and the CUDA 13 libraries, or put their directory on LD_LIBRARY_PATH"
        )))
    }
}

/// True when the CUDA driver library (`libcuda.so.1`) can be loaded; says nothing
/// about whether a GPU is present. Never panics.
pub fn driver_available() -> bool {
    // SAFETY: the check only loads the library and resolves its symbols.
    guarded("the CUDA driver", || unsafe {
        cudarc::driver::sys::is_culib_present()
    })
    .unwrap_or(false)
}

impl Gpu {
    /// Opens device `ordinal`: checks the libraries, creates the context (with
    /// cudarc's per-buffer event tracking off: one stream orders everything), a stream
    /// and a cuBLAS handle in default (exact f32) math mode.
    pub(crate) fn new(ordinal: usize) -> Result<Gpu, CudaError> {
        require(
            "no CUDA driver found (libcuda.so)",
            cudarc::driver::sys::is_culib_present,
        )?;
        let ctx = guarded("the CUDA driver", || CudaContext::new(ordinal))?
            .map_err(|e| CudaError::NoDevice(format!("device {ordinal}: {e}")))?;
        // SAFETY: set before any buffer exists; the backend uses one stream only.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        require(
            "no cuBLAS found (libcublas.so.13)",
            cudarc::cublas::sys::is_culib_present,
        )?;
        let blas = guarded("cuBLAS", || CudaBlas::new(stream.clone()))??;
        // SAFETY: a live handle; default math mode keeps f32 GEMMs in f32 (no TF32).
        unsafe {
            blas_sys::cublasSetMathMode(*blas.handle(), blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
        }
        .result()?;
        let blas_workspace = stream.alloc_zeros::<u8>(BLAS_WORKSPACE_BYTES)?;
        {
            let (address, _record) = blas_workspace.device_ptr(&stream);
            // SAFETY: a live handle and a live allocation of BLAS_WORKSPACE_BYTES, kept
            // as long as the handle.
            unsafe {
                blas_sys::cublasSetWorkspace_v2(
                    *blas.handle(),
                    address as *mut std::ffi::c_void,
                    BLAS_WORKSPACE_BYTES,
                )
            }
            .result()?;
        }
        let (major, minor) = ctx.compute_capability()?;
        let name = ctx.name()?;
        // SAFETY: a valid device handle from the live context.
        let total_memory = unsafe { driver_result::device::total_mem(ctx.cu_device()) }?;
        let mut driver = 0;
        // SAFETY: writes one int.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) }.result()?;
        Ok(Gpu {
            ctx,
            stream,
            blas,
            _blas_workspace: blas_workspace,
            recorder: Recorder::default(),
            arch: format!("compute_{major}{minor}"),
            description: format!(
                "{name} (compute capability {major}.{minor}, {:.1} GiB, CUDA driver {}.{})",
                total_memory as f64 / (1u64 << 30) as f64,
                driver / 1000,
                (driver % 1000) / 10
            ),
            total_memory,
        })
    }

    /// Waits for every queued kernel and copy.
    pub(crate) fn synchronize(&self) -> Result<(), CudaError> {
        Ok(self.stream.synchronize()?)
    }
}
