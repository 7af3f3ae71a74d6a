//! Memory handed back to the system after oversized work. glibc's malloc
//! keeps freed memory in its arenas (one per thread that allocated, each
//! tokenizing thread included), and raises its mmap threshold to the
//! largest block freed, so that after one oversized prompt later large
//! buffers stay on the heap too: a router's RSS stayed at 520 MB after one
//! 2 MB prompt. Two remedies, both no-ops on other C libraries:
//!
//! * [`tune`], at start: large blocks (256 KiB and more: bodies, a long
//!   prompt's ids) always get their own mapping, returned when freed.
//! * [`give_back`], after a large tokenizing job: the free pages of every
//!   arena are returned (`malloc_trim`; about a millisecond per 100 MB).

/// Blocks from this size on are mapped on their own (glibc's default is
/// 128 KiB, raised as large blocks are freed; a fixed value stops that).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 256 << 10;

/// Tokenizing jobs from this many input bytes on give memory back.
pub const GIVE_BACK_BYTES: usize = 1 << 20;

/// Sets the allocator up for a long-running router (once, at start).
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets a parameter of glibc's allocator; it is
        // called before the runtime's threads start.
        let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
        if ok != 1 {
            tracing::warn!("mallopt(M_MMAP_THRESHOLD) refused; large blocks may stay on the heap");
        }
    }
}

/// Returns the allocator's free pages to the system.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only releases memory the allocator holds free.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
