//! What runs behind the balancer: [`RouterKind`] (our router with a shared
//! or an isolated view, or an external peer router given as a command), and
//! [`Arm`], one compared configuration (a kind × a number of replicas).
//!
//! External peers (`sglang-router`, `vllm-router`, SMG, Dynamo, …) plug in
//! as [`RouterKind::External`] with an [`ExternalRouter`] command template,
//! so that they run as R replicas behind the same balancer as ours. A peer
//! may ask the sims to publish vLLM KV events ([`ExternalRouter::kv_events`])
//! and may run a [`Companion`] process beside each replica.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use super::sims::KvEndpoints;
use super::template::fill;
use protocol::WorkerRole;

/// The routing policies `prefix-router serve --policy` accepts.
pub const POLICIES: &[&str] = &[
    "cache_aware",
    "round_robin",
    "least_loaded",
    "power_of_two",
    "consistent_hash",
];

/// How each router replica knows the workers' caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View {
    /// One namespace in Valkey shared by every replica; the workers report
    /// their caches (push through the balancer). The product as designed.
    Shared,
    /// Each replica has its own namespace and a static worker list, and the
    /// workers report nothing: a replica only knows its own routing claims
    /// (kept `claim_ttl`). Stands for in-memory approximate routers.
    Isolated {
        /// Life of a routing claim (the router's `--speculative-ttl`).
        claim_ttl: Duration,
    },
}

/// A router replica's program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouterKind {
    /// `prefix-router serve --policy POLICY` with a shared or isolated view.
    PrefixRouter {
        /// The `--policy`.
        policy: String,
        /// Shared or isolated view.
        view: View,
    },
    /// Any other router, started from a command template.
    External(ExternalRouter),
}

impl RouterKind {
    /// Whether the sim-workers report their caches to the fleet (only our
    /// router with a shared view listens to them).
    pub fn workers_report(&self) -> bool {
        matches!(
            self,
            RouterKind::PrefixRouter {
                view: View::Shared,
                ..
            }
        )
    }

    /// Whether the sims publish vLLM KV events (a peer that subscribes).
    pub fn sims_publish_kv_events(&self) -> bool {
        matches!(self, RouterKind::External(e) if e.kv_events)
    }

    /// The path the balancer's health check and the launcher poll.
    pub fn health_path(&self) -> &str {
        match self {
            RouterKind::PrefixRouter { .. } => "/health",
            RouterKind::External(e) => &e.health_path,
        }
    }
}

/// Where a replica runs and what it routes to: the values of an
/// [`ExternalRouter`]'s placeholders.
#[derive(Debug, Clone)]
pub struct LaunchContext {
    /// Always `127.0.0.1`.
    pub host: String,
    /// The replica's port.
    pub port: u16,
    /// A second free port reserved for the replica's own use (a metrics
    /// exporter, say); stable across restarts.
    pub aux_port: u16,
    /// The replica's index (0-based).
    pub index: usize,
    /// 0 at the first start, one more after each restart of the routers.
    /// An isolated router's key prefix includes it, so that a restarted one
    /// starts with an empty view, as an in-memory router does.
    pub generation: u32,
    /// The workers' base URLs.
    pub worker_urls: Vec<String>,
    /// The served model name.
    pub model: String,
    /// The model's tokenizer directory.
    pub tokenizer_dir: PathBuf,
    /// The fleet's Valkey URL.
    pub valkey_url: String,
    /// Each worker's KV-event endpoints, in the order of `worker_urls`
    /// (empty unless the sims publish them).
    pub kv_events: Vec<KvEndpoints>,
    /// A third free port of the replica (a mesh or sync port), stable
    /// across restarts.
    pub mesh_port: u16,
    /// The other replicas' `(aux_port, mesh_port)`.
    pub peers: Vec<(u16, u16)>,
}

/// A peer router started from a command template. Placeholders in the
/// arguments: `{host}`, `{port}`, `{aux_port}`, `{mesh_port}`, `{index}`,
/// `{model}`, `{tokenizer_dir}`, `{valkey_url}`, `{worker_urls_csv}`,
/// `{mesh_peers_tcp_csv}` (`tcp://host:MESH,…` of the other replicas),
/// `{aux_peers_http_csv}` (`http://host:AUX,…` of the other replicas); and,
/// as whole arguments expanding to several: `{worker_urls}` (one per worker
/// URL), `{mesh_peers}` (`host:MESH` of each other replica),
/// `{kv_event_sources}` (`--kv-event-source URL=PUB` per worker),
/// `{kv_event_replay_sources}` (`--kv-event-replay-source URL=REPLAY` per
/// worker) and `{worker_kv_specs}` (`URL=PUB,REPLAY` per worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalRouter {
    /// The arm's name (`sglang`).
    pub name: String,
    /// The executable.
    pub program: PathBuf,
    /// The argument template.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Its liveness route.
    pub health_path: String,
    /// How long it may take to answer its health route.
    pub startup_timeout: Duration,
    /// The sims publish vLLM KV events, for the peer to subscribe to.
    pub kv_events: bool,
    /// A process started before each replica and stopped with it.
    pub companion: Option<Companion>,
}

