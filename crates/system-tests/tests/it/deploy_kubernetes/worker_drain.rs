//! A worker pod stopped drains before its engine stops.

use super::*;

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
