//! The bodies of a disaggregated request (issue 14), as vLLM's own
//! disaggregated proxies write them (`toy_proxy_server.py`,
//! `disagg_proxy_multiturn.py`): the prefill worker's request, the decode
//! worker's, and the `kv_transfer_params` taken from the prefill answer.

use bytes::Bytes;
use serde_json::Value;

use crate::request::Request;
use protocol::kv_transfer::{self, KvTransfer};

/// The key vLLM reads the handshake from, in requests and answers.
const PARAMS: &str = "kv_transfer_params";

/// Fields vLLM refuses or misreads in a one-token, unstreamed prefill:
/// `stream_options` (refused unstreamed) and `min_tokens` (above one it
/// contradicts `max_tokens`).
const NOT_IN_PREFILL: [&str; 2] = ["stream_options", "min_tokens"];

/// The prefill worker's body: the request with `max_tokens` 1 (and
/// `max_completion_tokens` 1 if the client set it), not streamed, without
/// [`NOT_IN_PREFILL`], and [`kv_transfer::prefill_request`] as its
/// `kv_transfer_params`. A client's own `kv_transfer_params` were taken
/// out when the request was read: only the router runs the handshake.
pub fn prefill(request: &Request) -> Bytes {
    let one = Value::from(1);
    let mut set = vec![
        ("max_tokens", one.clone()),
        ("stream", Value::Bool(false)),
        (PARAMS, kv_transfer::prefill_request()),
    ];
    if request.raw("max_completion_tokens").is_some() {
        set.push(("max_completion_tokens", one));
    }
    request.body_with(&set, &NOT_IN_PREFILL)
}

/// The decode worker's body: the request as forwarded (streamed or not)
/// with the prefill answer's `params`; without them (the prefill skipped
/// or failed), the request as forwarded.
pub fn decode(request: &Request, params: Option<&Value>) -> Bytes {
    match params {
        None => request.body(),
        Some(params) => request.body_with(&[(PARAMS, params.clone())], &[]),
    }
}

/// The `kv_transfer_params` of a prefill worker's JSON answer, checked to
/// be a remote prefill a decode worker can act on; else why not.
pub fn answer_params(answer: &[u8]) -> Result<Value, String> {
    let json: Value =
        serde_json::from_slice(answer).map_err(|e| format!("answer is not JSON: {e}"))?;
    let params = json.get(PARAMS).cloned().unwrap_or(Value::Null);
    match kv_transfer::parse(Some(&params)) {
        Ok(KvTransfer::RemotePrefill(_)) => Ok(params),
        Ok(_) => Err("answer without kv_transfer_params for a remote prefill".into()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(v: Value) -> Request {
        Request::parse(Bytes::from(v.to_string())).unwrap()
    }

    #[test]
    fn the_prefill_body_is_vllms() {
        let r = request(
            json!({"model": "m", "messages": [], "max_completion_tokens": 50,
            "stream": true, "stream_options": {"include_usage": true}, "min_tokens": 4}),
        );
        let p: Value = serde_json::from_slice(&prefill(&r)).unwrap();
        assert_eq!(
            p,
            json!({"model": "m", "messages": [], "max_completion_tokens": 1, "stream": false,
                "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": true,
                "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids": null,
                "remote_host": null, "remote_port": null}})
        );
        let plain = request(json!({"model": "m", "prompt": "x"}));
        let p: Value = serde_json::from_slice(&prefill(&plain)).unwrap();
        assert_eq!(p["max_tokens"], 1);
        assert!(p.get("max_completion_tokens").is_none());
    }

    #[test]
    fn the_decode_body_is_the_clients_with_the_params() {
        let sent = Bytes::from_static(br#"{"model":"m","prompt":"x","stream":true}"#);
        let r = Request::parse(sent.clone()).unwrap();
        assert_eq!(decode(&r, None), sent);
        let params = json!({"do_remote_prefill": true, "remote_engine_id": "p"});
        let d: Value = serde_json::from_slice(&decode(&r, Some(&params))).unwrap();
        assert_eq!(
            d,
            json!({"model": "m", "prompt": "x", "stream": true, "kv_transfer_params": params})
        );
    }

    #[test]
    fn only_a_remote_prefill_answer_is_handed_on() {
        let good = json!({"id": "c", "kv_transfer_params": {"do_remote_prefill": true,
            "do_remote_decode": false, "remote_block_ids": [[1]], "remote_engine_id": "p",
            "remote_host": "h", "remote_port": 1}});
        assert!(answer_params(good.to_string().as_bytes()).is_ok());
        for bad in [
            json!({"id": "c"}),
            json!({"kv_transfer_params": {"do_remote_prefill": true}}),
        ] {
            assert!(answer_params(bad.to_string().as_bytes()).is_err(), "{bad}");
        }
        assert!(answer_params(b"not json").is_err());
    }
}
