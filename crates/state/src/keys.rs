//! [`KeySpace`]: every key name of the shared state (see docs/state.md).

use super::{StateError, check_name};

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

    /// `<ns>:{<part>}:fb` and `<ns>:{<part>}:fg`: the priorities with
    /// entries waiting in a model's waiting room, and the entries
    /// dispatched from it and not yet routed (`flow_dispatch.lua`); both
    /// absent while nothing waits.
    pub fn flow_busy(&self, part: &str) -> [String; 2] {
        let base = self.model_base(part);
        [format!("{base}:fb"), format!("{base}:fg")]
    }

    /// `<ns>:{<part>}:rc:<key>`: a cached response of a model's part
    /// (`response_put.lua` keeps its budget beside it).
    pub fn response_entry(&self, part: &str, key_hex: &str) -> String {
        format!("{}:rc:{key_hex}", self.model_base(part))
    }

    /// `<ns>:tenant:{<tenant>}`: the prefix of every key of a tenant's
    /// limits (one hash tag per tenant; `limit_*.lua`).
    pub fn tenant_base(&self, tenant: &str) -> String {
        format!("{}:tenant:{{{}}}", self.namespace, tenant)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_model_hash_tag() {
        let ks = KeySpace::new("pr").unwrap();
        assert_eq!(ks.worker_ids("Qwen/Qwen3-8B"), "pr:{Qwen/Qwen3-8B}:ids");
        assert_eq!(ks.models(), "pr:models");
        assert_eq!(ks.response_entry("m", "ab"), "pr:{m}:rc:ab");
        assert_eq!(ks.flow_busy("m"), ["pr:{m}:fb", "pr:{m}:fg"]);
        assert_eq!(ks.tenant_base("key:ab"), "pr:tenant:{key:ab}");
    }

    #[test]
    fn key_prefixes_are_validated() {
        assert!(KeySpace::new("a:b").is_err());
        assert!(KeySpace::new("a b").is_err());
    }
}
