//! The OpenAI API's bodies (completions and chat: shaped like real
//! requests, arbitrary JSON, mutated bytes) through a real router.

use super::*;

/// Text a tokenizer may find hard: any characters, special tokens, long
/// runs, whitespace and control characters.
fn arb_text() -> impl Strategy<Value = String> {
    let tricky = prop_oneof![
        Just("<|im_start|>"),
        Just("<|im_end|>"),
        Just("<|endoftext|>"),
        Just("<think>"),
        Just("</think>"),
        Just("<tool_call>"),
        Just("\u{0}"),
        Just("\u{feff}"),
        Just("\u{202e}"),
        Just("e\u{301}\u{301}\u{301}"),
        Just("👩‍👩‍👧‍👦"),
        Just("\r\n\t "),
        Just("{{ raise_exception('x') }}"),
        Just("{% for %}"),
        Just("       "),
        Just("ab"),
    ];
    prop_oneof![
        4 => ".{0,120}",
        3 => "[a-zA-Z0-9 .,!?\n]{0,400}",
        3 => proptest::collection::vec((tricky, 1usize..40), 0..6).prop_map(|parts| {
            parts.into_iter().map(|(s, n)| s.repeat(n)).collect::<String>()
        }),
    ]
}

/// A token id as a client may send it: valid, out of the vocabulary, or
/// not a u32 at all.
fn arb_token() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => (0u32..160_000).prop_map(Value::from),
        1 => any::<u32>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => (-1e12f64..1e12).prop_map(Value::from),
        1 => arb_json(),
    ]
}

fn arb_model() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => Just(Value::from(QWEN)),
        2 => Just(Value::from("sql-lora")),
        1 => Just(Value::from("nobody-serves-this")),
        1 => "[a-zA-Z0-9._/:-]{0,30}".prop_map(Value::from),
        1 => ".{0,12}".prop_map(Value::from),
        1 => arb_json(),
    ]
}

fn arb_prompt() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => arb_text().prop_map(Value::from),
        2 => proptest::collection::vec(arb_text(), 0..4).prop_map(|v| json!(v)),
        3 => proptest::collection::vec(0u32..160_000, 0..300).prop_map(|v| json!(v)),
        2 => proptest::collection::vec(arb_token(), 0..20).prop_map(Value::Array),
        1 => proptest::collection::vec(proptest::collection::vec(0u32..1000, 0..50), 0..3)
            .prop_map(|v| json!(v)),
        1 => arb_json(),
    ]
}

/// A `/v1/completions` body: mostly well formed, every field sometimes
/// missing or of any type.
fn completion_body() -> impl Strategy<Value = Value> {
    (
        proptest::option::weighted(0.95, arb_model()),
        proptest::option::weighted(0.95, arb_prompt()),
        proptest::option::of(arb_bool_ish()),
        proptest::option::of(prop_oneof![arb_text().prop_map(Value::from), arb_json()]),
        proptest::option::of(prop_oneof![(0u32..64).prop_map(Value::from), arb_json()]),
        extra_fields(),
    )
        .prop_map(|(model, prompt, stream, salt, max_tokens, extra)| {
            let mut m = Map::new();
            for (k, v) in extra {
                m.insert(k, v);
            }
            put(&mut m, "model", model);
            put(&mut m, "prompt", prompt);
            put(&mut m, "stream", stream);
            put(&mut m, "cache_salt", salt);
            put(&mut m, "max_tokens", max_tokens);
            Value::Object(m)
        })
}

fn arb_content() -> impl Strategy<Value = Value> {
    let part = prop_oneof![
        4 => arb_text().prop_map(|t| json!({"type": "text", "text": t})),
        1 => arb_text().prop_map(|t| json!({"type": "image_url", "image_url": {"url": t}})),
        1 => arb_text().prop_map(|t| json!({"type": "input_audio", "input_audio": {"data": t}})),
        1 => arb_text().prop_map(|t| json!({"type": "refusal", "refusal": t})),
        1 => arb_text().prop_map(|t| json!({"text": t})),
        1 => arb_json(),
    ];
    prop_oneof![
        10 => arb_text().prop_map(Value::from),
        4 => proptest::collection::vec(part, 0..4).prop_map(Value::Array),
        1 => Just(Value::Null),
        1 => arb_json(),
    ]
}