/// A second process per replica (e.g. Dynamo's selection service beside
/// our frontend of it): started just before the replica, killed and
/// restarted with it; its CPU counts as the replica's. Same placeholders
/// as [`ExternalRouter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Companion {
    /// The executable.
    pub program: PathBuf,
    /// The argument template.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl ExternalRouter {
    /// Parses `NAME=PROGRAM ARG…` (arguments split on whitespace; no
    /// quoting), health route `/health`, 60 s to start.
    pub fn parse(spec: &str) -> anyhow::Result<Self> {
        let (name, command) = spec
            .split_once('=')
            .with_context(|| format!("--peer {spec:?}: expected NAME=COMMAND"))?;
        let name = name.trim();
        if name.is_empty() || POLICIES.contains(&name) || name == "isolated" {
            bail!("--peer {spec:?}: the name must be non-empty and not a policy name");
        }
        let mut words = command.split_whitespace().map(str::to_owned);
        let program = words
            .next()
            .with_context(|| format!("--peer {spec:?}: empty command"))?;
        Ok(ExternalRouter {
            name: name.to_owned(),
            program: program.into(),
            args: words.collect(),
            env: Vec::new(),
            health_path: "/health".into(),
            startup_timeout: Duration::from_secs(60),
            kv_events: false,
            companion: None,
        })
    }

    /// The arguments with every placeholder filled in from `ctx`.
    pub fn render_args(&self, ctx: &LaunchContext) -> Vec<String> {
        fill(&self.args, ctx)
    }
}

/// One compared configuration: a router kind run as `routers` replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm {
    /// Its name in tables and plots (`cache_aware ×2`).
    pub label: String,
    /// What each replica runs.
    pub kind: RouterKind,
    /// How many replicas sit behind the balancer.
    pub routers: usize,
    /// Extra flags of this arm's routers (after the run's own).
    pub router_args: Vec<String>,
    /// The sims' prefill/decode roles, one per sim (their number replaces
    /// the run's `--workers`); `None`: the run's sims, colocated.
    pub sim_roles: Option<Vec<WorkerRole>>,
}

impl Arm {
    /// Parses `NAME[:ROUTERS]`: a policy, `isolated` (cache_aware, one view
    /// per replica), or a peer's name; ROUTERS defaults to
    /// `default_routers`.
    pub fn parse(
        spec: &str,
        default_routers: usize,
        isolated_ttl: Duration,
        peers: &[ExternalRouter],
    ) -> anyhow::Result<Arm> {
        let (name, routers) = match spec.split_once(':') {
            Some((n, r)) => (
                n.trim(),
                r.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|r| *r > 0)
                    .with_context(|| {
                        format!("policy {spec:?}: ROUTERS must be a positive integer")
                    })?,
            ),
            None => (spec.trim(), default_routers),
        };
        let kind = if POLICIES.contains(&name) {
            RouterKind::PrefixRouter {
                policy: name.to_owned(),
                view: View::Shared,
            }
        } else if name == "isolated" {
            RouterKind::PrefixRouter {
                policy: "cache_aware".into(),
                view: View::Isolated {
                    claim_ttl: isolated_ttl,
                },
            }
        } else if let Some(p) = peers.iter().find(|p| p.name == name) {
            RouterKind::External(p.clone())
        } else {
            bail!(
                "unknown policy {name:?}: expected one of {}, isolated, or a --peer name",
                POLICIES.join(", ")
            );
        };
        Ok(Arm {
            label: format!("{name} ×{routers}"),
            kind,
            routers,
            router_args: Vec::new(),
            sim_roles: None,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn ctx() -> LaunchContext {
        LaunchContext {
            host: "127.0.0.1".into(),
            port: 9000,
            aux_port: 9100,
            index: 1,
            generation: 0,
            worker_urls: vec!["http://a:1".into(), "http://b:2".into()],
            model: "qwen3".into(),
            tokenizer_dir: "/tok".into(),
            valkey_url: "redis://127.0.0.1:7".into(),
            kv_events: vec![
                KvEndpoints {
                    publisher: "tcp://127.0.0.1:11".into(),
                    replay: "tcp://127.0.0.1:12".into(),
                },
                KvEndpoints {
                    publisher: "tcp://127.0.0.1:21".into(),
                    replay: "tcp://127.0.0.1:22".into(),
                },
            ],
            mesh_port: 9200,
            peers: vec![(9101, 9201), (9102, 9202)],
        }
    }

    #[test]
    fn arms_parse_with_router_counts() {
        let ttl = Duration::from_secs(600);
        let a = Arm::parse("cache_aware:1", 3, ttl, &[]).unwrap();
        assert_eq!((a.routers, a.label.as_str()), (1, "cache_aware ×1"));
        assert!(a.kind.workers_report());
        let a = Arm::parse("round_robin", 3, ttl, &[]).unwrap();
        assert_eq!(a.routers, 3);
        let a = Arm::parse("isolated", 2, ttl, &[]).unwrap();
        assert!(!a.kind.workers_report());
        assert!(Arm::parse("nope", 2, ttl, &[]).is_err());
        assert!(Arm::parse("cache_aware:0", 2, ttl, &[]).is_err());
        assert!(Arm::parse("cache_aware:x", 2, ttl, &[]).is_err());
    }

    #[test]
    fn peers_are_templates() {
        let p = ExternalRouter::parse(
            "sg=python3 -m r --port {port} --worker-urls {worker_urls} --x {worker_urls_csv} --m {aux_port}",
        )
        .unwrap();
        assert_eq!(p.program, PathBuf::from("python3"));
        assert_eq!(
            p.render_args(&ctx()),
            [
                "-m",
                "r",
                "--port",
                "9000",
                "--worker-urls",
                "http://a:1",
                "http://b:2",
                "--x",
                "http://a:1,http://b:2",
                "--m",
                "9100"
            ]
        );
        let arm = Arm::parse("sg:2", 3, Duration::ZERO, &[p]).unwrap();
        assert!(matches!(arm.kind, RouterKind::External(_)));
        assert!(!arm.kind.workers_report());
        assert!(ExternalRouter::parse("noequals").is_err());
        assert!(ExternalRouter::parse("cache_aware=x").is_err());
        assert!(ExternalRouter::parse("x=").is_err());
    }
}
