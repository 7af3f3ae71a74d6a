//! Tests of `prompt.rs`: every prompt shape vLLM accepts, and the errors
//! of those it refuses.

use super::*;
use crate::read_token_ids;
use serde_json::json;

#[test]
fn every_prompt_shape_vllm_accepts() {
    let p = |v: Value| completion_prompt(&json!({ "prompt": v }));
    assert_eq!(p(json!("hi")).unwrap(), CompletionPrompt::Text("hi".into()));
    assert_eq!(
        p(json!(["a", "b"])).unwrap(),
        CompletionPrompt::Text("a".into())
    );
    assert_eq!(
        p(json!([1, 2, 3])).unwrap(),
        CompletionPrompt::Tokens(vec![1, 2, 3])
    );
    assert_eq!(
        p(json!([[4, 5], [6]])).unwrap(),
        CompletionPrompt::Tokens(vec![4, 5])
    );
    for bad in [
        json!([]),
        json!(7),
        json!([-1]),
        json!([1.5]),
        json!([4294967296u64]),
        json!([{}]),
        Value::Null,
    ] {
        assert!(p(bad.clone()).is_err(), "{bad}");
    }
    assert!(completion_prompt(&json!({})).is_err());
}

#[test]
fn a_plain_id_list_reads_as_the_parser_reads_it() {
    let parsed = |t: &str| {
        serde_json::from_str::<PromptField>(t)
            .map_err(|e| e.to_string())
            .map(|p| p.0)
    };
    for text in [
        "[1,2,3]",
        " [ 0 , 4294967295,\n\t7 ] ",
        "[4294967296]",
        "[42949672950]",
        "[1,-2]",
        "[1.0]",
        "[1e3]",
        "[01]",
        "[]",
        "[1,]",
        "[,1]",
        "[1 2]",
        "[[1,2]]",
        "[\"a\"]",
        "\"text\"",
        "[1]x",
    ] {
        let mut ids = Vec::new();
        let fast = read_token_ids(text.as_bytes(), &mut ids)
            .map(|()| ids)
            .filter(|ids| !ids.is_empty());
        match parsed(text) {
            Ok(Ok(CompletionPrompt::Tokens(ids))) if !text.contains("[[") => {
                assert_eq!(fast.as_ref(), Some(&ids), "{text}")
            }
            other => assert!(fast.is_none(), "{text}: {other:?}"),
        }
        let whole = prompt_from_json(text);
        if let Ok(Ok(p)) = parsed(text) {
            assert_eq!(whole, Ok(p), "{text}");
        } else {
            assert!(whole.is_err(), "{text}");
        }
    }
    let long: Vec<u32> = (0..15_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let text = serde_json::to_string(&long).unwrap();
    let mut ids = vec![7];
    assert_eq!(read_token_ids(text.as_bytes(), &mut ids), Some(()));
    assert_eq!(ids[1..], long[..]);
    assert_eq!(read_token_ids(b" [ ] ", &mut ids), Some(()));
    assert_eq!(read_token_ids(b"[1,x]", &mut ids), None);
    assert_eq!(
        ids.len(),
        1 + long.len(),
        "a refused list leaves out as it was"
    );
}

#[test]
fn read_from_the_body_text_as_from_a_value() {
    #[derive(serde::Deserialize)]
    struct Body {
        prompt: PromptField,
        after: u32,
    }
    for prompt in [
        json!("hi"),
        json!(["a", 2]),
        json!([1, 2, 3]),
        json!([[4, 5], [6]]),
        json!([[]]),
        json!([]),
        json!([1, -1, 2]),
        json!([1, "x"]),
        json!([1, [2]]),
        json!([{ "a": [1] }, 2]),
        json!({ "k": [1] }),
        json!(true),
        json!([[1, 2.5]]),
        json!([null]),
        Value::Null,
    ] {
        let text = serde_json::to_vec(&json!({ "prompt": prompt, "after": 7 })).unwrap();
        let body: Body = serde_json::from_slice(&text).unwrap();
        assert_eq!(body.after, 7, "{prompt}");
        assert_eq!(
            body.prompt.0,
            completion_prompt(&json!({ "prompt": prompt })),
            "{prompt}"
        );
    }
    assert_eq!(
        completion_prompt(&json!({ "prompt": [5, -1] })),
        Err(InvalidPrompt(
            "token id -1 is not an unsigned 32-bit integer".into()
        ))
    );
}
