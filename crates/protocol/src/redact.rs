//! [`redact_url`]: a URL as it may be logged, without its password.
//!
//! The Valkey URL carries the password (`redis://user:pw@host`), and a
//! worker may register a URL with credentials; neither may reach the logs.

/// `url` with the password of its userinfo, and the value of a `password`
/// or `pass` query parameter, replaced by `***`. Text that is not a URL is
/// returned as is, unless it has an `@` before any `/`, in which case all
/// before the `@` is hidden (it may be credentials without a scheme).
/// A comma-separated list of URLs (a cluster's seeds) is redacted URL by
/// URL.
pub fn redact_url(url: &str) -> String {
    if url.matches("://").count() > 1 {
        return url.split(',').map(redact_url).collect::<Vec<_>>().join(",");
    }
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let (scheme, rest) = match head.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, head),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match (authority.rsplit_once('@'), scheme) {
        (Some((userinfo, host)), Some(_)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        (Some((_, host)), None) => format!("***@{host}"),
        (None, _) => authority.to_owned(),
    };
    let mut out = match scheme {
        Some(s) => format!("{s}://{authority}{path}"),
        None => format!("{authority}{path}"),
    };
    if let Some(q) = query {
        out.push('?');
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("password") || k.eq_ignore_ascii_case("pass") =>
                {
                    format!("{k}=***")
                }
                _ => p.to_owned(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden_and_the_rest_kept() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://:s3cret@h:1", "redis://:***@h:1"),
            ("valkeys://user:p%40ss@h:1/0", "valkeys://user:***@h:1/0"),
            ("valkey://user@h:1", "valkey://user@h:1"),
            ("redis://u:a:b@c@h:1/2", "redis://u:***@h:1/2"),
            (
                "redis://h:1/0?password=x&protocol=resp3",
                "redis://h:1/0?password=***&protocol=resp3",
            ),
            (
                "http://w:pw@10.0.0.1:8000/v1",
                "http://w:***@10.0.0.1:8000/v1",
            ),
            ("user:pw@host", "***@host"),
            ("not a url", "not a url"),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "{url}");
        }
    }
}
