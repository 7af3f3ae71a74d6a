//! [`check_worker_url`]: the shape of a worker's base URL, the same for a
//! registration through the push API and a `--worker` flag.
//!
//! The router appends a request's path to this URL, so anything after the
//! path (a query or a fragment) would swallow the path, and credentials
//! would end up in logs and in other routers' views of the fleet.

use thiserror::Error;

/// Longest worker URL accepted, in bytes.
pub const MAX_WORKER_URL_LEN: usize = 2048;

/// A worker URL that [`check_worker_url`] refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid worker url: {0} (expected http[s]://host[:port][/path], \
     without credentials, query or fragment)"
)]
pub struct InvalidWorkerUrl(pub &'static str);

/// Checks `http[s]://host[:port][/path]`: a host (a name, an IPv4 address
/// or a bracketed IPv6 address), an optional port 1..=65535, an optional
/// path; no user info, query, fragment, white space or control character;
/// at most [`MAX_WORKER_URL_LEN`] bytes.
pub fn check_worker_url(url: &str) -> Result<(), InvalidWorkerUrl> {
    let bad = InvalidWorkerUrl;
    if url.len() > MAX_WORKER_URL_LEN {
        return Err(bad("longer than 2048 bytes"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("white space or control character"));
    }
    if url.contains(['?', '#']) {
        return Err(bad("query or fragment"));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or(bad("scheme is not http or https"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(bad("credentials in the url"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or(bad("unclosed '['"))?;
            if addr.is_empty()
                || !addr
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
            {
                return Err(bad("malformed IPv6 address"));
            }
            match after {
                "" => (addr, None),
                p => (
                    addr,
                    Some(p.strip_prefix(':').ok_or(bad("junk after ']'"))?),
                ),
            }
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let host_ok = !host.is_empty()
        && (authority.starts_with('[')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')));
    if !host_ok {
        return Err(bad("missing or malformed host"));
    }
    if let Some(p) = port {
        let valid = !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n));
        if !valid {
            return Err(bad("port is not 1..=65535"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_pass() {
        for ok in [
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/",
            "https://gpu-0.internal",
            "http://h:1/base/path",
            "http://[::1]:8000",
            "http://[fe80::1]",
            "http://w_1.svc.cluster.local:80",
        ] {
            assert_eq!(check_worker_url(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        for bad in [
            "",
            "ftp://h:1",
            "http://",
            "http://h:1/base?x=1",
            "http://h:1/#frag",
            "http://user:pw@h:1",
            "http://h:0",
            "http://h:65536",
            "http://h:",
            "http://h:1a",
            "http://h h:1",
            "http://h:1/\n",
            "http://[::1",
            "http://[::1]x",
            "http://[zz]:1",
            "http://h%2f:1",
            "h:1",
        ] {
            assert!(check_worker_url(bad).is_err(), "{bad:?}");
        }
        assert!(check_worker_url(&format!("http://h/{}", "a".repeat(2048))).is_err());
    }
}
