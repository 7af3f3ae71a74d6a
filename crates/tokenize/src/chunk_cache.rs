//! [`ChunkCache`]: token ids of text chunks, cut where tokenization of the
//! parts equals tokenization of the whole.
//!
//! Tokenizing is the router's most expensive step (~11 ms for 8k tokens).
//! Prompts repeat long prefixes (system prompts, documents, earlier turns),
//! so the text is cut into chunks at "safe" boundaries and each chunk's ids
//! are cached. A boundary is safe right after a newline that is followed by
//! a character that is not white space: byte-level BPE pre-tokenizers
//! (GPT-2, Llama 3, Qwen) never put a newline and the following non-space
//! character in one pre-token, NFC cannot compose across a newline, and no
//! special token contains one. A property test checks the claim against the
//! plain tokenizer on varied text.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

/// Chunks shorter than this are merged with the next one.
pub const DEFAULT_CHUNK_BYTES: usize = 256;

/// Splits `text` at safe boundaries into chunks of at least `min_bytes`
/// (except the last); concatenating the chunks gives `text` back.
pub fn split_at_safe_boundaries(text: &str, min_bytes: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let bytes = rest.as_bytes();
        let mut cut = rest.len();
        let mut i = min_bytes.min(rest.len()).saturating_sub(1);
        while i + 1 < bytes.len() {
            if bytes[i] == b'\n' {
                let next = rest[i + 1..].chars().next();
                if next.is_some_and(|c| !c.is_whitespace()) {
                    cut = i + 1;
                    break;
                }
            }
            i += 1;
        }
        let (chunk, tail) = rest.split_at(cut);
        rest = tail;
        Some(chunk)
    })
}

/// Longest piece of text handed to the tokenizer at once. Its working
/// memory is about 200 times the bytes it is given (alignments, offsets and
/// a string per token), and glibc keeps much of it after: a 2 MB prompt in
/// one piece took a router from 107 to 520 MB. In pieces of this size a
/// tokenizing thread needs about 15 MB, whatever the prompt's length.
pub const MAX_PIECE_BYTES: usize = 64 << 10;

/// Cuts `text` (a chunk without safe boundaries, see
/// [`split_at_safe_boundaries`]) into pieces of at most `max_bytes`, each
/// with whether the cut after it keeps the ids exact. A cut is made before a
/// space that lies between two ASCII letters when the piece's second half
/// has one: exact, since byte-level BPE pre-tokenizers (GPT-2, Llama 3,
/// Qwen) never put a letter and the space after it in one pre-token, and
/// the space starts the next one with the letters that follow. Only when
/// there is none (64 KiB without a newline or a space between words) is the
/// cut made at the last character boundary: the ids next to that seam may
/// differ from the engine's, so the blocks after it miss the cache. Without
/// `space_cuts` (a vocabulary with an added token holding a space), every
/// cut is of the second kind.
pub fn split_long(
    text: &str,
    max_bytes: usize,
    space_cuts: bool,
) -> impl Iterator<Item = (&str, bool)> {
    let max_bytes = max_bytes.max(8);
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= max_bytes {
            let last = rest;
            rest = "";
            return Some((last, true));
        }
        let bytes = rest.as_bytes();
        let safe = (max_bytes / 2..max_bytes).rev().find(|&i| {
            space_cuts
                && bytes[i] == b' '
                && bytes[i - 1].is_ascii_alphabetic()
                && bytes[i + 1].is_ascii_alphabetic()
        });
        let (cut, exact) = match safe {
            Some(i) => (i, true),
            None => {
                let mut i = max_bytes;
                while !rest.is_char_boundary(i) {
                    i -= 1;
                }
                (i, false)
            }
        };
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some((piece, exact))
    })
}

/// A bounded map from chunk text to its ids. Keys are 64-bit hashes of the
/// text with a per-process random seed; the entry also keeps the text, so a
/// collision is detected rather than served.
pub struct ChunkCache {
    state: Mutex<CacheState>,
    hasher: RandomState,
    capacity_tokens: usize,
    chunk_bytes: usize,
}

struct CacheState {
    map: HashMap<u64, Entry>,
    tokens: usize,
    clock: u64,
}

struct Entry {
    text: Arc<str>,
    ids: Arc<[u32]>,
    used: u64,
}

