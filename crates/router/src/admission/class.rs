//! [`classify`]: a request's tenant and class, from its headers and its
//! body's `user`, as the admission settings say.
//!
//! The tenant comes from exactly one source, the one the operator chose: a
//! hash of the API key (default), a header, or the body's `user`. Nothing
//! else a client sends changes it, so no client escapes its tenant's limits
//! by varying anything else. A value that is not a safe key part (or is
//! long) is hashed, so tenant ids are always short, printable and free of
//! Valkey hash-tag braces.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::config::{AdmissionConfig, TenantSource};

/// The header naming a request's objective (GIE's).
pub const OBJECTIVE_HEADER: &str = "x-gateway-inference-objective";

/// The tenant of requests that carry no tenant (no key, no header, no `user`).
pub const ANONYMOUS: &str = "anon";

/// Longest tenant value kept as it is (longer ones are hashed).
const MAX_PLAIN: usize = 64;

/// Who a request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// The configured tenant's name; else `key:<16 hex digits of the key's
    /// SHA-256>`, `header:<value>`, `user:<value>` (a long or unusual value
    /// as `…:#<16 hex digits>` of its hash), or `anon`.
    pub id: String,
    /// Its weight against other tenants (1 unless configured).
    pub weight: u32,
    /// Whether the config file names it (metrics label it by name; every
    /// other tenant is `other`).
    pub configured: bool,
}

impl Tenant {
    /// The label metrics use: the name of a configured tenant, else `other`
    /// (bounded cardinality).
    pub fn label(&self) -> &str {
        if self.configured { &self.id } else { "other" }
    }
}

/// A request's tenant and class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestClass {
    /// Its tenant.
    pub tenant: Tenant,
    /// Its priority: the objective's, or 0 (no header, unknown objective).
    /// Negative: sheddable.
    pub priority: i32,
    /// The objective it named, when the configuration knows it.
    pub objective: Option<String>,
}

impl RequestClass {
    /// Whether the request may be refused at once when the fleet is saturated.
    pub fn sheddable(&self) -> bool {
        self.priority < 0
    }
}

/// The tenant and class of a request with `headers` whose body's `user`
/// field is `user`.
pub fn classify(cfg: &AdmissionConfig, headers: &HeaderMap, user: Option<&str>) -> RequestClass {
    let tenant = tenant(cfg, headers, user);
    let (priority, objective) = match headers
        .get(OBJECTIVE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .and_then(|name| cfg.objectives.get_key_value(name))
    {
        Some((name, &priority)) => (priority, Some(name.clone())),
        None => (0, None),
    };
    RequestClass {
        tenant,
        priority,
        objective,
    }
}

fn tenant(cfg: &AdmissionConfig, headers: &HeaderMap, user: Option<&str>) -> Tenant {
    let configured = |name: &str| {
        cfg.tenant(name).map(|t| Tenant {
            id: t.name.clone(),
            weight: t.weight,
            configured: true,
        })
    };
    let other = |id: String| Tenant {
        id,
        weight: 1,
        configured: false,
    };
    match &cfg.tenant_source {
        TenantSource::ApiKey => match api_key(headers) {
            None => configured(ANONYMOUS).unwrap_or_else(|| other(ANONYMOUS.into())),
            Some(key) => {
                let hex = sha256_hex(key.as_bytes());
                match cfg.tenant_by_key(&hex) {
                    Some(t) => Tenant {
                        id: t.name.clone(),
                        weight: t.weight,
                        configured: true,
                    },
                    None => other(format!("key:{}", &hex[..16])),
                }
            }
        },
        TenantSource::Header(name) => {
            // Every value of the header, joined: a client cannot pick one
            // of several to its liking.
            let mut values = headers.get_all(name).iter().map(|v| v.as_bytes());
            let value: Option<Vec<u8>> = values.next().map(|first| {
                let mut all = first.to_vec();
                for v in values {
                    all.push(b',');
                    all.extend_from_slice(v);
                }
                all
            });
            named(value.as_deref(), "header", &configured, &other)
        }
        TenantSource::User => named(user.map(str::as_bytes), "user", &configured, &other),
    }
}

/// The tenant a header or `user` value names: a configured tenant by its
/// name, else `<kind>:<value>`.
fn named(
    value: Option<&[u8]>,
    kind: &str,
    configured: &dyn Fn(&str) -> Option<Tenant>,
    other: &dyn Fn(String) -> Tenant,
) -> Tenant {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return configured(ANONYMOUS).unwrap_or_else(|| other(ANONYMOUS.into()));
    };
    if let Ok(text) = std::str::from_utf8(value) {
        if let Some(t) = configured(text) {
            return t;
        }
        if text.len() <= MAX_PLAIN && text.bytes().all(plain) {
            return other(format!("{kind}:{text}"));
        }
    }
    other(format!("{kind}:#{}", &sha256_hex(value)[..16]))
}

