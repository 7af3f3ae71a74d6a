use super::*;
use serde_json::{Value, json};
use tokenize::read_token_ids;

/// `v` without the id fields, the slow way.
fn stripped(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("prompt_token_ids");
    }
    if let Some(cs) = v.get_mut("choices").and_then(Value::as_array_mut) {
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("token_ids");
            c.remove("prompt_token_ids");
        }
    }
    v
}

fn without(json: &[u8]) -> Option<Vec<u8>> {
    let ids = scan(json)?;
    let mut out = Vec::new();
    ids.write_without(json, &mut out);
    Some(out)
}

fn list(json: &[u8], r: &Option<Range<usize>>) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    read_token_ids(&json[r.clone()?], &mut out)?;
    Some(out)
}

#[test]
fn ids_come_out_and_nothing_else_changes() {
    for v in [
        json!({"id": "c", "choices": [{"index": 0, "text": "a", "token_ids": [1, 2], "prompt_token_ids": [3], "finish_reason": null}]}),
        json!({"id": "c", "prompt_token_ids": [1], "choices": [{"delta": {"content": "\"token_ids\": [9]"}, "token_ids": [5]}]}),
        json!({"choices": [{"token_ids": [1], "text": "x", "my_token_ids": [4]}]}),
        json!({"choices": [{"token_ids": null}], "usage": {"prompt_tokens": 1}}),
        json!({"id": "c", "choices": []}),
        json!({"choices": [{"token_ids": [1], "prompt_token_ids": [2], "text": "a"}]}),
        json!({"choices": [{"text": "a", "token_ids": [1], "prompt_token_ids": [2]}]}),
        json!({"prompt_token_ids": [1, 2], "choices": [{"token_ids": []}, {"token_ids": [7]}]}),
        json!({"choices": [{"token_ids": [1]}], "prompt_token_ids": [2]}),
        json!({"a": {"token_ids": [1]}, "choices": [{"delta": {"token_ids": [2]}}]}),
        json!({}),
    ] {
        let compact = v.to_string();
        let out = without(compact.as_bytes()).expect(&compact);
        let got: Value = serde_json::from_slice(&out).expect("still JSON");
        assert_eq!(got, stripped(v.clone()), "{compact}");
        let spaced = serde_json::to_string_pretty(&v).unwrap();
        let out = without(spaced.as_bytes()).expect(&spaced);
        let got: Value = serde_json::from_slice(&out).expect("still JSON");
        assert_eq!(got, stripped(v), "{spaced}");
    }
    // The text keeps its bytes: only the key goes.
    let raw = br#"{"choices":[{"text":"\u00e9 x","token_ids":[7]}]}"#;
    assert_eq!(
        without(raw).unwrap(),
        br#"{"choices":[{"text":"\u00e9 x"}]}"#.to_vec()
    );
}

#[test]
fn the_ids_are_found_where_vllm_puts_them() {
    // Chat: the prompt at the top, the generated ids in the choice.
    let chat = br#"{"id":"x","prompt_token_ids":[10, 11,12],"choices":[{"index":0,"delta":{"content":"a"},"token_ids":[5]}]}"#;
    let ids = scan(chat).unwrap();
    assert_eq!(list(chat, &ids.prompt), Some(vec![10, 11, 12]));
    assert_eq!(list(chat, &ids.generated), Some(vec![5]));
    assert!(ids.any());
    // Completions: both in the choice.
    let comp = br#"{"choices":[{"text":"a","token_ids":[6,7],"prompt_token_ids":[1]}]}"#;
    let ids = scan(comp).unwrap();
    assert_eq!(list(comp, &ids.prompt), Some(vec![1]));
    assert_eq!(list(comp, &ids.generated), Some(vec![6, 7]));
    // The top-level prompt wins over a choice's.
    let both = br#"{"choices":[{"prompt_token_ids":[1]}],"prompt_token_ids":[2]}"#;
    assert_eq!(list(both, &scan(both).unwrap().prompt), Some(vec![2]));
    // Another choice's ids are cut, not taken as the first's.
    let two = br#"{"choices":[{"text":"a"},{"token_ids":[9]}]}"#;
    let ids = scan(two).unwrap();
    assert_eq!(ids.generated, None);
    assert!(ids.any());
    // None of them: nothing to cut.
    let plain = br#"{"choices":[{"text":"a","finish_reason":null}],"usage":null}"#;
    let ids = scan(plain).unwrap();
    assert!(!ids.any() && ids.prompt.is_none() && ids.generated.is_none());
    // `null` is cut but is no list.
    let null = br#"{"choices":[{"token_ids":null,"text":"a"}]}"#;
    let ids = scan(null).unwrap();
    assert!(ids.any() && ids.generated.is_none());
}

