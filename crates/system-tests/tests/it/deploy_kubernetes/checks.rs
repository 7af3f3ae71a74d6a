//! The checks of one rendering: every flag a binary takes, selectors that
//! match, DNS labels, the inference routing objects, and routers and workers
//! that hash alike.

use super::*;

pub(super) fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

pub(super) fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

pub(super) fn pod_templates(objects: &[Value]) -> Vec<(&Value, &Value)> {
    objects
        .iter()
        .filter(|o| ["Deployment", "StatefulSet", "Job"].contains(&o["kind"].as_str().unwrap()))
        .map(|o| (o, &o["spec"]["template"]))
        .collect()
}

/// `prefix-router <sub> --help`.
pub(super) fn help(sub: &str) -> String {
    let out = crate::support::router_command(sub)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

pub(super) fn check(objects: &[Value], what: &str) {
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
pub(super) fn inference_routing(objects: &[Value], pods: &[(&Value, &Value)], what: &str) {
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

/// Routers, reporters and engines hash alike: one block size and one hash
/// seed (vLLM's `PYTHONHASHSEED`) everywhere, or every match is a miss.
pub(super) fn hashing_agrees(objects: &[Value], what: &str) {
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
