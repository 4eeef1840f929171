//! `optimizer.bin`: an [`AdamWState`] on disk, little-endian throughout.
//!
//! ```text
//! offset      size    field
//! 0           8       magic "SAGEADAM"
//! 8           4       format version (u32, 1)
//! 12          4       optimizer step (u32)
//! 16          8       values per moment, n (u64)
//! 24          4       config length in bytes, c (u32)
//! 28          c       the AdamWConfig as JSON
//! 28+c        4n      first moments (f32)
//! 28+c+4n     4n      second moments (f32)
//! 28+c+8n     8       FNV-1a 64 checksum of every byte before it (u64)
//! ```
//!
//! The file's length must be exactly what the header announces, so truncation is
//! caught before any moment is read (and a corrupt length cannot cause a huge
//! allocation); the checksum catches corrupted bytes.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::optim::{AdamWConfig, AdamWState};

use super::error::CheckpointError;

/// The first bytes of every optimizer state file.
const MAGIC: &[u8; 8] = b"SAGEADAM";
/// The layout version this code writes and reads.
const FORMAT_VERSION: u32 = 1;
/// Bytes before the config: magic, version, step, moment length, config length.
const HEADER_LEN: u64 = 28;
/// Bytes of the trailing checksum.
const CHECKSUM_LEN: u64 = 8;
/// Moment values converted per buffered write or read.
const CHUNK_VALUES: usize = 1 << 14;

/// A running FNV-1a 64 hash.
struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Fnv1a {
        Fnv1a(Self::OFFSET_BASIS)
    }

    fn update(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(Self::PRIME);
        }
    }
}

/// A writer that hashes what passes through it.
struct HashingWriter<W> {
    inner: W,
    hash: Fnv1a,
}

impl<W: Write> HashingWriter<W> {
    fn write_hashed(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hash.update(bytes);
        self.inner.write_all(bytes)
    }
}

/// A reader that hashes what passes through it.
struct HashingReader<R> {
    inner: R,
    hash: Fnv1a,
}

impl<R: Read> HashingReader<R> {
    fn read_hashed(&mut self, bytes: &mut [u8]) -> io::Result<()> {
        self.inner.read_exact(bytes)?;
        self.hash.update(bytes);
        Ok(())
    }
}

/// Writes `state` to `path` (created or truncated) and syncs it to disk.
pub(super) fn write(path: &Path, state: &AdamWState) -> Result<(), CheckpointError> {
    let io_error = |e| CheckpointError::io("cannot write", path, e);
    let config = serde_json::to_vec(&state.config).map_err(|e| CheckpointError::json(path, e))?;
    let config_len = u32::try_from(config.len())
        .map_err(|_| CheckpointError::corrupt(path, "the optimizer config is over 4 GiB"))?;
    let file = File::create(path).map_err(io_error)?;
    let mut out = HashingWriter {
        inner: BufWriter::new(file),
        hash: Fnv1a::new(),
    };
    let mut header = Vec::with_capacity(HEADER_LEN as usize);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&state.step.to_le_bytes());
    header.extend_from_slice(&(state.m.len() as u64).to_le_bytes());
    header.extend_from_slice(&config_len.to_le_bytes());
    out.write_hashed(&header).map_err(io_error)?;
    out.write_hashed(&config).map_err(io_error)?;
    let mut bytes = Vec::with_capacity(4 * CHUNK_VALUES);
    for moment in [&state.m, &state.v] {
        for chunk in moment.chunks(CHUNK_VALUES) {
            bytes.clear();
            bytes.extend(chunk.iter().flat_map(|value| value.to_le_bytes()));
            out.write_hashed(&bytes).map_err(io_error)?;
        }
    }
    let checksum = out.hash.0.to_le_bytes();
    out.inner.write_all(&checksum).map_err(io_error)?;
    let file = out
        .inner
        .into_inner()
        .map_err(|e| io_error(e.into_error()))?;
    file.sync_all()
        .map_err(|e| CheckpointError::io("cannot sync", path, e))
}

