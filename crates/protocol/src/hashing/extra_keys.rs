//! The per-request inputs of vLLM's block hash besides the tokens (LoRA,
//! multimodal items, cache salt), and [`ExtraKeysFormat`], which selects
//! their shape by engine version (written by `key_encoding`).
//!
//! vLLM appends, in this order, the LoRA key, one key per multimodal item
//! overlapping the block, and the cache salt (block 0 only); `None` if there
//! are none (see `shared/vllm/README.md`, "Extra keys per block"). What each
//! key looks like changed over releases.

/// The CBOR shape of the extra keys, which depends on the engine's vLLM
/// version. Only the `sha256_cbor` pre-image is affected; NONE_HASH and the
/// chaining are the same in every format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ExtraKeysFormat {
    /// vLLM >= 0.31: tagged tuples `("lora", lora_name, lora_path)`,
    /// `("mm", identifier, offset_in_block)` and `("cache_salt", salt)`.
    /// Verified against the vLLM 0.33.0 vectors.
    #[default]
    Tagged,
    /// vLLM 0.19–0.30: untagged `lora_name`, `(identifier, offset_in_block)`
    /// and `salt`. Verified against the vLLM 0.30.0 and 0.23.0 vectors (the
    /// README's table starts this range at 0.19, the vector file's note at
    /// 0.20; no 0.19 vector exists).
    Untagged,
    /// vLLM 0.12–0.18: untagged `lora_name`, the multimodal `identifier`
    /// alone (no offset) and `salt`. Implemented from the README's table
    /// only: no vector covers it, so only its CBOR shape is unit-tested.
    UntaggedIdentifier,
    /// vLLM 0.10.2–0.11.x: the integer `lora_int_id` (see
    /// [`LoraKey::int_id`]), the multimodal item's hash (its `identifier`)
    /// and `salt`. Implemented from the README's table only: no vector
    /// covers it, so only its CBOR shape is unit-tested.
    LegacyIntLora,
}

impl ExtraKeysFormat {
    /// The format of vLLM `major.minor.patch`, per the README's table, or
    /// `None` before 0.10.2, whose v1 block hash this crate does not model.
    /// Releases after the newest checked one (0.33) are assumed to keep the
    /// tagged format.
    pub fn for_vllm_version(major: u64, minor: u64, patch: u64) -> Option<Self> {
        match (major, minor) {
            (0, 0..=9) => None,
            (0, 10) if patch < 2 => None,
            (0, 10..=11) => Some(ExtraKeysFormat::LegacyIntLora),
            (0, 12..=18) => Some(ExtraKeysFormat::UntaggedIdentifier),
            (0, 19..=30) => Some(ExtraKeysFormat::Untagged),
            _ => Some(ExtraKeysFormat::Tagged),
        }
    }
}

/// The LoRA adapter a request runs with. Every block of the request gets a
/// LoRA extra key, so requests for different adapters never share cached
/// blocks; its shape depends on the [`ExtraKeysFormat`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoraKey {
    /// `LoRARequest.lora_name`: the adapter name clients put in `model`.
    pub name: String,
    /// `LoRARequest.lora_path`: where the engine loaded the adapter from.
    pub path: String,
    /// `LoRARequest.lora_int_id`, the engine's numeric adapter id. Only
    /// [`ExtraKeysFormat::LegacyIntLora`] hashes it, and needs it.
    pub int_id: Option<u64>,
}

impl LoraKey {
    /// An adapter known by name and path, without a `lora_int_id`: enough
    /// for every format but [`ExtraKeysFormat::LegacyIntLora`].
    pub fn new(name: impl Into<String>, path: impl Into<String>) -> Self {
        LoraKey {
            name: name.into(),
            path: path.into(),
            int_id: None,
        }
    }

    /// The same adapter with the engine's `lora_int_id`.
    pub fn with_int_id(self, int_id: u64) -> Self {
        LoraKey {
            int_id: Some(int_id),
            ..self
        }
    }
}

