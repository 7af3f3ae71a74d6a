//! The push API's bodies (blocks, loads, arbitrary hashes and ids)
//! through a real router.

use super::*;

fn arb_hashes() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => proptest::collection::vec((0u64..64).prop_map(Value::from), 0..40).prop_map(Value::Array),
        4 => proptest::collection::vec(arb_hash(), 0..40).prop_map(Value::Array),
        1 => arb_json(),
    ]
}

fn arb_worker_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop_oneof![Just("f0"), Just("f1"), Just("f2")].prop_map(Value::from),
        1 => "[a-zA-Z0-9_.:-]{0,12}".prop_map(Value::from),
        1 => ".{0,10}".prop_map(Value::from),
        1 => arb_json(),
    ]
}

fn arb_push_model() -> impl Strategy<Value = Option<Value>> {
    proptest::option::weighted(
        0.7,
        prop_oneof![
            6 => Just(Value::from(QWEN)),
            2 => Just(Value::from("fz")),
            1 => "[a-zA-Z0-9._/-]{0,10}".prop_map(Value::from),
            1 => arb_json(),
        ],
    )
}

fn arb_load() -> impl Strategy<Value = Value> {
    let num = prop_oneof![
        4 => (0u64..100).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => (-10.0f64..10.0).prop_map(Value::from),
        1 => arb_json(),
    ];
    prop_oneof![
        4 => (
            proptest::option::of(num.clone()),
            proptest::option::of(num.clone()),
            proptest::option::of(prop_oneof![(0.0f64..1.0).prop_map(Value::from), num]),
        )
            .prop_map(|(w, r, kv)| {
                let mut m = Map::new();
                put(&mut m, "num_requests_waiting", w);
                put(&mut m, "num_requests_running", r);
                put(&mut m, "kv_cache_usage_perc", kv);
                Value::Object(m)
            }),
        1 => arb_json(),
    ]
}

/// One call of the push API with a body shaped like the route's.
fn push_call() -> impl Strategy<Value = Call> {
    let heartbeat = (
        arb_worker_id(),
        arb_push_model(),
        prop_oneof![
            4 => Just(Value::from("http://127.0.0.1:9")),
            1 => ".{0,30}".prop_map(Value::from),
            1 => "https?://[a-z0-9.:/]{0,20}".prop_map(Value::from),
            1 => arb_json(),
        ],
        proptest::option::of(arb_load()),
    )
        .prop_map(|(id, model, url, load)| {
            let mut m = Map::new();
            m.insert("worker_id".into(), id);
            put(&mut m, "model", model);
            m.insert("url".into(), url);
            put(&mut m, "load", load);
            ("/internal/heartbeat", m)
        });
    let batch = (
        arb_worker_id(),
        arb_push_model(),
        arb_hashes(),
        prop_oneof![
            Just(("/internal/stored", "block_hashes")),
            Just(("/internal/eviction", "evicted_hashes")),
        ],
    )
        .prop_map(|(id, model, hashes, (path, field))| {
            let mut m = Map::new();
            m.insert("worker_id".into(), id);
            put(&mut m, "model", model);
            m.insert(field.into(), hashes);
            (path, m)
        });
    let sync = (
        arb_worker_id(),
        arb_push_model(),
        arb_hashes(),
        proptest::option::weighted(
            0.5,
            prop_oneof![
                4 => prop_oneof![Just("s1"), Just("s2")].prop_map(Value::from),
                1 => ".{0,12}".prop_map(Value::from),
                1 => arb_json(),
            ],
        ),
        proptest::option::weighted(0.5, arb_bool_ish()),
    )
        .prop_map(|(id, model, hashes, sync_id, last)| {
            let mut m = Map::new();
            m.insert("worker_id".into(), id);
            put(&mut m, "model", model);
            m.insert("active_hashes".into(), hashes);
            put(&mut m, "sync_id", sync_id);
            put(&mut m, "last", last);
            ("/internal/sync", m)
        });
    (
        prop_oneof![3 => heartbeat, 4 => batch, 3 => sync],
        extra_fields(),
        0u8..20,
    )
        .prop_map(|((path, mut m), extra, drop_field)| {
            for (k, v) in extra {
                m.entry(k).or_insert(v);
            }
            // Now and then a required field goes missing.
            if drop_field == 0
                && let Some(k) = m.keys().next().cloned()
            {
                m.remove(&k);
            }
            Call::post(path, Value::Object(m).to_string())
        })
}

/// Percent-encodes every byte but unreserved ones.
fn encode_path(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn push_api_bodies_through_a_real_router() {
    let rig = Rig::start(0);
    let mut total = 0;
    total += fuzz("push API JSON", cases(300), push_call, |c| rig.call(&c));
    rig.report("push API JSON");
    let bytes = || {
        (
            arb_bytes(
                push_call().prop_map(|c| serde_json::from_slice(&c.body).unwrap_or(Value::Null)),
            ),
            prop_oneof![
                Just("/internal/heartbeat"),
                Just("/internal/stored"),
                Just("/internal/eviction"),
                Just("/internal/sync"),
            ],
        )
            .prop_map(|(body, path)| Call::post(path, body))
    };
    total += fuzz("push API bytes", cases(150), bytes, |c| rig.call(&c));
    rig.report("push API bytes");
    // Drains and listings with any id, model and query.
    let queries = || {
        (
            prop_oneof![
                4 => prop_oneof![Just("f0"), Just("f1"), Just("f2")].prop_map(str::to_owned),
                1 => ".{0,12}",
            ],
            proptest::option::of(prop_oneof![
                Just(QWEN.to_owned()),
                Just("fz".to_owned()),
                ".{0,10}"
            ]),
            any::<bool>(),
            proptest::option::of("[&=%a-z0-9]{0,12}"),
        )
            .prop_map(|(id, model, drain, raw)| {
                let mut query = model
                    .map(|m| format!("?model={}", encode_path(&m)))
                    .unwrap_or_default();
                if let Some(r) = raw {
                    query.push_str(if query.is_empty() { "?" } else { "&" });
                    query.push_str(&r);
                }
                if drain {
                    Call {
                        method: reqwest::Method::DELETE,
                        path: format!("/internal/workers/{}{query}", encode_path(&id)),
                        body: Bytes::new(),
                    }
                } else {
                    Call {
                        method: reqwest::Method::GET,
                        path: format!("/admin/workers{query}"),
                        body: Bytes::new(),
                    }
                }
            })
    };
    total += fuzz("drain and list", cases(100), queries, |c| rig.call(&c));
    rig.report("drain and list");
    println!("fuzz executions: push API total: {total}");
    rig.finish();
}
