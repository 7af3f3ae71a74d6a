//! Every kustomization renders with kubectl and holds what it promises;
//! the checks catch a wrong flag and a dangling selector.

use super::*;

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
