//! # sage-backend-wgpu
//!
//! The wgpu backend of the SAGE transformer: hand-written WGSL kernels for any
//! Vulkan/Metal/DX12 GPU. It implements the `Kernels` contract of `sage-core` and
//! nothing else.
//!
//! Status: arrives with the wgpu work (issue 7); this crate holds no code yet.
