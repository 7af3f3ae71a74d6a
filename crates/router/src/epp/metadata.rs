//! What the picker reads from Envoy's messages: request headers (one, or
//! all as an HTTP header map), the endpoint subset hint, the endpoint that
//! served; and workers' URLs as the `ip:port` endpoints the protocol speaks.

use std::collections::HashSet;

use super::messages::DESTINATION_NAMESPACE;
use super::wire::value::Kind;
use super::wire::{HeaderMap, Metadata, Value};
use axum::http::HeaderMap as HttpHeaderMap;

/// The metadata namespace of the subset hint.
pub const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";
/// The key of the subset hint: the endpoints the picker must choose among.
pub const SUBSET_KEY: &str = "x-gateway-destination-endpoint-subset";
/// The key (under `envoy.lb`) of the endpoint that served the request.
pub const SERVED_KEY: &str = "x-gateway-destination-endpoint-served";

/// The value of header `name` (lowercase, as Envoy sends them): Envoy puts
/// it in `raw_value`, older versions in `value`.
pub fn header(headers: Option<&HeaderMap>, name: &str) -> Option<String> {
    let h = headers?.headers.iter().find(|h| h.key == name)?;
    if h.raw_value.is_empty() {
        Some(h.value.clone())
    } else {
        String::from_utf8(h.raw_value.clone()).ok()
    }
}

/// The subset hint, when the gateway sent one: a list of `ip:port`, or one
/// comma-separated string of them. `Some(empty)` means no endpoint allowed.
pub fn subset_hint(metadata: Option<&Metadata>) -> Option<HashSet<String>> {
    let value = field(metadata, SUBSET_NAMESPACE, SUBSET_KEY)?;
    let mut endpoints = HashSet::new();
    match &value.kind {
        Some(Kind::ListValue(list)) => {
            for v in &list.values {
                if let Some(Kind::StringValue(s)) = &v.kind {
                    endpoints.extend(split(s));
                }
            }
        }
        Some(Kind::StringValue(s)) => endpoints.extend(split(s)),
        _ => {}
    }
    Some(endpoints)
}

/// The endpoint that served the request (the first valid one of the
/// destination list that Envoy's retries reached).
pub fn served(metadata: Option<&Metadata>) -> Option<String> {
    match &field(metadata, DESTINATION_NAMESPACE, SERVED_KEY)?.kind {
        Some(Kind::StringValue(s)) => split(s).next(),
        _ => None,
    }
}

fn field<'m>(metadata: Option<&'m Metadata>, namespace: &str, key: &str) -> Option<&'m Value> {
    metadata?.filter_metadata.get(namespace)?.fields.get(key)
}

fn split(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
}

/// A worker's base URL as an endpoint, `host:port` (the port defaulting to
/// the scheme's; IPv6 hosts in brackets); `None` for a URL without a host.
pub fn endpoint_of(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    Some(format!("{host}:{port}"))
}

/// The request headers Envoy sent, as a header map (pseudo-headers and
/// anything that is not a valid header skipped).
pub fn client_headers(headers: Option<&HeaderMap>) -> HttpHeaderMap {
    let mut out = HttpHeaderMap::new();
    for h in headers.map_or(&[][..], |h| &h.headers[..]) {
        let value = if h.raw_value.is_empty() {
            h.value.as_bytes()
        } else {
            &h.raw_value[..]
        };
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(h.key.as_bytes()),
            axum::http::HeaderValue::from_bytes(value),
        ) {
            out.append(name, value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_of_urls() {
        assert_eq!(
            endpoint_of("http://10.0.0.5:8000").as_deref(),
            Some("10.0.0.5:8000")
        );
        assert_eq!(
            endpoint_of("http://10.0.0.5/").as_deref(),
            Some("10.0.0.5:80")
        );
        assert_eq!(
            endpoint_of("https://[fd00::1]:8443/x").as_deref(),
            Some("[fd00::1]:8443")
        );
        assert_eq!(endpoint_of("not a url"), None);
    }
}
