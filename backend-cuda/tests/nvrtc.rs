//! Compiles every kernel source with NVRTC for Hopper (`compute_90`), which needs no
//! GPU and no driver: only `libnvrtc.so.13` (and its builtins library beside it) on the
//! loader's path, e.g. from the `nvidia-cuda-nvrtc` wheel (see `.ci/run`). Without NVRTC
//! the test says so and passes; with `SAGE_REQUIRE_NVRTC=1` it fails instead.

use sage_backend_cuda::{assemble_kernels, compile_kernels, nvrtc_available, AssembledFamily};

/// Fails unless ptxas's report of `family` names every kernel in `entries`.
fn assert_every_entry_reported(family: &AssembledFamily, entries: &[&str]) {
    for entry in entries {
        assert!(
            family.report.contains(&format!("entry function '{entry}'")),
            "{}: ptxas did not report `{entry}`:\n{}",
            family.file,
            family.report
        );
    }
}

#[test]
fn every_kernel_compiles_for_hopper() {
    if !nvrtc_available() {
        let why = "NVRTC (libnvrtc.so.13) is not on the loader's path";
        if std::env::var("SAGE_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("SAGE_REQUIRE_NVRTC=1 but {why}");
        }
        eprintln!("SKIPPED: the NVRTC compile check: {why}; set SAGE_REQUIRE_NVRTC=1 to make this a failure");
        return;
    }
    let families = match compile_kernels("compute_90") {
        Ok(families) => families,
        Err(e) => panic!("{e}"),
    };
    for family in &families {
        assert!(
            family.ptx.contains(".entry"),
            "{}: the PTX has no kernel entry",
            family.file
        );
        assert!(
            family.log.is_empty(),
            "{}: NVRTC warned:\n{}",
            family.file,
            family.log
        );
    }
    assert_eq!(families.len(), 11, "every family compiled");
}

/// Every family assembles to Hopper machine code (NVRTC's ptxas reads the inline
/// tensor-core PTX that a compile to PTX passes through unread), and every kernel
/// keeps its values in registers: ptxas reports no spills.
#[test]
fn every_kernel_assembles_for_hopper_without_spills() {
    if !nvrtc_available() {
        return;
    }
    let families = assemble_kernels("sm_90").unwrap_or_else(|e| panic!("{e}"));
    let compiled = compile_kernels("compute_90").expect("compiles");
    for (family, entries) in families.iter().zip(compiled.iter().map(|c| c.entries)) {
        assert!(!family.cubin.is_empty(), "{}: an empty cubin", family.file);
        assert_every_entry_reported(family, entries);
        let reports = family.report.matches("bytes spill stores").count();
        let clean = family
            .report
            .matches(" 0 bytes spill stores, 0 bytes spill loads")
            .count();
        assert!(
            reports >= entries.len() && clean == reports,
            "{}: a kernel spills registers:\n{}",
            family.file,
            family.report
        );
    }
}

/// Every kernel the backend loads by name is an entry point of its family's PTX.
#[test]
fn every_loaded_kernel_is_in_the_ptx() {
    if !nvrtc_available() {
        return;
    }
    for family in compile_kernels("compute_90").expect("compiles") {
        for entry in family.entries {
            assert!(
                family.ptx.contains(&format!(".entry {entry}(")),
                "{}: no kernel `{entry}` in the PTX",
                family.file
            );
        }
    }
}

/// A second assembly in one process reports as fully as the first: where a driver is
/// installed, NVRTC would otherwise hand back the first one's cubin from the driver's
/// compute cache without running ptxas, and the report came back empty (on an H100,
/// 2026-11-26).
#[test]
fn a_repeated_assembly_still_reports_every_kernel() {
    if !nvrtc_available() {
        return;
    }
    let compiled = compile_kernels("compute_90").expect("compiles");
    for _ in 0..2 {
        let families = assemble_kernels("sm_90").unwrap_or_else(|e| panic!("{e}"));
        for (family, entries) in families.iter().zip(compiled.iter().map(|c| c.entries)) {
            assert_every_entry_reported(family, entries);
        }
    }
}
