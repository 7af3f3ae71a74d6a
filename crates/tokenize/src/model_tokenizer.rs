//! [`ModelTokenizer`]: one model's tokenizer and its configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tokenizers::Tokenizer;

use super::chunk_cache::{DEFAULT_CHUNK_BYTES, MAX_PIECE_BYTES, split_long};
use super::tokenizer_file::TokenizerFile;
use super::{ChunkCache, split_at_safe_boundaries};

/// Why a tokenizer could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// A file is missing or unreadable.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `tokenizer_config.json` is not valid.
    #[error("parsing {path}: {source}")]
    Config {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// The tokenizers library refused the file or the input.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The text has more than the `max` tokens the caller accepts; found
    /// after `at_least` of them, without tokenizing the rest.
    #[error("the prompt has at least {at_least} tokens, more than {max}")]
    TooLong {
        /// Tokens counted when the encoder stopped (more than `max`).
        at_least: usize,
        /// The limit.
        max: usize,
    },
}

/// The parts of `tokenizer_config.json` that decide how prompts become ids.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TokenizerConfig {
    /// The chat template: one string, or a list of named templates.
    #[serde(default)]
    pub chat_template: Option<ChatTemplateField>,
    /// BOS token text, if the model has one.
    #[serde(default, deserialize_with = "token_text")]
    pub bos_token: Option<String>,
    /// EOS token text.
    #[serde(default, deserialize_with = "token_text")]
    pub eos_token: Option<String>,
}

/// `chat_template` as HF stores it.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ChatTemplateField {
    /// A single template.
    One(String),
    /// Named templates: `[{"name": "default", "template": "..."}, ...]`.
    Named(Vec<NamedTemplate>),
}

/// One entry of a named template list.
#[derive(Debug, Clone, Deserialize)]
pub struct NamedTemplate {
    /// Its name (`default`, `tool_use`, ...).
    pub name: String,
    /// The Jinja source.
    pub template: String,
}

/// Special tokens appear either as plain strings or as AddedToken objects.
fn token_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tok {
        Text(String),
        Obj { content: String },
    }
    Ok(Option::<Tok>::deserialize(d)?.map(|t| match t {
        Tok::Text(s) | Tok::Obj { content: s } => s,
    }))
}

/// A model's tokenizer, shared by all requests for that model.
#[derive(Clone)]
pub struct ModelTokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    /// The loaded `tokenizer.json`, shared with the other tokenizers of
    /// the process that read the same file.
    file: Arc<TokenizerFile>,
    config: TokenizerConfig,
    cache: ChunkCache,
}

impl ModelTokenizer {
    /// Loads `tokenizer.json` and `tokenizer_config.json` from `dir` (and
    /// `chat_template.jinja`, which wins over the config's template, when
    /// present); caches up to `cache_tokens` tokens of text chunks.
    pub fn from_dir(dir: &Path, cache_tokens: usize) -> Result<Self, TokenizeError> {
        Self::from_dir_with_chunks(dir, cache_tokens, DEFAULT_CHUNK_BYTES)
    }

