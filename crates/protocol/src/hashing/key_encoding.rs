//! Writing a request's [`ExtraKeys`] into each block's CBOR pre-image, in
//! the shape of the engine's [`ExtraKeysFormat`] (see `shared/vllm/README.md`,
//! "Extra keys per block").

use super::cbor;
use super::extra_keys::{ExtraKeys, ExtraKeysFormat, MissingLoraIntId};

/// One request's extra keys, ready to be written block by block in one
/// format: the LoRA key, identical on every block, is encoded once.
pub(super) struct RequestKeys<'a> {
    format: ExtraKeysFormat,
    keys: &'a ExtraKeys,
    lora: Option<Vec<u8>>,
    salt: Option<&'a str>,
}

impl<'a> RequestKeys<'a> {
    /// Prepares `keys` for `format`; fails only for a LoRA request without a
    /// `lora_int_id` in [`ExtraKeysFormat::LegacyIntLora`].
    pub(super) fn new(
        format: ExtraKeysFormat,
        keys: &'a ExtraKeys,
    ) -> Result<Self, MissingLoraIntId> {
        let lora = match &keys.lora {
            None => None,
            Some(l) => {
                let mut enc = Vec::with_capacity(l.name.len() + l.path.len() + 16);
                match format {
                    ExtraKeysFormat::Tagged => {
                        cbor::write_array_header(&mut enc, 3);
                        cbor::write_text(&mut enc, "lora");
                        cbor::write_text(&mut enc, &l.name);
                        cbor::write_text(&mut enc, &l.path);
                    }
                    ExtraKeysFormat::Untagged | ExtraKeysFormat::UntaggedIdentifier => {
                        cbor::write_text(&mut enc, &l.name);
                    }
                    ExtraKeysFormat::LegacyIntLora => {
                        let id = l.int_id.ok_or_else(|| MissingLoraIntId {
                            name: l.name.clone(),
                        })?;
                        cbor::write_uint(&mut enc, id);
                    }
                }
                Some(enc)
            }
        };
        Ok(RequestKeys {
            format,
            keys,
            lora,
            salt: keys.effective_salt(),
        })
    }

    /// Appends the extra keys of the block of tokens `[start, end)`: `null`
    /// if there are none, else an array in vLLM's order (LoRA, multimodal
    /// items, cache salt on block 0).
    pub(super) fn write_block(&self, buf: &mut Vec<u8>, start: u64, end: u64) {
        let mm = self.keys.multimodal_in(start, end);
        let salt = if start == 0 { self.salt } else { None };
        let n_extra = usize::from(self.lora.is_some()) + mm.len() + usize::from(salt.is_some());
        if n_extra == 0 {
            cbor::write_null(buf);
            return;
        }
        cbor::write_array_header(buf, n_extra);
        if let Some(enc) = &self.lora {
            buf.extend_from_slice(enc);
        }
        for item in mm {
            match self.format {
                ExtraKeysFormat::Tagged => {
                    cbor::write_array_header(buf, 3);
                    cbor::write_text(buf, "mm");
                    cbor::write_text(buf, &item.identifier);
                    write_offset_in_block(buf, item.offset, start);
                }
                ExtraKeysFormat::Untagged => {
                    cbor::write_array_header(buf, 2);
                    cbor::write_text(buf, &item.identifier);
                    write_offset_in_block(buf, item.offset, start);
                }
                ExtraKeysFormat::UntaggedIdentifier | ExtraKeysFormat::LegacyIntLora => {
                    cbor::write_text(buf, &item.identifier);
                }
            }
        }
        if let Some(s) = salt {
            if self.format == ExtraKeysFormat::Tagged {
                cbor::write_array_header(buf, 2);
                cbor::write_text(buf, "cache_salt");
            }
            cbor::write_text(buf, s);
        }
    }
}

