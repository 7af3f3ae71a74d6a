//! The bodies a [`Request`] hands on, written from its entries: the
//! client's bytes when nothing was taken out or set; else its entries in
//! order (without the fields only the router sets, and without those the
//! router sets), then the router's own.

use bytes::Bytes;
use serde_json::Value;

use super::Request;

impl Request {
    /// The body to forward: the client's as sent, unless it carried fields
    /// only the router sets or the router set fields of its own.
    pub fn body(&self) -> Bytes {
        self.changed_body().unwrap_or_else(|| self.sent.clone())
    }

    /// [`body`](Self::body) when it differs from the client's; `None`: the
    /// client's as sent.
    pub fn changed_body(&self) -> Option<Bytes> {
        (self.router_only || !self.set.is_empty()).then(|| self.body_with(&[], &[]))
    }

    /// The body handed on, with `set` set (replacing the client's and the
    /// router's values) and the fields `remove` taken out.
    pub fn body_with(&self, set: &[(&str, Value)], remove: &[&str]) -> Bytes {
        let set_here = |k: &str| set.iter().any(|(s, _)| *s == k);
        let set_before = |k: &str| self.set.iter().any(|(s, _)| *s == k);
        let mut out = Vec::with_capacity(self.sent.len() + 64);
        out.push(b'{');
        let mut first = true;
        let mut write = |out: &mut Vec<u8>, key: &str, value: &[u8]| {
            if !first {
                out.push(b',');
            }
            first = false;
            // A str always serializes.
            let _ = serde_json::to_writer(&mut *out, key);
            out.push(b':');
            out.extend_from_slice(value);
        };
        for e in &self.entries {
            let key = e.key.as_str();
            if !(set_here(key) || set_before(key) || remove.contains(&key)) {
                write(&mut out, key, &self.sent[e.value.clone()]);
            }
        }
        let own = self.set.iter().map(|(k, v)| (*k, v));
        for (key, value) in own
            .filter(|(k, _)| !set_here(k) && !remove.contains(k))
            .chain(set.iter().map(|(k, v)| (*k, v)))
        {
            // A JSON value always serializes.
            let value = serde_json::to_vec(value).unwrap_or_default();
            write(&mut out, key, &value);
        }
        out.push(b'}');
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: &'static [u8]) -> Request {
        Request::parse(Bytes::from_static(body)).unwrap()
    }

    #[test]
    fn the_handshake_is_taken_out_and_the_rest_kept_in_order() {
        let sent = br#"{"model":"m","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"192.0.2.66"},"prompt":"x","kv_transfer_params":null,"stream":true}"#;
        let r = request(sent);
        assert!(r.changed_body().is_some());
        assert_eq!(
            &r.body()[..],
            br#"{"model":"m","prompt":"x","stream":true}"#
        );
        let escaped = request(br#"{"model":"m","kv_transfer_param\u0073":{"remote_port":1}}"#);
        let out: Value = serde_json::from_slice(&escaped.body()).unwrap();
        assert_eq!(out, json!({"model": "m"}));
        assert!(Request::parse(Bytes::from_static(b"[1]")).is_err());
    }

    #[test]
    fn an_untouched_body_goes_on_byte_for_byte() {
        let sent = b"{ \"model\" : \"m\",\n \"prompt\": [1, 2] }";
        let r = request(sent);
        assert!(r.changed_body().is_none());
        assert_eq!(&r.body()[..], &sent[..]);
    }

    #[test]
    fn set_fields_replace_the_clients_and_removed_ones_go() {
        let mut r = request(br#"{"priority":5,"model":"m","stream":true,"min_tokens":3}"#);
        r.set("priority", json!(-2));
        assert_eq!(
            &r.body()[..],
            br#"{"model":"m","stream":true,"min_tokens":3,"priority":-2}"#
        );
        let prefill = r.body_with(&[("stream", json!(false))], &["min_tokens"]);
        assert_eq!(
            &prefill[..],
            br#"{"model":"m","priority":-2,"stream":false}"#
        );
        assert!(Request::parse(Bytes::from_static(b"{} x")).is_err());
        assert!(Request::parse(Bytes::new()).is_err());
    }
}
