//! The backend parity tests run CPU against CPU: a sanity check of the tests
//! themselves (every tolerance must hold with zero difference).

sage_e2e::backend_parity_tests!(Some(sage_backend_cpu::CpuBackend::new()));
