//! Without a CUDA driver, opening the backend is an error that names the missing
//! library, never a panic. Where a driver is installed the test has nothing to check
//! (the parity tests cover a working device).

use sage_backend_cuda::{driver_available, CudaBackend, CudaError};

#[test]
fn opening_without_a_driver_is_a_clear_error() {
    if driver_available() {
        eprintln!("a CUDA driver is installed: nothing to check here");
        return;
    }
    let error = CudaBackend::new().expect_err("no driver, no backend");
    let message = error.to_string();
    eprintln!("CudaBackend::new() without a driver: {message}");
    assert!(matches!(error, CudaError::NoLibrary(_)), "{error:?}");
    assert!(
        message.contains("no CUDA driver found (libcuda.so)"),
        "{message}"
    );
}
