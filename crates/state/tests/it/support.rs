//! What the state suite's tests share: a real valkey-server on an ephemeral
//! loopback port ([`fleet::Valkey`]), stores on it, and a reader of the raw
//! state in Valkey. The router's test support includes this file and builds
//! on it.
#![allow(dead_code)] // each includer uses a part

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use state::{BatchLimits, ConnectionSettings, StateStore, StateTtls};

/// A valkey-server child process ([`fleet::Valkey`]); killed on drop.
pub struct Valkey {
    inner: fleet::Valkey,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Valkey {
    /// A server without persistence.
    pub fn start() -> Valkey {
        Self::start_with(&[])
    }

    /// A server with extra configuration arguments.
    pub fn start_with(extra: &[&str]) -> Valkey {
        Self::try_start_with(extra).expect("starting valkey-server (run scripts/install-deps.sh)")
    }

    /// A server on a port of fleet's choosing (tried again on another when
    /// the first was taken meanwhile).
    pub fn try_start_with(extra: &[&str]) -> anyhow::Result<Valkey> {
        let inner = fleet::Valkey::start_with(fleet::ValkeySpec {
            args: extra.iter().map(|s| s.to_string()).collect(),
            ..fleet::ValkeySpec::default()
        })?;
        let port = inner.port();
        Ok(Valkey { inner, port })
    }

    /// A server on `port` with extra configuration arguments.
    pub fn start_on(port: u16, extra: &[&str]) -> Valkey {
        let inner = fleet::Valkey::start_with(fleet::ValkeySpec {
            port: Some(port),
            args: extra.iter().map(|s| s.to_string()).collect(),
            ..fleet::ValkeySpec::default()
        })
        .expect("starting valkey-server (run scripts/install-deps.sh)");
        Valkey { inner, port }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.inner.url()
    }

    /// A client for direct inspection.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// A blocking connection for direct inspection.
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connection")
    }

    /// The server's data directory (AOF files live here).
    pub fn dir(&self) -> PathBuf {
        self.inner.dir().to_owned()
    }

    /// SIGKILL, like a crash.
    pub fn kill(&mut self) {
        self.inner.kill();
    }

    /// Starts again on the same port and directory, with its data.
    pub fn restart(&mut self) {
        self.restart_with(true);
    }

    /// Starts again on the same port and directory; without `keep_data`
    /// its data files are removed first, so that it comes back empty.
    pub fn restart_with(&mut self, keep_data: bool) {
        self.inner
            .restart(keep_data)
            .expect("restarting valkey-server");
    }
}

/// Random cases a property test runs: `default` in the test command, or
/// `$PROPTEST_CASES` for a deeper run by hand (docs/architecture.md, "The
/// test command").
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Short TTLs so that expiry tests run in seconds.
pub fn fast_ttls() -> StateTtls {
    StateTtls {
        speculative: Duration::from_millis(1500),
        confirmed: Duration::from_secs(600),
        worker_lease: Duration::from_millis(1500),
        router_lease: Duration::from_secs(2),
        sync_stage: Duration::from_secs(60),
        patch_stall: Duration::from_millis(500),
    }
}

/// A store on `valkey` under `prefix`, as router `router_id`.
pub fn store(valkey: &Valkey, prefix: &str, router_id: &str, ttls: StateTtls) -> StateStore {
    store_with(valkey, prefix, router_id, ttls, BatchLimits::default())
}

/// [`store`] with chunk and step sizes of its own.
pub fn store_with(
    valkey: &Valkey,
    prefix: &str,
    router_id: &str,
    ttls: StateTtls,
    limits: BatchLimits,
) -> StateStore {
    let mut settings = ConnectionSettings::new(&valkey.url());
    settings.hot_timeout = Duration::from_secs(2);
    StateStore::new(settings, prefix, router_id, ttls, limits).expect("store")
}

/// The model the API tests register workers for.
pub const M: &str = "m";

/// Registers (or renews) worker `id` of [`M`] through the store itself, at
/// a URL of its own.
pub async fn register_in(s: &StateStore, id: &str) {
    let hb = state::WorkerHeartbeat {
        worker_id: id.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        load: None,
    };
    s.heartbeat(M, &hb).await.expect("heartbeat");
}

/// The raw maps of one model, read straight from Valkey.
#[derive(Debug, Default, PartialEq, Eq, Clone)]
pub struct RawState {
    /// hash → incarnation → (kind, expiry seconds).
    pub forward: BTreeMap<String, BTreeMap<String, (char, u64)>>,
    /// incarnation → hashes.
    pub reverse: BTreeMap<String, BTreeSet<String>>,
    /// incarnation → hashes whose entry is speculative.
    pub speculative: BTreeMap<String, BTreeSet<String>>,
}