/// Writes `offset - block_start`, which is negative for an item that began
/// in an earlier block, without overflowing for any pair of u64 values.
fn write_offset_in_block(out: &mut Vec<u8>, offset: u64, block_start: u64) {
    if offset >= block_start {
        cbor::write_uint(out, offset - block_start);
    } else {
        // offset - block_start = -1 - (block_start - offset - 1)
        cbor::write_negative(out, block_start - offset - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::{LoraKey, MultimodalItem};

    fn item(id: &str, offset: u64, length: u64) -> MultimodalItem {
        MultimodalItem {
            identifier: id.into(),
            offset,
            length,
        }
    }

    /// Every kind of key: a LoRA with an int id, two items in block [16, 32)
    /// (one began in block 0), and a salt.
    fn all_keys() -> ExtraKeys {
        ExtraKeys {
            lora: Some(LoraKey::new("ab", "/p").with_int_id(7)),
            multimodal: vec![item("x", 4, 20), item("y", 30, 4)],
            cache_salt: Some("s".into()),
        }
    }

    fn block(format: ExtraKeysFormat, keys: &ExtraKeys, start: u64) -> String {
        let mut out = Vec::new();
        RequestKeys::new(format, keys)
            .unwrap()
            .write_block(&mut out, start, start + 16);
        hex::encode(out)
    }

    #[test]
    fn tagged_shape() {
        let keys = all_keys();
        // (("lora", "ab", "/p"), ("mm", "x", 4), ("cache_salt", "s"))
        assert_eq!(
            block(ExtraKeysFormat::Tagged, &keys, 0),
            "83 83 646c6f7261 626162 622f70 83 626d6d 6178 04 82 6a63616368655f73616c74 6173"
                .replace(' ', "")
        );
        // (("lora", "ab", "/p"), ("mm", "x", -12), ("mm", "y", 14))
        assert_eq!(
            block(ExtraKeysFormat::Tagged, &keys, 16),
            "83 83 646c6f7261 626162 622f70 83 626d6d 6178 2b 83 626d6d 6179 0e".replace(' ', "")
        );
    }

    #[test]
    fn untagged_shape() {
        let keys = all_keys();
        // ("ab", ("x", 4), "s")
        assert_eq!(
            block(ExtraKeysFormat::Untagged, &keys, 0),
            "83 626162 82 6178 04 6173".replace(' ', "")
        );
        // ("ab", ("x", -12), ("y", 14))
        assert_eq!(
            block(ExtraKeysFormat::Untagged, &keys, 16),
            "83 626162 82 6178 2b 82 6179 0e".replace(' ', "")
        );
    }

    #[test]
    fn untagged_identifier_shape() {
        let keys = all_keys();
        // ("ab", "x", "s"), then ("ab", "x", "y")
        assert_eq!(
            block(ExtraKeysFormat::UntaggedIdentifier, &keys, 0),
            "83 626162 6178 6173".replace(' ', "")
        );
        assert_eq!(
            block(ExtraKeysFormat::UntaggedIdentifier, &keys, 16),
            "83 626162 6178 6179".replace(' ', "")
        );
    }

    #[test]
    fn legacy_int_lora_shape() {
        let keys = all_keys();
        // (7, "x", "s"), then (7, "x", "y")
        assert_eq!(
            block(ExtraKeysFormat::LegacyIntLora, &keys, 0),
            "83 07 6178 6173".replace(' ', "")
        );
        assert_eq!(
            block(ExtraKeysFormat::LegacyIntLora, &keys, 16),
            "83 07 6178 6179".replace(' ', "")
        );
        // A large id uses the shortest uint head.
        let big = ExtraKeys {
            lora: Some(LoraKey::new("ab", "/p").with_int_id(1000)),
            ..ExtraKeys::default()
        };
        assert_eq!(block(ExtraKeysFormat::LegacyIntLora, &big, 0), "811903e8");
        // Without the int id the engine's key is unknown.
        let no_id = ExtraKeys {
            lora: Some(LoraKey::new("ab", "/p")),
            ..ExtraKeys::default()
        };
        assert_eq!(
            RequestKeys::new(ExtraKeysFormat::LegacyIntLora, &no_id).err(),
            Some(MissingLoraIntId { name: "ab".into() })
        );
        // The other formats do not need it.
        assert_eq!(block(ExtraKeysFormat::Untagged, &no_id, 0), "81626162");
    }

    #[test]
    fn no_keys_is_null_in_every_format() {
        let salt_only = ExtraKeys {
            cache_salt: Some("s".into()),
            ..ExtraKeys::default()
        };
        for format in [
            ExtraKeysFormat::Tagged,
            ExtraKeysFormat::Untagged,
            ExtraKeysFormat::UntaggedIdentifier,
            ExtraKeysFormat::LegacyIntLora,
        ] {
            assert_eq!(block(format, &ExtraKeys::default(), 0), "f6");
            // The salt is only on block 0; an empty salt is no salt.
            assert_eq!(block(format, &salt_only, 16), "f6");
            let empty_salt = ExtraKeys {
                cache_salt: Some(String::new()),
                ..ExtraKeys::default()
            };
            assert_eq!(block(format, &empty_salt, 0), "f6");
        }
    }

    #[test]
    fn offset_in_block_can_be_negative() {
        let enc = |offset, start| {
            let mut out = Vec::new();
            write_offset_in_block(&mut out, offset, start);
            out
        };
        assert_eq!(enc(4, 0), [0x04]);
        assert_eq!(enc(4, 16), [0x2b]); // -12
        assert_eq!(
            enc(0, u64::MAX),
            [0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]
        );
        assert_eq!(
            enc(u64::MAX, 0),
            [0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
    }
}
