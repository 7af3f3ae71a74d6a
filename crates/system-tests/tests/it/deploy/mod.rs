//! Static checks of the deployment, without a Docker engine:
//! `docker-compose.yml` against the official compose-spec JSON schema
//! (`deploy/compose-spec.schema.json`) and against the fleet's topology,
//! `deploy/haproxy.cfg`, the `Dockerfile` and the env files. HAProxy itself
//! parses `deploy/haproxy.cfg` in `tests/fleet_script.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

mod balancer;
mod compose;
mod dockerfile;
mod secrets;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

// ---------------------------------------------------------------------------
// docker-compose.yml as compose reads it

/// The compose file as `docker compose` sees it with an empty environment:
/// YAML merge keys applied, every `${VAR:-default}` replaced by its default.
fn compose() -> Value {
    let text = read("docker-compose.yml");
    let mut yaml: serde_norway::Value =
        serde_norway::from_str(&text).expect("docker-compose.yml is not YAML");
    yaml.apply_merge().expect("YAML merge keys");
    let mut v = serde_json::to_value(&yaml).expect("docker-compose.yml as JSON");
    interpolate_tree(&mut v);
    v
}

fn interpolate_tree(v: &mut Value) {
    match v {
        Value::String(s) => *s = interpolate(s),
        Value::Array(a) => a.iter_mut().for_each(interpolate_tree),
        Value::Object(m) => m.values_mut().for_each(interpolate_tree),
        _ => {}
    }
}

/// Compose's interpolation with no variable set: `$$` is a `$`,
/// `${NAME:-default}` and `${NAME-default}` are their default. Anything
/// else (`$NAME`, `${NAME}`, `${NAME:?}`) would need the operator to set a
/// variable, so it fails the test: the file must work as it is.
fn interpolate(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('{') {
            let end = r
                .find('}')
                .unwrap_or_else(|| panic!("unclosed ${{ in {s:?}"));
            let expr = &r[..end];
            let default = expr
                .split_once(":-")
                .or_else(|| expr.split_once('-'))
                .map(|(_, d)| d)
                .unwrap_or_else(|| panic!("{s:?}: ${{{expr}}} has no default"));
            out.push_str(default);
            rest = &r[end + 1..];
        } else {
            panic!("{s:?}: a bare $VARIABLE has no default (write ${{VAR:-default}} or $$)");
        }
    }
    out.push_str(rest);
    out
}

fn services(c: &Value) -> &serde_json::Map<String, Value> {
    c["services"].as_object().expect("services")
}

fn service<'a>(c: &'a Value, name: &str) -> &'a Value {
    services(c)
        .get(name)
        .unwrap_or_else(|| panic!("no service {name:?}"))
}

/// `command`/`entrypoint`: a list, or a string split as a shell would
/// (enough for the plain words these files use).
fn words(v: &Value) -> Vec<String> {
    match v {
        Value::Null => Vec::new(),
        Value::String(s) => s.split_whitespace().map(str::to_owned).collect(),
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        other => panic!("not a command: {other}"),
    }
}

/// The value of `--name` in `args` (`--name value` or `--name=value`).
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(&prefix)
        }
    })
}