/// Reads the optimizer state of `path`, checking its length, format and checksum.
pub(super) fn read(path: &Path) -> Result<AdamWState, CheckpointError> {
    let read_error = |e| CheckpointError::io("cannot read", path, e);
    let file = File::open(path).map_err(read_error)?;
    let actual_len = file.metadata().map_err(read_error)?.len();
    if actual_len < HEADER_LEN {
        return Err(CheckpointError::corrupt(
            path,
            format_args!(
                "truncated: {actual_len} bytes, shorter than the {HEADER_LEN}-byte header"
            ),
        ));
    }
    let mut input = HashingReader {
        inner: BufReader::new(file),
        hash: Fnv1a::new(),
    };
    let mut header = [0u8; HEADER_LEN as usize];
    input.read_hashed(&mut header).map_err(read_error)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(CheckpointError::corrupt(
            path,
            "it does not start with \"SAGEADAM\"",
        ));
    }
    let version = u32::from_le_bytes(array_at(rest, 0));
    if version != FORMAT_VERSION {
        return Err(CheckpointError::corrupt(
            path,
            format_args!("format version {version}; this build reads version {FORMAT_VERSION}"),
        ));
    }
    let step = u32::from_le_bytes(array_at(rest, 4));
    let moment_len = u64::from_le_bytes(array_at(rest, 8));
    let config_len = u32::from_le_bytes(array_at(rest, 16));
    let expected_len = moment_len
        .checked_mul(8)
        .and_then(|moments| moments.checked_add(HEADER_LEN + CHECKSUM_LEN))
        .and_then(|len| len.checked_add(u64::from(config_len)));
    match expected_len {
        Some(expected) if expected == actual_len => {}
        Some(expected) if expected > actual_len => {
            return Err(CheckpointError::corrupt(
                path,
                format_args!(
                    "truncated: {actual_len} bytes, the header announces {expected} ({moment_len} \
                     values per moment)"
                ),
            ))
        }
        Some(expected) => {
            return Err(CheckpointError::corrupt(
                path,
                format_args!(
                    "{} unexpected bytes after the {expected} the header announces",
                    actual_len - expected
                ),
            ))
        }
        None => {
            return Err(CheckpointError::corrupt(
                path,
                format_args!("the header announces an impossible size ({moment_len} values)"),
            ))
        }
    }
    // The length check above bounds both sizes by the file's length.
    let mut config = vec![0u8; config_len as usize];
    input.read_hashed(&mut config).map_err(read_error)?;
    let m = read_moment(&mut input, moment_len as usize).map_err(read_error)?;
    let v = read_moment(&mut input, moment_len as usize).map_err(read_error)?;
    let computed = input.hash.0;
    let mut stored = [0u8; CHECKSUM_LEN as usize];
    input.inner.read_exact(&mut stored).map_err(read_error)?;
    if u64::from_le_bytes(stored) != computed {
        return Err(CheckpointError::corrupt(
            path,
            "checksum mismatch: the file was modified or damaged",
        ));
    }
    let config: AdamWConfig = serde_json::from_slice(&config)
        .map_err(|e| CheckpointError::corrupt(path, format_args!("optimizer config: {e}")))?;
    Ok(AdamWState { config, step, m, v })
}

/// The `N` bytes at `offset` of the fixed-size header `bytes`.
fn array_at<const N: usize>(bytes: &[u8], offset: usize) -> [u8; N] {
    let mut array = [0u8; N];
    array.copy_from_slice(&bytes[offset..offset + N]);
    array
}

/// Reads `len` little-endian f32 values.
fn read_moment<R: Read>(input: &mut HashingReader<R>, len: usize) -> io::Result<Vec<f32>> {
    let mut values = Vec::with_capacity(len);
    let mut bytes = vec![0u8; 4 * CHUNK_VALUES];
    while values.len() < len {
        let count = (len - values.len()).min(CHUNK_VALUES);
        let chunk = &mut bytes[..4 * count];
        input.read_hashed(chunk)?;
        values.extend(
            chunk
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
    }
    Ok(values)
}
