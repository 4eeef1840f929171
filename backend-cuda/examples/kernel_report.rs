//! Prints ptxas's resource report (registers, shared memory, spills) of every kernel, or
//! of the families whose file names contain FILTER, assembled for Hopper (`sm_90`)
//! through NVRTC: what a change to a kernel costs in registers, without a GPU. With
//! `--out DIR` it also writes each family's cubin there, for `nvdisasm` (PyPI's
//! `nvidia-cuda-nvdisasm`) to show the machine code.
//!
//! `LD_LIBRARY_PATH=<dir of libnvrtc.so.13> cargo run --release -p sage-backend-cuda
//! --example kernel_report -- [FILTER] [--out DIR]`

use std::path::PathBuf;

use sage_backend_cuda::{assemble_kernels, nvrtc_available};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !nvrtc_available() {
        return Err("NVRTC (libnvrtc.so.13) is not on the loader's path".into());
    }
    let mut filter = String::new();
    let mut out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = Some(args.next().ok_or("--out needs a directory")?.into()),
            _ => filter = arg,
        }
    }
    if let Some(dir) = &out {
        std::fs::create_dir_all(dir)?;
    }
    for family in assemble_kernels("sm_90")? {
        if !family.file.contains(filter.as_str()) {
            continue;
        }
        println!("== {} ({} bytes of cubin)", family.file, family.cubin.len());
        for line in family.report.lines() {
            if line.contains("Compiling entry")
                || line.contains("registers")
                || line.contains("spill")
            {
                println!("{}", line.trim());
            }
        }
        if let Some(dir) = &out {
            let path = dir.join(family.file.replace(".cu", ".cubin"));
            std::fs::write(&path, &family.cubin)?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}
