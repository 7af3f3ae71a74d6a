//! [`context_length`]: how many tokens a model takes, from the files of its
//! tokenizer directory, as the engine would derive it; the router's
//! default `--max-prompt-tokens`.

use std::path::Path;

use serde_json::Value;

/// Hugging Face writes `model_max_length` as 1e30 when it is not set: a
/// value past this is no length.
const UNSET: f64 = 1e12;

/// The largest context the model's files allow: `config.json`'s
/// `max_position_embeddings`, stretched by its `rope_scaling` factor (as
/// vLLM stretches it for YaRN and the like, from the original length when
/// given), and `tokenizer_config.json`'s `model_max_length`. The largest
/// wins, so that no prompt the engine could take is refused; `None` when
/// neither file names one.
pub fn context_length(dir: &Path) -> Option<u64> {
    let read = |name: &str| -> Option<Value> {
        serde_json::from_slice(&std::fs::read(dir.join(name)).ok()?).ok()
    };
    let mut found: Vec<f64> = Vec::new();
    if let Some(config) = read("config.json") {
        // Multimodal configs keep the language model's in text_config.
        let text = config.get("text_config").unwrap_or(&config);
        let positions = text.get("max_position_embeddings").and_then(Value::as_f64);
        found.extend(positions);
        if let Some(rope) = text.get("rope_scaling").filter(|r| r.is_object()) {
            let factor = rope.get("factor").and_then(Value::as_f64).unwrap_or(1.0);
            let original = rope
                .get("original_max_position_embeddings")
                .and_then(Value::as_f64)
                .or(positions);
            found.extend(original.map(|o| o * factor.max(1.0)));
        }
    }
    if let Some(tokenizer) = read("tokenizer_config.json") {
        found.extend(tokenizer.get("model_max_length").and_then(Value::as_f64));
    }
    found
        .into_iter()
        .filter(|n| n.is_finite() && *n >= 1.0 && *n < UNSET)
        .map(|n| n as u64)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in files {
            std::fs::write(dir.path().join(name), body).unwrap();
        }
        dir
    }

    #[test]
    fn the_largest_length_the_files_allow() {
        let none = dir_with(&[]);
        assert_eq!(context_length(none.path()), None);
        let unset = dir_with(&[("tokenizer_config.json", r#"{"model_max_length": 1e30}"#)]);
        assert_eq!(context_length(unset.path()), None);
        let both = dir_with(&[
            ("config.json", r#"{"max_position_embeddings": 40960}"#),
            ("tokenizer_config.json", r#"{"model_max_length": 131072}"#),
        ]);
        assert_eq!(context_length(both.path()), Some(131_072));
        let yarn = dir_with(&[(
            "config.json",
            r#"{"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}"#,
        )]);
        assert_eq!(context_length(yarn.path()), Some(131_072));
        let nested = dir_with(&[(
            "config.json",
            r#"{"text_config": {"max_position_embeddings": 8192}}"#,
        )]);
        assert_eq!(context_length(nested.path()), Some(8192));
    }
}
