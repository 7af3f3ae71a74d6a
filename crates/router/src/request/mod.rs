//! [`Request`]: a client's request body, read once into its top-level
//! entries and the typed [`Fields`] the router reads. Every later stage
//! takes the `Request`, not bytes: the response cache's key
//! (`response_cache`), the prompt pipeline (the completions prompt, or the
//! chat renderer over the entries), admission, migration's eligibility,
//! and the bodies handed on (`body`: the fields only the router sets taken
//! out, the router's own set, the prefill and decode bodies of P/D).
//!
//! One scan of the body (`scan`) checks it is a JSON object and records
//! where each entry's value lies, borrowing it (no copy); a `prompt` of
//! token ids is typed by that scan, so its ids are read once. The small
//! fields are typed from their entries; any other prompt is read from its
//! entry by the one stage that needs it.

mod body;
mod fields;
mod scan;

pub use fields::{Fields, ROUTER_FIELDS};

use std::fmt;
use std::ops::Range;

use bytes::Bytes;
use serde_json::Value;
use tokenize::{CompletionPrompt, InvalidPrompt};

/// Why a body is not a request: not a JSON object.
#[derive(Debug, thiserror::Error)]
#[error("invalid JSON body: {0}")]
pub struct InvalidBody(pub(crate) String);

/// One top-level entry: its key and where its value lies in the body.
#[derive(Debug)]
struct Entry {
    key: String,
    value: Range<usize>,
}

/// A client's request body, read once.
#[derive(Debug)]
pub struct Request {
    /// The body as the client sent it.
    sent: Bytes,
    /// Its entries in order, without the [`ROUTER_FIELDS`].
    entries: Vec<Entry>,
    fields: Fields,
    /// Whether the client sent any of the [`ROUTER_FIELDS`].
    router_only: bool,
    /// Fields the router sets on the body it hands on (its own value
    /// replaces the client's).
    set: Vec<(&'static str, Value)>,
    /// The `prompt`'s ids, typed by the scan when it was a plain list of
    /// them; taken by the first [`completion_prompt`](Self::completion_prompt).
    prompt_ids: Option<Vec<u32>>,
}

impl Request {
    /// Reads `sent`: a JSON object, else [`InvalidBody`]. A repeated key's
    /// last value counts, as in the engine's parser.
    pub fn parse(sent: Bytes) -> Result<Request, InvalidBody> {
        let scanned = scan::scan(&sent)?;
        let mut request = Request {
            entries: Vec::with_capacity(scanned.entries.len()),
            fields: Fields::default(),
            router_only: false,
            set: Vec::new(),
            prompt_ids: scanned.prompt_ids,
            sent,
        };
        for (key, value) in scanned.entries {
            if ROUTER_FIELDS.contains(&key.as_str()) {
                request.router_only = true;
                continue;
            }
            // The scan checked the value's text is UTF-8.
            let text = std::str::from_utf8(&request.sent[value.clone()]).unwrap_or_default();
            request.fields.read(&key, text).map_err(invalid)?;
            request.entries.push(Entry { key, value });
        }
        Ok(request)
    }

    /// The typed fields.
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// The body's length as sent, in bytes.
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// The entries as sent (key, value as JSON text), in order, without the
    /// [`ROUTER_FIELDS`]; a repeated key appears each time.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (e.key.as_str(), self.text(&e.value)))
    }

    /// The value of `key` as JSON text (the last when repeated).
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.key == key)
            .map(|e| self.text(&e.value))
    }

    /// The completions `prompt` (its first prompt when a batch), or why it
    /// is not one vLLM accepts. The ids the scan typed are handed over (not
    /// copied) by the first call; a later call reads the entry again.
    pub fn completion_prompt(&mut self) -> Result<CompletionPrompt, InvalidPrompt> {
        if let Some(ids) = self.prompt_ids.take() {
            return Ok(CompletionPrompt::Tokens(ids));
        }
        let raw = self
            .raw("prompt")
            .ok_or_else(|| InvalidPrompt("prompt is required".into()))?;
        tokenize::prompt_from_json(raw)
    }

    /// Sets `key` to `value` on the body handed on (the client's own
    /// replaced).
    pub fn set(&mut self, key: &'static str, value: Value) {
        self.set.retain(|(k, _)| *k != key);
        self.set.push((key, value));
    }

    fn text(&self, range: &Range<usize>) -> &str {
        // The range is a value's text, checked UTF-8 by the scan.
        std::str::from_utf8(&self.sent[range.clone()]).unwrap_or_default()
    }
}

fn invalid(e: impl fmt::Display) -> InvalidBody {
    InvalidBody(e.to_string())
}
