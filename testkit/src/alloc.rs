//! A counting global allocator, for the tests that prove a hot path
//! allocates nothing. A test binary installs it with
//! `#[global_allocator] static A: mdbus_testkit::alloc::Counting = mdbus_testkit::alloc::Counting;`
//! and reads [`allocs`] before and after the path it watches. Counts are
//! per thread, so other threads of the harness do not disturb them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting allocations (and reallocations) of the
/// calling thread.
pub struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; it only
// counts on the side, in a thread-local that needs no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

/// Allocations the calling thread made so far (with [`Counting`]
/// installed as the global allocator).
pub fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[cfg(test)]
mod tests {
    #[global_allocator]
    static A: super::Counting = super::Counting;

    #[test]
    fn each_allocation_of_this_thread_is_counted() {
        let before = super::allocs();
        let v = std::hint::black_box(vec![1u8; 64]);
        let mut s = std::hint::black_box(String::with_capacity(1));
        s.push_str("grows past its capacity");
        assert_eq!(
            super::allocs() - before,
            2 + 1,
            "vec, string, and its regrowth"
        );
        drop((v, s));
    }
}
