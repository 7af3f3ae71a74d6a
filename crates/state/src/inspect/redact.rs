//! Keeps the Valkey password out of everything inspect prints.

pub(crate) use protocol::redact_url;

/// Scrubs the secrets of one URL from arbitrary text (client error messages).
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for the secrets in `url`: its password, raw and
    /// percent-decoded, and a `pass=` query parameter.
    pub(crate) fn new(url: &str) -> Self {
        let mut secrets = Vec::new();
        let (head, query) = match url.split_once('?') {
            Some((h, q)) => (h, Some(q)),
            None => (url, None),
        };
        if let Some((_, rest)) = head.split_once("://") {
            let authority = rest.split('/').next().unwrap_or("");
            if let Some((userinfo, _)) = authority.rsplit_once('@')
                && let Some((_, pw)) = userinfo.split_once(':')
            {
                secrets.push(pw.to_owned());
            }
        }
        for p in query.unwrap_or("").split('&') {
            if let Some((k, v)) = p.split_once('=')
                && (k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password"))
            {
                secrets.push(v.to_owned());
            }
        }
        let decoded: Vec<String> = secrets.iter().map(|s| percent_decode(s)).collect();
        secrets.extend(decoded);
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every secret replaced by `***`.
    pub(crate) fn clean(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            out = out.replace(s.as_str(), "***");
        }
        out
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://:s3cret@h:6379/0"),
            "redis://:***@h:6379/0"
        );
        assert_eq!(
            redact_url("valkeys://user:p%40ss@h:1"),
            "valkeys://user:***@h:1"
        );
        assert_eq!(redact_url("redis://user@h:1"), "redis://user@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact_url("redis+unix:///run/v.sock?db=1&pass=x"),
            "redis+unix:///run/v.sock?db=1&pass=***"
        );
        let r = Redactor::new("redis://u:p%40ss@h:1");
        assert_eq!(
            r.clean("auth p@ss failed for p%40ss"),
            "auth *** failed for ***"
        );
        assert_eq!(Redactor::new("redis://h:1").clean("x"), "x");
    }
}
