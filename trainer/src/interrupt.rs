//! A request, from outside, that a long run stop at its next step boundary: the `sage`
//! CLI sets it on SIGINT or SIGTERM during `sage sft`, `sage train` and `sage
//! experiment`, whose SFT stages then save a checkpoint of the step just finished and
//! return, so `--resume` continues from there (an experiment's RL arm stops too, and
//! runs again whole on resume). A program that embeds the trainer can set it too ([`request_stop`]).

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a stop is requested; never cleared.
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks every run in this process to stop at its next step boundary.
pub fn request_stop() {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}
