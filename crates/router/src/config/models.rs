//! The base models a router hashes prompts for ([`ModelConfig`]), from
//! `--model`/`--tokenizer-dir` and the TOML file's `[[models]]` array. A
//! model named by its Hugging Face id needs no tokenizer directory: its
//! files come from the Hugging Face cache or the hub (`crate::models::hub`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::models::{ModelConfig, hub};

/// One `[[models]]` entry of the TOML file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileModel {
    name: String,
    tokenizer_dir: Option<PathBuf>,
    revision: Option<String>,
    block_size: Option<usize>,
    hash_seed: Option<String>,
    #[serde(default, alias = "lora")]
    loras: Vec<String>,
}

/// The top-level settings a `[[models]]` entry falls back to.
pub(super) struct ModelDefaults {
    /// The top-level `block_size` (16 unless set).
    pub block_size: usize,
    /// The top-level `hash_seed`.
    pub hash_seed: Option<String>,
    /// The top-level `model_revision` (`main` unless set).
    pub revision: String,
}

/// The model of `--model`/`--tokenizer-dir`, if one is hashed: with a
/// tokenizer directory, or named by a Hugging Face id that no `[[models]]`
/// entry of `file` configures.
pub(super) fn single_model(
    model: &Option<String>,
    tokenizer_dir: &Option<PathBuf>,
    loras: &[(String, String)],
    defaults: &ModelDefaults,
    file: &[FileModel],
) -> anyhow::Result<Option<ModelConfig>> {
    let dir = match (model, tokenizer_dir) {
        (Some(_), Some(dir)) => dir.clone(),
        (Some(name), None) if hub::is_hub_id(name) && !file.iter().any(|m| m.name == *name) => {
            hub_dir(name, &defaults.revision)?
        }
        _ if !loras.is_empty() => {
            bail!("--lora needs --model and --tokenizer-dir (or put `loras` in a [[models]] entry)")
        }
        _ => return Ok(None),
    };
    Ok(model.as_ref().map(|name| ModelConfig {
        name: name.clone(),
        tokenizer_dir: dir,
        block_size: defaults.block_size,
        hash_seed: defaults.hash_seed.clone(),
        loras: loras.to_vec(),
    }))
}

fn hub_dir(id: &str, revision: &str) -> anyhow::Result<PathBuf> {
    hub::tokenizer_dir(id, revision, &hub::HubSettings::from_env()).with_context(|| {
        format!("model {id:?}: no tokenizer directory given, and none from the Hugging Face hub")
    })
}

/// `single` (from `--model`/`--tokenizer-dir`) first, then the file's
/// entries, each checked: a valid, unique name (adapters included), a
/// positive block size, a tokenizer directory that holds `tokenizer.json`.
pub(super) fn resolve_models(
    single: Option<ModelConfig>,
    file: Vec<FileModel>,
    defaults: &ModelDefaults,
) -> anyhow::Result<Vec<ModelConfig>> {
    let mut models: Vec<ModelConfig> = single.into_iter().collect();
    for (i, m) in file.into_iter().enumerate() {
        let what = format!("[[models]] entry {} ({:?})", i + 1, m.name);
        let tokenizer_dir = match m.tokenizer_dir {
            Some(dir) => dir,
            None if hub::is_hub_id(&m.name) => {
                hub_dir(&m.name, m.revision.as_deref().unwrap_or(&defaults.revision))
                    .with_context(|| what.clone())?
            }
            None => bail!(
                "{what}: tokenizer_dir is required unless the name is a Hugging Face id (org/name)"
            ),
        };
        models.push(ModelConfig {
            loras: parse_loras(m.loras).with_context(|| what.clone())?,
            name: m.name,
            tokenizer_dir,
            block_size: m.block_size.unwrap_or(defaults.block_size),
            hash_seed: m.hash_seed.or_else(|| defaults.hash_seed.clone()),
        });
    }
    let mut names = HashSet::new();
    for m in &models {
        protocol::check_name("model", &m.name).with_context(|| format!("model {:?}", m.name))?;
        if !names.insert(m.name.as_str()) {
            bail!(
                "model {:?} is configured twice (--model/--tokenizer-dir and [[models]] names must be unique)",
                m.name
            );
        }
        if m.block_size == 0 {
            bail!("model {:?}: block_size must be positive", m.name);
        }
        check_tokenizer_dir(&m.name, &m.tokenizer_dir)?;
    }
    for m in &models {
        for (adapter, _) in &m.loras {
            protocol::check_name("model", adapter)
                .with_context(|| format!("LoRA adapter {adapter:?} of {:?}", m.name))?;
            if !names.insert(adapter.as_str()) {
                bail!(
                    "LoRA adapter {adapter:?} of model {:?} reuses a model or adapter name",
                    m.name
                );
            }
        }
    }
    Ok(models)
}

fn check_tokenizer_dir(model: &str, dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        bail!(
            "model {model:?}: tokenizer_dir {} is not a directory",
            dir.display()
        );
    }
    if !dir.join("tokenizer.json").is_file() {
        bail!(
            "model {model:?}: tokenizer_dir {} has no tokenizer.json",
            dir.display()
        );
    }
    Ok(())
}

/// `--lora NAME=PATH` specs as (name, path).
pub(super) fn parse_loras(specs: Vec<String>) -> anyhow::Result<Vec<(String, String)>> {
    specs
        .into_iter()
        .map(|s| match s.split_once('=') {
            Some((name, path)) if !name.is_empty() && !path.is_empty() => {
                Ok((name.to_owned(), path.to_owned()))
            }
            _ => bail!("--lora {s:?}: expected NAME=PATH"),
        })
        .collect()
}
