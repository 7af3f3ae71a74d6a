//! Which serving thread the current thread is: a router serves on one
//! single-threaded runtime per core, and each gives its connections to
//! Valkey (and to workers) a slot of their own, so that an I/O event wakes
//! only the thread whose request waits on it. A connection's driver task
//! runs on the runtime that opened it; used from another thread, every
//! reply would wake two.
//!
//! A thread that never says otherwise is thread 0: a router served in one
//! runtime (tests, `--async-threads 1`) has one slot, which every thread
//! of it shares.

use std::cell::Cell;

thread_local! {
    static SERVING_THREAD: Cell<usize> = const { Cell::new(0) };
}

/// Marks the current thread as serving thread `index` (set once, as it
/// starts its runtime).
pub fn set_serving_thread(index: usize) {
    SERVING_THREAD.with(|t| t.set(index));
}

/// The current thread's index among the serving threads (0 unless set).
pub fn serving_thread() -> usize {
    SERVING_THREAD.with(Cell::get)
}

/// The slot of `slots` the current thread uses.
pub(crate) fn serving_slot<T>(slots: &[T]) -> Option<&T> {
    match slots.len() {
        0 => None,
        n => slots.get(serving_thread() % n),
    }
}
