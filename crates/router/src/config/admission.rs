//! Admission settings: where a request's tenant comes from, the tenants'
//! weights and limits (`[[tenants]]`), the limits of every other tenant,
//! and the objectives (`x-gateway-inference-objective` → priority).
//! [`AdmissionArgs`] are `serve`'s flags (flattened, boxed); the file's
//! keys sit beside the others in `FileConfig`; [`resolve`] merges them
//! (flags over the file over the defaults) and refuses bad ones at start.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::HeaderName;
use serde::Deserialize;

use protocol::parse_duration;

use super::file::file_duration;

/// Tokens reserved for the answer when a request names no `max_tokens`.
const DEFAULT_MAX_TOKENS: u64 = 256;

/// Flags of `serve` about tenants, classes and limits (flattened into
/// [`super::ServeArgs`]).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct AdmissionArgs {
    /// Take a request's tenant from this header (e.g.
    /// `x-gateway-inference-fairness-id`) instead of its API key. Only as
    /// trustworthy as whoever sets it: a gateway in front must set or strip
    /// it [default: a hash of the API key; no key: one `anon` tenant].
    #[arg(long, env = "PREFIX_ROUTER_TENANT_HEADER")]
    pub tenant_header: Option<String>,
    /// Take a request's tenant from its body's `user` field instead of its
    /// API key [default: off].
    #[arg(long, env = "PREFIX_ROUTER_TENANT_FROM_USER")]
    pub tenant_from_user: bool,
    /// Requests per minute of every tenant the config file does not name,
    /// fleet-wide [default: unlimited].
    #[arg(long, env = "PREFIX_ROUTER_TENANT_REQUESTS_PER_MINUTE")]
    pub tenant_requests_per_minute: Option<u64>,
    /// Tokens per minute (prompt plus `max_tokens`, corrected by the
    /// answer's usage) of every tenant the config file does not name,
    /// fleet-wide [default: unlimited].
    #[arg(long, env = "PREFIX_ROUTER_TENANT_TOKENS_PER_MINUTE")]
    pub tenant_tokens_per_minute: Option<u64>,
    /// Requests in flight at once of every tenant the config file does not
    /// name, fleet-wide [default: unlimited].
    #[arg(long, env = "PREFIX_ROUTER_TENANT_MAX_CONCURRENT")]
    pub tenant_max_concurrent: Option<u64>,
    /// An objective `NAME=PRIORITY` for `x-gateway-inference-objective`
    /// (repeatable); a negative priority is sheddable. Requests without the
    /// header, or naming an unknown objective, get priority 0.
    #[arg(
        long = "objective",
        env = "PREFIX_ROUTER_OBJECTIVES",
        value_delimiter = ','
    )]
    pub objectives: Vec<String>,
    /// Pass the request's priority on to the engine as vLLM's `priority`
    /// body field (engines run with `--scheduling-policy priority`); a
    /// client's own `priority` is replaced [default: off].
    #[arg(long, env = "PREFIX_ROUTER_PASS_PRIORITY")]
    pub pass_priority: bool,
    /// Tokens reserved for the answer of a request without `max_tokens`
    /// (or `max_completion_tokens`), until its usage corrects them
    /// [default: 256].
    #[arg(long, env = "PREFIX_ROUTER_DEFAULT_MAX_TOKENS")]
    pub default_max_tokens: Option<u64>,
    /// The window the per-minute limits are counted over; shorter in tests
    /// (limits scale with it: 120 per minute is 12 per 6s) [default: 1m].
    #[arg(long, env = "PREFIX_ROUTER_RATE_LIMIT_WINDOW", value_parser = parse_duration)]
    pub rate_limit_window: Option<Duration>,
}

/// The file's admission keys (top level of the TOML file).
#[derive(Debug, Default)]
pub(super) struct FileKeys {
    pub(super) tenant_header: Option<String>,
    pub(super) tenant_from_user: Option<bool>,
    pub(super) tenant_requests_per_minute: Option<u64>,
    pub(super) tenant_tokens_per_minute: Option<u64>,
    pub(super) tenant_max_concurrent: Option<u64>,
    pub(super) objectives: BTreeMap<String, i64>,
    pub(super) pass_priority: Option<bool>,
    pub(super) default_max_tokens: Option<u64>,
    pub(super) rate_limit_window: Option<String>,
    pub(super) tenants: Vec<FileTenant>,
}

/// One `[[tenants]]` entry of the TOML file. Numbers are read signed, so
/// that a negative one gets a clear error rather than a parse error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTenant {
    name: String,
    weight: Option<i64>,
    requests_per_minute: Option<i64>,
    tokens_per_minute: Option<i64>,
    max_concurrent: Option<i64>,
    /// With the API key as tenant source: the hex SHA-256 of the keys that
    /// are this tenant (at least its first 16 digits).
    #[serde(default)]
    api_key_sha256: Vec<String>,
}

