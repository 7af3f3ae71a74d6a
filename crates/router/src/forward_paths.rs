//! Which `/v1/*` paths the router forwards to a worker ([`ForwardPaths`]),
//! and the check that a path cannot leave `/v1/` on the way ([`check_path`]).
//!
//! The path is forwarded as the client wrote it, appended to the worker's
//! base URL. An HTTP client normalizes dot segments when it parses that URL,
//! so `/v1/../metrics` would reach the worker's `/metrics`: every segment
//! is checked raw and percent-decoded, and only paths a vLLM replica serves
//! under `/v1/` (plus the operator's `--forward-path` list) are forwarded.

/// Why a path was refused (a 400 `invalid_path`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path refused: {0}")]
pub struct PathRefused(pub &'static str);

/// vLLM's OpenAI-compatible inference routes under `/v1/` besides the two
/// the router hashes (`/v1/completions`, `/v1/chat/completions`) and the one
/// it answers itself (`/v1/models`). A trailing `/*` takes one or more
/// further segments. Adapter loading (`/v1/load_lora_adapter`) is an
/// operator's action and is left out on purpose.
const VLLM_V1_ROUTES: [&str; 9] = [
    "/v1/embeddings",
    "/v1/score",
    "/v1/rerank",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
    "/v1/responses",
    "/v1/responses/*",
    "/v1/completions/render",
    "/v1/chat/completions/render",
];

/// The `/v1/*` paths forwarded besides the hashed routes.
#[derive(Debug, Clone)]
pub struct ForwardPaths {
    patterns: Vec<String>,
}

impl ForwardPaths {
    /// vLLM's routes plus `extra` (each `/v1/…`, optionally ending in `/*`).
    pub fn new(extra: &[String]) -> Result<Self, String> {
        for p in extra {
            check_pattern(p)?;
        }
        let patterns = VLLM_V1_ROUTES
            .iter()
            .map(|s| (*s).to_owned())
            .chain(extra.iter().cloned())
            .collect();
        Ok(ForwardPaths { patterns })
    }

    /// True when `path` (already through [`check_path`]) may be forwarded.
    pub fn allows(&self, path: &str) -> bool {
        self.patterns.iter().any(|p| match p.strip_suffix("/*") {
            Some(prefix) => path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.len() > 1 && rest.starts_with('/')),
            None => path == p,
        })
    }
}

/// An operator's `--forward-path`: a clean `/v1/…` path, or one ending `/*`.
fn check_pattern(p: &str) -> Result<(), String> {
    let path = p.strip_suffix("/*").unwrap_or(p);
    let clean = path.starts_with("/v1/")
        && path.len() > "/v1/".len()
        && !path.contains(['?', '#', '*', '%'])
        && check_path(path).is_ok();
    if clean {
        Ok(())
    } else {
        Err(format!(
            "forward path {p:?}: expected /v1/<segment>[/<segment>…], optionally ending in /*, \
             without dot segments, query, fragment or percent-escapes"
        ))
    }
}

/// Refuses a path that could resolve outside `/v1/` or mean something else
/// to the worker than to the router: a `.` or `..` segment (raw or
/// percent-encoded), an encoded `/` or `\`, a backslash, an empty segment,
/// a NUL, or a malformed escape. The path must start with `/v1/`.
pub fn check_path(path: &str) -> Result<(), PathRefused> {
    let bad = PathRefused;
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Err(bad("it must start with /v1/"));
    };
    for segment in rest.split('/') {
        let decoded = percent_decode(segment).ok_or_else(|| bad("malformed percent-escape"))?;
        if segment.is_empty() {
            return Err(bad("empty segment"));
        }
        if decoded == b"." || decoded == b".." {
            return Err(bad("dot segment"));
        }
        if decoded.iter().any(|b| matches!(b, b'/' | b'\\' | 0)) {
            return Err(bad("encoded separator or NUL"));
        }
    }
    Ok(())
}

/// `%XX` escapes decoded; `None` when one is malformed.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_out_of_v1_are_refused() {
        for p in [
            "/v1/../sim/resync",
            "/v1/../metrics",
            "/v1/%2e%2e/admin%2fx",
            "/v1/%2E%2e/x",
            "/v1/./embeddings",
            "/v1/a/../../x",
            "/v1/a%2fb",
            "/v1/a%5cb",
            "/v1/a\\b",
            "/v1//embeddings",
            "/v1/a%00",
            "/v1/a%zz",
            "/v1/a%2",
            "/metrics",
            "/v2/rerank",
        ] {
            assert!(check_path(p).is_err(), "{p}");
        }
        for p in ["/v1/embeddings", "/v1/responses/resp_1", "/v1/a%20b"] {
            assert!(check_path(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn only_listed_routes_are_forwarded() {
        let paths = ForwardPaths::new(&["/v1/custom".into(), "/v1/jobs/*".into()]).unwrap();
        for p in [
            "/v1/embeddings",
            "/v1/responses/r1",
            "/v1/responses/r1/cancel",
            "/v1/custom",
            "/v1/jobs/7",
        ] {
            assert!(paths.allows(p), "{p}");
        }
        for p in [
            "/v1/load_lora_adapter",
            "/v1/responses/",
            "/v1/custom/x",
            "/v1/jobs",
            "/v1/embeddingsx",
        ] {
            assert!(!paths.allows(p), "{p}");
        }
    }

    #[test]
    fn operator_patterns_are_checked() {
        for bad in [
            "/v2/x", "/v1/", "/v1/../x", "/v1/a?b", "/v1/a*", "v1/x", "/v1/%2e",
        ] {
            assert!(ForwardPaths::new(&[bad.to_owned()]).is_err(), "{bad}");
        }
    }
}
