//! Static checks of the deployment, without a Docker engine:
//! `docker-compose.yml` against the official compose-spec JSON schema
//! (`deploy/compose-spec.schema.json`) and against the fleet's topology,
//! `deploy/haproxy.cfg`, the `Dockerfile` and the env files. HAProxy itself
//! parses `deploy/haproxy.cfg` in `tests/fleet_script.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

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

/// `host:port` of an `http://host:port[/...]` or `redis://host:port` URL.
fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").expect("URL with a scheme").1;
    let authority = rest.split('/').next().unwrap();
    assert!(!authority.contains('@'), "credentials in {url:?}");
    let (h, p) = authority.rsplit_once(':').expect("URL with a port");
    (h.to_owned(), p.parse().expect("port"))
}

/// The simulated workers: services whose entrypoint is `sim-worker`.
fn sim_workers(c: &Value) -> Vec<(&String, &Value)> {
    services(c)
        .iter()
        .filter(|(_, s)| words(&s["entrypoint"]).first().map(String::as_str) == Some("sim-worker"))
        .collect()
}

// ---------------------------------------------------------------------------
// deploy/haproxy.cfg

#[derive(Debug)]
struct Section {
    kind: String,
    name: String,
    lines: Vec<Vec<String>>,
}

impl Section {
    fn directives(&self, name: &str) -> Vec<&Vec<String>> {
        self.lines.iter().filter(|l| l[0] == name).collect()
    }
}

/// Sections (an unindented keyword line, then its indented directives),
/// comments dropped, words split on blanks.
fn haproxy_sections() -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for raw in read("deploy/haproxy.cfg").lines() {
        let line = raw.split('#').next().unwrap();
        let ws: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        if ws.is_empty() {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            sections
                .last_mut()
                .expect("a directive before any section")
                .lines
                .push(ws);
        } else {
            sections.push(Section {
                kind: ws[0].clone(),
                name: ws.get(1).cloned().unwrap_or_default(),
                lines: Vec::new(),
            });
        }
    }
    sections
}

fn section<'a>(all: &'a [Section], kind: &str, name: &str) -> &'a Section {
    all.iter()
        .find(|s| s.kind == kind && s.name == name)
        .unwrap_or_else(|| panic!("haproxy.cfg has no `{kind} {name}`"))
}