#[test]
fn strings_that_look_like_id_fields_are_left_alone() {
    for (raw, left) in [
        // In a value, escaped quotes around the name.
        (
            &br#"{"choices":[{"text":"\"token_ids\":[1]","token_ids":[2]}]}"#[..],
            &br#"{"choices":[{"text":"\"token_ids\":[1]"}]}"#[..],
        ),
        // A key whose content is `"token_ids` (escaped quote first).
        (
            br#"{"choices":[{"\"token_ids":[1],"token_ids":[2]}]}"#,
            br#"{"choices":[{"\"token_ids":[1]}]}"#,
        ),
        // A value ending in a backslash, then the real key.
        (
            br#"{"choices":[{"text":"a\\","token_ids":[2]}]}"#,
            br#"{"choices":[{"text":"a\\"}]}"#,
        ),
        // The name escaped: not the bytes of the key, so not ours.
        (
            br#"{"choices":[{"token\u005fids":[1],"token_ids":[2]}]}"#,
            br#"{"choices":[{"token\u005fids":[1]}]}"#,
        ),
        // Nested deeper than a choice.
        (
            br#"{"choices":[{"delta":{"token_ids":[1]},"token_ids":[2]}]}"#,
            br#"{"choices":[{"delta":{"token_ids":[1]}}]}"#,
        ),
    ] {
        let text = String::from_utf8_lossy(raw);
        let ids = scan(raw).unwrap_or_else(|| panic!("{text}"));
        assert_eq!(list(raw, &ids.generated), Some(vec![2]), "{text}");
        assert_eq!(without(raw).unwrap(), left.to_vec(), "{text}");
    }
}

#[test]
fn blanks_vllm_may_emit_are_read() {
    let raw = b"{ \"prompt_token_ids\" :\n[ 1 ,\t2\r\n] , \"choices\" : [ { \"token_ids\" : [ 3 ] , \"text\" : \"a\" } ] }";
    let ids = scan(raw).unwrap();
    assert_eq!(list(raw, &ids.prompt), Some(vec![1, 2]));
    assert_eq!(list(raw, &ids.generated), Some(vec![3]));
    let got: Value = serde_json::from_slice(&without(raw).unwrap()).unwrap();
    assert_eq!(got, json!({"choices": [{"text": "a"}]}));
}

#[test]
fn a_huge_prompt_is_found_and_parsed() {
    let ids: Vec<u32> = (0..200_000).map(|i| i * 7919 % 151_936).collect();
    let v = json!({"id": "c", "prompt_token_ids": ids, "choices": [{"delta": {"content": ""}, "token_ids": []}]});
    let raw = v.to_string();
    let found = scan(raw.as_bytes()).unwrap();
    assert_eq!(list(raw.as_bytes(), &found.prompt), Some(ids));
    assert_eq!(list(raw.as_bytes(), &found.generated), Some(vec![]));
    let out = without(raw.as_bytes()).unwrap();
    assert!(out.len() < 100, "{}", String::from_utf8_lossy(&out));
}

#[test]
fn malformed_chunks_are_refused_without_a_panic() {
    for raw in [
        &b""[..],
        b"[]",
        b"\"token_ids\"",
        b"{",
        b"{\"choices\":[{\"token_ids\":[1,2]}]",
        b"{\"choices\":[{\"token_ids\":\"12\"}]}",
        b"{\"choices\":[{\"token_ids\":{\"a\":1}}]}",
        b"{\"choices\":[{\"token_ids\":[1.5]}]}",
        b"{\"choices\":[{\"token_ids\":[-1]}]}",
        b"{\"choices\":[{\"token_ids\":[1],\"token_ids\":[2]}]}",
        b"{\"prompt_token_ids\":[1],\"prompt_token_ids\":[2]}",
        b"{\"choices\":[{\"token_ids\":nul}]}",
        b"{\"choices\":[{\"token_ids\":nullx}]}",
        b"{\"a\":1,}",
        b"{\"a\":1} x",
        b"{\"a\" 1}",
        b"{\"a\":\"\\",
    ] {
        assert_eq!(scan(raw), None, "{}", String::from_utf8_lossy(raw));
    }
    // Every cut of a real chunk: refused, never a panic.
    let chunk = br#"{"id":"c","prompt_token_ids":[1,2],"choices":[{"index":0,"delta":{"content":"a\"b"},"token_ids":[3],"finish_reason":null}],"usage":{"x":[1,{"y":null}]}}"#;
    for end in 0..chunk.len() {
        assert_eq!(scan(&chunk[..end]), None, "cut at {end}");
    }
    assert!(scan(chunk).is_some());
    // Deep nesting costs no stack.
    let deep = format!(
        "{{\"a\":{}{}}}",
        "[".repeat(1_000_000),
        "]".repeat(1_000_000)
    );
    assert!(scan(deep.as_bytes()).is_some());
}