/// Where a request's tenant is read from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TenantSource {
    /// A hash of the API key (`Authorization: Bearer …`).
    #[default]
    ApiKey,
    /// This request header's value.
    Header(HeaderName),
    /// The body's `user` field.
    User,
}

/// A tenant's limits, fleet-wide; `None`: unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantLimits {
    /// Requests per window (a minute unless `--rate-limit-window`).
    pub requests_per_minute: Option<u64>,
    /// Tokens per window: prompt plus `max_tokens`, corrected by usage.
    pub tokens_per_minute: Option<u64>,
    /// Requests in flight at once.
    pub max_concurrent: Option<u64>,
}

impl TenantLimits {
    /// Whether any limit applies (else admission costs nothing).
    pub fn any(&self) -> bool {
        self.requests_per_minute.is_some()
            || self.tokens_per_minute.is_some()
            || self.max_concurrent.is_some()
    }
}

/// One tenant the file names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantConfig {
    /// Its name: its id in limits, metrics and explain.
    pub name: String,
    /// Its share against other tenants (1 unless set).
    pub weight: u32,
    /// Its limits; each unset one falls back to the `--tenant-*` default.
    pub limits: TenantLimits,
    /// Lower-case hex prefixes of SHA-256 of its API keys.
    pub api_key_sha256: Vec<String>,
}

/// The resolved admission settings.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    /// Where the tenant comes from.
    pub tenant_source: TenantSource,
    /// The file's tenants, in file order.
    pub tenants: Vec<TenantConfig>,
    /// Limits of every tenant the file does not name.
    pub default_limits: TenantLimits,
    /// Objective name → priority.
    pub objectives: HashMap<String, i32>,
    /// Whether the priority is passed on as vLLM's `priority` field.
    pub pass_priority: bool,
    /// Tokens reserved for an answer without `max_tokens`.
    pub default_max_tokens: u64,
    /// The window of the per-minute limits (a minute but in tests).
    pub window: Duration,
}

impl Default for AdmissionConfig {
    /// No limits, tenants by API key, no objectives.
    fn default() -> Self {
        AdmissionConfig {
            tenant_source: TenantSource::default(),
            tenants: Vec::new(),
            default_limits: TenantLimits::default(),
            objectives: HashMap::new(),
            pass_priority: false,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            window: Duration::from_secs(60),
        }
    }
}

impl AdmissionConfig {
    /// Whether any tenant has a limit (else admission never calls Valkey).
    pub fn limits_anything(&self) -> bool {
        self.default_limits.any() || self.tenants.iter().any(|t| t.limits.any())
    }

    /// The file's tenant named `name`.
    pub fn tenant(&self, name: &str) -> Option<&TenantConfig> {
        self.tenants.iter().find(|t| t.name == name)
    }

    /// The file's tenant one of whose key hashes `key_hex` (the full hex
    /// SHA-256 of an API key) starts with.
    pub fn tenant_by_key(&self, key_hex: &str) -> Option<&TenantConfig> {
        self.tenants.iter().find(|t| {
            t.api_key_sha256
                .iter()
                .any(|prefix| key_hex.starts_with(prefix.as_str()))
        })
    }

    /// The limits of the tenant `id` (`configured`: named by the file).
    pub fn limits_of(&self, id: &str, configured: bool) -> TenantLimits {
        let d = self.default_limits;
        match configured.then(|| self.tenant(id)).flatten() {
            Some(t) => TenantLimits {
                requests_per_minute: t.limits.requests_per_minute.or(d.requests_per_minute),
                tokens_per_minute: t.limits.tokens_per_minute.or(d.tokens_per_minute),
                max_concurrent: t.limits.max_concurrent.or(d.max_concurrent),
            },
            None => d,
        }
    }
}