    /// [`ModelTokenizer::from_dir`] with chunks of at least `chunk_bytes`.
    pub fn from_dir_with_chunks(
        dir: &Path,
        cache_tokens: usize,
        chunk_bytes: usize,
    ) -> Result<Self, TokenizeError> {
        let file = TokenizerFile::load(&dir.join("tokenizer.json"))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let mut config: TokenizerConfig = match std::fs::read(&cfg_path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|source| TokenizeError::Config {
                path: cfg_path,
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TokenizerConfig::default(),
            Err(source) => {
                return Err(TokenizeError::Read {
                    path: cfg_path,
                    source,
                });
            }
        };
        // A template kept apart wins over the config's, as in transformers.
        let jinja = dir.join("chat_template.jinja");
        match std::fs::read_to_string(&jinja) {
            // It is the default template; named ones (`tool_use`) stay.
            Ok(t) => {
                config.chat_template = Some(match config.chat_template.take() {
                    Some(ChatTemplateField::Named(mut named)) => {
                        named.retain(|n| n.name != "default");
                        named.push(NamedTemplate {
                            name: "default".into(),
                            template: t,
                        });
                        ChatTemplateField::Named(named)
                    }
                    _ => ChatTemplateField::One(t),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(TokenizeError::Read {
                    path: jinja,
                    source,
                });
            }
        }
        Ok(ModelTokenizer {
            inner: Arc::new(Inner {
                file,
                config,
                cache: ChunkCache::new(cache_tokens, chunk_bytes),
            }),
        })
    }

    /// The parsed `tokenizer_config.json`.
    pub fn config(&self) -> &TokenizerConfig {
        &self.inner.config
    }

    /// The ids of `text` as the plain HF tokenizer gives them; with
    /// `add_special_tokens`, the post-processor's BOS/EOS too (vLLM's
    /// completions default; chat prompts are encoded without).
    pub fn encode_plain(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, TokenizeError> {
        self.inner
            .file
            .tokenizer
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))
    }

    /// Same ids as [`ModelTokenizer::encode_plain`], but long texts are cut
    /// at boundaries the pre-tokenizer never crosses and each chunk's ids are
    /// cached, so a repeated long prefix costs a hash lookup.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizeError> {
        self.encode_bounded(text, add_special_tokens, usize::MAX)
    }

    /// A lower bound on the tokens of `bytes` bytes of text, from the
    /// longest token of the vocabulary (0 unless the tokenizer is byte-level
    /// BPE, where the bound is sound).
    pub fn min_tokens(&self, bytes: usize) -> usize {
        if self.inner.file.chunkable {
            bytes.div_ceil(self.inner.file.max_token_bytes)
        } else {
            0
        }
    }

    /// A lower bound on the tokens of `text`: [`min_tokens`](Self::min_tokens)
    /// of its length, or its length over
    /// [`SHORT_TOKEN_BYTES`](crate::long_tokens::SHORT_TOKEN_BYTES) when it
    /// holds none of the vocabulary's longer tokens (one pass over the
    /// text: asked only when the first bound does not already pass `max`
    /// and the second could).
    pub fn min_tokens_of(&self, text: &str, max: usize) -> usize {
        let coarse = self.min_tokens(text.len());
        let short = crate::long_tokens::SHORT_TOKEN_BYTES;
        if coarse > max
            || !self.inner.file.chunkable
            || self.inner.file.max_token_bytes <= short
            || text.len().div_ceil(short) <= max
            || self.inner.file.long_tokens.may_occur_in(text)
        {
            return coarse;
        }
        text.len().div_ceil(short)
    }

    /// [`ModelTokenizer::encode`], but it gives up with
    /// [`TokenizeError::TooLong`] as soon as the text is known to have more
    /// than `max` tokens: at once when its length alone says so
    /// ([`min_tokens_of`](Self::min_tokens_of)), else after the chunk that passed
    /// the limit, so that a huge prompt costs about `max` tokens of work.
    pub fn encode_bounded(
        &self,
        text: &str,
        add_special_tokens: bool,
        max: usize,
    ) -> Result<Vec<u32>, TokenizeError> {
        let too_long = |at_least: usize| Err(TokenizeError::TooLong { at_least, max });
        let floor = self.min_tokens_of(text, max);
        if floor > max {
            return too_long(floor);
        }
        let inner = &self.inner;
        if !inner.file.chunkable {
            let ids = self.encode_plain(text, add_special_tokens)?;
            return if ids.len() > max {
                too_long(ids.len())
            } else {
                Ok(ids)
            };
        }
        let mut ids = Vec::new();
        if add_special_tokens {
            ids.extend_from_slice(&inner.file.specials.0);
        }
        // Chunks cut at safe boundaries, and long ones in pieces, so that
        // the tokenizer's working memory stays bounded (`MAX_PIECE_BYTES`).
        let pieces = split_at_safe_boundaries(text, inner.cache.chunk_bytes())
            .flat_map(|chunk| split_long(chunk, MAX_PIECE_BYTES, inner.file.space_cuts));
        for (piece, exact) in pieces {
            match inner.cache.get(piece) {
                Some(cached) => ids.extend_from_slice(&cached),
                None => {
                    let piece_ids = self.encode_plain(piece, false)?;
                    ids.extend_from_slice(&piece_ids);
                    inner.cache.insert(piece, piece_ids);
                }
            }
            if !exact {
                metrics::counter!("prefix_router_tokenize_inexact_cuts_total").increment(1);
            }
            if ids.len() > max {
                return too_long(ids.len());
            }
        }
        if add_special_tokens {
            ids.extend_from_slice(&inner.file.specials.1);
        }
        if ids.len() > max {
            return too_long(ids.len());
        }
        Ok(ids)
    }

    /// The text of token ids (for logs and tests).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizeError> {
        self.inner
            .file
            .tokenizer
            .decode(ids, false)
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))
    }
}

/// Chunking is exact only for byte-level BPE without a normalizer or
/// pre-tokenizer that adds text per piece (SentencePiece's `▁` prefix).
/// Read from the loaded tokenizer's own parts (their JSON, as in
/// `tokenizer.json`), not by parsing the whole file a second time.
pub(crate) fn is_byte_level(tokenizer: &Tokenizer) -> bool {
    let (Ok(pre), Ok(norm)) = (
        serde_json::to_string(&tokenizer.get_pre_tokenizer()),
        serde_json::to_string(&tokenizer.get_normalizer()),
    ) else {
        return false;
    };
    pre.contains("\"ByteLevel\"")
        && !pre.contains("Metaspace")
        && !norm.contains("Prepend")
        && !norm.contains("Replace")
}

/// What the post-processor adds around a single sequence, found by
/// encoding a probe with and without special tokens.
pub(crate) fn post_processor_specials(
    tok: &Tokenizer,
) -> Result<(Vec<u32>, Vec<u32>), TokenizeError> {
    let enc = |special| {
        tok.encode_fast("a", special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))
    };
    let (with, without) = (enc(true)?, enc(false)?);
    let at = with
        .windows(without.len().max(1))
        .position(|w| w == without.as_slice())
        .ok_or_else(|| TokenizeError::Tokenizer("post-processor rewrites the sequence".into()))?;
    Ok((with[..at].to_vec(), with[at + without.len()..].to_vec()))
}

#[cfg(test)]
#[path = "model_tokenizer_tests.rs"]
mod tests;
