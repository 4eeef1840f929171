//! The command stream: every kernel launch, upload and buffer clear is recorded, in
//! call order, into one pending command encoder, which is submitted only when the host
//! needs a result back (a read, the sum of squares) or the batch grows large. A
//! training step is thus a handful of submissions. Consecutive launches share one
//! compute pass (wgpu places a barrier between dispatches that touch the same buffer);
//! the pass ends when a copy or clear must be recorded, or at submission.

use std::sync::mpsc;

use crate::device::Gpu;
use crate::error::WgpuError;
use crate::store::Window;

/// Launches recorded before the encoder is submitted without waiting for a read.
const MAX_PENDING_COMMANDS: u32 = 2048;

/// Bytes of staged uploads held before the encoder is submitted without waiting.
const MAX_STAGED_BYTES: u64 = 64 << 20;

/// Bytes one staging buffer moves; larger uploads and reads go in pieces of this size.
const TRANSFER_BYTES: usize = 64 << 20;

/// The pending encoder, its open compute pass, and the buffer reads come back through.
#[derive(Default)]
pub(crate) struct Recorder {
    /// The open compute pass of `encoder`; the encoder accepts nothing else until it ends.
    pass: Option<wgpu::ComputePass<'static>>,
    encoder: Option<wgpu::CommandEncoder>,
    commands: u32,
    staged_bytes: u64,
    /// Mappable buffer of reads, grown as needed.
    readback: Option<wgpu::Buffer>,
    /// Command buffers submitted so far.
    pub(crate) submissions: u64,
}

impl Recorder {
    /// The pending encoder, begun if there is none, with no pass open.
    fn encoder(&mut self, gpu: &Gpu) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.encoder.get_or_insert_with(|| new_encoder(gpu))
    }

    /// The open compute pass, begun if there is none.
    fn pass(&mut self, gpu: &Gpu) -> &mut wgpu::ComputePass<'static> {
        let encoder = &mut self.encoder;
        self.pass.get_or_insert_with(|| {
            encoder
                .get_or_insert_with(|| new_encoder(gpu))
                .begin_compute_pass(&wgpu::ComputePassDescriptor::default())
                .forget_lifetime()
        })
    }

    /// Counts one recorded command (and `staged` bytes of upload); submits when the
    /// batch has grown past its bounds.
    fn recorded(&mut self, gpu: &Gpu, staged: u64) -> Result<(), WgpuError> {
        self.commands += 1;
        self.staged_bytes += staged;
        if self.commands >= MAX_PENDING_COMMANDS || self.staged_bytes >= MAX_STAGED_BYTES {
            self.submit(gpu)?;
        }
        Ok(())
    }

    /// Submits the pending encoder, if any, and reports any error the device raised.
    pub(crate) fn submit(&mut self, gpu: &Gpu) -> Result<(), WgpuError> {
        self.pass = None;
        if let Some(encoder) = self.encoder.take() {
            gpu.queue.submit([encoder.finish()]);
            self.submissions += 1;
        }
        self.commands = 0;
        self.staged_bytes = 0;
        gpu.check_errors()
    }

    /// Records one launch of `pipeline` over `grid` workgroups with `windows` bound in
    /// order and `params` as push constants.
    pub(crate) fn launch(
        &mut self,
        gpu: &Gpu,
        pipeline: &wgpu::ComputePipeline,
        layout: &wgpu::BindGroupLayout,
        windows: &[Window],
        params: &[u32],
        grid: [u32; 3],
    ) -> Result<(), WgpuError> {
        let entries: Vec<wgpu::BindGroupEntry> = windows
            .iter()
            .enumerate()
            .map(|(i, w)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &w.buffer,
                    offset: w.offset,
                    size: wgpu::BufferSize::new(w.size),
                }),
            })
            .collect();
        let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout,
            entries: &entries,
        });
        let pass = self.pass(gpu);
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.set_push_constants(0, bytemuck::cast_slice(params));
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        self.recorded(gpu, 0)
    }

    /// Records zero-filling the whole of `buffer`.
    pub(crate) fn clear(&mut self, gpu: &Gpu, buffer: &wgpu::Buffer) -> Result<(), WgpuError> {
        self.encoder(gpu).clear_buffer(buffer, 0, None);
        self.recorded(gpu, 0)
    }

    /// Records copying `data` into `buffer` at byte `offset`, through staging buffers of
    /// at most [`TRANSFER_BYTES`], so that it lands after every command recorded before it.
    pub(crate) fn upload(
        &mut self,
        gpu: &Gpu,
        buffer: &wgpu::Buffer,
        offset: u64,
        data: &[u8],
    ) -> Result<(), WgpuError> {
        for (i, piece) in data.chunks(TRANSFER_BYTES).enumerate() {
            let bytes = piece.len() as u64;
            let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes,
                usage: wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            });
            staging
                .slice(..)
                .get_mapped_range_mut()
                .copy_from_slice(piece);
            staging.unmap();
            let at = offset + (i * TRANSFER_BYTES) as u64;
            self.encoder(gpu)
                .copy_buffer_to_buffer(&staging, 0, buffer, at, bytes);
            self.recorded(gpu, bytes)?;
        }
        Ok(())
    }

    /// Fills `out` from `buffer` at byte `offset`: submits everything pending and waits
    /// for it, reading back through a mappable buffer of at most [`TRANSFER_BYTES`].
    pub(crate) fn download(
        &mut self,
        gpu: &Gpu,
        buffer: &wgpu::Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), WgpuError> {
        for (i, piece) in out.chunks_mut(TRANSFER_BYTES).enumerate() {
            let bytes = piece.len() as u64;
            let mapped = bytes.next_multiple_of(wgpu::MAP_ALIGNMENT);
            let readback = match self.readback.take() {
                Some(readback) if readback.size() >= mapped => readback,
                _ => gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("readback"),
                    size: mapped.next_power_of_two(),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
            };
            let at = offset + (i * TRANSFER_BYTES) as u64;
            self.encoder(gpu)
                .copy_buffer_to_buffer(buffer, at, &readback, 0, bytes);
            self.submit(gpu)?;
            let (sender, receiver) = mpsc::channel();
            readback.map_async(wgpu::MapMode::Read, 0..mapped, move |result| {
                // The receiver waits below; if it is gone there is no one to tell.
                let _ = sender.send(result);
            });
            gpu.device
                .poll(wgpu::PollType::Wait)
                .map_err(|e| WgpuError::Device(format!("waiting for a read: {e}")))?;
            receiver
                .recv()
                .map_err(|_| WgpuError::Device("a read never completed".into()))?
                .map_err(|e| WgpuError::Device(format!("mapping a read: {e}")))?;
            piece.copy_from_slice(&readback.slice(0..bytes).get_mapped_range());
            readback.unmap();
            self.readback = Some(readback);
        }
        gpu.check_errors()
    }
}

/// A new command encoder.
fn new_encoder(gpu: &Gpu) -> wgpu::CommandEncoder {
    gpu.device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
}
