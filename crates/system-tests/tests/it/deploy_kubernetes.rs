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

fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

fn pod_templates(objects: &[Value]) -> Vec<(&Value, &Value)> {
    objects
        .iter()
        .filter(|o| ["Deployment", "StatefulSet", "Job"].contains(&o["kind"].as_str().unwrap()))
        .map(|o| (o, &o["spec"]["template"]))
        .collect()
}

/// `prefix-router <sub> --help`.
fn help(sub: &str) -> String {
    let out = crate::support::router_command(sub)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn check(objects: &[Value], what: &str) {
    let mut names = BTreeSet::new();
    for o in objects {
        let pair = (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
        );
        assert!(KINDS.contains(&pair), "{what}: unknown {pair:?}");
        let name = o["metadata"]["name"].as_str().unwrap();
        assert!(dns_label(name), "{what}: bad name {name}");
        assert!(
            names.insert((pair.1, name)),
            "{what}: {pair:?} {name} twice"
        );
    }
    let secrets: BTreeMap<&str, &Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Secret")
        .map(|o| (o["metadata"]["name"].as_str().unwrap(), &o["stringData"]))
        .collect();
    let pods = pod_templates(objects);
    let mut helps = BTreeMap::new();
    for (w, t) in &pods {
        if w["kind"] != "Job" {
            assert!(
                labels_match(
                    &w["spec"]["selector"]["matchLabels"],
                    &t["metadata"]["labels"]
                ),
                "{what}: {} selects no pod of its own",
                w["metadata"]["name"]
            );
        }
        for c in t["spec"]["containers"].as_array().unwrap() {
            assert!(c["image"].as_str().is_some_and(|i| !i.is_empty()));
            let ports: BTreeSet<&str> = c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            let numbers: BTreeSet<u64> = c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["containerPort"].as_u64())
                .collect();
            for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                let p = &c[probe];
                if let Some(o) = p.as_object() {
                    let handlers = ["httpGet", "tcpSocket", "grpc", "exec"];
                    let n = handlers.iter().filter(|h| o.contains_key(**h)).count();
                    assert_eq!(n, 1, "{what}: {probe} has {n} handlers");
                }
                if let Some(port) = p["grpc"]["port"].as_u64() {
                    assert!(
                        numbers.contains(&port),
                        "{what}: {probe} on unknown port {port}"
                    );
                    // The picker's gRPC health services (src/epp/mod.rs).
                    let service = p["grpc"]["service"].as_str().unwrap_or("");
                    assert!(
                        ["", "liveness", "readiness"].contains(&service),
                        "{what}: {probe} asks for gRPC health of {service:?}"
                    );
                }
                for kind in ["httpGet", "tcpSocket"] {
                    if let Some(port) = p[kind]["port"].as_str() {
                        assert!(
                            ports.contains(port),
                            "{what}: {probe} on unknown port {port}"
                        );
                    }
                }
            }
            for e in c["env"].as_array().into_iter().flatten() {
                if let Some(r) = e["valueFrom"].get("secretKeyRef") {
                    let s = secrets
                        .get(r["name"].as_str().unwrap())
                        .unwrap_or_else(|| panic!("{what}: no secret {}", r["name"]));
                    assert!(
                        s.get(r["key"].as_str().unwrap()).is_some(),
                        "{what}: no key {}",
                        r["key"]
                    );
                }
            }
            if c["image"].as_str().unwrap().starts_with("prefix-router:") {
                let args: Vec<&str> = c["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap())
                    .collect();
                let sub = args[0];
                let text = helps.entry(sub).or_insert_with(|| help(sub));
                for a in &args {
                    if a.starts_with("--") {
                        assert!(
                            text.contains(&format!("{a} ")) || text.contains(&format!("{a}\n")),
                            "{what}: `{sub}` has no flag {a}"
                        );
                    }
                }
                for e in c["env"].as_array().into_iter().flatten() {
                    let n = e["name"].as_str().unwrap();
                    if n.starts_with("PREFIX_ROUTER_") && n != "PREFIX_ROUTER_LOG" {
                        assert!(
                            text.contains(&format!("env: {n}")),
                            "{what}: `{sub}` reads no {n}"
                        );
                    }
                }
                // The router's probes are its real health routes.
                for probe in ["readinessProbe", "livenessProbe"] {
                    if let Some(path) = c[probe]["httpGet"]["path"].as_str() {
                        assert!(
                            ["/health", "/ready"].contains(&path),
                            "{what}: probe {path}"
                        );
                    }
                }
            }
        }
    }
    for s in objects.iter().filter(|o| o["kind"] == "Service") {
        let sel = &s["spec"]["selector"];
        let targets: Vec<_> = pods
            .iter()
            .filter(|(_, t)| labels_match(sel, &t["metadata"]["labels"]))
            .collect();
        assert!(
            !targets.is_empty(),
            "{what}: Service {} selects no pod",
            s["metadata"]["name"]
        );
        for p in s["spec"]["ports"].as_array().unwrap() {
            if let Some(tp) = p["targetPort"].as_str() {
                assert!(
                    targets.iter().all(|(_, t)| t["spec"]["containers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|c| {
                            c["ports"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|cp| cp["name"] == tp)
                        })),
                    "{what}: Service {} targets port {tp} a pod lacks",
                    s["metadata"]["name"]
                );
            }
        }
    }
    inference_routing(objects, &pods, what);
    for h in objects
        .iter()
        .filter(|o| o["kind"] == "HorizontalPodAutoscaler")
    {
        let r = &h["spec"]["scaleTargetRef"];
        assert!(
            objects
                .iter()
                .any(|o| o["kind"] == r["kind"] && o["metadata"]["name"] == r["name"]),
            "{what}: HPA target"
        );
    }
    for p in objects
        .iter()
        .filter(|o| ["PodDisruptionBudget", "NetworkPolicy"].contains(&o["kind"].as_str().unwrap()))
    {
        let sel = if p["kind"] == "NetworkPolicy" {
            &p["spec"]["podSelector"]["matchLabels"]
        } else {
            &p["spec"]["selector"]["matchLabels"]
        };
        assert!(
            pods.iter()
                .any(|(_, t)| labels_match(sel, &t["metadata"]["labels"])),
            "{what}: {} {} selects no pod",
            p["kind"],
            p["metadata"]["name"]
        );
    }
}

