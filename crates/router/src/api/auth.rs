//! [`InternalAuth`]: the bearer token that guards internal and admin routes.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::ApiError;

/// The expected token, kept as a SHA-256 digest so that comparing takes the
/// same time whatever the length or content of the presented token.
#[derive(Clone)]
pub struct InternalAuth {
    digest: Option<[u8; 32]>,
}

impl InternalAuth {
    /// Requires `Authorization: Bearer <token>`.
    pub fn token(token: &str) -> Self {
        InternalAuth {
            digest: Some(Sha256::digest(token.as_bytes()).into()),
        }
    }

    /// Lets every request through (`--allow-unauthenticated-internal`).
    pub fn disabled() -> Self {
        InternalAuth { digest: None }
    }

    fn accepts(&self, presented: Option<&[u8]>) -> bool {
        let Some(expected) = &self.digest else {
            return true;
        };
        let Some(presented) = presented else {
            return false;
        };
        let got: [u8; 32] = Sha256::digest(presented).into();
        got.ct_eq(expected).into()
    }
}

impl std::fmt::Debug for InternalAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.digest.is_some() {
            "InternalAuth(token)"
        } else {
            "InternalAuth(disabled)"
        })
    }
}

/// Middleware: 401 with a JSON error unless the bearer token matches.
pub async fn require_token(
    State(auth): State<InternalAuth>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()));
    if !auth.accepts(presented) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        ));
    }
    Ok(next.run(req).await)
}

/// The credentials of `Bearer <token>`; the scheme name is
/// case-insensitive (RFC 7235 §2.1), the token is not.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(b"Bearer ".len())?;
    scheme.eq_ignore_ascii_case(b"Bearer ").then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive_the_token_is_not() {
        for v in [
            &b"Bearer tok"[..],
            b"bearer tok",
            b"BEARER tok",
            b"bEaReR tok",
        ] {
            assert_eq!(bearer_token(v), Some(&b"tok"[..]));
        }
        for v in [&b"Basic tok"[..], b"Bearertok", b"Bearer", b""] {
            assert_eq!(bearer_token(v), None);
        }
        assert_eq!(bearer_token(b"Bearer TOK"), Some(&b"TOK"[..]));
    }

    #[test]
    fn only_the_exact_token_passes() {
        let auth = InternalAuth::token("s3cret");
        assert!(auth.accepts(Some(b"s3cret")));
        for bad in [&b""[..], b"s3cre", b"s3cret ", b"S3CRET"] {
            assert!(!auth.accepts(Some(bad)));
        }
        assert!(!auth.accepts(None));
        assert!(InternalAuth::disabled().accepts(None));
    }
}