impl ChunkCache {
    /// A cache holding up to `capacity_tokens` ids in total (0 disables it),
    /// of chunks of at least `chunk_bytes`.
    pub fn new(capacity_tokens: usize, chunk_bytes: usize) -> Self {
        ChunkCache {
            state: Mutex::new(CacheState {
                map: HashMap::new(),
                tokens: 0,
                clock: 0,
            }),
            hasher: RandomState::new(),
            capacity_tokens,
            chunk_bytes: chunk_bytes.max(1),
        }
    }

    /// The minimum chunk size the text is cut into.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    fn key(&self, text: &str) -> u64 {
        self.hasher.hash_one(text)
    }

    /// The cached ids of `text`, if present.
    pub fn get(&self, text: &str) -> Option<Arc<[u32]>> {
        let key = self.key(text);
        let mut st = self.state.lock().ok()?;
        st.clock += 1;
        let clock = st.clock;
        let e = st.map.get_mut(&key)?;
        if &*e.text != text {
            return None;
        }
        e.used = clock;
        metrics::counter!("prefix_router_tokenize_cache_hits_total").increment(1);
        Some(e.ids.clone())
    }

    /// Caches `ids` for `text`; evicts the least recently used half when full.
    pub fn insert(&self, text: &str, ids: Vec<u32>) {
        if self.capacity_tokens == 0 || ids.len() > self.capacity_tokens / 4 {
            return;
        }
        let key = self.key(text);
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if st.tokens + ids.len() > self.capacity_tokens {
            evict_older_half(&mut st);
        }
        st.clock += 1;
        st.tokens += ids.len();
        let used = st.clock;
        if let Some(old) = st.map.insert(
            key,
            Entry {
                text: text.into(),
                ids: ids.into(),
                used,
            },
        ) {
            st.tokens -= old.ids.len();
        }
    }
}

fn evict_older_half(st: &mut CacheState) {
    let mut ages: Vec<u64> = st.map.values().map(|e| e.used).collect();
    let mid = ages.len() / 2;
    let (_, median, _) = ages.select_nth_unstable(mid);
    let cutoff = *median;
    st.map.retain(|_, e| e.used > cutoff);
    st.tokens = st.map.values().map(|e| e.ids.len()).sum();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_concatenate_to_the_text_and_end_after_newlines() {
        let text = "line one\nline two\n\n  indented\nlast";
        let chunks: Vec<&str> = split_at_safe_boundaries(text, 1).collect();
        assert_eq!(chunks.concat(), text);
        assert_eq!(
            chunks,
            vec!["line one\n", "line two\n\n  indented\n", "last"]
        );
        let big: Vec<&str> = split_at_safe_boundaries(text, 12).collect();
        assert_eq!(big, vec!["line one\nline two\n\n  indented\n", "last"]);
        assert_eq!(split_at_safe_boundaries("", 4).count(), 0);
    }

    #[test]
    fn long_text_is_cut_before_a_space_between_letters_else_anywhere() {
        let words = "alpha beta gamma delta ".repeat(10);
        let pieces: Vec<(&str, bool)> = split_long(&words, 32, true).collect();
        assert_eq!(pieces.iter().map(|p| p.0).collect::<String>(), words);
        assert!(pieces.iter().all(|(p, exact)| p.len() <= 32 && *exact));
        assert!(pieces[1..].iter().all(|(p, _)| p.starts_with(' ')));
        let blob = "é".repeat(40);
        let pieces: Vec<(&str, bool)> = split_long(&blob, 33, true).collect();
        assert_eq!(pieces.iter().map(|p| p.0).collect::<String>(), blob);
        assert_eq!(pieces[0], ("é".repeat(16).as_str(), false));
        assert!(pieces.last().is_some_and(|p| p.1));
        assert_eq!(split_long("", 16, true).count(), 0);
        assert!(
            split_long(&words, 32, false)
                .take(3)
                .all(|(p, exact)| p.len() == 32 && !exact)
        );
    }

    #[test]
    fn evicts_when_full_and_never_serves_a_different_text() {
        let cache = ChunkCache::new(16, 1);
        cache.insert("a", vec![1, 2, 3, 4]);
        assert_eq!(cache.get("a").as_deref(), Some(&[1, 2, 3, 4][..]));
        assert!(cache.get("b").is_none());
        for i in 0..10 {
            cache.insert(&format!("t{i}"), vec![i; 4]);
        }
        let st = cache.state.lock().unwrap();
        assert!(st.tokens <= 16);
    }
}
