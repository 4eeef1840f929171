//! The sandbox worker program: started by a process-isolated `Sandbox` with
//! `--sage-sandbox-worker ADDRESS_SPACE_BYTES`, it runs agent code for its parent over
//! its standard input and output. Programs that call
//! `sage_envs::sandbox::serve_worker_if_asked` first thing in `main` serve as their own
//! workers; this binary is for the others (test binaries, embedders).
#![forbid(unsafe_code)]

fn main() {
    #[cfg(target_os = "linux")]
    {
        sage_envs::sandbox::serve_worker_if_asked();
        eprintln!(
            "sage-sandbox-worker is started by the sandbox, as `sage-sandbox-worker {} ADDRESS_SPACE_BYTES`",
            sage_envs::sandbox::WORKER_ARG
        );
        std::process::exit(2);
    }
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("sage-sandbox-worker: process isolation is implemented for Linux only");
        std::process::exit(2);
    }
}
