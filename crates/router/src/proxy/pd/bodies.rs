//! The bodies of a disaggregated request (issue 14), as vLLM's own
//! disaggregated proxies write them (`toy_proxy_server.py`,
//! `disagg_proxy_multiturn.py`): the prefill worker's request, the decode
//! worker's, and the `kv_transfer_params` taken from the prefill answer.

use bytes::Bytes;
use serde_json::{Map, Value};

use protocol::kv_transfer::{self, KvTransfer};

/// The key vLLM reads the handshake from, in requests and answers.
const PARAMS: &str = "kv_transfer_params";

/// A client's request, parsed once to derive both workers' bodies.
pub struct PdBodies {
    /// The body as the client sent it.
    original: Bytes,
    /// Its JSON object.
    request: Map<String, Value>,
}

impl PdBodies {
    /// The client's body as a JSON object; `None` when it is not one. A
    /// client's own `kv_transfer_params` were taken out before
    /// (`router_fields`): only the router runs the handshake.
    pub fn parse(original: Bytes) -> Option<PdBodies> {
        let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(&original) else {
            return None;
        };
        Some(PdBodies { original, request })
    }

    /// The prefill worker's body: the request with `max_tokens` 1 (and
    /// `max_completion_tokens` 1 if the client set it), not streamed,
    /// without `stream_options` (vLLM refuses them unstreamed) nor
    /// `min_tokens` (above one it would contradict `max_tokens`), and
    /// [`kv_transfer::prefill_request`] as its `kv_transfer_params`.
    pub fn prefill(&self) -> Bytes {
        let mut body = self.request.clone();
        body.insert("max_tokens".into(), Value::from(1));
        if body.contains_key("max_completion_tokens") {
            body.insert("max_completion_tokens".into(), Value::from(1));
        }
        body.insert("stream".into(), Value::Bool(false));
        body.remove("stream_options");
        body.remove("min_tokens");
        body.insert(PARAMS.into(), kv_transfer::prefill_request());
        to_bytes(&body)
    }

    /// The decode worker's body: the client's request (streamed or not) with
    /// the prefill answer's `params`; without them (the prefill skipped or
    /// failed), the client's body byte for byte.
    pub fn decode(&self, params: Option<&Value>) -> Bytes {
        match params {
            None => self.original.clone(),
            Some(params) => {
                let mut body = self.request.clone();
                body.insert(PARAMS.into(), params.clone());
                to_bytes(&body)
            }
        }
    }
}

fn to_bytes(body: &Map<String, Value>) -> Bytes {
    // A map of JSON values always serializes.
    Bytes::from(serde_json::to_vec(body).unwrap_or_default())
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

    fn bodies(v: Value) -> PdBodies {
        PdBodies::parse(Bytes::from(v.to_string())).unwrap()
    }

    #[test]
    fn the_prefill_body_is_vllms() {
        let b = bodies(
            json!({"model": "m", "messages": [], "max_completion_tokens": 50,
            "stream": true, "stream_options": {"include_usage": true}, "min_tokens": 4}),
        );
        let p: Value = serde_json::from_slice(&b.prefill()).unwrap();
        assert_eq!(
            p,
            json!({"model": "m", "messages": [], "max_completion_tokens": 1, "stream": false,
                "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": true,
                "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids": null,
                "remote_host": null, "remote_port": null}})
        );
        let plain = bodies(json!({"model": "m", "prompt": "x"}));
        let p: Value = serde_json::from_slice(&plain.prefill()).unwrap();
        assert_eq!(p["max_tokens"], 1);
        assert!(p.get("max_completion_tokens").is_none());
    }

    #[test]
    fn the_decode_body_is_the_clients_with_the_params() {
        let sent = Bytes::from_static(br#"{"model":"m","prompt":"x","stream":true}"#);
        let b = PdBodies::parse(sent.clone()).unwrap();
        assert_eq!(b.decode(None), sent);
        let params = json!({"do_remote_prefill": true, "remote_engine_id": "p"});
        let d: Value = serde_json::from_slice(&b.decode(Some(&params))).unwrap();
        assert_eq!(
            d,
            json!({"model": "m", "prompt": "x", "stream": true, "kv_transfer_params": params})
        );
    }

    #[test]
    fn a_body_that_is_no_object_is_not_split() {
        assert!(PdBodies::parse(Bytes::from_static(b"[1]")).is_none());
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
