//! [`load_tokenizer`]: a `tokenizer.json` read once, into the tokenizer
//! `tokenizers` itself would build from it.
//!
//! `Tokenizer::from_bytes` spends most of a start on detours through its
//! BPE model (see `bpe_json`): a debug sim spent 84 % of its start CPU
//! there. Here the top-level object is read as `tokenizers` reads it
//! (`tokenizer/serialization.rs`): the normalizer, pre-tokenizer,
//! post-processor, decoder, truncation and padding by `tokenizers`' own
//! readers, the BPE model by [`BpeJson`], the added tokens as the file
//! lists them; then the tokenizer is built, and the added tokens are added
//! in the file's order with their flags, as `tokenizers` adds them.
//!
//! The result is checked before it is used: every added token must have
//! the id and flags the file gives it, and the vocabulary sizes must be
//! what `tokenizers` counts. On any mismatch, a model that is not BPE, or
//! anything else unexpected (an unknown key, which `tokenizers` refuses),
//! the file is loaded by `Tokenizer::from_bytes` instead (logged at debug),
//! so the answer, or the error, is always that of `tokenizers`.
//!
//! Layout: `bpe_json`, `BpeJson`, the BPE model read straight
//! into typed parts; `shape`, [`VocabShape`], the longest keys, read while
//! loading. Depends on no workspace crate; `tokenize` uses it. A crate of
//! its own so that test builds can build this reader at opt-level 1 (a
//! debug router's or sim's start is mostly this load) and `tokenize`, with
//! its tests, at opt-level 0 (the workspace's `Cargo.toml`).

mod bpe_json;
mod shape;

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper,
    PreTokenizerWrapper, Tokenizer, TokenizerBuilder,
};

use crate::bpe_json::BpeJson;

pub use shape::{SHORT_TOKEN_BYTES, VocabShape};

/// Why a `tokenizer.json` could not be loaded: `tokenizers`' own error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

/// A loaded tokenizer, and what its vocabulary looks like.
pub struct LoadedTokenizer {
    /// The tokenizer, equal to `Tokenizer::from_bytes` of the same file.
    pub tokenizer: Tokenizer,
    /// Whether the fast read was used (false: the plain `tokenizers` load).
    pub fast: bool,
    /// Its vocabulary's longest tokens, read while loading.
    pub shape: VocabShape,
}

/// A hash of a file's bytes, the same for the same bytes within a process
/// (aHash with fixed seeds: a debug build hashes 11 MB in a few
/// milliseconds, std's SipHash took tens), to tell files apart.
pub fn content_hash(bytes: &[u8]) -> u64 {
    ahash::RandomState::with_seeds(0x5eed, 0x70c, 0xf11e, 0xb17e5).hash_one(bytes)
}

/// Loads a `tokenizer.json` from its bytes: the same tokenizer as
/// `Tokenizer::from_bytes`, read faster when its model is BPE.
pub fn load_tokenizer(bytes: &[u8]) -> Result<LoadedTokenizer, LoadError> {
    match fast_load(bytes) {
        Ok(loaded) => Ok(loaded),
        Err(why) => {
            tracing::debug!(%why, "tokenizer.json read by the plain tokenizers load");
            let tokenizer = Tokenizer::from_bytes(bytes).map_err(|e| LoadError(e.to_string()))?;
            let shape = VocabShape::of(tokenizer.get_vocab(true).keys().map(String::as_str));
            Ok(LoadedTokenizer {
                tokenizer,
                fast: false,
                shape,
            })
        }
    }
}

type Builder = TokenizerBuilder<
    ModelWrapper,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// The file's parts before the tokenizer is built.
struct FileParts {
    builder: Builder,
    model: Option<BpeJson>,
    added: Vec<FileAddedToken>,
}

/// One entry of `added_tokens` (every field required, as in `tokenizers`).
#[derive(Deserialize)]
struct FileAddedToken {
    id: u32,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

impl FileAddedToken {
    fn token(&self) -> AddedToken {
        AddedToken {
            content: self.content.clone(),
            single_word: self.single_word,
            lstrip: self.lstrip,
            rstrip: self.rstrip,
            normalized: self.normalized,
            special: self.special,
        }
    }
}

/// The fast read, or why it does not apply.
fn fast_load(bytes: &[u8]) -> Result<LoadedTokenizer, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parts = de.deserialize_map(FileVisitor).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    let model = parts.model.ok_or("no model")?;
    let added = parts.added;
    let shape = VocabShape::of(
        model
            .vocab
            .keys()
            .map(String::as_str)
            .chain(added.iter().map(|t| t.content.as_str())),
    );
    let model_size = model.vocab.len();
    let in_model = added
        .iter()
        .filter(|t| model.vocab.contains_key(&t.content))
        .count();
    let bpe = model.build()?;
    let mut tokenizer: Tokenizer = parts
        .builder
        .with_model(bpe.into())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    tokenizer
        .add_tokens(added.iter().map(FileAddedToken::token))
        .map_err(|e| e.to_string())?;
    let sizes = (model_size, model_size + added.len() - in_model);
    check(&tokenizer, &added, sizes)?;
    Ok(LoadedTokenizer {
        tokenizer,
        fast: true,
        shape,
    })
}

/// Every added token has the file's id and flags, no other was added, and
/// the vocabulary sizes (without, with the added tokens) are `sizes`.
fn check(
    tokenizer: &Tokenizer,
    added: &[FileAddedToken],
    sizes: (usize, usize),
) -> Result<(), String> {
    let decoder = tokenizer.get_added_vocabulary().get_added_tokens_decoder();
    if decoder.len() != added.len() {
        return Err(format!(
            "{} added tokens in the file, {} in the tokenizer",
            added.len(),
            decoder.len()
        ));
    }
    for t in added {
        if decoder.get(&t.id) != Some(&t.token()) {
            return Err(format!(
                "added token {:?}: the file says id {}, the tokenizer gave {:?}",
                t.content,
                t.id,
                tokenizer.token_to_id(&t.content)
            ));
        }
    }
    let got = (
        tokenizer.get_vocab_size(false),
        tokenizer.get_vocab_size(true),
    );
    if got != sizes {
        return Err(format!("vocabulary sizes {got:?}, expected {sizes:?}"));
    }
    Ok(())
}

struct FileVisitor;

impl<'de> Visitor<'de> for FileVisitor {
    type Value = FileParts;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tokenizer.json object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FileParts, A::Error> {
        let mut parts = FileParts {
            builder: Builder::new(),
            model: None,
            added: Vec::new(),
        };
        while let Some(key) = map.next_key::<String>()? {
            let b = parts.builder;
            parts.builder = match key.as_str() {
                "version" => {
                    let v = map.next_value::<String>()?;
                    if v != "1.0" {
                        return Err(de::Error::custom(format!("tokenizer version {v:?}")));
                    }
                    b
                }
                "truncation" => b.with_truncation(map.next_value()?),
                "padding" => b.with_padding(map.next_value()?),
                "normalizer" => b.with_normalizer(map.next_value()?),
                "pre_tokenizer" => b.with_pre_tokenizer(map.next_value()?),
                "post_processor" => b.with_post_processor(map.next_value()?),
                "decoder" => b.with_decoder(map.next_value()?),
                "added_tokens" => {
                    parts.added = map.next_value()?;
                    b
                }
                "model" => {
                    parts.model = Some(map.next_value()?);
                    b
                }
                // `tokenizers` does not read past an unknown key.
                other => return Err(de::Error::custom(format!("unknown key {other:?}"))),
            };
        }
        Ok(parts)
    }
}
