//! The tokenizer's working memory on oversized prompts is bounded: bytes
//! allocated at the peak of a bounded encode, counted by a global allocator
//! (real Qwen3 tokenizer). A 2,000,000-character prompt in one piece took
//! a router from 107 MB to 520 MB; in pieces of `MAX_PIECE_BYTES` the peak
//! is a few tens of MB whatever the prompt's length.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokenize::{ModelTokenizer, TokenizeError};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters
// are updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated at the peak of `f`, above what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed) - before)
}

/// One test (the counters are the process's): prompts of 2,000,000
/// characters, with spaces between words and without any, under a limit
/// they fit (a large explicit `--max-prompt-tokens`) and one they do not.
#[test]
fn oversized_prompts_are_tokenized_within_a_memory_budget() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
    let tok = ModelTokenizer::from_dir(&dir, 4 << 20).unwrap();
    let budget = 64 << 20;
    let words = "hello ".repeat(2_000_000 / 6);
    let letters = "x".repeat(2_000_000);
    for (what, text) in [("words", &words), ("one word", &letters)] {
        let (ids, peak) = peak_of(|| tok.encode_bounded(text, true, 1_000_000));
        let ids = ids.unwrap();
        eprintln!(
            "{what}: {} bytes, {} tokens, peak {:.1} MiB",
            text.len(),
            ids.len(),
            peak as f64 / f64::from(1 << 20)
        );
        assert!(ids.len() > 1_000, "{what}: {} tokens", ids.len());
        assert!(peak < budget, "{what}: peak {peak} bytes");
        // Under a limit the prompt does not fit: refused within the budget.
        let (refused, peak) = peak_of(|| tok.encode_bounded(text, true, 50_000));
        assert!(
            matches!(refused, Err(TokenizeError::TooLong { .. })),
            "{what}: {:?}",
            refused.map(|v| v.len())
        );
        assert!(peak < budget, "{what}: peak {peak} bytes when refused");
    }
}
