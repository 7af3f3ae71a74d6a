//! [`SimServerError`]: why a simulated worker could not start (its
//! tokenizer, engine settings, address, reporters, vocabulary, LMCache).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::EngineError;
use tokenize::TokenizeError;
use worker::kv_events::PublisherError;
use worker::push::PushError;

/// Why a simulated worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimServerError {
    /// The tokenizer directory is unusable.
    #[error("loading the tokenizer from {dir}: {source}")]
    Tokenizer {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        #[source]
        source: TokenizeError,
    },
    /// The engine configuration is unusable.
    #[error("engine configuration: {0}")]
    Engine(#[from] EngineError),
    /// The HTTP address cannot be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The fleet client cannot be built.
    #[error("push reporting: {0}")]
    Push(#[from] PushError),
    /// The KV-event sockets cannot be set up.
    #[error("KV events: {0}")]
    KvEvents(#[from] PublisherError),
    /// The answers' vocabulary is unusable.
    #[error("the answer vocabulary {text:?}: {reason}")]
    Vocabulary {
        /// The text given.
        text: String,
        /// Why.
        reason: String,
    },
    /// The LMCache settings are unusable.
    #[error("LMCache: {0}")]
    Lmcache(String),
    /// A startup task panicked or was cancelled.
    #[error("startup task failed: {0}")]
    Task(String),
}
