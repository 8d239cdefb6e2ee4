//! The binary's global allocator: mimalloc, asked through its plain entry points whenever
//! they already give the alignment a layout needs, and through its aligned ones otherwise.
//!
//! The `mimalloc` crate's `MiMalloc` sends every allocation to `mi_malloc_aligned`. In
//! mimalloc 3 that call takes the plain fast path only while the size class's free list is
//! not empty; otherwise it falls to a generic path that, for a block size that is not a
//! power of two (48, 80, 320 B, …), over-allocates by the alignment and adjusts the pointer.
//! Under the pipelined echo bench about a quarter of the allocations went that way, and the
//! allocator took about 1,300 instructions of a 12,500-instruction request (callgrind;
//! benches/README.md, "The allocator asked plainly"). The same dispatch is open upstream as
//! purpleprotocol/mimalloc_rust#170.
//!
//! Why the plain calls are enough: mimalloc is a C `malloc`, so it aligns every block of
//! 16 bytes or more to 16 (`MI_MAX_ALIGN_SIZE`, `max_align_t`), and every smaller block to
//! 8. This is the rule of std's own `System` allocator on the same platforms: a layout whose
//! alignment is at most 16 and at most its size takes `malloc`.

// A `GlobalAlloc` is an unsafe trait over raw pointers; this module is one of the crate's
// two exceptions to `unsafe_code = "deny"` (Cargo.toml).
#![allow(unsafe_code)]

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment mimalloc's plain calls give every block at least as large as it
/// (`MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

/// mimalloc as the global allocator, plain calls where they suffice (see the module's doc).
pub struct Mimalloc;

/// Whether a block of `size` bytes from a plain call is aligned to `align`.
fn plain_suffices(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// A block for `layout` from `plain` when it aligns the block, else from `aligned`: the
/// one dispatch of `alloc` and `alloc_zeroed`.
///
/// # Safety
/// `plain` and `aligned` are mimalloc's allocation calls of one kind (`mi_malloc` and
/// `mi_malloc_aligned`, or the zeroing pair), which have no preconditions.
#[inline]
unsafe fn allocate(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: as the caller promises, calls without preconditions.
    unsafe {
        if plain_suffices(layout.align(), layout.size()) {
            plain(layout.size()).cast()
        } else {
            aligned(layout.size(), layout.align()).cast()
        }
    }
}

// SAFETY: every path returns a block of at least `layout.size()` bytes aligned to
// `layout.align()` or null (the plain ones by `plain_suffices`, the others by mimalloc's
// aligned calls), and every block, however it was made, is freed and resized by mimalloc,
// which finds a block's start from any pointer it returned.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation pair.
        unsafe { allocate(layout, mi::mi_malloc, mi::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's zeroing allocation pair.
        unsafe { allocate(layout, mi::mi_zalloc, mi::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a block this allocator returned.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a block this allocator returned, with its layout; a
        // block kept in place keeps its alignment, a moved one is made by a plain call only
        // when that call aligns it.
        unsafe {
            if plain_suffices(layout.align(), new_size) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every small layout (sizes 1–4,200 B, alignments 1–64), allocated with and without
    /// zeroing and resized up and down, comes back aligned, zeroed where asked, and with
    /// its bytes kept across a resize. Many blocks of each layout are held at once so that
    /// the size classes' free lists run empty and refill, where mimalloc changes path.
    #[test]
    fn every_block_is_aligned_zeroed_and_kept_across_resizes() {
        let allocator = Mimalloc;
        let sizes = (1..=96).chain((100..=4200).step_by(52));
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64] {
                let layout = Layout::from_size_align(size, align).expect("valid layout");
                let mut held = Vec::new();
                for round in 0..40u8 {
                    // SAFETY: a non-zero size; each block is checked, then freed once below.
                    unsafe {
                        let zeroed = round % 2 == 0;
                        let block = if zeroed {
                            allocator.alloc_zeroed(layout)
                        } else {
                            allocator.alloc(layout)
                        };
                        assert!(!block.is_null());
                        assert_eq!(block as usize % align, 0, "size {size}, align {align}");
                        if zeroed {
                            assert!((0..size).all(|i| *block.add(i) == 0));
                        }
                        std::ptr::write_bytes(block, round, size);
                        held.push((block, round));
                    }
                }
                for (i, (block, fill)) in held.into_iter().enumerate() {
                    let new_size = if i % 2 == 0 {
                        size * 3
                    } else {
                        size.div_ceil(2)
                    };
                    // SAFETY: `block` was made with `layout` above and is resized once, then
                    // freed once with the layout of its new size.
                    unsafe {
                        let resized = allocator.realloc(block, layout, new_size);
                        assert!(!resized.is_null());
                        assert_eq!(resized as usize % align, 0, "resize {size} → {new_size}");
                        let kept = size.min(new_size);
                        assert!((0..kept).all(|i| *resized.add(i) == fill));
                        let new_layout = Layout::from_size_align(new_size, align).expect("valid");
                        allocator.dealloc(resized, new_layout);
                    }
                }
            }
        }
    }
}
