//! bf16 shadows of GEMM operands for the bf16 mode. A GEMM there multiplies bf16 copies
//! of its f32 operands; a weight is the same tensor, unchanged, from one GEMM to the
//! next until the optimizer (or a host write) changes it, so its copy is kept and cast
//! again only after a write, once per optimizer step rather than once per GEMM.
//!
//! The rule is conservative by construction: every tensor a kernel is handed through
//! [`Store::address`](crate::store::Store::address) counts as written and makes the
//! shadows it overlaps stale; only the GEMM's own operands (and the other reads that
//! name [`Store::address_read`](crate::store::Store::address_read)) do not. A tensor
//! is kept once it is met unchanged a second time (a weight, or an activation that
//! feeds several GEMMs, such as the normed input of q, k and v); one written between
//! its uses (an activation) keeps using the scratch copy, unless the kernel that writes
//! it writes its copy too ([`Shadows::produce`], for any tensor a GEMM has read before:
//! RMSNorm, SwiGLU, attention's output, RoPE), so its GEMMs find the copy current and
//! nothing is cast. Such a copy survives only reads that name `address_read` (the bias
//! gradient's read of the query, key and value gradients). Kept copies are bounded by a
//! budget of elements.

use std::collections::HashMap;

/// Where a tensor lies: its buffer, first element and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Span {
    pub(crate) buffer: u32,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Span {
    fn overlaps(&self, other: &Span) -> bool {
        self.buffer == other.buffer
            && self.offset < other.offset + other.len
            && other.offset < self.offset + self.len
    }
}

/// How a GEMM gets the bf16 copy of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShadowUse {
    /// The kept copy at this address matches the tensor: no cast.
    Current(u64),
    /// The kept copy at this address is stale: cast into it (it is current after).
    Refresh(u64),
    /// Met unchanged again and within the budget: allocate a copy, cast into it, and
    /// [`Shadows::hold`] it.
    Keep,
    /// Cast into the GEMM's scratch space.
    Scratch,
}

/// How a kernel about to write a whole tensor (an activation or gradient that GEMMs
/// read) gets its bf16 copy written beside it, with no cast after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyOut {
    /// Into the kept copy at this address (current once the kernel has run).
    Into(u64),
    /// Allocate a copy, have the kernel write it, and [`Shadows::hold`] it.
    Keep,
    /// No copy: no GEMM has read the tensor yet, or there is no room.
    None,
}

/// The records' flags at one moment, by buffer, in record order.
pub(crate) struct ShadowFlags(HashMap<u32, Vec<bool>>);

/// One tensor's record: its kept copy (memory and address), if any, and whether the
/// tensor is unchanged since the copy (or, without one, since it was last met).
struct Shadow<M> {
    kept: Option<(M, u64)>,
    unchanged: bool,
}

/// The shadows of a backend's tensors, by buffer; `M` is the copy's memory.
pub(crate) struct Shadows<M> {
    by_buffer: HashMap<u32, Vec<(Span, Shadow<M>)>>,
    kept_elements: usize,
    budget_elements: usize,
}

impl<M> Shadows<M> {
    /// No shadows yet; at most `budget_elements` bf16 elements kept at a time.
    pub(crate) fn new(budget_elements: usize) -> Shadows<M> {
        Shadows {
            by_buffer: HashMap::new(),
            kept_elements: 0,
            budget_elements,
        }
    }

    /// Records that `span` may be written: every shadow overlapping it goes stale.
    pub(crate) fn written(&mut self, span: Span) {
        // Every kernel's operand lookup comes here; without shadows (the f32 mode) that
        // is all it costs.
        if self.by_buffer.is_empty() {
            return;
        }
        if let Some(shadows) = self.by_buffer.get_mut(&span.buffer) {
            for (at, shadow) in shadows.iter_mut() {
                if at.overlaps(&span) {
                    shadow.unchanged = false;
                }
            }
        }
    }

