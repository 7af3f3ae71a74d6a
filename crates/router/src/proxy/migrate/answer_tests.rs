use super::*;
use crate::proxy::migrate::sse::Events;

fn request(chat: bool, client_ids: bool) -> Eligible {
    Eligible {
        streamed: true,
        chat,
        client_ids,
        model: "m".into(),
        salt: None,
        max_tokens: Some(8),
    }
}

/// A completion's stream as the worker sends it (asked for the ids), and
/// as the client gets it without them.
const SENT: &str = concat!(
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"token_ids\":[7],\"index\":0,\"text\":\" a\",\"logprobs\":null,\"finish_reason\":null,\"prompt_token_ids\":[1,2,3]}]}\n\n",
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"\\\"finish_reason\\\":\\\"stop\\\"\",\"finish_reason\":null,\"token_ids\":[ 8 ]}]}\n\n",
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"é\",\"token_ids\":[9],\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":6,\"completion_tokens\":3}}\n\n",
    "data: [DONE]\n\n",
);
const SEEN: &str = concat!(
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":null,\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"\\\"finish_reason\\\":\\\"stop\\\"\",\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"é\",\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":6,\"completion_tokens\":3}}\n\n",
    "data: [DONE]\n\n",
);

/// `stream` read in `parts` as the relay reads it: what the client gets
/// and the answer after it (or why the worker failed).
fn relay(answer: &mut Answer, parts: &[&[u8]]) -> Result<Vec<u8>, Broken> {
    let mut events = Events::default();
    let mut out = BytesMut::new();
    for part in parts {
        events.push(Bytes::copy_from_slice(part)).unwrap();
        while let Some((raw, data)) = events.next_data() {
            answer.on_event(&raw, &data, &mut out)?;
        }
    }
    Ok(out.to_vec())
}

#[test]
fn the_client_gets_the_stream_without_the_ids_however_the_reads_split_it() {
    let sent = SENT.as_bytes();
    for cut in 0..=sent.len() {
        for client_ids in [false, true] {
            let mut a = Answer::new(request(false, client_ids));
            let out = relay(&mut a, &[&sent[..cut], &sent[cut..]]).unwrap();
            let want = if client_ids { SENT } else { SEEN };
            assert_eq!(String::from_utf8_lossy(&out), want, "cut at {cut}");
            assert!(a.finished && a.done, "cut at {cut}");
            assert_eq!(a.generated, vec![7, 8, 9], "cut at {cut}");
            assert_eq!(a.prompt_ids(), Some(vec![1, 2, 3]), "cut at {cut}");
            assert_eq!(a.stuck(), None, "cut at {cut}");
        }
    }
    // One byte a read.
    let mut a = Answer::new(request(false, false));
    let bytes: Vec<&[u8]> = sent.chunks(1).collect();
    assert_eq!(
        String::from_utf8_lossy(&relay(&mut a, &bytes).unwrap()),
        SEEN
    );
}

#[test]
fn only_a_finish_reason_that_is_a_string_ends_the_answer() {
    let head = "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[1],\"prompt_token_ids\":[1]}]}\n\n";
    for (chunk, ends) in [
        (
            r#"{"choices":[{"index":0,"text":"b","token_ids":[2],"finish_reason":null}]}"#,
            false,
        ),
        (
            r#"{"choices":[{"index":0,"text":"\"finish_reason\":\"stop\"","token_ids":[2]}]}"#,
            false,
        ),
        (
            r#"{"choices":[{"index":0,"text":"b","token_ids":[2],"finish_reason":"stop"}]}"#,
            true,
        ),
        (
            r#"{"choices":[{"token_ids":[2],"finish_reason":"length","index":0,"text":"b"}]}"#,
            true,
        ),
    ] {
        let mut a = Answer::new(request(false, false));
        let stream = format!("{head}data: {chunk}\n\ndata: [DONE]\n\n");
        let got = relay(&mut a, &[stream.as_bytes()]);
        assert_eq!(got.is_ok(), ends, "{chunk}");
        assert_eq!(a.finished, ends, "{chunk}");
    }
}

#[test]
fn an_error_event_or_a_chunk_that_is_not_json_breaks_the_answer() {
    for event in [
        r#"{"error":{"message":"boom","code":500}}"#,
        r#"{"choices":[{"index":0,"text":"a"}],"error":null}"#,
        r#"{"choices":[{"index":0,"text":"a","token_ids":[1]}"#,
        r#"{"choices":[{"index":0,"text":tru,"token_ids":[1]}]}"#,
    ] {
        let mut a = Answer::new(request(false, false));
        let stream = format!("data: {event}\n\n");
        assert!(relay(&mut a, &[stream.as_bytes()]).is_err(), "{event}");
    }
}

#[test]
fn chunks_the_scan_leaves_to_serde_are_relayed_alike() {
    // An exponent: serde reads the chunk, it goes without its ids.
    let stream = concat!(
        "data: {\"created\":1e0,\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[4],\"prompt_token_ids\":[1]}]}\n\n",
        "data: {\"created\":1e0,\"choices\":[{\"index\":0,\"text\":\"b\",\"token_ids\":[5],\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let mut a = Answer::new(request(false, false));
    let out = relay(&mut a, &[stream.as_bytes()]).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        concat!(
            "data: {\"created\":1e0,\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n",
            "data: {\"created\":1e0,\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        )
    );
    assert_eq!((a.generated.as_slice(), a.done), (&[4, 5][..], true));
    // A chat chunk with a parser's output: relayed, and the answer stuck.
    let chat = concat!(
        "data: {\"id\":\"c\",\"prompt_token_ids\":[1],\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"r\"},\"token_ids\":[3]}]}\n\n",
    );
    let mut a = Answer::new(request(true, false));
    relay(&mut a, &[chat.as_bytes()]).unwrap();
    assert_eq!(a.stuck(), Some("tool-call or reasoning parsing"));
}
