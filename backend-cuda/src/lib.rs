//! # sage-backend-cuda
//!
//! The CUDA backend of the SAGE transformer: kernels compiled at run time with NVRTC,
//! GEMM through cuBLAS, bf16 mixed precision. It implements the `Kernels` contract of
//! `sage-core` and nothing else.
//!
//! Status: arrives with the CUDA work (issue 8); this crate holds no code yet.