/// The admission settings: flags over the file over the defaults.
pub(super) fn resolve(args: &AdmissionArgs, file: FileKeys) -> anyhow::Result<AdmissionConfig> {
    let from_user = args.tenant_from_user || file.tenant_from_user.unwrap_or(false);
    let header = args.tenant_header.clone().or(file.tenant_header);
    let tenant_source = match (header, from_user) {
        (Some(_), true) => {
            bail!("--tenant-header and --tenant-from-user both name the tenant source; set one")
        }
        (Some(h), false) => TenantSource::Header(
            HeaderName::try_from(h.trim().to_ascii_lowercase())
                .with_context(|| format!("--tenant-header {h:?} is not a header name"))?,
        ),
        (None, true) => TenantSource::User,
        (None, false) => TenantSource::ApiKey,
    };
    let default_limits = TenantLimits {
        requests_per_minute: positive(
            "--tenant-requests-per-minute",
            args.tenant_requests_per_minute
                .or(file.tenant_requests_per_minute),
        )?,
        tokens_per_minute: positive(
            "--tenant-tokens-per-minute",
            args.tenant_tokens_per_minute
                .or(file.tenant_tokens_per_minute),
        )?,
        max_concurrent: positive(
            "--tenant-max-concurrent",
            args.tenant_max_concurrent.or(file.tenant_max_concurrent),
        )?,
    };
    let mut objectives = HashMap::new();
    if args.objectives.is_empty() {
        for (name, priority) in file.objectives {
            let priority = i32::try_from(priority).map_err(|_| {
                anyhow::anyhow!("objective {name:?}: priority {priority} is out of range")
            })?;
            add_objective(&mut objectives, name, priority)?;
        }
    } else {
        for spec in &args.objectives {
            let (name, priority) = spec
                .split_once('=')
                .with_context(|| format!("--objective {spec:?}: expected NAME=PRIORITY"))?;
            let priority: i32 = priority.trim().parse().with_context(|| {
                format!("--objective {spec:?}: the priority must be a whole number")
            })?;
            add_objective(&mut objectives, name.trim().to_owned(), priority)?;
        }
    }
    let tenants = file
        .tenants
        .into_iter()
        .map(tenant)
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (i, t) in tenants.iter().enumerate() {
        if tenants[..i].iter().any(|o| o.name == t.name) {
            bail!("[[tenants]] names {:?} twice", t.name);
        }
    }
    let default_max_tokens = args
        .default_max_tokens
        .or(file.default_max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let window = args
        .rate_limit_window
        .or(file_duration(file.rate_limit_window, "rate_limit_window")?)
        .unwrap_or(Duration::from_secs(60));
    if window < Duration::from_millis(100) {
        bail!("--rate-limit-window must be at least 100ms, got {window:?}");
    }
    Ok(AdmissionConfig {
        tenant_source,
        tenants,
        default_limits,
        objectives,
        pass_priority: args.pass_priority || file.pass_priority.unwrap_or(false),
        default_max_tokens,
        window,
    })
}

fn add_objective(
    objectives: &mut HashMap<String, i32>,
    name: String,
    priority: i32,
) -> anyhow::Result<()> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("objective name {name:?} must be non-empty, without white space");
    }
    if objectives.insert(name.clone(), priority).is_some() {
        bail!("objective {name:?} is given twice");
    }
    Ok(())
}

/// One `[[tenants]]` entry, checked.
fn tenant(t: FileTenant) -> anyhow::Result<TenantConfig> {
    let name = t.name;
    protocol::check_name("tenant name", &name)
        .map_err(|e| anyhow::anyhow!("[[tenants]] {name:?}: {e}"))?;
    let weight = match t.weight {
        None => 1,
        Some(w) if w >= 1 => u32::try_from(w)
            .map_err(|_| anyhow::anyhow!("[[tenants]] {name:?}: weight {w} is too large"))?,
        Some(w) => bail!("[[tenants]] {name:?}: weight must be a positive whole number, got {w}"),
    };
    let limit = |what: &str, v: Option<i64>| -> anyhow::Result<Option<u64>> {
        match v {
            None => Ok(None),
            Some(n) if n >= 1 => Ok(Some(n.unsigned_abs())),
            Some(n) => bail!("[[tenants]] {name:?}: {what} must be positive, got {n}"),
        }
    };
    let limits = TenantLimits {
        requests_per_minute: limit("requests_per_minute", t.requests_per_minute)?,
        tokens_per_minute: limit("tokens_per_minute", t.tokens_per_minute)?,
        max_concurrent: limit("max_concurrent", t.max_concurrent)?,
    };
    let mut api_key_sha256 = Vec::with_capacity(t.api_key_sha256.len());
    for h in t.api_key_sha256 {
        let h = h.trim().to_ascii_lowercase();
        if h.len() < 16 || h.len() > 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "[[tenants]] {name:?}: api_key_sha256 {h:?} must be 16 to 64 hex digits of the key's SHA-256"
            );
        }
        api_key_sha256.push(h);
    }
    Ok(TenantConfig {
        name,
        weight,
        limits,
        api_key_sha256,
    })
}

fn positive(flag: &str, v: Option<u64>) -> anyhow::Result<Option<u64>> {
    match v {
        Some(0) => bail!("{flag} must be positive (leave it unset for no limit)"),
        v => Ok(v),
    }
}
