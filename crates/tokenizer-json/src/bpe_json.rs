//! [`BpeJson`]: the `model` object of a `tokenizer.json` whose model is BPE,
//! read straight into typed parts (vocabulary, merges, options).
//!
//! `tokenizers` reads the model through an untagged enum: it buffers the
//! whole object (the vocabulary and the merges, most of the file) into
//! serde's private content tree, copies it into a `serde_json::Value` for a
//! flattened field, and only then reads the BPE model from that `Value`.
//! Here the model is read once. The semantics are those of `tokenizers`'
//! BPE reader (`models/bpe/serialization.rs`): unknown keys are ignored, a
//! later key wins over an earlier one, an option given as `null` keeps the
//! builder's default, the merges are either all `"a b"` strings (a
//! `#version` line skipped, exactly one space each) or all `["a", "b"]`
//! pairs. Anything else (a `type` other than `"BPE"`, or none) is an error
//! here, so that the caller falls back to the plain load.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use tokenizers::models::bpe::{BPE, Merges, Vocab};

/// A BPE model as its JSON states it, before it is built.
pub(crate) struct BpeJson {
    /// Token → id.
    pub vocab: Vocab,
    /// The merges, in rank order.
    merges: Merges,
    dropout: Option<f32>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
    end_of_word_suffix: Option<String>,
    fuse_unk: Option<bool>,
    byte_fallback: Option<bool>,
    ignore_merges: Option<bool>,
}

impl BpeJson {
    /// The model, built by `tokenizers`' own builder (which checks the
    /// dropout and that every merge and its result are in the vocabulary).
    pub fn build(self) -> Result<BPE, String> {
        let mut builder = BPE::builder().vocab_and_merges(self.vocab, self.merges);
        if let Some(p) = self.dropout {
            builder = builder.dropout(p);
        }
        if let Some(unk) = self.unk_token {
            builder = builder.unk_token(unk);
        }
        if let Some(prefix) = self.continuing_subword_prefix {
            builder = builder.continuing_subword_prefix(prefix);
        }
        if let Some(suffix) = self.end_of_word_suffix {
            builder = builder.end_of_word_suffix(suffix);
        }
        if let Some(fuse) = self.fuse_unk {
            builder = builder.fuse_unk(fuse);
        }
        if let Some(fallback) = self.byte_fallback {
            builder = builder.byte_fallback(fallback);
        }
        if let Some(ignore) = self.ignore_merges {
            builder = builder.ignore_merges(ignore);
        }
        builder
            .build()
            .map_err(|e| format!("building the BPE model: {e}"))
    }
}

impl<'de> Deserialize<'de> for BpeJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(BpeVisitor)
    }
}

struct BpeVisitor;

