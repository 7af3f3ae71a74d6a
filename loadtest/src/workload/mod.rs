//! Workloads as a [`Plan`]: sessions of timed turns, fixed in advance from a
//! seed, so that every compared policy receives the same requests at the
//! same times. A single request is a one-turn session; a multi-turn chat
//! sends turn k+1 once turn k is answered (and not before its planned time).

mod random;
mod synthetic;
mod text;
mod trace;

pub use random::{Rng64, Zipf, exp_sample};
pub use synthetic::{SyntheticKind, SyntheticOptions, synthetic_plan};
pub use text::Words;
pub use trace::{TraceEntry, TraceOptions, TraceTokens, parse_trace, trace_plan};

use std::time::Duration;

use serde::Serialize;

/// Which OpenAI endpoint text prompts go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Api {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

impl std::str::FromStr for Api {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "completions" => Ok(Api::Completions),
            "chat" => Ok(Api::Chat),
            _ => Err(format!("unknown api {s:?}: expected completions or chat")),
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Its text.
    pub content: String,
}

impl Message {
    /// A message of `role`.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// What a turn sends.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// A completions prompt of token ids, expanded when sent (trace replay).
    Tokens(TraceTokens),
    /// A completions prompt of text.
    Text(String),
    /// A chat conversation (a session's first turn).
    Messages(Vec<Message>),
    /// The next user message of the session's conversation: sent after the
    /// earlier turns and their answers.
    FollowUp(String),
}

impl Prompt {
    /// The endpoint it goes to.
    pub fn api(&self) -> Api {
        match self {
            Prompt::Tokens(_) | Prompt::Text(_) => Api::Completions,
            Prompt::Messages(_) | Prompt::FollowUp(_) => Api::Chat,
        }
    }

    /// Its token count when known without a tokenizer (token-id prompts).
    pub fn known_tokens(&self) -> Option<u64> {
        match self {
            Prompt::Tokens(t) => Some(t.len() as u64),
            _ => None,
        }
    }
}

/// One request of a session.
#[derive(Debug, Clone)]
pub struct Turn {
    /// When it is due, from the start of the run.
    pub at: Duration,
    /// What it sends.
    pub prompt: Prompt,
    /// Its `max_tokens`.
    pub max_tokens: u32,
}

/// A sequence of turns sent one after another.
#[derive(Debug, Clone)]
pub struct Session {
    /// The turns, in order; the first one's `at` is the session's start.
    pub turns: Vec<Turn>,
}

/// A whole workload.
#[derive(Debug, Clone)]
pub struct Plan {
    /// A one-line description for the report.
    pub description: String,
    /// The sessions, sorted by start time.
    pub sessions: Vec<Session>,
}

impl Plan {
    /// Builds a plan; sessions are sorted by start, empty ones dropped.
    pub fn new(description: impl Into<String>, mut sessions: Vec<Session>) -> Self {
        sessions.retain(|s| !s.turns.is_empty());
        sessions.sort_by_key(|s| s.turns[0].at);
        Plan {
            description: description.into(),
            sessions,
        }
    }

    /// How many requests it sends.
    pub fn requests(&self) -> usize {
        self.sessions.iter().map(|s| s.turns.len()).sum()
    }

    /// When its last turn is due.
    pub fn span(&self) -> Duration {
        self.sessions
            .iter()
            .filter_map(|s| s.turns.last())
            .map(|t| t.at)
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(ms: u64) -> Turn {
        Turn {
            at: Duration::from_millis(ms),
            prompt: Prompt::Text("x".into()),
            max_tokens: 1,
        }
    }

    #[test]
    fn plans_sort_sessions_and_count_turns() {
        let p = Plan::new(
            "t",
            vec![
                Session {
                    turns: vec![turn(50), turn(80)],
                },
                Session { turns: vec![] },
                Session {
                    turns: vec![turn(10)],
                },
            ],
        );
        assert_eq!(p.sessions.len(), 2);
        assert_eq!(p.sessions[0].turns[0].at, Duration::from_millis(10));
        assert_eq!(p.requests(), 3);
        assert_eq!(p.span(), Duration::from_millis(80));
        assert_eq!("chat".parse::<Api>(), Ok(Api::Chat));
        assert!("x".parse::<Api>().is_err());
    }
}