/// `environment` as a map (dict or `KEY=VALUE` list).
fn env(svc: &Value) -> BTreeMap<String, String> {
    match &svc["environment"] {
        Value::Null => BTreeMap::new(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect(),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                let s = x.as_str().expect("environment entry");
                let (k, v) = s.split_once('=').unwrap_or((s, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect(),
        other => panic!("environment: {other}"),
    }
}

/// `env_file` paths (string, list of strings, or list of `{path}`).
fn env_files(svc: &Value) -> Vec<String> {
    match &svc["env_file"] {
        Value::Null => Vec::new(),
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => s.clone(),
                Value::Object(o) => o["path"].as_str().expect("env_file path").to_owned(),
                other => panic!("env_file: {other}"),
            })
            .collect(),
        other => panic!("env_file: {other}"),
    }
}

#[derive(Debug)]
struct Mount {
    kind: &'static str,
    source: String,
    target: String,
}

/// A service's `volumes`, short (`SRC:DST[:MODE]`) or long syntax.
fn mounts(svc: &Value) -> Vec<Mount> {
    let Some(list) = svc["volumes"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .map(|m| match m {
            Value::String(s) => {
                let parts: Vec<&str> = s.split(':').collect();
                assert!(parts.len() >= 2, "anonymous volume {s:?}");
                let source = parts[0].to_owned();
                let kind = if source.starts_with(['.', '/', '~']) {
                    "bind"
                } else {
                    "volume"
                };
                Mount {
                    kind,
                    source,
                    target: parts[1].to_owned(),
                }
            }
            Value::Object(o) => {
                let kind = match o["type"].as_str().expect("volume type") {
                    "bind" => "bind",
                    "volume" => "volume",
                    other => panic!("unexpected mount type {other}"),
                };
                Mount {
                    kind,
                    source: o["source"].as_str().expect("volume source").to_owned(),
                    target: o["target"].as_str().expect("volume target").to_owned(),
                }
            }
            other => panic!("volume: {other}"),
        })
        .collect()
}

/// Published ports as (host ip, host port, container port).
fn published(svc: &Value) -> Vec<(String, String, String)> {
    let Some(list) = svc["ports"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .map(|p| match p {
            Value::String(s) => {
                let parts: Vec<&str> = s.split(':').collect();
                match parts.as_slice() {
                    [ip, host, container] => {
                        (ip.to_string(), host.to_string(), container.to_string())
                    }
                    [host, container] => (String::new(), host.to_string(), container.to_string()),
                    [container] => (String::new(), String::new(), container.to_string()),
                    _ => panic!("port {s:?}"),
                }
            }
            Value::Object(o) => (
                o.get("host_ip")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                o.get("published")
                    .map(|v| v.as_str().map_or(v.to_string(), str::to_owned))
                    .unwrap_or_default(),
                o["target"].to_string(),
            ),
            other => panic!("port: {other}"),
        })
        .collect()
}

fn depends_on(svc: &Value) -> BTreeSet<String> {
    match &svc["depends_on"] {
        Value::Null => BTreeSet::new(),
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_owned()).collect(),
        Value::Object(m) => m.keys().cloned().collect(),
        other => panic!("depends_on: {other}"),
    }
}

// ---------------------------------------------------------------------------
// Dockerfile

#[derive(Debug)]
struct Stage {
    image: String,
    name: Option<String>,
    /// Instructions as (KEYWORD, rest), continuations joined.
    instructions: Vec<(String, String)>,
}

fn dockerfile() -> Vec<Stage> {
    let text = read("Dockerfile");
    let mut logical: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            logical.push(std::mem::take(&mut cur));
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    for l in logical {
        let (kw, rest) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
        let kw = kw.to_ascii_uppercase();
        let rest = rest.trim().to_owned();
        if kw == "FROM" {
            let ws: Vec<&str> = rest.split_whitespace().collect();
            let name = match ws.as_slice() {
                [_, as_, n] if as_.eq_ignore_ascii_case("as") => Some(n.to_string()),
                [_] => None,
                _ => panic!("FROM {rest}"),
            };
            stages.push(Stage {
                image: ws[0].to_owned(),
                name,
                instructions: Vec::new(),
            });
        } else {
            stages
                .last_mut()
                .expect("an instruction before FROM")
                .instructions
                .push((kw, rest));
        }
    }
    stages
}

fn instructions<'a>(s: &'a Stage, kw: &str) -> Vec<&'a str> {
    s.instructions
        .iter()
        .filter(|(k, _)| k == kw)
        .map(|(_, r)| r.as_str())
        .collect()
}

/// The router service's listen port, from PREFIX_ROUTER_LISTEN.
fn router_port(c: &Value) -> u16 {
    let listen = env(service(c, "router"))
        .remove("PREFIX_ROUTER_LISTEN")
        .expect("router: PREFIX_ROUTER_LISTEN");
    let (host, port) = listen.rsplit_once(':').expect("LISTEN is ADDR:PORT");
    assert_eq!(
        host, "0.0.0.0",
        "a router in a container must listen beyond loopback"
    );
    port.parse().expect("listen port")
}
