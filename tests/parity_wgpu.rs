//! The backend parity tests for the wgpu backend against the CPU oracle, on whatever
//! adapter wgpu finds (Mesa's lavapipe in CI). Without an adapter each test says so and
//! returns; with `SAGE_REQUIRE_WGPU=1` a missing adapter fails the test instead.

use std::io::Write;
use std::sync::Once;

use sage_backend_wgpu::WgpuBackend;

/// Says once per process which adapter the tests run on, or why they are skipped.
static REPORT: Once = Once::new();

fn report(line: String) {
    REPORT.call_once(|| say(&line));
}

/// Writes `line` to the process's stderr past the test harness's output capture,
/// through a duplicate of the stderr handle, so a skip is seen even when tests pass.
fn say(line: &str) {
    #[cfg(unix)]
    let handle = std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned();
    #[cfg(windows)]
    let handle = std::os::windows::io::AsHandle::as_handle(&std::io::stderr()).try_clone_to_owned();
    #[cfg(any(unix, windows))]
    if let Ok(handle) = handle {
        let _ = writeln!(std::fs::File::from(handle), "{line}");
        return;
    }
    eprintln!("{line}");
}

/// The wgpu backend, or `None` (after saying why) when no adapter exists and
/// `SAGE_REQUIRE_WGPU` is not `1`.
fn wgpu_backend() -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(backend) => {
            report(format!(
                "wgpu parity tests run on: {}",
                backend.description()
            ));
            Some(backend)
        }
        Err(e) if std::env::var("SAGE_REQUIRE_WGPU").as_deref() == Ok("1") => {
            panic!("SAGE_REQUIRE_WGPU=1 but the wgpu backend cannot start: {e}")
        }
        Err(e) => {
            report(format!(
                "SKIPPED: wgpu parity tests, no adapter ({e}); \
                 set SAGE_REQUIRE_WGPU=1 to make this a failure"
            ));
            None
        }
    }
}

sage_e2e::backend_parity_tests!(wgpu_backend());