fn bind_port(s: &Section) -> u16 {
    let binds = s.directives("bind");
    assert_eq!(binds.len(), 1, "`{} {}`: one bind", s.kind, s.name);
    binds[0][1]
        .rsplit_once(':')
        .expect("bind ADDR:PORT")
        .1
        .parse()
        .expect("bind port")
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

fn cargo_toml() -> toml::Value {
    toml::from_str(&read("Cargo.toml")).expect("Cargo.toml")
}

/// Every binary of the workspace, with the package it belongs to: the
/// `[[bin]]` entries of each member, and its `src/main.rs` when no entry
/// names it (Cargo's implicit binary).
fn workspace_bins() -> BTreeMap<String, String> {
    let manifest = cargo_toml();
    let members = manifest["workspace"]["members"]
        .as_array()
        .expect("members");
    let mut bins = BTreeMap::new();
    for m in members {
        let member = m.as_str().expect("member path");
        let toml: toml::Value =
            toml::from_str(&read(&format!("{member}/Cargo.toml"))).expect("member Cargo.toml");
        let package = toml["package"]["name"]
            .as_str()
            .expect("package name")
            .to_owned();
        let mut main_named = false;
        for b in toml
            .get("bin")
            .and_then(|b| b.as_array())
            .into_iter()
            .flatten()
        {
            main_named |= b.get("path").and_then(|p| p.as_str()) == Some("src/main.rs");
            bins.insert(
                b["name"].as_str().expect("bin name").to_owned(),
                package.clone(),
            );
        }
        let autobins = toml["package"]
            .get("autobins")
            .and_then(|a| a.as_bool())
            .unwrap_or(true);
        if !main_named && autobins && root().join(member).join("src/main.rs").is_file() {
            bins.insert(package.clone(), package);
        }
    }
    bins
}

/// The packages a `cargo build` command line selects with `-p`/`--package`,
/// or `None` when it names none (or says `--workspace`): then every member
/// is a candidate and `--bin` alone picks the binaries.
fn selected_packages(cmd: &str) -> Option<BTreeSet<String>> {
    // Only the `cargo build` itself: `mkdir -p` after `&&` selects nothing.
    let from = cmd.find("cargo build").expect("a cargo build command");
    let words: Vec<&str> = cmd[from..]
        .split_whitespace()
        .take_while(|w| !matches!(*w, "&&" | "||" | ";" | "|"))
        .collect();
    let mut packages = BTreeSet::new();
    for (i, w) in words.iter().enumerate() {
        if *w == "--workspace" || *w == "--all" {
            return None;
        }
        if *w == "-p" || *w == "--package" {
            packages.insert(words.get(i + 1).expect("a package after -p").to_string());
        } else if let Some(p) = w.strip_prefix("--package=") {
            packages.insert(p.to_owned());
        } else if let Some(p) = w.strip_prefix("-p").filter(|p| !p.is_empty()) {
            packages.insert(p.to_owned());
        }
    }
    (!packages.is_empty()).then_some(packages)
}

/// Every `PREFIX_ROUTER_*` variable the router reads: the `env = "…"` of
/// its flags and the log filter.
fn router_env_vars() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let config = root().join("crates/router/src/config");
    let mut files: Vec<String> = std::fs::read_dir(&config)
        .unwrap()
        .map(|e| {
            format!(
                "crates/router/src/config/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .collect();
    files.push("crates/router/src/main.rs".into());
    files.push("crates/router/src/telemetry.rs".into());
    for file in &files {
        let text = read(file);
        for (i, _) in text.match_indices("\"PREFIX_ROUTER_") {
            let name: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            names.insert(name);
        }
    }
    assert!(names.contains("PREFIX_ROUTER_VALKEY"), "{names:?}");
    names
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

// ---------------------------------------------------------------------------
// The tests

#[test]
fn compose_file_is_valid_against_the_compose_spec_schema() {
    let schema: Value =
        serde_json::from_str(&read("deploy/compose-spec.schema.json")).expect("schema JSON");
    let url = "file:///compose-spec.schema.json";
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(url, schema).expect("schema resource");
    let mut schemas = boon::Schemas::new();
    let idx = compiler
        .compile(url, &mut schemas)
        .expect("schema compiles");
    let doc = compose();
    if let Err(e) = schemas.validate(&doc, idx) {
        panic!("docker-compose.yml does not match the compose spec:\n{e:#}");
    }
    // The validator is live: a typo'd service key is refused.
    let mut bad = doc.clone();
    bad["services"]["router"]["enviroment"] = serde_json::json!({"A": "b"});
    assert!(
        schemas.validate(&bad, idx).is_err(),
        "schema accepts anything"
    );
}

#[test]
fn valkey_keeps_an_append_only_file_on_a_named_volume() {
    let c = compose();
    let v = service(&c, "valkey");
    let image = v["image"].as_str().expect("valkey image");
    assert!(image.starts_with("valkey/valkey:8"), "image {image}");
    let cmd = words(&v["command"]);
    let appendonly = cmd
        .windows(2)
        .any(|w| w[0] == "--appendonly" && w[1] == "yes");
    assert!(appendonly, "valkey without AOF: {cmd:?}");
    let data = mounts(v)
        .into_iter()
        .find(|m| m.target == "/data")
        .expect("valkey: a volume at /data (the image's working directory)");
    assert_eq!(data.kind, "volume", "valkey data on a named volume");
    assert!(
        c["volumes"].get(&data.source).is_some(),
        "volume {} is not declared at the top level",
        data.source
    );
    let test = words(&v["healthcheck"]["test"]);
    assert!(
        test.iter().any(|w| w.contains("ping")),
        "valkey healthcheck: {test:?}"
    );
    assert!(
        published(v).is_empty(),
        "valkey must not be published on the host"
    );
}

#[test]
fn routers_scale_freely_and_take_their_config_from_the_environment() {
    let c = compose();
    let r = service(&c, "router");
    assert!(
        r.get("ports").is_none(),
        "a fixed host port prevents --scale router=N"
    );
    assert!(
        r.get("container_name").is_none(),
        "a container name prevents --scale"
    );
    assert!(
        r["build"].is_string() || r["build"].is_object(),
        "router is built here"
    );
    assert_eq!(words(&r["command"]), ["serve"]);

    let e = env(r);
    let known = router_env_vars();
    for k in e.keys().filter(|k| k.starts_with("PREFIX_ROUTER_")) {
        assert!(known.contains(k), "the router reads no {k}");
    }
    router_port(&c);
    let (vhost, _) = host_port(&e["PREFIX_ROUTER_VALKEY"]);
    assert_eq!(vhost, "valkey", "routers use the compose Valkey");
    assert!(depends_on(r).contains("valkey"));
    assert!(!e["PREFIX_ROUTER_MODEL"].is_empty());
    let tok = &e["PREFIX_ROUTER_TOKENIZER_DIR"];
    assert!(
        mounts(r)
            .iter()
            .any(|m| &m.target == tok && m.kind == "bind"),
        "the tokenizer dir {tok} is not mounted into the router"
    );
    assert!(
        env_files(r)
            .iter()
            .any(|f| f.trim_start_matches("./") == ".env"),
        "router: the token comes from env_file .env"
    );
}

#[test]
fn the_balancer_is_tcp_and_finds_the_router_replicas_through_docker_dns() {
    let c = compose();
    let b = service(&c, "balancer");
    assert_eq!(b["image"], "haproxy:2.8");
    let cfg_mount = mounts(b)
        .into_iter()
        .find(|m| m.target == "/usr/local/etc/haproxy/haproxy.cfg")
        .expect("balancer: haproxy.cfg mounted at the image's default path");
    assert_eq!(
        cfg_mount.source.trim_start_matches("./"),
        "deploy/haproxy.cfg"
    );
    assert!(depends_on(b).contains("router"));

    let cfg = haproxy_sections();
    let defaults = section(&cfg, "defaults", "");
    assert!(
        defaults.lines.iter().any(|l| l == &["mode", "tcp"]),
        "defaults: mode tcp"
    );
    // Every proxy but the stats page stays in TCP mode.
    for s in cfg
        .iter()
        .filter(|s| s.kind != "listen" || s.name != "stats")
    {
        for m in s.directives("mode") {
            assert_eq!(m[1], "tcp", "`{} {}` is not TCP", s.kind, s.name);
        }
    }
    let frontends: Vec<&Section> = cfg.iter().filter(|s| s.kind == "frontend").collect();
    assert_eq!(frontends.len(), 1, "one frontend");
    let fe = frontends[0];
    let fe_port = bind_port(fe);
    let ports = published(b);
    assert!(
        ports
            .iter()
            .any(|(ip, _, container)| container == &fe_port.to_string() && ip == "127.0.0.1"),
        "the frontend port {fe_port} is published on 127.0.0.1: {ports:?}"
    );
    for (ip, _, _) in &ports {
        assert_eq!(
            ip, "127.0.0.1",
            "balancer ports are published on loopback only"
        );
    }
    let backend_name = &fe.directives("default_backend")[0][1];
    let be = section(&cfg, "backend", backend_name);
    let templates = be.directives("server-template");
    assert_eq!(
        templates.len(),
        1,
        "backend {backend_name}: one server-template"
    );
    let t = templates[0];
    let (host, port) = t[3].rsplit_once(':').expect("server-template ADDR:PORT");
    assert_eq!(host, "router", "the template resolves the `router` service");
    assert_eq!(port.parse::<u16>().unwrap(), router_port(&c));
    let count = t[2].rsplit('-').next().unwrap().parse::<u32>().unwrap();
    assert!(count >= 8, "room for at least 8 routers, got {count}");
    let opts = |l: &Vec<String>| l.iter().skip(1).cloned().collect::<Vec<_>>();
    let mut server_opts = opts(t);
    for d in be.directives("default-server") {
        server_opts.extend(opts(d));
    }
    assert!(
        server_opts.contains(&"check".to_owned()),
        "routers are health-checked"
    );
    let resolver = server_opts
        .windows(2)
        .find(|w| w[0] == "resolvers")
        .map(|w| w[1].clone())
        .expect("server-template uses a resolvers section");
    for s in [be, defaults] {
        assert!(
            s.directives("option").iter().all(|o| o[1] != "httpchk"),
            "TCP health checks, not HTTP ones"
        );
    }
    let res = section(&cfg, "resolvers", &resolver);
    assert!(
        res.directives("nameserver")
            .iter()
            .any(|n| n[2] == "127.0.0.11:53"),
        "resolvers {resolver}: Docker's DNS at 127.0.0.11:53"
    );
    // fleet.sh swaps the docker-only block and the template for static
    // servers: the markers must be there, around the resolvers section.
    let text = read("deploy/haproxy.cfg");
    let begin = text
        .find("# --- docker-only begin ---")
        .expect("begin marker");
    let end = text.find("# --- docker-only end ---").expect("end marker");
    let resolvers_at = text.find("\nresolvers ").expect("resolvers section");
    assert!(begin < resolvers_at && resolvers_at < end);
}

#[test]
fn workers_are_reachable_and_report_through_the_balancer() {
    let c = compose();
    let workers = sim_workers(&c);
    assert!(
        workers.len() >= 2,
        "a fleet has several workers: {}",
        workers.len()
    );
    let fe_port = bind_port(
        haproxy_sections()
            .iter()
            .find(|s| s.kind == "frontend")
            .unwrap(),
    );
    let router = service(&c, "router");
    let model = env(router)["PREFIX_ROUTER_MODEL"].clone();
    let mut ids = BTreeSet::new();
    for (name, w) in workers {
        let args = words(&w["command"]);
        let get = |f: &str| flag(&args, f).unwrap_or_else(|| panic!("{name}: no {f}: {args:?}"));
        assert_eq!(
            get("--fleet-url"),
            format!("http://balancer:{fe_port}"),
            "{name} reports through the balancer"
        );
        assert_eq!(
            get("--host"),
            "0.0.0.0",
            "{name} must be reachable by the routers"
        );
        let port: u16 = get("--port").parse().expect("--port");
        assert_eq!(
            get("--advertise-url"),
            format!("http://{name}:{port}"),
            "{name} advertises its service name and port"
        );
        assert_eq!(get("--model"), model, "{name} serves the routers' model");
        let tok = get("--tokenizer-dir");
        assert!(
            mounts(w)
                .iter()
                .any(|m| m.target == tok && m.kind == "bind"),
            "{name}: tokenizer {tok} not mounted"
        );
        assert!(
            ids.insert(get("--worker-id").to_owned()),
            "{name}: duplicate worker id"
        );
        assert!(
            env_files(w)
                .iter()
                .any(|f| f.trim_start_matches("./") == ".env"),
            "{name}: the token comes from env_file .env"
        );
        assert_eq!(
            w["image"], router["image"],
            "{name} runs the router's image"
        );
        assert!(w.get("build").is_some(), "{name}: the image is built here");
        assert!(
            depends_on(w).contains("balancer"),
            "{name} depends on the balancer"
        );
        assert!(w.get("container_name").is_none());
    }
}

#[test]
fn no_secret_is_in_the_compose_file_the_image_or_git() {
    let c = compose();
    // A variable named like a secret: a word TOKEN, PASSWORD, … in its name.
    let secretish = |k: &str| {
        let k = k.to_ascii_uppercase();
        k.ends_with("API_KEY")
            || k.split('_').any(|w| {
                [
                    "TOKEN",
                    "PASSWORD",
                    "PASSWD",
                    "PASS",
                    "SECRET",
                    "CREDENTIALS",
                ]
                .contains(&w)
            })
    };
    assert!(secretish("PREFIX_ROUTER_INTERNAL_TOKEN") && !secretish("PREFIX_ROUTER_TOKENIZER_DIR"));
    for (name, s) in services(&c) {
        for (k, v) in env(s) {
            assert!(
                !secretish(&k),
                "{name}: {k}={v} in the compose file; use .env"
            );
        }
        for field in ["command", "entrypoint"] {
            let ws = words(&s[field]);
            assert!(
                !ws.iter().any(|w| w.starts_with("--internal-token")),
                "{name}: the token on a command line"
            );
        }
        if let Some(args) = s["build"].get("args") {
            panic!("{name}: build args {args} (nothing is baked into the image)");
        }
    }
    fn no_credentials(v: &Value) {
        match v {
            Value::String(s) => {
                if let Some((_, rest)) = s.split_once("://") {
                    let authority = rest.split('/').next().unwrap();
                    assert!(!authority.contains('@'), "credentials in a URL: {s}");
                }
            }
            Value::Array(a) => a.iter().for_each(no_credentials),
            Value::Object(m) => m.values().for_each(no_credentials),
            _ => {}
        }
    }
    no_credentials(&c);

    // .env is the operator's: ignored by git and by docker build.
    let lines = |f: &str| -> Vec<String> { read(f).lines().map(|l| l.trim().to_owned()).collect() };
    assert!(
        lines(".gitignore")
            .iter()
            .any(|l| l == ".env" || l == "/.env"),
        ".env is not git-ignored"
    );
    assert!(
        lines(".dockerignore").iter().any(|l| l == ".env"),
        ".env is not in .dockerignore"
    );
    // The example names the token and holds no value for it.
    let example = read(".env.example");
    let vars: BTreeMap<&str, &str> = example
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once('=').expect("KEY=VALUE"))
        .collect();
    assert_eq!(
        vars.get("PREFIX_ROUTER_INTERNAL_TOKEN"),
        Some(&""),
        ".env.example declares PREFIX_ROUTER_INTERNAL_TOKEN, empty"
    );
    for (k, v) in &vars {
        assert!(
            !secretish(k) || v.is_empty(),
            ".env.example: a value for {k}"
        );
    }
    // Nothing secret in the image: no such ENV/ARG, no .env copied.
    for stage in dockerfile() {
        for (kw, rest) in &stage.instructions {
            if kw == "ENV" || kw == "ARG" {
                for name in rest
                    .split_whitespace()
                    .map(|w| w.split('=').next().unwrap())
                {
                    assert!(!secretish(name), "Dockerfile: {kw} {rest}");
                }
            }
            if kw == "COPY" || kw == "ADD" {
                assert!(!rest.contains(".env"), "Dockerfile: {kw} {rest}");
            }
        }
    }
}

#[test]
fn every_file_the_compose_file_refers_to_exists() {
    let c = compose();
    let resolve = |p: &str| -> PathBuf { root().join(p) };
    for (name, s) in services(&c) {
        for m in mounts(s).into_iter().filter(|m| m.kind == "bind") {
            let p = resolve(&m.source);
            assert!(p.exists(), "{name}: {} does not exist", p.display());
            if m.target.contains("models") || m.target.contains("tokenizer") {
                for f in ["tokenizer.json", "tokenizer_config.json"] {
                    assert!(p.join(f).is_file(), "{name}: no {f} in {}", p.display());
                }
            }
        }
        match &s["build"] {
            Value::Null => {}
            b => {
                let (ctx, file) = match b {
                    Value::String(ctx) => (ctx.clone(), "Dockerfile".to_owned()),
                    o => (
                        o["context"].as_str().unwrap_or(".").to_owned(),
                        o["dockerfile"].as_str().unwrap_or("Dockerfile").to_owned(),
                    ),
                };
                assert!(
                    resolve(&ctx).join(&file).is_file(),
                    "{name}: no {file} in {ctx}"
                );
            }
        }
        for f in env_files(s) {
            // The operator's .env is git-ignored; its template must exist.
            let p = resolve(&f);
            let example = resolve(&format!("{f}.example"));
            assert!(
                p.is_file() || example.is_file(),
                "{name}: neither {f} nor {f}.example exists"
            );
        }
    }
}

#[test]
fn the_dockerfile_builds_both_binaries_into_a_slim_non_root_image() {
    let stages = dockerfile();
    assert!(stages.len() >= 2, "multi-stage build");
    let builder = &stages[0];
    let rust_version = cargo_toml()["workspace"]["package"]["rust-version"]
        .as_str()
        .expect("rust-version")
        .to_owned();
    assert_eq!(
        builder.image,
        format!("rust:{rust_version}-bookworm"),
        "the builder uses the crate's rust-version"
    );
    let builder_name = builder.name.clone().expect("the builder stage is named");
    let build = instructions(builder, "RUN")
        .into_iter()
        .find(|r| r.contains("cargo build"))
        .expect("the builder runs cargo build");
    assert!(
        build.contains("--release") && build.contains("--locked"),
        "{build}"
    );
    // Each binary exists, is asked for, and belongs to a package the line
    // selects: `-p prefix-router --bin sim-worker` fails in the workspace.
    let bins = workspace_bins();
    let packages = selected_packages(build);
    for bin in ["prefix-router", "sim-worker"] {
        let package = bins
            .get(bin)
            .unwrap_or_else(|| panic!("the workspace has no bin {bin}"));
        assert!(
            build.contains(&format!("--bin {bin} ")) || build.ends_with(&format!("--bin {bin}")),
            "{bin} is not built: {build}"
        );
        if let Some(selected) = &packages {
            assert!(
                selected.contains(package),
                "{bin} is in package {package}, which the build does not select: {build}"
            );
        }
    }

    let runtime = stages.last().unwrap();
    assert_eq!(runtime.image, "debian:bookworm-slim");
    assert!(
        instructions(runtime, "RUN")
            .iter()
            .any(|r| r.contains("apt-get install") && r.contains("ca-certificates")),
        "the runtime trusts the system CA store (rediss://)"
    );
    let copies: Vec<&str> = instructions(runtime, "COPY")
        .into_iter()
        .filter(|c| c.contains(&format!("--from={builder_name}")))
        .collect();
    for bin in ["prefix-router", "sim-worker"] {
        assert!(
            copies
                .iter()
                .any(|c| c.contains(&format!("/{bin} ")) || c.contains(&format!("/{bin}\t"))),
            "{bin} is not copied into the runtime: {copies:?}"
        );
    }
    let user = instructions(runtime, "USER");
    let user = user.last().expect("the runtime sets a USER");
    let name = user.split(':').next().unwrap();
    assert!(name != "root" && name != "0", "the runtime runs as root");
    assert_eq!(
        instructions(runtime, "ENTRYPOINT"),
        [r#"["prefix-router"]"#]
    );
    assert_eq!(instructions(runtime, "CMD"), [r#"["serve"]"#]);
    let c = compose();
    let port = router_port(&c).to_string();
    assert!(
        instructions(runtime, "EXPOSE").iter().any(|e| e
            .split_whitespace()
            .any(|p| p.trim_end_matches("/tcp") == port)),
        "EXPOSE {port}"
    );
    // The context leaves out build outputs and secrets.
    let ignore = read(".dockerignore");
    for must in ["target", ".git", ".env"] {
        assert!(
            ignore.lines().any(|l| l.trim() == must),
            ".dockerignore lacks {must}"
        );
    }
}

#[test]
fn interpolation_is_compose_like() {
    assert_eq!(interpolate("a${X:-b}c"), "abc");
    assert_eq!(interpolate("${X-8080}"), "8080");
    assert_eq!(interpolate("$$HOME"), "$HOME");
    assert!(std::panic::catch_unwind(|| interpolate("${X}")).is_err());
    assert!(std::panic::catch_unwind(|| interpolate("$X")).is_err());
}

#[test]
fn package_selection_is_read_as_cargo_reads_it() {
    let set = |ps: &[&str]| Some(ps.iter().map(|p| p.to_string()).collect::<BTreeSet<_>>());
    assert_eq!(
        selected_packages("cargo build --release --bin a --bin b && mkdir -p /out"),
        None
    );
    assert_eq!(
        selected_packages("cargo build -p x --workspace --bin a"),
        None
    );
    assert_eq!(
        selected_packages("cargo build -p x --package y --package=z -pw --bin a && mkdir -p o"),
        set(&["w", "x", "y", "z"])
    );
}

#[test]
fn the_cluster_profile_is_three_primaries_and_three_replicas_on_fixed_addresses() {
    let c = compose();
    let in_profile = |svc: &Value| {
        svc["profiles"]
            .as_array()
            .is_some_and(|p| p.iter().any(|x| x == "cluster"))
    };
    let nodes: Vec<(&String, &Value)> = services(&c)
        .iter()
        .filter(|(name, _)| name.starts_with("valkey-c") && name.as_str() != "valkey-cluster-init")
        .collect();
    assert_eq!(nodes.len(), 6, "six cluster nodes");
    let subnet = c["networks"]["valkey-cluster"]["ipam"]["config"][0]["subnet"]
        .as_str()
        .expect("the cluster network's subnet");
    let prefix = subnet.trim_end_matches("0/24");
    let mut addresses = BTreeSet::new();
    for (name, node) in &nodes {
        assert!(in_profile(node), "{name}: only in the cluster profile");
        let cmd = words(&node["command"]);
        let flag = |f: &str| cmd.iter().position(|w| w == f).map(|i| cmd[i + 1].clone());
        assert_eq!(flag("--cluster-enabled").as_deref(), Some("yes"), "{name}");
        assert!(flag("--cluster-config-file").is_some(), "{name}");
        let ip = node["networks"]["valkey-cluster"]["ipv4_address"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: a fixed address"));
        assert!(ip.starts_with(prefix), "{name}: {ip} outside {subnet}");
        addresses.insert(ip.to_owned());
    }
    assert_eq!(addresses.len(), 6, "distinct addresses");
    let init = service(&c, "valkey-cluster-init");
    assert!(in_profile(init));
    let script = words(&init["command"]).join(" ");
    for ip in &addresses {
        assert!(script.contains(&format!("{ip}:6379")), "init joins {ip}");
    }
    assert!(script.contains("--cluster-replicas 1") && script.contains("--cluster-yes"));
    for (name, _) in &nodes {
        assert!(
            depends_on(init).contains(name.as_str()),
            "init waits for {name}"
        );
    }
    // The default profile is untouched: no default service needs the cluster.
    for (name, svc) in services(&c) {
        if !in_profile(svc) {
            assert!(
                depends_on(svc).iter().all(|d| !d.starts_with("valkey-c")),
                "{name} depends on a cluster node"
            );
        }
    }
}
