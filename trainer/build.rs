//! Records the git revision the trainer is built from (`SAGE_GIT_REVISION`, "unknown"
//! outside a git checkout or without git), which every run writes into its
//! `run-info.json`, and the compiler's version (`SAGE_RUSTC_VERSION`) for `sage env`.

use std::process::Command;

fn main() {
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SAGE_GIT_REVISION={revision}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let compiler = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SAGE_RUSTC_VERSION={compiler}");
    // A new commit moves HEAD's branch; rebuild to record it. (A path that does not
    // exist would rerun this script on every build.)
    println!("cargo:rerun-if-changed=build.rs");
    for path in ["../.git/HEAD", "../.git/refs/heads"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
