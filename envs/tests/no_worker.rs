//! Secure by default: without a sandbox worker program, building an environment that
//! runs agent code fails with an error that says how to provide one, and never falls
//! back to running agent code in the caller's process. (Its own test binary: it points
//! `SAGE_SANDBOX_WORKER` at a program that does not exist.)
#![cfg(target_os = "linux")]

use std::sync::Arc;

use sage_core::Environment;
use sage_envs::environment::{EnvConfig, EnvError, WorldEnv};
use sage_envs::sandbox::{Isolation, Limits, Sandbox, WORKER_ENV};
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};

#[test]
fn without_a_worker_the_environment_refuses_and_says_how_to_provide_one() {
    std::env::set_var(WORKER_ENV, "/nonexistent/sage-sandbox-worker");
    let config = CatalogConfig {
        seeds: 1,
        iid_seeds: 1,
        ..CatalogConfig::default()
    };
    let catalog = Arc::new(Catalog::build_splits(&config, &[Split::Train]).expect("a catalog"));

    let refused = WorldEnv::new(catalog.clone(), EnvConfig::default());
    let Err(EnvError::Isolation(error)) = refused else {
        panic!("an environment without a worker was built");
    };
    for needed in [
        "/nonexistent/sage-sandbox-worker",
        "serve_worker_if_asked()",
        WORKER_ENV,
        "Isolation::InProcess",
    ] {
        assert!(
            error.message.contains(needed),
            "{needed}: {}",
            error.message
        );
    }
    let sandbox = Sandbox::with_isolation(Limits::default(), Isolation::Process);
    assert!(sandbox.is_err());

    // The explicit opt-in runs agent code in-process.
    let config = EnvConfig {
        isolation: Isolation::InProcess,
        ..EnvConfig::default()
    };
    let mut env = WorldEnv::new(catalog.clone(), config).expect("in-process");
    assert_eq!(env.isolation(), Isolation::InProcess);
    env.reset(&catalog.scenarios()[0].tasks[0].task, &[])
        .expect("reset");
    let step = env.step("```python\nprint(6 * 7)\n```").expect("step");
    assert_eq!(step.observation, "42\n");
}
