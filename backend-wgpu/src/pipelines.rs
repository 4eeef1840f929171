//! The kernels' compute pipelines, compiled on first use: one WGSL module per kernel
//! family (the shared grid prelude in front), one bind-group layout per binding count
//! (every binding a read-write storage buffer, so one buffer may be bound several times
//! in a launch), and push constants for each kernel's offsets and sizes.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::device::{Gpu, PARAM_BYTES};
use crate::error::WgpuError;

/// A WGSL file of kernels; each holds a family's forward beside its backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    Elementwise,
    Embedding,
    Norm,
    Columns,
    Matmul,
    Rope,
    Attention,
    Swiglu,
    Logprob,
    Adamw,
}

/// The source of a family's shader file, after the grid prelude.
macro_rules! shader {
    ($file:literal) => {
        concat!(
            include_str!("shaders/grid.wgsl"),
            include_str!(concat!("shaders/", $file))
        )
    };
}

impl Family {
    /// The WGSL of the family, with the constants it shares with the other backends
    /// defined first where it needs them.
    fn source(self) -> Cow<'static, str> {
        let source = match self {
            Family::Elementwise => shader!("elementwise.wgsl"),
            Family::Embedding => shader!("embedding.wgsl"),
            Family::Norm => shader!("norm.wgsl"),
            Family::Columns => {
                return Cow::Owned(format!(
                    "const ROWS_PER_BLOCK: u32 = {}u;\n{}",
                    sage_transformer::COLUMN_SUM_ROWS,
                    shader!("columns.wgsl")
                ))
            }
            Family::Matmul => shader!("matmul.wgsl"),
            Family::Rope => shader!("rope.wgsl"),
            Family::Attention => shader!("attention.wgsl"),
            Family::Swiglu => shader!("swiglu.wgsl"),
            Family::Logprob => shader!("logprob.wgsl"),
            Family::Adamw => shader!("adamw.wgsl"),
        };
        Cow::Borrowed(source)
    }
}

/// One entry point: its file, its name, and how many storage buffers it binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Kernel {
    pub(crate) family: Family,
    pub(crate) entry: &'static str,
    pub(crate) bindings: u32,
}

/// Compiled modules, layouts and pipelines, each made once.
#[derive(Default)]
pub(crate) struct Pipelines {
    modules: HashMap<Family, wgpu::ShaderModule>,
    layouts: HashMap<u32, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>,
    pipelines: HashMap<Kernel, wgpu::ComputePipeline>,
}

impl Pipelines {
    /// The pipeline of `kernel` and the layout its bind group must follow.
    pub(crate) fn get(
        &mut self,
        gpu: &Gpu,
        kernel: Kernel,
    ) -> Result<(wgpu::ComputePipeline, wgpu::BindGroupLayout), WgpuError> {
        let device = &gpu.device;
        let (group_layout, pipeline_layout) = self
            .layouts
            .entry(kernel.bindings)
            .or_insert_with(|| layouts(device, kernel.bindings))
            .clone();
        if let Some(pipeline) = self.pipelines.get(&kernel) {
            return Ok((pipeline.clone(), group_layout));
        }
        device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .modules
            .entry(kernel.family)
            .or_insert_with(|| {
                device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(kernel.entry),
                    source: wgpu::ShaderSource::Wgsl(kernel.family.source()),
                })
            })
            .clone();
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(kernel.entry),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(error) = pollster::block_on(device.pop_error_scope()) {
            self.modules.remove(&kernel.family);
            return Err(WgpuError::Device(format!(
                "compiling kernel `{}` of {:?}: {error}",
                kernel.entry, kernel.family
            )));
        }
        self.pipelines.insert(kernel, pipeline.clone());
        Ok((pipeline, group_layout))
    }
}

/// A bind-group layout of `bindings` read-write storage buffers and the pipeline layout
/// that adds the push constants.
fn layouts(device: &wgpu::Device, bindings: u32) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..bindings)
        .map(|binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &entries,
    });
    let pipeline = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[&group],
        push_constant_ranges: &[wgpu::PushConstantRange {
            stages: wgpu::ShaderStages::COMPUTE,
            range: 0..PARAM_BYTES,
        }],
    });
    (group, pipeline)
}