impl RawState {
    /// Forward pairs (hash, incarnation), ignoring kinds and expiries.
    pub fn forward_pairs(&self) -> BTreeSet<(String, String)> {
        self.forward
            .iter()
            .flat_map(|(h, m)| m.keys().map(move |i| (h.clone(), i.clone())))
            .collect()
    }

    /// Speculative forward pairs (hash, incarnation).
    pub fn speculative_forward_pairs(&self) -> BTreeSet<(String, String)> {
        self.forward
            .iter()
            .flat_map(|(h, m)| {
                m.iter()
                    .filter(|(_, (k, _))| *k == 's')
                    .map(move |(i, _)| (h.clone(), i.clone()))
            })
            .collect()
    }

    /// Pairs (hash, incarnation) of the speculative sets.
    pub fn speculative_pairs(&self) -> BTreeSet<(String, String)> {
        self.speculative
            .iter()
            .flat_map(|(i, hs)| hs.iter().map(move |h| (h.clone(), i.clone())))
            .collect()
    }

    /// Reverse pairs (hash, incarnation).
    pub fn reverse_pairs(&self) -> BTreeSet<(String, String)> {
        self.reverse
            .iter()
            .flat_map(|(i, hs)| hs.iter().map(move |h| (h.clone(), i.clone())))
            .collect()
    }
}

fn scan_keys(conn: &mut redis::Connection, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(conn).expect("KEYS");
    keys.sort();
    keys
}

/// The hashes (16-hex) Valkey holds for `worker`'s live incarnation of
/// `model` under `prefix` (its reverse set); empty when it has none.
pub fn worker_blocks(valkey: &Valkey, prefix: &str, model: &str, worker: &str) -> BTreeSet<String> {
    let Ok(mut conn) = valkey.client().get_connection() else {
        return BTreeSet::new();
    };
    let base = format!("{prefix}:{{{model}}}");
    let idx: Option<String> = redis::cmd("HGET")
        .arg(format!("{base}:ids"))
        .arg(worker)
        .query(&mut conn)
        .unwrap_or(None);
    let Some(idx) = idx else {
        return BTreeSet::new();
    };
    redis::cmd("SMEMBERS")
        .arg(format!("{base}:r:{idx}"))
        .query(&mut conn)
        .unwrap_or_default()
}

/// Calls `script` of the state library on `model` under `prefix` over
/// `conn`, with `args` after the base (as `StateStore` would, without its
/// retries and patching).
pub async fn call_script<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    model: &str,
    script: state::ScriptName,
    args: &[&[u8]],
) -> T {
    let (base, ids) = (
        format!("{prefix}:{{{model}}}"),
        format!("{prefix}:{{{model}}}:ids"),
    );
    let mut all: Vec<&[u8]> = vec![base.as_bytes()];
    all.extend_from_slice(args);
    state::ScriptSet::new()
        .call(conn, script, &[&ids], &all)
        .await
        .expect("script call")
}

/// Reads every forward bucket and reverse set of `model` under `prefix`.
pub fn raw_state(valkey: &Valkey, prefix: &str, model: &str) -> RawState {
    let mut conn = valkey.conn();
    let base = format!("{prefix}:{{{model}}}");
    let mut st = RawState::default();
    for key in scan_keys(&mut conn, &format!("{base}:f:*")) {
        let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query(&mut conn)
            .expect("HGETALL");
        for (h, v) in fields {
            let entry = st.forward.entry(h).or_default();
            for tok in v.split(',') {
                let pos = tok.find(|c: char| !c.is_ascii_digit()).expect("entry kind");
                let kind = tok.as_bytes()[pos] as char;
                let exp: u64 = tok[pos + 1..].parse().expect("expiry");
                assert!(
                    entry.insert(tok[..pos].to_owned(), (kind, exp)).is_none(),
                    "duplicate entry in {v}"
                );
            }
        }
    }
    for (kind, map) in [("r", &mut st.reverse), ("sp", &mut st.speculative)] {
        for key in scan_keys(&mut conn, &format!("{base}:{kind}:*")) {
            let idx = key.rsplit(':').next().expect("idx").to_owned();
            let members: BTreeSet<String> = redis::cmd("SMEMBERS")
                .arg(&key)
                .query(&mut conn)
                .expect("SMEMBERS");
            if !members.is_empty() {
                map.insert(idx, members);
            }
        }
    }

    st
}
