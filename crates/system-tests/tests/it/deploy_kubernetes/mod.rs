//! Checks of `deploy/kubernetes/` (no cluster here): every kustomization
//! is rendered by the real `kubectl kustomize` (what `kubectl apply -k`
//! applies; the test fails, saying so, without kubectl, which
//! `scripts/install-deps.sh` installs) and what it renders is checked:
//! every object has a known apiVersion and kind, a valid name, and matches
//! Kubernetes' strict JSON schema (`schemas/`); selectors select pods;
//! Services, probes and the autoscaler point at ports and workloads that
//! exist; secrets referenced exist with the key; and every flag and
//! `PREFIX_ROUTER_*` variable given to a `prefix-router` container is one
//! the binary's `--help` lists.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

mod checks;
mod renderings;
mod schema;
mod worker_drain;
use checks::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

/// Every directory under `deploy/kubernetes` holding a kustomization, as
/// paths relative to it, sorted.
fn kustomizations() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("kustomization.yaml").is_file() {
            out.push(dir.to_owned());
        }
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            }
        }
    }
    let mut dirs = Vec::new();
    walk(&root(), &mut dirs);
    let mut names: Vec<String> = dirs
        .iter()
        .map(|d| d.strip_prefix(root()).unwrap().to_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The objects `kubectl kustomize` renders for `dir`, as JSON.
fn build(dir: &Path) -> Vec<Value> {
    let text = fleet::kustomize::render(dir).unwrap_or_else(|e| panic!("{e:#}"));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| {
            let v = serde_norway::Value::deserialize(d).unwrap();
            serde_json::to_value(&v).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

const KINDS: [(&str, &str); 10] = [
    ("v1", "Service"),
    ("v1", "Secret"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
];

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [Value], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).and_then(Value::as_str)
}
