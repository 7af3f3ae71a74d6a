//! [`TokenizerFile`]: a loaded `tokenizer.json` and what it says about
//! tokens, shared by every [`ModelTokenizer`](crate::ModelTokenizer) of
//! the process that reads the same file while one of them is alive.
//!
//! A load is most of a debug router's or sim's start (≈ 0.35 s of CPU),
//! and one process often loads the same file several times: a router
//! whose models share a tokenizer, the in-process routers and sims of a
//! test. The file is read each time; when its bytes are those of a file
//! already loaded and still in use (the same length and hash), that
//! tokenizer is the answer, else the bytes are loaded. A tokenizer no one
//! uses any more is not kept (the list holds weak references), and a
//! failed load is not remembered.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokenizers::Tokenizer;

use crate::long_tokens::LongTokens;
use crate::model_tokenizer::{TokenizeError, is_byte_level, post_processor_specials};
use tokenizer_json::LoadedTokenizer;

/// A loaded `tokenizer.json`, and what its vocabulary and post-processor
/// say about tokens.
pub(crate) struct TokenizerFile {
    pub(crate) tokenizer: Tokenizer,
    /// Ids the post-processor puts before and after a single sequence.
    pub(crate) specials: (Vec<u32>, Vec<u32>),
    /// Whether cutting at safe boundaries keeps ids exact (byte-level BPE).
    pub(crate) chunkable: bool,
    /// Whether a cut before a space between letters keeps ids exact (no
    /// added token holds a space).
    pub(crate) space_cuts: bool,
    /// The most bytes of text one token stands for (byte-level BPE; the
    /// longest entry of the vocabulary), so that a text of n bytes has at
    /// least n / this many tokens.
    pub(crate) max_token_bytes: usize,
    /// The vocabulary's long tokens, for a tighter bound than
    /// `max_token_bytes` on texts that hold none of them.
    pub(crate) long_tokens: LongTokens,
}

/// What tells one file's bytes from another's: their length and hash.
#[derive(PartialEq, Eq, Clone, Copy)]
struct ContentId {
    len: usize,
    hash: u64,
}

impl ContentId {
    fn of(bytes: &[u8]) -> ContentId {
        ContentId {
            len: bytes.len(),
            hash: tokenizer_json::content_hash(bytes),
        }
    }
}

/// Loads a `tokenizer.json` from its bytes: the same tokenizer as
/// `Tokenizer::from_bytes`, read faster when its model is BPE (the
/// `tokenizer-json` crate, built at opt-level 1 in test builds).
pub fn load_tokenizer(bytes: &[u8]) -> Result<LoadedTokenizer, TokenizeError> {
    tokenizer_json::load_tokenizer(bytes).map_err(|e| TokenizeError::Tokenizer(e.0))
}

/// The files loaded in this process, while in use.
static IN_USE: Mutex<Vec<(ContentId, Weak<TokenizerFile>)>> = Mutex::new(Vec::new());

impl TokenizerFile {
    /// The tokenizer of `path` (a `tokenizer.json`): the one already
    /// loaded from the same bytes if it is still in use, else built now.
    /// Loads run one at a time, so that two callers asking for the same
    /// file at once build it once.
    pub(crate) fn load(path: &Path) -> Result<Arc<TokenizerFile>, TokenizeError> {
        let bytes = std::fs::read(path).map_err(|source| TokenizeError::Read {
            path: path.to_owned(),
            source,
        })?;
        let id = ContentId::of(&bytes);
        let mut in_use = IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
        in_use.retain(|(_, file)| file.strong_count() > 0);
        if let Some(file) = in_use
            .iter()
            .find(|(known, _)| *known == id)
            .and_then(|(_, file)| file.upgrade())
        {
            return Ok(file);
        }
        let file = Arc::new(TokenizerFile::from_bytes(&bytes)?);
        in_use.push((id, Arc::downgrade(&file)));
        Ok(file)
    }

    /// A `tokenizer.json` from its bytes.
    fn from_bytes(bytes: &[u8]) -> Result<TokenizerFile, TokenizeError> {
        let loaded = load_tokenizer(bytes)?;
        let (tokenizer, shape) = (loaded.tokenizer, loaded.shape);
        let specials = post_processor_specials(&tokenizer)?;
        let chunkable = is_byte_level(&tokenizer);
        let space_cuts = !tokenizer
            .get_added_tokens_decoder()
            .values()
            .any(|t| t.content.contains(' '));
        let long_tokens = if chunkable {
            LongTokens::new(shape.long.iter().map(String::as_str))
        } else {
            LongTokens::new(std::iter::empty())
        };
        Ok(TokenizerFile {
            tokenizer,
            specials,
            chunkable,
            space_cuts,
            // Byte-level vocabularies spell each byte as one character.
            max_token_bytes: shape.longest_chars,
            long_tokens,
        })
    }
}

#[cfg(test)]
#[path = "tokenizer_file_tests.rs"]
mod tests;
