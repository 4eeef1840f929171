//! What the caller and a sandbox worker process say to each other over the worker's
//! standard input and output: length-prefixed JSON frames ([`write_frame`],
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

/// Writes `message` as one frame and flushes.
pub(crate) fn write_frame(out: &mut impl Write, message: &impl Serialize) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME_BYTES {
        return Err(io::Error::other(format!(
            "a message of {} bytes is over the frame limit of {MAX_FRAME_BYTES}",
            body.len()
        )));
    }
    out.write_all(&(body.len() as u32).to_le_bytes())?;
    out.write_all(&body)?;
    out.flush()
}

/// Why no frame came.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The deadline passed first.
    TimedOut,
    /// The peer closed its end (it exited).
    Closed,
    /// Reading failed or the frame was malformed.
    Broken(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::TimedOut => f.write_str("no message before the deadline"),
            ReadError::Closed => f.write_str("the other side closed the pipe"),
            ReadError::Broken(why) => f.write_str(why),
        }
    }
}

/// How long a reader keeps asking for data (yielding its CPU between tries) before it
/// sleeps in `poll`. A reply to an API call or an execution usually follows within
/// microseconds, while waking a sleeping process on another CPU costs tens of
/// microseconds on a virtual machine.
const SPIN: Duration = Duration::from_micros(50);

/// Reads frames from a pipe (switched to non-blocking), each by a deadline (the
/// caller's kill timer) or for ever: it reads what is there, keeps trying for [`SPIN`]
/// when nothing is, then sleeps until the pipe is readable.
pub(crate) struct FrameReader<R> {
    inner: R,
    buffer: Vec<u8>,
    start: usize,
}

impl<R: Read + AsRawFd> FrameReader<R> {
    /// A reader over `inner`, whose file descriptor it makes non-blocking.
    pub(crate) fn new(inner: R) -> io::Result<FrameReader<R>> {
        sys::set_nonblocking(inner.as_raw_fd())?;
        Ok(FrameReader {
            inner,
            buffer: Vec::new(),
            start: 0,
        })
    }

    /// The next frame, decoded; waits until `deadline` at most (`None`: for ever).
    pub(crate) fn read<T: DeserializeOwned>(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<T, ReadError> {
        self.fill(4, deadline)?;
        let header: [u8; 4] = self.buffer[self.start..self.start + 4]
            .try_into()
            .map_err(|_| ReadError::Broken("short frame header".to_owned()))?;
        let len = u32::from_le_bytes(header) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(ReadError::Broken(format!(
                "a frame of {len} bytes is over the limit of {MAX_FRAME_BYTES}"
            )));
        }
        self.fill(4 + len, deadline)?;
        let body = &self.buffer[self.start + 4..self.start + 4 + len];
        let message = serde_json::from_slice(body)
            .map_err(|e| ReadError::Broken(format!("a malformed frame: {e}")));
        self.start += 4 + len;
        message
    }

    /// Makes at least `needed` unread bytes available.
    fn fill(&mut self, needed: usize, deadline: Option<Instant>) -> Result<(), ReadError> {
        if self.buffer.len() - self.start < needed && self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let mut spin_until = Instant::now() + SPIN;
        while self.buffer.len() - self.start < needed {
            let len = self.buffer.len();
            let want = (needed - (len - self.start)).max(64 << 10);
            self.buffer.resize(len + want, 0);
            let read = self.inner.read(&mut self.buffer[len..]);
            self.buffer.truncate(len + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Err(ReadError::Closed),
                Ok(_) => spin_until = Instant::now() + SPIN,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return Err(ReadError::TimedOut);
                    }
                    if now < spin_until {
                        // Yielding rather than spinning hands the CPU to the other side
                        // when both share one (a loaded machine).
                        std::thread::yield_now();
                    } else {
                        wait_readable(self.inner.as_raw_fd(), deadline)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Broken(e.to_string())),
            }
        }
        Ok(())
    }
}

/// Waits until `fd` can be read without blocking, or `deadline` passes (`None`: no
/// deadline).
fn wait_readable(fd: RawFd, deadline: Option<Instant>) -> Result<(), ReadError> {
    loop {
        let timeout_ms = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadError::TimedOut);
                }
                left.as_millis().clamp(1, i32::MAX as u128) as i32
            }
            None => -1,
        };
        match sys::wait_readable(fd, timeout_ms) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => return Err(ReadError::Broken(error.to_string())),
        }
    }
}
