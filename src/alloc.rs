//! The process allocator: mimalloc, called the way its fast paths expect.
//!
//! The `mimalloc` crate's allocator passes every request through
//! `mi_malloc_aligned`, whose fast path only covers blocks up to 1 KiB; larger
//! ones (a replayed request's future, a task) took its generic aligned path,
//! about 5 % of a replay's thread. Requests that plain `mi_malloc` already
//! aligns (up to 16 bytes, as `std`'s System allocator reasons) go there.

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment `mi_malloc` guarantees for blocks of at least that size.
const MIN_ALIGN: usize = 16;

/// mimalloc as the global allocator (`#[global_allocator]` in the binary and
/// the benches).
pub struct Mimalloc;

/// Whether plain `mi_malloc` of `size` bytes is aligned enough for `align`.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

// SAFETY: every call forwards to mimalloc, which returns blocks of at least
// the requested size and alignment (plain calls only where `plain` holds),
// frees any of its blocks with `mi_free`, and is thread-safe.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>())
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            mi::mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

/// Keeps freed memory in the process instead of returning it to the OS 10 ms
/// after it is freed (mimalloc's default). A run in virtual time frees and
/// reallocates at a high rate, and each page handed back was faulted in and
/// zeroed again (2 MiB at a time with huge pages): a 1M-request replay took
/// about 4,000 page faults, now about 450. Peak memory is what it was; it is
/// just not handed back early.
pub fn keep_freed_memory() {
    /// `mi_option_purge_delay` in mimalloc.h (the same in v2 and v3).
    const PURGE_DELAY: mi::mi_option_t = 15;
    // SAFETY: sets a plain option value; call it before the work starts.
    unsafe { mi::mi_option_set(PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_have_the_alignment_asked_for() {
        for (size, align) in [(1, 1), (8, 8), (24, 16), (3000, 16), (4, 16), (200, 128), (5000, 4096)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero-size layout; the block is written within
            // its size and freed once.
            unsafe {
                let p = Mimalloc.alloc(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "{size} bytes aligned to {align}");
                p.write_bytes(0xAB, size);
                let q = Mimalloc.realloc(p, layout, size * 3);
                assert_eq!(q as usize % align, 0, "{size}→{} bytes aligned to {align}", size * 3);
                assert_eq!(*q.add(size - 1), 0xAB, "realloc keeps the contents");
                Mimalloc.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                let z = Mimalloc.alloc_zeroed(layout);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                Mimalloc.dealloc(z, layout);
            }
        }
    }
}