fn arb_tool_calls() -> impl Strategy<Value = Value> {
    let call = (
        "[a-z_]{0,10}",
        prop_oneof![arb_text().prop_map(Value::from), arb_json()],
    )
        .prop_map(|(name, arguments)| {
            json!({"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}})
        });
    prop_oneof![
        3 => proptest::collection::vec(call, 0..3).prop_map(Value::Array),
        1 => arb_json(),
    ]
}

fn arb_message() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            18 => prop_oneof![
                Just("system"),
                Just("user"),
                Just("assistant"),
                Just("tool"),
                Just("developer"),
            ]
            .prop_map(Value::from),
            1 => ".{0,10}".prop_map(Value::from),
            1 => arb_json(),
        ],
        proptest::option::weighted(0.9, arb_content()),
        proptest::option::weighted(0.1, arb_text().prop_map(Value::from)),
        proptest::option::weighted(0.15, arb_tool_calls()),
        proptest::option::weighted(0.1, arb_text().prop_map(Value::from)),
        proptest::option::weighted(
            0.1,
            prop_oneof![arb_text().prop_map(Value::from), arb_json()],
        ),
    )
        .prop_map(
            |(role, content, name, tool_calls, tool_call_id, reasoning)| {
                let mut m = Map::new();
                m.insert("role".into(), role);
                put(&mut m, "content", content);
                put(&mut m, "name", name);
                put(&mut m, "tool_calls", tool_calls);
                put(&mut m, "tool_call_id", tool_call_id);
                put(&mut m, "reasoning_content", reasoning);
                Value::Object(m)
            },
        )
}

fn arb_tools() -> impl Strategy<Value = Value> {
    let schema = prop_oneof![
        4 => proptest::collection::btree_map("[a-z_]{1,10}", prop_oneof![
            Just(json!({"type": "string"})),
            Just(json!({"type": "integer", "minimum": 0})),
            arb_text().prop_map(|d| json!({"type": "array", "items": {"type": "string"}, "description": d})),
        ], 0..4)
        .prop_map(|props| json!({"type": "object", "properties": props})),
        1 => arb_json(),
    ];
    let tool = ("[a-zA-Z_]{1,12}", arb_text(), schema).prop_map(|(name, desc, params)| {
        json!({"type": "function", "function": {"name": name, "description": desc, "parameters": params}})
    });
    prop_oneof![
        8 => proptest::collection::vec(tool, 1..3).prop_map(Value::Array),
        1 => arb_json(),
    ]
}

/// A `/v1/chat/completions` body.
fn chat_body() -> impl Strategy<Value = Value> {
    (
        proptest::option::weighted(0.95, arb_model()),
        prop_oneof![
            16 => proptest::collection::vec(arb_message(), 1..5).prop_map(Value::Array),
            1 => Just(json!([])),
            1 => arb_json(),
        ],
        proptest::option::weighted(0.2, arb_tools()),
        proptest::option::weighted(
            0.2,
            prop_oneof![
                8 => arb_bool_ish().prop_map(|b| json!({"enable_thinking": b})),
                1 => arb_json(),
            ],
        ),
        proptest::option::weighted(0.2, arb_bool_ish()),
        proptest::option::weighted(0.1, arb_bool_ish()),
        proptest::option::weighted(0.03, arb_text().prop_map(Value::from)),
        proptest::option::of(arb_bool_ish()),
        extra_fields(),
    )
        .prop_map(
            |(model, messages, tools, kwargs, add_gen, cont, template, stream, extra)| {
                let mut m = Map::new();
                for (k, v) in extra {
                    m.insert(k, v);
                }
                put(&mut m, "model", model);
                m.insert("messages".into(), messages);
                put(&mut m, "tools", tools);
                put(&mut m, "chat_template_kwargs", kwargs);
                put(&mut m, "add_generation_prompt", add_gen);
                put(&mut m, "continue_final_message", cont);
                put(&mut m, "chat_template", template);
                put(&mut m, "stream", stream);
                Value::Object(m)
            },
        )
}

// ---------------------------------------------------------------- targets

#[test]
fn openai_bodies_through_a_real_router() {
    let rig = Rig::start(2);
    let mut total = 0;
    let completions = || {
        (completion_body(), 0u8..10).prop_map(|(body, pick)| {
            let path = match pick {
                0 => "/admin/explain",
                1 => "/v1/embeddings",
                _ => "/v1/completions",
            };
            Call::post(path, body.to_string())
        })
    };
    total += fuzz("completions JSON", cases(200), completions, |c| {
        rig.call(&c)
    });
    rig.report("completions JSON");
    let chats = || {
        (chat_body(), 0u8..10).prop_map(|(body, pick)| {
            let path = if pick == 0 {
                "/admin/explain"
            } else {
                "/v1/chat/completions"
            };
            Call::post(path, body.to_string())
        })
    };
    total += fuzz("chat JSON", cases(200), chats, |c| rig.call(&c));
    rig.report("chat JSON");
    let bytes = || {
        (
            prop_oneof![arb_bytes(completion_body()), arb_bytes(chat_body())],
            prop_oneof![
                Just("/v1/completions"),
                Just("/v1/chat/completions"),
                Just("/v1/embeddings"),
                Just("/admin/explain"),
            ],
        )
            .prop_map(|(body, path)| Call::post(path, body))
    };
    total += fuzz("OpenAI bytes", cases(200), bytes, |c| rig.call(&c));
    rig.report("OpenAI bytes");
    let served: usize = rig.workers.iter().map(FakeWorker::hits).sum();
    println!("fuzz executions: OpenAI total: {total} ({served} forwarded to workers)");
    assert!(served > 0, "no request was ever routed");
    rig.finish();
}
