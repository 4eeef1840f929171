//! What the caller and a sandbox worker process say to each other over the worker's
//! standard input and output: length-prefixed JSON frames ([`FrameWriter`],
//! [`FrameReader`]) carrying a [`Request`] to the worker or a [`Reply`] from it.
//!
//! One conversation at a time: the caller sends a request and reads replies until the
//! one that ends it. While an execution runs, the worker sends [`Reply::ApiCall`] for
//! every API call that passed the signature check and waits for [`Request::ApiResult`].

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::{Map, Value};

use super::deadline::{Deadline, POLL_SLICE};
use super::sys;
use crate::sandbox::{ApiSpec, ExecError, ExecOutcome, FunctionRef, Limits};

/// Largest frame either side accepts: code and skills are at most 64 KiB by default,
/// API arguments and results are bounded by the heap limit; anything larger is a
/// broken or hostile peer.
pub(crate) const MAX_FRAME_BYTES: usize = 256 << 20;

/// A request from the caller to the worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    /// Start a fresh session under these limits; the next execution is number
    /// `executions` and the episode has made `episode_api_calls` API calls (both 0 for a
    /// new episode). No reply.
    Reset {
        limits: Box<Limits>,
        executions: u32,
        episode_api_calls: u32,
    },
    /// Define a library skill; replied to with [`Reply::Loaded`].
    LoadSkill { source: String },
    /// Run one turn's code; replied to with any number of [`Reply::ApiCall`] and then
    /// [`Reply::Executed`]. `specs` replaces the worker's table of API signatures when
    /// the caller's host publishes a different one than the worker last saw.
    Execute {
        code: String,
        specs: Option<Vec<ApiSpec>>,
    },
    /// The answer to a [`Reply::ApiCall`]: the host's result or its error message.
    ApiResult(Result<Value, String>),
    /// Ask for a function's source; replied to with [`Reply::Source`].
    FunctionSource { function: FunctionRef },
}

/// A reply from the worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Reply {
    /// The result of [`Request::LoadSkill`].
    Loaded(Result<String, ExecError>),
    /// Agent code calls `apis.<app>.<api>` with arguments already checked against the
    /// API's signature.
    ApiCall {
        app: String,
        api: String,
        args: Map<String, Value>,
    },
    /// The execution ended; the outcome and the episode's API calls so far.
    Executed {
        outcome: Box<ExecOutcome>,
        episode_api_calls: u32,
    },
    /// The result of [`Request::FunctionSource`].
    Source(Option<String>),
}

/// Writes frames to a pipe (switched to non-blocking), each by a deadline or for ever:
/// it writes what the pipe takes and sleeps in `poll` until it takes more.
pub(crate) struct FrameWriter<W> {
    inner: W,
}

impl<W: Write + AsRawFd> FrameWriter<W> {
    /// A writer over `inner`, whose file descriptor it makes non-blocking.
    pub(crate) fn new(inner: W) -> io::Result<FrameWriter<W>> {
        sys::set_nonblocking(inner.as_raw_fd())?;
        Ok(FrameWriter { inner })
    }

    /// Writes `message` as one frame, by `deadline` at most (`None`: for ever). A
    /// message over [`MAX_FRAME_BYTES`] is refused before anything is written.
    pub(crate) fn write(
        &mut self,
        message: &impl Serialize,
        deadline: Option<&Deadline>,
    ) -> Result<(), PipeError> {
        let mut frame = vec![0u8; 4];
        serde_json::to_writer(&mut frame, message)
            .map_err(|e| PipeError::Broken(format!("a message cannot be encoded: {e}")))?;
        let len = frame.len() - 4;
        if len > MAX_FRAME_BYTES {
            return Err(PipeError::Broken(format!(
                "a message of {len} bytes is over the frame limit of {MAX_FRAME_BYTES}"
            )));
        }
        frame[..4].copy_from_slice(&(len as u32).to_le_bytes());
        let mut sent = 0;
        while sent < frame.len() {
            match self.inner.write(&frame[sent..]) {
                Ok(0) => return Err(PipeError::Closed),
                Ok(written) => sent += written,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_ready(self.inner.as_raw_fd(), Ready::Write, deadline)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Err(PipeError::Closed),
                Err(e) => return Err(PipeError::Broken(e.to_string())),
            }
        }
        Ok(())
    }
}

/// Why a frame was not read or written.
#[derive(Debug)]
pub(crate) enum PipeError {
    /// The deadline passed first.
    TimedOut,
    /// The peer closed its end (it exited).
    Closed,
    /// Reading failed or the frame was malformed.
    Broken(String),
}

impl std::fmt::Display for PipeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PipeError::TimedOut => f.write_str("the deadline passed"),
            PipeError::Closed => f.write_str("the other side closed the pipe"),
            PipeError::Broken(why) => f.write_str(why),
        }
    }
}