/// What serde reads of `json` without its id fields (the relay's slow
/// way), when the scan finds them.
fn serde_view(json: &[u8]) -> Option<Result<View, String>> {
    let lean = without(json)?;
    Some(serde_json::from_slice::<View>(&lean).map_err(|e| e.to_string()))
}

/// Chunks as vLLM and the sim send them, and some shaped otherwise.
const CHUNKS: [&str; 10] = [
    r#"{"id":"cmpl-1","object":"text_completion","created":1764300000,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[279],"prompt_token_ids":[1,2,3]}],"usage":null}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764300000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,2]}"#,
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764300000,"model":"m","choices":[{"index":0,"delta":{"content":"é\"x\\n"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":[5,6]}]}"#,
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}"#,
    r#"{"error":{"object":"error","message":"boom","type":"InternalServerError","param":null,"code":500}}"#,
    r#"{ "choices" : [ { "token_ids" : [ 7 ] , "index" : 1 , "text" : "" } , { "index" : 0 , "delta" : null } ] , "usage" : [ ] }"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"id":"t","function":{"arguments":"{}"}}],"reasoning":null,"reasoning_content":"r"},"text":true,"finish_reason":-0.5}]}"#,
    r#"{"a":[[],{},[{"b":[true,false,null,"",0,-1.25,"\u00e9\/"]}]],"choices":[{"finish_reason":"stop","index":0}],"z":{}}"#,
    r#"{"choices":[{"index":0,"text":"a","token_ids":[1],"finish_reason":null}],"prompt_token_ids":[9]}"#,
    "{\"choices\":[{\"index\":0,\"text\":\"\\u0041\\t\",\"finish_reason\":null}]}",
];

#[test]
fn the_view_of_a_vllm_chunk_is_read_without_serde_and_is_serdes() {
    for chunk in CHUNKS {
        let ids = scan(chunk.as_bytes()).expect(chunk);
        let view = ids.view.expect(chunk);
        assert_eq!(Some(Ok(view)), serde_view(chunk.as_bytes()), "{chunk}");
    }
}

/// A small deterministic generator (xorshift), for the mutations below.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as usize
    }
}

#[test]
fn whenever_the_scan_vouches_for_a_chunk_serde_reads_the_same() {
    // Bytes that change what a chunk means.
    let bytes = b"{}[],:\"\\ 0123456789-+.eEnultrfasx\x01\x1f\xc3\xa9\xff\t\n";
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut vouched, mut refused, mut doubted) = (0, 0, 0);
    for round in 0..60_000 {
        let base = CHUNKS[round % CHUNKS.len()].as_bytes();
        let mut m = base.to_vec();
        for _ in 0..1 + rng.next() % 3 {
            let at = rng.next() % (m.len() + 1);
            match rng.next() % 4 {
                0 if at < m.len() => {
                    m.remove(at);
                }
                1 if at < m.len() => m[at] = bytes[rng.next() % bytes.len()],
                2 => {
                    let from = rng.next() % (m.len() + 1);
                    let end = (from + rng.next() % 12).min(m.len());
                    let piece = m[from..end].to_vec();
                    m.splice(at..at, piece);
                }
                _ => m.insert(at, bytes[rng.next() % bytes.len()]),
            }
        }
        let text = String::from_utf8_lossy(&m);
        match scan(&m) {
            None => refused += 1,
            Some(Ids { view: None, .. }) => doubted += 1,
            Some(Ids {
                view: Some(view), ..
            }) => {
                vouched += 1;
                assert_eq!(serde_view(&m), Some(Ok(view)), "{text}");
                let lean = without(&m).unwrap();
                assert!(serde_json::from_slice::<Value>(&lean).is_ok(), "{text}");
            }
        }
    }
    // Each way is taken often: the comparison is not vacuous.
    assert!(
        vouched > 10_000 && refused > 5_000 && doubted > 1_000,
        "{vouched} {refused} {doubted}"
    );
}

