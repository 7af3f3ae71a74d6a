//! `docker-compose.yml`: valid against the compose-spec schema, Valkey's
//! volume, the routers' environment, the files it refers to, compose's
//! interpolation, and the cluster profile.

use super::*;

/// `host:port` of an `http://host:port[/...]` or `redis://host:port` URL.
fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").expect("URL with a scheme").1;
    let authority = rest.split('/').next().unwrap();
    assert!(!authority.contains('@'), "credentials in {url:?}");
    let (h, p) = authority.rsplit_once(':').expect("URL with a port");
    (h.to_owned(), p.parse().expect("port"))
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
fn interpolation_is_compose_like() {
    assert_eq!(interpolate("a${X:-b}c"), "abc");
    assert_eq!(interpolate("${X-8080}"), "8080");
    assert_eq!(interpolate("$$HOME"), "$HOME");
    assert!(std::panic::catch_unwind(|| interpolate("${X}")).is_err());
    assert!(std::panic::catch_unwind(|| interpolate("$X")).is_err());
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
