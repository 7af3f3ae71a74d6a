//! Forwarding loops: a worker URL that points back at a router (or at the
//! balancer in front of the routers) would make one request circle until
//! file descriptors run out. Every forwarded request carries a `via` mark
//! ([`VIA`]); a router refuses a request that already has one (508), and
//! refuses to register a worker at one of its own listeners.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use axum::http::header::VIA;

/// The `via` entry a router adds to every request it forwards (RFC 9110
/// §7.6.3: protocol and a pseudonym).
pub const VIA_MARK: &str = "1.1 prefix-router";

/// True when the request has passed through a router already.
pub fn looped(headers: &HeaderMap) -> bool {
    headers.get_all(VIA).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|entry| entry.split_whitespace().nth(1) == Some("prefix-router"))
        })
    })
}

/// True when `url` names one of `listeners`: the same port on the same
/// address, a loopback address, or any address when the listener is
/// unspecified (`0.0.0.0`). Host names other than `localhost` are not
/// resolved; the `via` mark stops those loops at the first hop.
pub fn is_own_listener(url: &str, listeners: &[SocketAddr]) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let default_port = if url.starts_with("https://") { 443 } else { 80 };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && !p.ends_with(']') => {
            (h, p.parse::<u16>().unwrap_or(0))
        }
        _ => (authority, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = if host.eq_ignore_ascii_case("localhost") {
        Some(IpAddr::from([127, 0, 0, 1]))
    } else {
        host.parse::<IpAddr>().ok()
    };
    let Some(ip) = ip else { return false };
    listeners.iter().any(|l| {
        l.port() == port
            && (l.ip() == ip || ip.is_loopback() || ip.is_unspecified() || l.ip().is_unspecified())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_router_mark_is_a_loop() {
        let mut h = HeaderMap::new();
        assert!(!looped(&h));
        h.append(VIA, "1.1 edge-proxy".parse().unwrap());
        assert!(!looped(&h));
        h.append(VIA, "1.0 fred, 1.1 prefix-router".parse().unwrap());
        assert!(looped(&h));
    }

    #[test]
    fn own_listeners_are_recognized() {
        let own: Vec<SocketAddr> = vec![
            "127.0.0.1:8080".parse().unwrap(),
            "0.0.0.0:9090".parse().unwrap(),
        ];
        for url in [
            "http://127.0.0.1:8080",
            "http://localhost:8080/",
            "http://[::1]:8080",
            "http://10.1.2.3:9090/base",
            "http://0.0.0.0:8080",
        ] {
            assert!(is_own_listener(url, &own), "{url}");
        }
        for url in [
            "http://127.0.0.1:8081",
            "http://10.1.2.3:8080",
            "http://gpu-0:8080",
            "https://127.0.0.1",
        ] {
            assert!(!is_own_listener(url, &own), "{url}");
        }
    }
}