/// Bytes kept as they are in a tenant id.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@' | b'/' | b'+' | b'=')
}

/// The API key of `Authorization: Bearer <key>` (the scheme in any case).
fn api_key(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, key) = value.split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TenantConfig;
    use axum::http::HeaderValue;

    fn cfg(source: TenantSource) -> AdmissionConfig {
        AdmissionConfig {
            tenant_source: source,
            tenants: vec![TenantConfig {
                name: "team-a".into(),
                weight: 3,
                limits: Default::default(),
                api_key_sha256: vec![sha256_hex(b"sk-a")[..20].to_owned()],
            }],
            objectives: [("interactive".to_owned(), 10), ("batch".to_owned(), -1)]
                .into_iter()
                .collect(),
            ..AdmissionConfig::default()
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn api_key_tenants() {
        let c = cfg(TenantSource::ApiKey);
        let a = classify(&c, &headers(&[("authorization", "Bearer sk-a")]), None);
        assert_eq!((a.tenant.id.as_str(), a.tenant.weight), ("team-a", 3));
        assert!(a.tenant.configured);
        assert_eq!(a.tenant.label(), "team-a");
        let b = classify(&c, &headers(&[("authorization", "bearer  sk-b ")]), None);
        assert_eq!(b.tenant.id, format!("key:{}", &sha256_hex(b"sk-b")[..16]));
        assert_eq!(b.tenant.label(), "other");
        let none = classify(&c, &HeaderMap::new(), None);
        assert_eq!(none.tenant.id, ANONYMOUS);
        // Nothing but the key counts: another header or `user` changes nothing.
        let same = classify(
            &c,
            &headers(&[
                ("authorization", "Bearer sk-b"),
                ("x-gateway-inference-fairness-id", "me"),
            ]),
            Some("someone"),
        );
        assert_eq!(same.tenant, b.tenant);
    }

    #[test]
    fn header_tenants() {
        let name = axum::http::HeaderName::from_static("x-gateway-inference-fairness-id");
        let c = cfg(TenantSource::Header(name));
        let t = |pairs: &[(&'static str, &str)]| classify(&c, &headers(pairs), None).tenant;
        assert_eq!(
            t(&[("x-gateway-inference-fairness-id", "team-a")]).id,
            "team-a"
        );
        assert_eq!(
            t(&[("x-gateway-inference-fairness-id", "b")]).id,
            "header:b"
        );
        assert_eq!(t(&[("authorization", "Bearer sk-a")]).id, ANONYMOUS);
        let odd = t(&[("x-gateway-inference-fairness-id", "a{b}")]);
        assert!(odd.id.starts_with("header:#") && !odd.id.contains('{'));
        // Two values are one tenant of their own, not the first one's.
        let two = t(&[
            ("x-gateway-inference-fairness-id", "b"),
            ("x-gateway-inference-fairness-id", "team-a"),
        ]);
        assert_ne!(two.id, "team-a");
        assert_ne!(two.id, "header:b");
    }

    #[test]
    fn user_tenants() {
        let c = cfg(TenantSource::User);
        assert_eq!(
            classify(&c, &HeaderMap::new(), Some("team-a")).tenant.id,
            "team-a"
        );
        assert_eq!(
            classify(&c, &HeaderMap::new(), Some("bob")).tenant.id,
            "user:bob"
        );
        assert_eq!(classify(&c, &HeaderMap::new(), None).tenant.id, ANONYMOUS);
        let long = "x".repeat(500);
        assert_eq!(
            classify(&c, &HeaderMap::new(), Some(&long)).tenant.id.len(),
            5 + 1 + 16
        );
    }

    #[test]
    fn objectives() {
        let c = cfg(TenantSource::ApiKey);
        let p = |v: &str| classify(&c, &headers(&[(OBJECTIVE_HEADER, v)]), None);
        assert_eq!(p("interactive").priority, 10);
        assert_eq!(p("interactive").objective.as_deref(), Some("interactive"));
        assert!(p("batch").sheddable());
        // Unknown: the documented default, priority 0, no error.
        assert_eq!((p("nope").priority, p("nope").objective), (0, None));
        assert_eq!(classify(&c, &HeaderMap::new(), None).priority, 0);
    }
}