/// An InferencePool selects pods serving its target ports and names a
/// picker Service whose port reaches a `prefix-router epp`; an HTTPRoute's
/// pool exists.
fn inference_routing(objects: &[Value], pods: &[(&Value, &Value)], what: &str) {
    for pool in objects.iter().filter(|o| o["kind"] == "InferencePool") {
        let name = &pool["metadata"]["name"];
        let selected: Vec<_> = pods
            .iter()
            .filter(|(_, t)| {
                labels_match(
                    &pool["spec"]["selector"]["matchLabels"],
                    &t["metadata"]["labels"],
                )
            })
            .collect();
        assert!(!selected.is_empty(), "{what}: pool {name} selects no pod");
        for port in pool["spec"]["targetPorts"].as_array().unwrap() {
            assert!(
                selected.iter().all(|(_, t)| t["spec"]["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                    .any(|p| p["containerPort"] == port["number"])),
                "{what}: pool {name} targets port {} its pods lack",
                port["number"]
            );
        }
        let picker = &pool["spec"]["endpointPickerRef"];
        let service = objects
            .iter()
            .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == picker["name"])
            .unwrap_or_else(|| panic!("{what}: pool {name}: no picker Service {}", picker["name"]));
        let port = service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["port"] == picker["port"]["number"])
            .unwrap_or_else(|| panic!("{what}: pool {name}: the picker Service has no such port"));
        let target = port["targetPort"].as_str().unwrap();
        let runs_epp = pods.iter().any(|(_, t)| {
            labels_match(&service["spec"]["selector"], &t["metadata"]["labels"])
                && t["spec"]["containers"].as_array().unwrap().iter().any(|c| {
                    c["args"][0] == "epp"
                        && c["ports"].as_array().into_iter().flatten().any(|p| {
                            p["name"] == target && {
                                let listen = flag(c["args"].as_array().unwrap(), "--grpc-listen");
                                listen.is_some_and(|l| {
                                    l.ends_with(&format!(":{}", p["containerPort"]))
                                })
                            }
                        })
                })
        });
        assert!(
            runs_epp,
            "{what}: pool {name}'s picker port reaches no `prefix-router epp --grpc-listen`"
        );
    }
    for route in objects.iter().filter(|o| o["kind"] == "HTTPRoute") {
        for rule in route["spec"]["rules"].as_array().unwrap() {
            for backend in rule["backendRefs"].as_array().unwrap() {
                if backend["kind"] == "InferencePool" {
                    assert!(
                        objects.iter().any(|o| o["kind"] == "InferencePool"
                            && o["metadata"]["name"] == backend["name"]),
                        "{what}: route to a missing pool {}",
                        backend["name"]
                    );
                }
            }
        }
    }
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [Value], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).and_then(Value::as_str)
}

