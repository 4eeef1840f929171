//! The operating-system calls the worker processes need, as safe functions: the only
//! `unsafe` code of process isolation (the other is `host_slot`). Each call passes
//! structs it owns to one libc function and checks its result.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

/// CPU time (user + system) the calling process has used, in whole seconds rounded up.
pub(crate) fn cpu_seconds_used() -> io::Result<u64> {
    // SAFETY: getrusage writes one rusage struct into the zeroed value it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((usage.ru_utime.tv_sec + usage.ru_stime.tv_sec).max(0) as u64 + 1)
}

/// Makes the calling process ignore SIGINT: a worker lives as long as its parent keeps
/// its standard input open, so a Ctrl-C at the terminal (sent to the whole process
/// group) reaches the parent, which stops at a step boundary, without killing the
/// workers of the step it is finishing.
pub(crate) fn ignore_interrupts() -> io::Result<()> {
    // SAFETY: installs the predefined "ignore" disposition; no handler code runs.
    if unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A resource [`set_soft_limit`] can limit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Resource {
    /// The address space, in bytes.
    AddressSpace,
    /// CPU time, in seconds.
    CpuTime,
}

/// Sets the soft limit of `resource` to `value`, capped at the hard limit (which stays).
pub(crate) fn set_soft_limit(resource: Resource, value: u64) -> io::Result<()> {
    let resource = match resource {
        Resource::AddressSpace => libc::RLIMIT_AS,
        Resource::CpuTime => libc::RLIMIT_CPU,
    };
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit / setrlimit read or write one rlimit struct we own.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    limit.rlim_cur = value.min(limit.rlim_max);
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Switches the file descriptor `fd` (which the caller owns) to non-blocking reads and
/// writes.
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a file descriptor the caller owns, reading and setting flags only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `fd` is readable or `timeout_ms` milliseconds have passed (-1: no
/// timeout). `Ok(true)`: readable (or closed); `Ok(false)`: timed out or interrupted by
/// a signal.
pub(crate) fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, timeout_ms)
}

/// Waits until `fd` is writable or `timeout_ms` milliseconds have passed (-1: no
/// timeout). `Ok(true)`: writable (or closed); `Ok(false)`: timed out or interrupted.
pub(crate) fn wait_writable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    wait_for(fd, libc::POLLOUT, timeout_ms)
}

/// `poll` on one file descriptor for `events`.
fn wait_for(fd: RawFd, events: libc::c_short, timeout_ms: i32) -> io::Result<bool> {
    let mut poll_fd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: `poll_fd` is a valid, initialised pollfd array of length 1 that lives
    // for the duration of the call.
    let ready = unsafe { libc::poll(&mut poll_fd, 1, timeout_ms) };
    if ready > 0 {
        return Ok(true);
    }
    if ready < 0 {
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Ok(false)
}
