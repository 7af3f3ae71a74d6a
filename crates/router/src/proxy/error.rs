//! [`ProxyError`]: why a request could not be routed or forwarded.

use state::StateError;
use tokenize::TokenizeError;

impl From<tokenize::InvalidPrompt> for ProxyError {
    fn from(e: tokenize::InvalidPrompt) -> Self {
        ProxyError::InvalidRequest(e.0)
    }
}

/// Failures of the routing path, by what the client should be told.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The request is malformed (4xx).
    #[error("{0}")]
    InvalidRequest(String),
    /// No worker serves this model.
    #[error("model {0:?} is not served by any live worker")]
    UnknownModel(String),
    /// Every worker tried failed before answering.
    #[error("no worker could take the request: {0}")]
    NoWorker(String),
    /// The prompt has more tokens than `--max-prompt-tokens` (413); found
    /// before any state is written.
    #[error("the prompt has {tokens} tokens, more than the {max} this router accepts")]
    PromptTooLong {
        /// Tokens of the prompt (for text, counted by the tokenizer).
        tokens: u64,
        /// The limit.
        max: u64,
    },
    /// The tokenizing pool and its queue are full (503).
    #[error(transparent)]
    Busy(#[from] super::PoolBusy),
    /// The prompt could not be tokenized.
    #[error("tokenizing the prompt: {0}")]
    Tokenize(#[from] TokenizeError),
    /// Flow control refused or shed it (the workers are saturated).
    #[error(transparent)]
    Overloaded(#[from] crate::flow::Refusal),
    /// The tenant's limits refuse the request (429 with OpenAI's headers).
    #[error("{}", .0.message)]
    Limited(Box<crate::admission::Refusal>),
    /// The shared state failed in a way routing cannot work around.
    #[error(transparent)]
    State(#[from] StateError),
}
