//! [`KeySpace`]: every key name of the shared state (see docs/state.md).

use super::StateError;

/// Longest model name or worker id accepted, in bytes.
pub const MAX_NAME_LEN: usize = 256;

/// Builds key names for one fleet namespace. All keys of a model share the
/// hash tag `{<model>}`, so each script touches one cluster slot.
#[derive(Debug, Clone)]
pub struct KeySpace {
    namespace: String,
}

impl KeySpace {
    /// A key space under `namespace` (the `--key-prefix`).
    pub fn new(namespace: &str) -> Result<Self, StateError> {
        check_name("key prefix", namespace)?;
        if namespace.contains(['{', '}', ':']) {
            return Err(StateError::Invalid {
                what: "key prefix",
                detail: "must not contain '{', '}' or ':'".into(),
            });
        }
        Ok(KeySpace {
            namespace: namespace.to_owned(),
        })
    }

    /// `<ns>:{<model>}`: the prefix of every key of `model`.
    pub fn model_base(&self, model: &str) -> String {
        format!("{}:{{{}}}", self.namespace, model)
    }

    /// `<ns>:{<model>}:ids`: worker id → live incarnation; KEYS[1] of every script.
    pub fn worker_ids(&self, model: &str) -> String {
        format!("{}:ids", self.model_base(model))
    }

    /// `<ns>:models`: the set of models that ever had a worker.
    pub fn models(&self) -> String {
        format!("{}:models", self.namespace)
    }

    /// `<ns>:worker_model`: worker id → its model, so workers may omit it.
    pub fn worker_models(&self) -> String {
        format!("{}:worker_model", self.namespace)
    }
}

/// Checks a model name, worker id or router id: 1..=256 bytes, printable,
/// no white space, no braces (they would change the cluster hash tag).
pub fn check_name(what: &'static str, name: &str) -> Result<(), StateError> {
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
    Err(StateError::Invalid {
        what,
        detail: detail.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_model_hash_tag() {
        let ks = KeySpace::new("pr").unwrap();
        assert_eq!(ks.worker_ids("Qwen/Qwen3-8B"), "pr:{Qwen/Qwen3-8B}:ids");
        assert_eq!(ks.models(), "pr:models");
    }

    #[test]
    fn names_are_validated() {
        assert!(check_name("model", "Qwen/Qwen3-8B").is_ok());
        for bad in ["", "a b", "a{b", "x}", "tab\t", &"x".repeat(257)] {
            assert!(check_name("model", bad).is_err(), "{bad:?}");
        }
        assert!(KeySpace::new("a:b").is_err());
    }
}