    /// How a GEMM gets the bf16 copy of `span` now; the record then counts it as
    /// unchanged (the caller casts it, unless the copy is current).
    pub(crate) fn lookup(&mut self, span: Span) -> ShadowUse {
        let room = self.kept_elements + span.len <= self.budget_elements;
        let shadows = self.by_buffer.entry(span.buffer).or_default();
        let Some((_, shadow)) = shadows.iter_mut().find(|(at, _)| *at == span) else {
            shadows.push((
                span,
                Shadow {
                    kept: None,
                    unchanged: true,
                },
            ));
            return ShadowUse::Scratch;
        };
        let was_unchanged = std::mem::replace(&mut shadow.unchanged, true);
        match (&shadow.kept, was_unchanged) {
            (Some((_, address)), true) => ShadowUse::Current(*address),
            (Some((_, address)), false) => ShadowUse::Refresh(*address),
            (None, true) if room => ShadowUse::Keep,
            (None, _) => ShadowUse::Scratch,
        }
    }

    /// How the kernel about to write all of `span` (which it has just counted as
    /// [`written`](Shadows::written)) writes its copy too. Only a tensor that a GEMM has
    /// read as this very span gets one: its kept copy, else a new one within the budget.
    /// The record counts the tensor as unchanged since the copy, as the kernel leaves it.
    pub(crate) fn produce(&mut self, span: Span) -> CopyOut {
        let room = self.kept_elements + span.len <= self.budget_elements;
        let Some(shadows) = self.by_buffer.get_mut(&span.buffer) else {
            return CopyOut::None;
        };
        let Some((_, shadow)) = shadows.iter_mut().find(|(at, _)| *at == span) else {
            return CopyOut::None;
        };
        match &shadow.kept {
            Some((_, address)) => {
                shadow.unchanged = true;
                CopyOut::Into(*address)
            }
            None if room => CopyOut::Keep,
            None => CopyOut::None,
        }
    }

    /// Keeps `memory` at `address` as the current copy of `span` (after
    /// [`ShadowUse::Keep`] and the cast into it, or [`CopyOut::Keep`] and the kernel
    /// that wrote it).
    pub(crate) fn hold(&mut self, span: Span, memory: M, address: u64) {
        let shadows = self.by_buffer.entry(span.buffer).or_default();
        let record = Shadow {
            kept: Some((memory, address)),
            unchanged: true,
        };
        match shadows.iter_mut().find(|(at, _)| *at == span) {
            Some((_, shadow)) => {
                if shadow.kept.is_none() {
                    self.kept_elements += span.len;
                }
                *shadow = record;
            }
            None => {
                self.kept_elements += span.len;
                shadows.push((span, record));
            }
        }
    }

    /// Drops every shadow of `buffer` (freed), returning the kept copies' memory.
    pub(crate) fn forget(&mut self, buffer: u32) -> Vec<M> {
        let shadows = self.by_buffer.remove(&buffer).unwrap_or_default();
        shadows
            .into_iter()
            .filter_map(|(span, shadow)| {
                let (memory, _) = shadow.kept?;
                self.kept_elements -= span.len;
                Some(memory)
            })
            .collect()
    }

    /// Drops every shadow of every buffer, returning the kept copies' memory.
    pub(crate) fn clear(&mut self) -> Vec<M> {
        self.kept_elements = 0;
        self.by_buffer
            .drain()
            .flat_map(|(_, shadows)| shadows)
            .filter_map(|(_, shadow)| shadow.kept.map(|(memory, _)| memory))
            .collect()
    }

    /// Every record's flag, to put back with [`Shadows::restore`].
    pub(crate) fn flags(&self) -> ShadowFlags {
        ShadowFlags(
            self.by_buffer
                .iter()
                .map(|(&buffer, shadows)| {
                    (buffer, shadows.iter().map(|(_, s)| s.unchanged).collect())
                })
                .collect(),
        )
    }