/// Routers, reporters and engines hash alike: one block size and one hash
/// seed (vLLM's `PYTHONHASHSEED`) everywhere, or every match is a miss.
fn hashing_agrees(objects: &[Value], what: &str) {
    let mut sizes = BTreeSet::new();
    let mut seeds = BTreeSet::new();
    let mut seen = 0;
    for (_, t) in pod_templates(objects) {
        for c in t["spec"]["containers"].as_array().unwrap() {
            let image = c["image"].as_str().unwrap();
            let args = c["args"].as_array().cloned().unwrap_or_default();
            if image.starts_with("vllm/") {
                sizes.insert(flag(&args, "--block-size").map(str::to_owned));
                let seed = c["env"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|e| e["name"] == "PYTHONHASHSEED");
                seeds.insert(seed.and_then(|e| e["value"].as_str()).map(str::to_owned));
                seen += 1;
            } else if image.starts_with("prefix-router:") {
                sizes.insert(flag(&args, "--block-size").map(str::to_owned));
                seeds.insert(flag(&args, "--hash-seed").map(str::to_owned));
                seen += 1;
            }
        }
    }
    assert!(seen >= 3, "{what}: {seen} hashing containers");
    assert_eq!(sizes.len(), 1, "{what}: block sizes differ: {sizes:?}");
    assert_eq!(seeds.len(), 1, "{what}: hash seeds differ: {seeds:?}");
}

/// Every kustomization renders with the real kubectl (`kubectl apply -k`
/// of each works) and what it renders holds together; the three known ones
/// are among them.
#[test]
fn every_kustomization_renders_with_kubectl_and_holds_together() {
    let all = kustomizations();
    for known in [
        "base",
        "overlays/inference-gateway",
        "overlays/valkey-cluster",
    ] {
        assert!(all.iter().any(|k| k == known), "{known} not in {all:?}");
    }
    for dir in &all {
        let objects = build(&root().join(dir));
        check(&objects, dir);
        hashing_agrees(&objects, dir);
    }
}

/// What each rendering holds: the base its kinds, the cluster overlay
/// the cluster in place of the single Valkey, the gateway overlay its pool.
#[test]
fn the_renderings_hold_what_each_kustomization_promises() {
    let base = build(&root().join("base"));
    let kinds: BTreeSet<&str> = base.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    for k in [
        "Deployment",
        "StatefulSet",
        "Service",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "Secret",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(k), "base has no {k}");
    }
    let cluster = build(&root().join("overlays/valkey-cluster"));
    // The overlay swaps the single Valkey for the cluster and seeds the routers.
    assert!(!cluster.iter().any(|o| o["metadata"]["name"] == "valkey"));
    let router = cluster
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "prefix-router")
        .unwrap();
    let args = router["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    let seeds = args
        .iter()
        .position(|a| a == "--valkey")
        .map(|i| args[i + 1].as_str().unwrap())
        .unwrap();
    assert_eq!(seeds.split(',').count(), 3);
    let gateway = build(&root().join("overlays/inference-gateway"));
    let kinds: BTreeSet<&str> = gateway
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains("InferencePool") && kinds.contains("HTTPRoute"));
}

#[test]
fn the_checks_catch_a_wrong_flag_and_a_dangling_selector() {
    let mut base = build(&root().join("base"));
    let at = base
        .iter()
        .position(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "prefix-router")
        .unwrap();
    base[at]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap()
        .push(Value::from("--no-such-flag"));
    let wrong_flag = std::panic::catch_unwind(|| check(&base, "mutated"));
    assert!(wrong_flag.is_err());
    // A router without the engines' hash seed.
    let mut base = build(&root().join("base"));
    let at = base
        .iter()
        .position(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "prefix-router")
        .unwrap();
    let args = base[at]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap();
    let i = args.iter().position(|a| a == "--hash-seed").unwrap();
    args.drain(i..i + 2);
    assert!(std::panic::catch_unwind(|| hashing_agrees(&base, "mutated")).is_err());
    let mut base = build(&root().join("base"));
    let s = base
        .iter()
        .position(|o| o["kind"] == "Service" && o["metadata"]["name"] == "valkey")
        .unwrap();
    base[s]["spec"]["selector"] = serde_json::json!({"app.kubernetes.io/name": "valkye"});
    assert!(std::panic::catch_unwind(|| check(&base, "mutated")).is_err());
    // A pool whose picker port is not the one `epp` listens on.
    let mut gateway = build(&root().join("overlays/inference-gateway"));
    let pool = gateway
        .iter()
        .position(|o| o["kind"] == "InferencePool")
        .unwrap();
    gateway[pool]["spec"]["endpointPickerRef"]["port"]["number"] = Value::from(8080);
    assert!(std::panic::catch_unwind(|| check(&gateway, "mutated")).is_err());
}

