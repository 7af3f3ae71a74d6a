//! The requests of the exactness check: every prompt shape a client sends
//! (completions as text, token ids and a list; chat with a system prompt,
//! tools and tool calls, several turns, unicode, content parts, template
//! kwargs; `cache_salt`). Each is sent twice, through different routers.

use serde_json::{Value, json};

use crate::workload::{Api, Words};

/// One request of the check.
#[derive(Debug, Clone)]
pub struct Case {
    /// What it exercises.
    pub name: &'static str,
    /// Completions or chat.
    pub api: Api,
    /// The body, as a client sends it.
    pub body: Value,
}

impl Case {
    /// For a list of prompts: each prompt alone as a completions body, so
    /// that the router's match of each can be asked (the engine counts
    /// the list's cached tokens together).
    pub fn parts(&self) -> Vec<Value> {
        match self.body["prompt"].as_array() {
            Some(list) if list.first().is_some_and(|p| !p.is_number()) => list
                .iter()
                .map(|p| {
                    let mut b = self.body.clone();
                    b["prompt"] = p.clone();
                    b
                })
                .collect(),
            _ => vec![self.body.clone()],
        }
    }
}

const MAX_TOKENS: u32 = 4;

fn completion(model: &str, prompt: Value) -> Value {
    json!({ "model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0 })
}

fn chat(model: &str, messages: Value) -> Value {
    json!({ "model": model, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0 })
}

/// The cases, built from seeded words so that every run sends the same.
pub fn cases(model: &str) -> Vec<Case> {
    let mut w = Words::new(7);
    let document = w.text(700);
    let system = format!("You are a careful assistant. {}", w.text(400));
    let first_user = format!("Summarize this: {}", w.text(300));
    let ids: Vec<u32> = (0..900u32).map(|i| 1000 + (i * 7919) % 140_000).collect();
    let tool = json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": { "city": { "type": "string" } },
                "required": ["city"]
            }
        }
    }]);
    let tool_turns = json!([
        { "role": "system", "content": system },
        { "role": "user", "content": format!("What is the weather in Paris? {}", w.text(200)) },
        { "role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": { "name": "get_weather", "arguments": "{\"city\": \"Paris\"}" }
        }]},
        { "role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 °C." },
        { "role": "user", "content": "And tomorrow?" }
    ]);
    let unicode = format!(
        "Traduis et commente : « {} » — 東京の天気は晴れです。Привет, мир! مرحبا بالعالم 🌍🚀 ✓ {}",
        w.text(150),
        w.text(150)
    );
    let mut with_tools = chat(model, tool_turns);
    with_tools["tools"] = tool;
    with_tools["tool_choice"] = json!("none");
    let mut kwargs = chat(
        model,
        json!([
            { "role": "system", "content": system },
            { "role": "user", "content": format!("Think step by step: {}", w.text(250)) }
        ]),
    );
    kwargs["chat_template_kwargs"] = json!({ "enable_thinking": false });
    let mut salted = chat(
        model,
        json!([
            { "role": "system", "content": system },
            { "role": "user", "content": first_user }
        ]),
    );
    salted["cache_salt"] = json!("tenant-a");
    let mut streamed = completion(model, json!(format!("{document} Question: who wrote it?")));
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({ "include_usage": true });
    vec![
        Case {
            name: "completions: text",
            api: Api::Completions,
            body: completion(model, json!(document)),
        },
        Case {
            name: "completions: text, streamed, same document",
            api: Api::Completions,
            body: streamed,
        },
        Case {
            name: "completions: token ids",
            api: Api::Completions,
            body: completion(model, json!(ids)),
        },
        Case {
            name: "completions: a list of two prompts",
            api: Api::Completions,
            body: completion(model, json!([w.text(400), w.text(300)])),
        },
        Case {
            name: "chat: system + user",
            api: Api::Chat,
            body: chat(
                model,
                json!([
                    { "role": "system", "content": system },
                    { "role": "user", "content": first_user }
                ]),
            ),
        },
        Case {
            name: "chat: several turns (extends the one above)",
            api: Api::Chat,
            body: chat(
                model,
                json!([
                    { "role": "system", "content": system },
                    { "role": "user", "content": first_user },
                    { "role": "assistant", "content": format!("Here is a summary. {}", w.text(120)) },
                    { "role": "user", "content": format!("Now shorter, please. {}", w.text(60)) }
                ]),
            ),
        },
        Case {
            name: "chat: tools, a tool call and its result",
            api: Api::Chat,
            body: with_tools,
        },
        Case {
            name: "chat: unicode",
            api: Api::Chat,
            body: chat(model, json!([{ "role": "user", "content": unicode }])),
        },
        Case {
            name: "chat: content parts",
            api: Api::Chat,
            body: chat(
                model,
                json!([
                    { "role": "system", "content": [{ "type": "text", "text": system }] },
                    { "role": "user", "content": [
                        { "type": "text", "text": format!("Part one. {}", w.text(200)) },
                        { "type": "text", "text": format!("Part two. {}", w.text(100)) }
                    ]}
                ]),
            ),
        },
        Case {
            name: "chat: chat_template_kwargs (enable_thinking false)",
            api: Api::Chat,
            body: kwargs,
        },
        Case {
            name: "chat: cache_salt (same messages as system + user)",
            api: Api::Chat,
            body: salted,
        },
    ]
}

/// A prompt of its own, sent only to be forgotten by an engine (cache
/// reset, restart): no other case shares its first block.
pub fn probe(model: &str, name: &'static str, seed: u64) -> Case {
    let mut w = Words::new(seed);
    Case {
        name,
        api: Api::Completions,
        body: completion(model, json!(format!("Probe {seed}. {}", w.text(500)))),
    }
}
