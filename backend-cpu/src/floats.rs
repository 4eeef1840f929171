//! The host memory of the store's f32 buffers. A buffer of at least [`HUGE_PAGE_BYTES`]
//! on Linux is an anonymous mapping the kernel is asked to back with 2 MiB pages
//! (`MADV_HUGEPAGE`, which the usual `madvise` setting of transparent huge pages waits
//! for): a GEMM's rows of `c` and its operands then share a few TLB entries instead of
//! one per 4 KiB, which gave SmolLM2's training step 1.01-1.08x on 2 Zen 5 cores, faster
//! in each of four pairs (BENCHMARKS.md, "Huge pages"). Smaller buffers, and every buffer
//! elsewhere, are vectors on the heap. Both start zeroed, from pages the kernel zeroes
//! when each is first touched.

use std::ops::{Deref, DerefMut};

use crate::error::CpuError;
use crate::store::zeroed;

/// The smallest buffer mapped for huge pages: one 2 MiB page.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// A zero-filled run of f32 values.
pub(crate) enum Floats {
    /// A vector on the heap.
    Heap(Vec<f32>),
    /// `len` values at the start of an anonymous mapping advised for huge pages.
    #[cfg(target_os = "linux")]
    Mapped { map: memmap2::MmapMut, len: usize },
}

impl Floats {
    /// `len` zeros, mapped for huge pages where they fill at least one (Linux); on the
    /// heap elsewhere, or where the mapping or the advice is refused.
    pub(crate) fn zeroed(len: usize) -> Result<Floats, CpuError> {
        #[cfg(target_os = "linux")]
        if len.saturating_mul(size_of::<f32>()) >= HUGE_PAGE_BYTES {
            if let Some(mapped) = Floats::mapped(len) {
                return Ok(mapped);
            }
        }
        Ok(Floats::Heap(zeroed(len)?))
    }

    /// An anonymous mapping of `len` floats advised for huge pages, before any page of
    /// it is touched; None where either step is refused.
    #[cfg(target_os = "linux")]
    fn mapped(len: usize) -> Option<Floats> {
        let map = memmap2::MmapOptions::new()
            .len(len.checked_mul(size_of::<f32>())?)
            .map_anon()
            .ok()?;
        map.advise(memmap2::Advice::HugePage).ok()?;
        Some(Floats::Mapped { map, len })
    }

    /// Whether the values lie in a mapping advised for huge pages.
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        match self {
            Floats::Heap(_) => false,
            #[cfg(target_os = "linux")]
            Floats::Mapped { .. } => true,
        }
    }
}

impl Deref for Floats {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            Floats::Heap(values) => values,
            // A mapping starts on a page, so its bytes are aligned for f32.
            #[cfg(target_os = "linux")]
            Floats::Mapped { map, len } => &bytemuck::cast_slice(map)[..*len],
        }
    }
}

impl DerefMut for Floats {
    fn deref_mut(&mut self) -> &mut [f32] {
        match self {
            Floats::Heap(values) => values,
            #[cfg(target_os = "linux")]
            Floats::Mapped { map, len } => &mut bytemuck::cast_slice_mut(map)[..*len],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer of a huge page or more is mapped (on Linux with transparent huge pages;
    /// a kernel without them refuses the advice), one below it is not; both start zeroed
    /// and hold what is written, at their exact lengths.
    #[test]
    fn large_buffers_are_mapped_and_all_start_zeroed() {
        let huge_pages = cfg!(target_os = "linux")
            && std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
        let large = HUGE_PAGE_BYTES / size_of::<f32>() + 3;
        for (len, mapped) in [(large, huge_pages), (1000, false)] {
            let mut floats = Floats::zeroed(len).expect("allocation");
            assert_eq!(floats.is_mapped(), mapped, "{len} floats");
            assert_eq!(floats.len(), len);
            assert!(floats.iter().all(|&x| x == 0.0), "{len} floats not zeroed");
            floats[len - 1] = 2.5;
            floats[0] = -1.0;
            assert_eq!((floats[0], floats[len - 1]), (-1.0, 2.5));
        }
    }
}
