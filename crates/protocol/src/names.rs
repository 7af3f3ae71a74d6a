//! [`check_name`]: the one rule for model names, worker ids and router ids,
//! which become parts of Valkey keys and cluster hash tags.

use thiserror::Error;

/// Longest model name or worker id accepted, in bytes.
pub const MAX_NAME_LEN: usize = 256;

/// A name that [`check_name`] refused: which name, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid {what}: {detail}")]
pub struct InvalidName {
    /// Which name it was (`"model"`, `"worker_id"`, …).
    pub what: &'static str,
    /// Why it was refused.
    pub detail: &'static str,
}

/// Checks a model name, worker id or router id: 1..=256 bytes, printable,
/// no white space, no braces (they would change the cluster hash tag).
pub fn check_name(what: &'static str, name: &str) -> Result<(), InvalidName> {
    let detail = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_NAME_LEN {
        "is longer than 256 bytes"
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "must not contain white space or control characters"
    } else if name.contains(['{', '}']) {
        "must not contain '{' or '}'"
    } else {
        return Ok(());
    };
    Err(InvalidName { what, detail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(check_name("model", "Qwen/Qwen3-8B").is_ok());
        for bad in ["", "a b", "a{b", "x}", "tab\t", &"x".repeat(257)] {
            assert!(check_name("model", bad).is_err(), "{bad:?}");
        }
    }
}