impl<'de> Visitor<'de> for BpeVisitor {
    type Value = BpeJson;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a BPE model object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BpeJson, A::Error> {
        let mut typed = false;
        let mut vocab = None;
        let mut merges = None;
        let mut bpe = BpeJson {
            vocab: Vocab::default(),
            merges: Vec::new(),
            dropout: None,
            unk_token: None,
            continuing_subword_prefix: None,
            end_of_word_suffix: None,
            fuse_unk: None,
            byte_fallback: None,
            ignore_merges: None,
        };
        // Each option as `tokenizers` reads it: `null` leaves the default,
        // and a value given twice is the later one.
        fn set<T>(slot: &mut Option<T>, value: Option<T>) {
            if value.is_some() {
                *slot = value;
            }
        }
        while let Some(key) = map.next_key::<String>()? {
            match key.as_ref() {
                "type" => {
                    let t = map.next_value::<String>()?;
                    if t != "BPE" {
                        return Err(de::Error::custom(format!("model type {t:?}, not BPE")));
                    }
                    typed = true;
                }
                "vocab" => vocab = Some(map.next_value::<VocabList>()?.into_vocab()),
                "merges" => merges = Some(map.next_value::<MergeList>()?.0),
                "dropout" => set(&mut bpe.dropout, map.next_value()?),
                "unk_token" => set(&mut bpe.unk_token, map.next_value()?),
                "continuing_subword_prefix" => {
                    set(&mut bpe.continuing_subword_prefix, map.next_value()?)
                }
                "end_of_word_suffix" => set(&mut bpe.end_of_word_suffix, map.next_value()?),
                "fuse_unk" => set(&mut bpe.fuse_unk, map.next_value()?),
                "byte_fallback" => set(&mut bpe.byte_fallback, map.next_value()?),
                "ignore_merges" => set(&mut bpe.ignore_merges, map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !typed {
            return Err(de::Error::custom("the model has no \"type\": \"BPE\""));
        }
        match (vocab, merges) {
            (Some(vocab), Some(merges)) => {
                bpe.vocab = vocab;
                bpe.merges = merges;
                Ok(bpe)
            }
            _ => Err(de::Error::custom("the BPE model lacks its vocab or merges")),
        }
    }
}

/// The vocabulary's entries in file order, gathered before the map is
/// built so that it is built at its size (no rehashing as it grows).
struct VocabList(Vec<(String, u32)>);

impl VocabList {
    /// The map; a token given twice keeps its later id, as in a map read
    /// directly.
    fn into_vocab(self) -> Vocab {
        let mut vocab = Vocab::with_capacity(self.0.len());
        vocab.extend(self.0);
        vocab
    }
}

impl<'de> Deserialize<'de> for VocabList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(VocabVisitor)
    }
}

struct VocabVisitor;

impl<'de> Visitor<'de> for VocabVisitor {
    type Value = VocabList;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a vocabulary: token to id")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<VocabList, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(entry) = map.next_entry::<String, u32>()? {
            entries.push(entry);
        }
        Ok(VocabList(entries))
    }
}

/// The merges in either form, never both in one list.
struct MergeList(Merges);

impl<'de> Deserialize<'de> for MergeList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(MergeListVisitor)
    }
}

struct MergeListVisitor;

impl<'de> Visitor<'de> for MergeListVisitor {
    type Value = MergeList;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of merges")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MergeList, A::Error> {
        let mut merges = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut lines = None;
        while let Some(merge) = seq.next_element::<Merge>()? {
            let is_line = matches!(merge, Merge::Line(_));
            if *lines.get_or_insert(is_line) != is_line {
                return Err(de::Error::custom("the merges mix strings and pairs"));
            }
            match merge {
                Merge::Pair(a, b) => merges.push((a, b)),
                Merge::Line(None) => {}
                Merge::Line(Some(pair)) => merges.push(pair),
            }
        }
        Ok(MergeList(merges))
    }
}

/// One merge: a `["a", "b"]` pair, or an `"a b"` line (`None` for a
/// `#version` line, which `tokenizers` skips).
enum Merge {
    Pair(String, String),
    Line(Option<(String, String)>),
}

impl<'de> Deserialize<'de> for Merge {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MergeVisitor)
    }
}

struct MergeVisitor;

impl<'de> Visitor<'de> for MergeVisitor {
    type Value = Merge;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a merge: \"a b\" or [\"a\", \"b\"]")
    }

    fn visit_str<E: de::Error>(self, line: &str) -> Result<Merge, E> {
        if line.starts_with("#version") {
            return Ok(Merge::Line(None));
        }
        let mut parts = line.split(' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), None) => Ok(Merge::Line(Some((a.to_owned(), b.to_owned())))),
            _ => Err(E::custom(format!("merge {line:?} is not two tokens"))),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Merge, A::Error> {
        let mut next = || seq.next_element::<String>();
        let (Some(a), Some(b)) = (next()?, next()?) else {
            return Err(de::Error::custom("a merge pair has fewer than two tokens"));
        };
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("a merge pair has more than two tokens"));
        }
        Ok(Merge::Pair(a, b))
    }
}