#[test]
fn ids_at_odd_places_and_strings_that_look_like_fields() {
    let view = |raw: &[u8]| scan(raw).unwrap().view.unwrap();
    // The ids first in the choice, the prompt last at the top.
    let raw = br#"{"choices":[{"token_ids":[5],"index":0,"text":"a","finish_reason":null}],"prompt_token_ids":[1,2],"id":"x"}"#;
    let ids = scan(raw).unwrap();
    assert_eq!(list(raw, &ids.prompt), Some(vec![1, 2]));
    assert_eq!(list(raw, &ids.generated), Some(vec![5]));
    assert_eq!(
        without(raw).unwrap(),
        br#"{"choices":[{"index":0,"text":"a","finish_reason":null}],"id":"x"}"#.to_vec()
    );
    let c = view(raw).choices.first.unwrap();
    assert_eq!(
        (c.index, c.text, c.finish_reason),
        (Some(0), Shape::Text, Shape::Null)
    );
    // A `finish_reason` inside a string, escaped quotes and all, is text.
    for raw in [
        &br#"{"choices":[{"text":"\"finish_reason\":\"stop\"","finish_reason":null}]}"#[..],
        br#"{"choices":[{"text":"a\\","x":"\"finish_reason\":\"stop\"","token_ids":[1]}]}"#,
        br#"{"choices":[{"delta":{"content":"{\"finish_reason\": \"length\"}"}}]}"#,
        br#"{"choices":[{"logprobs":{"finish_reason":"stop"},"text":"a"}]}"#,
    ] {
        let c = view(raw).choices.first.unwrap();
        assert!(
            !c.finish_reason.filled(),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
    // A finish reason: a string ends the answer, `null` does not.
    let finish = |raw: &[u8]| view(raw).choices.first.unwrap().finish_reason;
    assert_eq!(
        finish(br#"{"choices":[{"finish_reason":"length"}]}"#),
        Shape::Text
    );
    assert_eq!(
        finish(br#"{"choices":[{"finish_reason" : null }]}"#),
        Shape::Null
    );
    assert_eq!(finish(br#"{"choices":[{"text":"a"}]}"#), Shape::Absent);
    assert!(finish(br#"{"choices":[{"finish_reason":"stop"}]}"#).filled());
    assert!(!finish(br#"{"choices":[{"finish_reason":null}]}"#).filled());
    // Another choice, or one of another index: several.
    assert!(view(br#"{"choices":[{"index":1}]}"#).choices.several);
    assert!(
        view(br#"{"choices":[{"index":0},{"index":0}]}"#)
            .choices
            .several
    );
    assert!(!view(br#"{"choices":[{"index":null}]}"#).choices.several);
}

#[test]
fn what_serde_may_read_otherwise_is_left_to_serde() {
    for raw in [
        // A key serde reads unescaped.
        &br#"{"choices":[{"finish\u005freason":"stop"}]}"#[..],
        // A repeated field serde refuses.
        br#"{"choices":[{"finish_reason":null,"finish_reason":"stop"}]}"#,
        br#"{"usage":null,"usage":null}"#,
        // Numbers serde may not read as the walk would.
        br#"{"created":1e3,"choices":[]}"#,
        br#"{"created":01,"choices":[]}"#,
        br#"{"choices":[{"index":"0"}]}"#,
        br#"{"choices":[{"index":-1}]}"#,
        br#"{"choices":[{"index":0.0}]}"#,
        br#"{"choices":[{"index":99999999999999999999}]}"#,
        // Strings serde refuses or reads otherwise.
        b"{\"choices\":[{\"text\":\"a\x01\"}]}",
        b"{\"choices\":[{\"text\":\"\xc3\"}]}",
        br#"{"choices":[{"text":"\ud800"}]}"#,
        br#"{"choices":[{"text":"\q"}]}"#,
        br#"{"choices":[{"text":"\u+fff"}]}"#,
        // Shapes serde refuses.
        br#"{"choices":null}"#,
        br#"{"choices":[3]}"#,
        br#"{"choices":[{"delta":[]}]}"#,
        br#"{"a":[1 2],"choices":[]}"#,
        br#"{"a":{"b" 1},"choices":[]}"#,
        br#"{"a":[},"choices":[]}"#,
        br#"{"a":nul,"choices":[]}"#,
    ] {
        let text = String::from_utf8_lossy(raw);
        if let Some(ids) = scan(raw) {
            assert_eq!(ids.view, None, "{text}");
        }
    }
    // Nesting near serde's limit.
    let deep = format!(
        r#"{{"a":{}{},"choices":[]}}"#,
        "[".repeat(120),
        "]".repeat(120)
    );
    assert_eq!(scan(deep.as_bytes()).unwrap().view, None);
    let fine = format!(
        r#"{{"a":{}{},"choices":[]}}"#,
        "[".repeat(90),
        "]".repeat(90)
    );
    assert!(scan(fine.as_bytes()).unwrap().view.is_some());
}
