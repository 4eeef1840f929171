//! [`HostSlot`]: lends the caller's `&mut dyn ApiHost` to the interpreter for the
//! duration of one execution.
//!
//! The interpreter's state lives in a long-lived session (see `session.rs`), while the
//! host is borrowed anew by every [`Sandbox::execute`](super::Sandbox::execute) call.
//! The slot holds a lifetime-erased pointer to the host only while
//! [`HostSlot::lend`] runs, and [`HostSlot::with`] takes the pointer out of the slot
//! while using it, so there is never more than one live reference to the host.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ptr::NonNull;

use super::api::ApiHost;

/// A place where the current execution's host can be reached from built-in functions.
#[derive(Default)]
pub(crate) struct HostSlot {
    host: Cell<Option<NonNull<dyn ApiHost + 'static>>>,
}

/// Puts the slot's previous content back when dropped, also on unwinding.
struct Restore<'a> {
    slot: &'a Cell<Option<NonNull<dyn ApiHost + 'static>>>,
    previous: Option<NonNull<dyn ApiHost + 'static>>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        self.slot.set(self.previous);
    }
}

impl HostSlot {
    /// Runs `f` with `host` reachable through [`HostSlot::with`].
    pub(crate) fn lend<R>(&self, host: &mut dyn ApiHost, f: impl FnOnce() -> R) -> R {
        let pointer: NonNull<dyn ApiHost + '_> = NonNull::from(host);
        // SAFETY: only the lifetime bound of the trait object changes (same layout). The
        // pointer is removed from the slot by `Restore` before this function returns,
        // so it is never used after the borrow of `host` ends.
        let pointer: NonNull<dyn ApiHost + 'static> = unsafe { std::mem::transmute(pointer) };
        let _restore = Restore {
            slot: &self.host,
            previous: self.host.replace(Some(pointer)),
        };
        f()
    }

    /// Calls `f` with the lent host; `None` when no host is lent (or it is in use).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut dyn ApiHost) -> R) -> Option<R> {
        let pointer = self.host.take()?;
        let _restore = Restore {
            slot: &self.host,
            previous: Some(pointer),
        };
        // SAFETY: the pointer was put in the slot by `lend`, whose caller holds the
        // unique borrow of the host for as long as it is there. It has been taken out
        // of the slot, so no other reference to the host exists while `f` runs.
        let host = unsafe { &mut *pointer.as_ptr() };
        Some(f(host))
    }
}