/// `deploy/kubernetes/schemas/`: Kubernetes 1.33's strict JSON schemas of
/// the kinds used (see the README there), compiled once.
fn schemas() -> (boon::Schemas, BTreeMap<(String, String), boon::SchemaIndex>) {
    let dir = root().join("schemas");
    let mut compiler = boon::Compiler::new();
    let load = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    };
    compiler
        .add_resource(
            "https://kubernetes.io/api/_definitions.json",
            load("_definitions.json"),
        )
        .unwrap();
    let mut schemas = boon::Schemas::new();
    let mut index = BTreeMap::new();
    for (api, kind) in KINDS.iter() {
        let group = api
            .split('/')
            .rev()
            .nth(1)
            .map(|g| g.split('.').next().unwrap());
        let file = match group {
            Some(g) => format!(
                "{}-{g}-{}.json",
                kind.to_lowercase(),
                api.rsplit('/').next().unwrap()
            ),
            None => format!("{}-{api}.json", kind.to_lowercase()),
        };
        let schema = load(&file);
        let id = schema["$id"].as_str().unwrap().to_owned();
        compiler.add_resource(&id, schema).unwrap();
        let idx = compiler.compile(&id, &mut schemas).unwrap();
        index.insert(((*api).to_owned(), (*kind).to_owned()), idx);
    }
    (schemas, index)
}

#[test]
fn every_object_matches_the_kubernetes_schema() {
    let (schemas, index) = schemas();
    let mut checked = 0;
    for dir in kustomizations() {
        for o in build(&root().join(&dir)) {
            let key = (
                o["apiVersion"].as_str().unwrap().to_owned(),
                o["kind"].as_str().unwrap().to_owned(),
            );
            let idx = index[&key];
            if let Err(e) = schemas.validate(&o, idx) {
                panic!(
                    "{dir}: {} {} does not match the schema:\n{e:#}",
                    key.1, o["metadata"]["name"]
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 15, "{checked} objects");
    // The schemas are strict: a misspelt field is refused.
    let mut bad = build(&root().join("base"))
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    bad["spec"]["template"]["spec"]["contianers"] = serde_json::json!([]);
    let idx = index[&("apps/v1".to_owned(), "Deployment".to_owned())];
    assert!(schemas.validate(&bad, idx).is_err());
    // So are the CRDs' (GIE's InferencePool, Gateway API's HTTPRoute).
    let mut pool = build(&root().join("overlays/inference-gateway"))
        .into_iter()
        .find(|o| o["kind"] == "InferencePool")
        .unwrap();
    let idx = index[&(
        "inference.networking.k8s.io/v1".to_owned(),
        "InferencePool".to_owned(),
    )];
    assert!(schemas.validate(&pool, idx).is_ok());
    pool["spec"]["endpointPickerRef"]["failureMode"] = Value::from("FailSometimes");
    assert!(schemas.validate(&pool, idx).is_err());
}

/// A worker pod drains before its engine stops: both containers' `preStop`
/// hooks ask the reporter's `GET /drain` (on its metrics listener), and
/// the grace period outlasts the drain deadline.
#[test]
fn stopping_a_worker_pod_drains_it_before_the_engine_stops() {
    let base = build(&root().join("base"));
    let pod = base
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "vllm-qwen3")
        .map(|o| &o["spec"]["template"]["spec"])
        .expect("the example worker");
    let containers = pod["containers"].as_array().unwrap();
    let reporter = containers.iter().find(|c| c["name"] == "reporter").unwrap();
    let args = reporter["args"].as_array().unwrap();
    let listen = flag(args, "--metrics-listen").expect("--metrics-listen");
    let port: u64 = listen.rsplit(':').next().unwrap().parse().unwrap();
    let deadline = flag(args, "--drain-deadline").expect("--drain-deadline");
    let deadline: u64 = deadline
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .expect("a drain deadline in whole seconds");
    let named: BTreeMap<&str, u64> = reporter["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or(""),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    for c in containers {
        let hook = &c["lifecycle"]["preStop"]["httpGet"];
        assert_eq!(hook["path"], "/drain", "{}: {hook}", c["name"]);
        let to = match &hook["port"] {
            Value::Number(n) => n.as_u64().unwrap(),
            Value::String(name) if c["name"] == "reporter" => named[name.as_str()],
            other => panic!("{}: port {other} is not the reporter's", c["name"]),
        };
        assert_eq!(to, port, "{}: the hook misses the reporter", c["name"]);
    }
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        grace > deadline,
        "grace {grace}s within the drain deadline {deadline}s"
    );
}