/// How long a reader keeps asking for data (yielding its CPU between tries) before it
/// sleeps in `poll`. A reply to an API call or an execution usually follows within
/// microseconds, while waking a sleeping process on another CPU costs tens of
/// microseconds on a virtual machine.
const SPIN: Duration = Duration::from_micros(50);

/// Bytes a reader asks the pipe for at least, per read.
const READ_BYTES: usize = 64 << 10;

/// A reader's buffer larger than this is freed once it holds nothing unread.
const KEPT_BUFFER_BYTES: usize = 1 << 20;

/// Reads frames from a pipe (switched to non-blocking), each by a deadline (the
/// caller's kill timer) or for ever: it reads what is there, keeps trying for [`SPIN`]
/// when nothing is, then sleeps until the pipe is readable.
pub(crate) struct FrameReader<R> {
    inner: R,
    /// Received bytes in `buffer[start..end]`; the bytes after `end` are zeroed room
    /// for the next reads, so every byte of a frame is zeroed once and read once.
    buffer: Vec<u8>,
    start: usize,
    end: usize,
}

impl<R: Read + AsRawFd> FrameReader<R> {
    /// A reader over `inner`, whose file descriptor it makes non-blocking.
    pub(crate) fn new(inner: R) -> io::Result<FrameReader<R>> {
        sys::set_nonblocking(inner.as_raw_fd())?;
        Ok(FrameReader {
            inner,
            buffer: Vec::new(),
            start: 0,
            end: 0,
        })
    }

    /// The next frame, decoded; waits until `deadline` at most (`None`: for ever).
    pub(crate) fn read<T: DeserializeOwned>(
        &mut self,
        deadline: Option<&Deadline>,
    ) -> Result<T, PipeError> {
        self.fill(4, deadline)?;
        let header: [u8; 4] = self.buffer[self.start..self.start + 4]
            .try_into()
            .map_err(|_| PipeError::Broken("short frame header".to_owned()))?;
        let len = u32::from_le_bytes(header) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(PipeError::Broken(format!(
                "a frame of {len} bytes is over the limit of {MAX_FRAME_BYTES}"
            )));
        }
        self.fill(4 + len, deadline)?;
        let body = &self.buffer[self.start + 4..self.start + 4 + len];
        let message = serde_json::from_slice(body)
            .map_err(|e| PipeError::Broken(format!("a malformed frame: {e}")));
        self.start += 4 + len;
        if self.start == self.end && self.buffer.len() > KEPT_BUFFER_BYTES {
            // A large frame's room is not kept for the small ones that follow.
            self.buffer = Vec::new();
            (self.start, self.end) = (0, 0);
        }
        message
    }

    /// Makes at least `needed` unread bytes available, in time linear in `needed`.
    fn fill(&mut self, needed: usize, deadline: Option<&Deadline>) -> Result<(), PipeError> {
        if self.end - self.start < needed && self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // Room for the whole frame at once, and for at least one large read.
        let room = (self.start + needed).max(self.end + READ_BYTES);
        if self.buffer.len() < room {
            self.buffer.resize(room, 0);
        }
        let mut spin_until = Instant::now() + SPIN;
        while self.end - self.start < needed {
            match self.inner.read(&mut self.buffer[self.end..]) {
                Ok(0) => return Err(PipeError::Closed),
                Ok(read) => {
                    self.end += read;
                    spin_until = Instant::now() + SPIN;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() < spin_until {
                        // Yielding rather than spinning hands the CPU to the other side
                        // when both share one (a loaded machine).
                        std::thread::yield_now();
                    } else {
                        wait_ready(self.inner.as_raw_fd(), Ready::Read, deadline)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(PipeError::Broken(e.to_string())),
            }
            // Checked after every read, so a peer that trickles cannot outlast it.
            if deadline.is_some_and(|d| d.left().is_none()) && self.end - self.start < needed {
                return Err(PipeError::TimedOut);
            }
        }
        Ok(())
    }
}

/// What [`wait_ready`] waits for.
#[derive(Clone, Copy)]
enum Ready {
    Read,
    Write,
}

/// Waits until `fd` can be read (or written) without blocking, or `deadline` passes
/// (`None`: no deadline). It sleeps at most [`POLL_SLICE`] at a time, so that the
/// deadline sees a stop of the caller as one long gap between its readings.
fn wait_ready(fd: RawFd, ready: Ready, deadline: Option<&Deadline>) -> Result<(), PipeError> {
    loop {
        let timeout_ms = match deadline {
            Some(deadline) => {
                let left = deadline.left().ok_or(PipeError::TimedOut)?;
                left.min(POLL_SLICE).as_millis().max(1) as i32
            }
            None => -1,
        };
        let waited = match ready {
            Ready::Read => sys::wait_readable(fd, timeout_ms),
            Ready::Write => sys::wait_writable(fd, timeout_ms),
        };
        match waited {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => return Err(PipeError::Broken(error.to_string())),
        }
    }
}