    /// Puts back the flags of [`Shadows::flags`] and drops the records made since
    /// (appended when a tensor was looked up for the first time): a traced or abandoned
    /// step leaves the record as it found it. Those records hold no copy: a copy is
    /// only kept by a step that ran, never by one traced or captured, whose
    /// allocations are refused.
    pub(crate) fn restore(&mut self, flags: &ShadowFlags) {
        self.by_buffer.retain(|buffer, shadows| {
            let before = flags.0.get(buffer).map(Vec::as_slice).unwrap_or(&[]);
            debug_assert!(shadows[before.len().min(shadows.len())..]
                .iter()
                .all(|(_, shadow)| shadow.kept.is_none()));
            shadows.truncate(before.len());
            for ((_, shadow), &unchanged) in shadows.iter_mut().zip(before) {
                shadow.unchanged = unchanged;
            }
            !shadows.is_empty()
        });
    }

    /// bf16 elements kept.
    pub(crate) fn kept_elements(&self) -> usize {
        self.kept_elements
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(buffer: u32, offset: usize, len: usize) -> Span {
        Span {
            buffer,
            offset,
            len,
        }
    }

    #[test]
    fn a_weight_is_kept_on_its_second_use_and_cast_again_only_after_a_write() {
        let mut shadows: Shadows<&str> = Shadows::new(1000);
        let weight = span(0, 100, 50);
        assert_eq!(shadows.lookup(weight), ShadowUse::Scratch);
        assert_eq!(shadows.lookup(weight), ShadowUse::Keep);
        shadows.hold(weight, "copy", 0xa0);
        assert_eq!(shadows.lookup(weight), ShadowUse::Current(0xa0));
        assert_eq!(shadows.lookup(weight), ShadowUse::Current(0xa0));
        // Writes elsewhere, in the same buffer or another, leave it current.
        shadows.written(span(0, 150, 10));
        shadows.written(span(1, 100, 50));
        assert_eq!(shadows.lookup(weight), ShadowUse::Current(0xa0));
        // The optimizer writes the whole buffer: one refresh, then current again.
        shadows.written(span(0, 0, 10_000));
        assert_eq!(shadows.lookup(weight), ShadowUse::Refresh(0xa0));
        assert_eq!(shadows.lookup(weight), ShadowUse::Current(0xa0));
        // A write that only touches its last element stales it too.
        shadows.written(span(0, 149, 1));
        assert_eq!(shadows.lookup(weight), ShadowUse::Refresh(0xa0));
        assert_eq!(shadows.kept_elements(), 50);
    }

    #[test]
    fn a_tensor_written_between_its_uses_stays_in_scratch() {
        let mut shadows: Shadows<&str> = Shadows::new(1000);
        let activation = span(2, 0, 64);
        for _ in 0..3 {
            assert_eq!(shadows.lookup(activation), ShadowUse::Scratch);
            shadows.written(span(2, 32, 64));
        }
        assert_eq!(shadows.kept_elements(), 0);
    }

    #[test]
    fn copies_stay_within_the_budget_and_go_with_their_buffer() {
        let mut shadows: Shadows<u8> = Shadows::new(100);
        let (first, second) = (span(0, 0, 60), span(0, 60, 60));
        for (at, memory) in [(first, 1), (second, 2)] {
            assert_eq!(shadows.lookup(at), ShadowUse::Scratch);
            if shadows.lookup(at) == ShadowUse::Keep {
                shadows.hold(at, memory, 0x10);
            }
        }
        // The second would pass the budget of 100: it stays in scratch.
        assert_eq!(shadows.kept_elements(), 60);
        assert_eq!(shadows.lookup(second), ShadowUse::Scratch);
        assert_eq!(shadows.forget(0), vec![1]);
        assert_eq!(shadows.kept_elements(), 0);
        assert_eq!(shadows.lookup(first), ShadowUse::Scratch, "a fresh record");
    }

    #[test]
    fn restoring_flags_undoes_a_traced_step() {
        let mut shadows: Shadows<&str> = Shadows::new(1000);
        let (weight, activation) = (span(0, 0, 50), span(1, 0, 8));
        shadows.lookup(weight);
        assert_eq!(shadows.lookup(weight), ShadowUse::Keep);
        shadows.hold(weight, "copy", 0xa0);
        shadows.lookup(activation);
        let flags = shadows.flags();
        // A traced step: the weight written, then met; a tensor seen for the first time.
        shadows.written(span(0, 0, 10));
        assert_eq!(shadows.lookup(weight), ShadowUse::Refresh(0xa0));
        assert_eq!(shadows.lookup(span(2, 0, 4)), ShadowUse::Scratch);
        assert_eq!(shadows.lookup(activation), ShadowUse::Keep);
        shadows.restore(&flags);
        // As before the trace: the weight current, the activation met once, the new
        // tensor unknown (so met once again, not kept).
        assert_eq!(shadows.lookup(weight), ShadowUse::Current(0xa0));
        assert_eq!(shadows.lookup(span(2, 0, 4)), ShadowUse::Scratch);
        assert_eq!(shadows.lookup(activation), ShadowUse::Keep);
        assert_eq!(shadows.kept_elements(), 50);
    }

    #[test]
    fn a_kernel_writes_the_copy_of_a_tensor_a_gemm_reads_and_the_gemm_casts_nothing() {
        let mut shadows: Shadows<&str> = Shadows::new(100);
        let (activation, unread) = (span(4, 0, 64), span(4, 64, 16));
        // Never read by a GEMM: no copy is written.
        assert_eq!(shadows.produce(activation), CopyOut::None);
        // A GEMM reads it (cast into scratch): from then on the writer keeps a copy.
        assert_eq!(shadows.lookup(activation), ShadowUse::Scratch);
        shadows.written(activation);
        assert_eq!(shadows.produce(activation), CopyOut::Keep);
        shadows.hold(activation, "copy", 0xb0);
        assert_eq!(shadows.lookup(activation), ShadowUse::Current(0xb0));
        // The next write (the next layer, the next step) goes into the same copy.
        shadows.written(activation);
        assert_eq!(shadows.produce(activation), CopyOut::Into(0xb0));
        assert_eq!(shadows.lookup(activation), ShadowUse::Current(0xb0));
        // A write that does not make the copy leaves it stale: the GEMM casts again.
        shadows.written(span(4, 10, 1));
        assert_eq!(shadows.lookup(activation), ShadowUse::Refresh(0xb0));
        // Only the very span read: a part or a neighbour gets none.
        assert_eq!(shadows.produce(span(4, 0, 32)), CopyOut::None);
        assert_eq!(shadows.produce(unread), CopyOut::None);
        assert_eq!(shadows.kept_elements(), 64);
    }

    #[test]
    fn a_written_copy_stays_within_the_budget() {
        let mut shadows: Shadows<&str> = Shadows::new(100);
        let (first, second) = (span(5, 0, 60), span(6, 0, 60));
        for at in [first, second] {
            shadows.lookup(at);
            shadows.written(at);
        }
        assert_eq!(shadows.produce(first), CopyOut::Keep);
        shadows.hold(first, "copy", 0xc0);
        // 60 more would pass the budget of 100: the writer writes no copy, the GEMM casts.
        assert_eq!(shadows.produce(second), CopyOut::None);
        assert_eq!(shadows.lookup(second), ShadowUse::Scratch);
        assert_eq!(shadows.kept_elements(), 60);
    }

    #[test]
    fn clearing_returns_every_kept_copy_and_starts_afresh() {
        let mut shadows: Shadows<u8> = Shadows::new(1000);
        let spans = [span(0, 0, 10), span(0, 10, 20), span(3, 0, 30)];
        for (memory, at) in spans.iter().enumerate() {
            shadows.lookup(*at);
            assert_eq!(shadows.lookup(*at), ShadowUse::Keep);
            shadows.hold(*at, memory as u8, 0x10);
        }
        assert_eq!(shadows.kept_elements(), 60);
        let mut copies = shadows.clear();
        copies.sort();
        assert_eq!(copies, vec![0, 1, 2]);
        assert_eq!(shadows.kept_elements(), 0);
        assert_eq!(
            shadows.lookup(spans[2]),
            ShadowUse::Scratch,
            "a fresh record"
        );
    }
}
