//! Every rendered object matches the Kubernetes schema.

use super::*;

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
