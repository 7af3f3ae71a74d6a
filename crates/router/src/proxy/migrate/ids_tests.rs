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
    assert_eq!(scan(plain), Some(Ids::default()));
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