/// One multimodal placeholder in the prompt (an image, audio clip, ...).
/// Blocks that overlap it get a key naming it (with the offset in the block,
/// from vLLM 0.19 on), so that identical placeholder tokens for different
/// media hash differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultimodalItem {
    /// `MultiModalFeatureSpec.identifier`: the engine's content hash of the
    /// item (prefixed with the LoRA name when tower-connector LoRA is on).
    pub identifier: String,
    /// Index of the item's first placeholder token in the prompt.
    pub offset: u64,
    /// Number of placeholder tokens.
    pub length: u64,
}

/// Per-request inputs to the block hash besides the tokens.
///
/// An empty value (the [`Default`]) gives `null` extra keys on every block,
/// the plain text-only case, in every format.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtraKeys {
    /// The LoRA adapter, if the request uses one.
    pub lora: Option<LoraKey>,
    /// Multimodal items, sorted by offset and non-overlapping, as vLLM
    /// requires (it looks them up by bisection).
    pub multimodal: Vec<MultimodalItem>,
    /// The request's `cache_salt`. It only affects block 0, and an empty
    /// salt counts as none (vLLM tests the string's truthiness).
    pub cache_salt: Option<String>,
}

impl ExtraKeys {
    /// The salt as vLLM sees it: `None` for a missing or empty salt.
    pub(super) fn effective_salt(&self) -> Option<&str> {
        self.cache_salt.as_deref().filter(|s| !s.is_empty())
    }

    /// The multimodal items overlapping tokens `[start, end)`, chosen exactly
    /// like vLLM's `get_mm_features_in_window` (two bisections, then a slice).
    /// For sorted, non-overlapping, non-empty items this is also what the
    /// cursor walk of releases before it selects.
    pub(super) fn multimodal_in(&self, start: u64, end: u64) -> &[MultimodalItem] {
        let items = &self.multimodal;
        let lo = items.partition_point(|m| m.offset.saturating_add(m.length) <= start);
        let hi = items.partition_point(|m| m.offset < end);
        items.get(lo..hi).unwrap_or(&[])
    }
}

/// A LoRA request that cannot be hashed in
/// [`ExtraKeysFormat::LegacyIntLora`] because its `lora_int_id` is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("LoRA adapter {name:?} has no lora_int_id, which vLLM 0.10.2-0.11 hashes")]
pub struct MissingLoraIntId {
    /// The adapter's name.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, offset: u64, length: u64) -> MultimodalItem {
        MultimodalItem {
            identifier: id.into(),
            offset,
            length,
        }
    }

    #[test]
    fn versions_map_to_the_readme_table() {
        let f = ExtraKeysFormat::for_vllm_version;
        assert_eq!(f(0, 9, 2), None);
        assert_eq!(f(0, 10, 1), None);
        assert_eq!(f(0, 10, 2), Some(ExtraKeysFormat::LegacyIntLora));
        assert_eq!(f(0, 11, 2), Some(ExtraKeysFormat::LegacyIntLora));
        assert_eq!(f(0, 12, 0), Some(ExtraKeysFormat::UntaggedIdentifier));
        assert_eq!(f(0, 18, 1), Some(ExtraKeysFormat::UntaggedIdentifier));
        assert_eq!(f(0, 19, 0), Some(ExtraKeysFormat::Untagged));
        assert_eq!(f(0, 30, 3), Some(ExtraKeysFormat::Untagged));
        assert_eq!(f(0, 31, 0), Some(ExtraKeysFormat::Tagged));
        assert_eq!(f(1, 0, 0), Some(ExtraKeysFormat::Tagged));
        assert_eq!(ExtraKeysFormat::default(), ExtraKeysFormat::Tagged);
    }

    #[test]
    fn multimodal_window_matches_vllm_bisection() {
        let keys = ExtraKeys {
            multimodal: vec![item("a", 4, 12), item("b", 16, 20), item("c", 40, 4)],
            ..ExtraKeys::default()
        };
        let ids = |s, e| {
            keys.multimodal_in(s, e)
                .iter()
                .map(|m| m.identifier.as_str())
                .collect::<Vec<_>>()
        };
        // "a" ends exactly at 16, so it is not in block [16, 32).
        assert_eq!(ids(0, 16), ["a"]);
        assert_eq!(ids(16, 32), ["b"]);
        assert_eq!(ids(32, 48), ["b", "c"]);
        assert!(ids(48, 64).is_empty());
    }
}
