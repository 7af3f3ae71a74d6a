//! `prefix-router reporter` command-line arguments.

use std::collections::HashMap;
use std::time::Duration;

use crate::push::WorkerIdentity;
use protocol::WorkerRole;
use protocol::hashing::{HashSeed, LoraKey};
use protocol::{parse_duration, parse_duration_or_zero};

use super::run::ReporterConfig;

/// Run beside one vLLM engine: report its KV cache to the fleet.
#[derive(Debug, Clone, clap::Args)]
pub struct ReporterArgs {
    /// The engine's KV-event endpoint, as given to vLLM (`tcp://*:5557` is
    /// bound by vLLM, so the reporter connects to it on 127.0.0.1; an
    /// endpoint vLLM connects to is bound by the reporter).
    #[arg(long, env = "PREFIX_ROUTER_KV_EVENTS")]
    pub kv_events: String,
    /// The engine's replay endpoint (vLLM's `replay_endpoint`).
    #[arg(long, env = "PREFIX_ROUTER_KV_REPLAY")]
    pub replay: Option<String>,
    /// Topic filter (vLLM's `topic`; "" = all).
    #[arg(long, env = "PREFIX_ROUTER_KV_TOPIC", default_value = "")]
    pub topic: String,
    /// The engine's HTTP base URL; its `/metrics` gives the load sent with heartbeats.
    #[arg(long, env = "PREFIX_ROUTER_ENGINE_URL")]
    pub engine_url: Option<String>,
    /// How often the engine's `/metrics` is scraped.
    #[arg(long, env = "PREFIX_ROUTER_ENGINE_SCRAPE_INTERVAL", value_parser = parse_duration, default_value = "1s")]
    pub scrape_interval: Duration,
    /// On SIGTERM, the worker drains this long before it deregisters: no
    /// router sends it anything new, its answers finish (the engine's
    /// `/metrics` say when it runs nothing, with --engine-url), and the
    /// routers move what still runs at the deadline; 0s: deregister at once.
    #[arg(long, env = "PREFIX_ROUTER_DRAIN_DEADLINE", value_parser = parse_duration_or_zero, default_value = "30s")]
    pub drain_deadline: Duration,
    /// The fleet's internal API: any router, or the balancer in front of them.
    #[arg(long, env = "PREFIX_ROUTER_FLEET_URL")]
    pub fleet_url: String,
    /// The fleet's internal token.
    #[arg(long, env = "PREFIX_ROUTER_INTERNAL_TOKEN", hide_env_values = true)]
    pub internal_token: Option<String>,
    /// This worker's id in the fleet.
    #[arg(long, env = "PREFIX_ROUTER_WORKER_ID")]
    pub worker_id: String,
    /// The URL routers send requests to [default: --engine-url].
    #[arg(long, env = "PREFIX_ROUTER_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// The model the engine serves.
    #[arg(long, env = "PREFIX_ROUTER_MODEL")]
    pub model: String,
    /// Tokens per KV block (the engine's `--block-size`).
    #[arg(long, env = "PREFIX_ROUTER_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: usize,
    /// The engine's PYTHONHASHSEED, if it sets one.
    #[arg(long, env = "PREFIX_ROUTER_HASH_SEED")]
    pub hash_seed: Option<String>,
    /// The engine's role in disaggregated serving: prefill, decode or both
    /// (vLLM's KV-transfer role; both = colocated).
    #[arg(long, env = "PREFIX_ROUTER_ROLE", default_value = "both")]
    pub role: WorkerRole,
    /// Prefix family depth in blocks; must equal the routers'
    /// `--family-blocks` when they shard the model.
    #[arg(long, env = "PREFIX_ROUTER_FAMILY_BLOCKS", default_value_t = protocol::family::DEFAULT_FAMILY_BLOCKS)]
    pub family_blocks: usize,
    /// LoRA adapters as NAME=PATH (vLLM hashes the path; events carry only the name).
    #[arg(long = "lora", env = "PREFIX_ROUTER_LORAS", value_delimiter = ',')]
    pub loras: Vec<String>,
    /// How often changes are sent to the fleet.
    #[arg(long, env = "PREFIX_ROUTER_FLUSH_INTERVAL", value_parser = parse_duration, default_value = "100ms")]
    pub flush_interval: Duration,
    /// How often the full block set is sent (destructive sync). Each sync
    /// costs Valkey a few µs per held block: more workers, longer period.
    #[arg(long, env = "PREFIX_ROUTER_SYNC_INTERVAL", value_parser = parse_duration, default_value = "5s")]
    pub sync_interval: Duration,
    /// Serve the reporter's Prometheus metrics at http://ADDR/metrics.
    #[arg(long, env = "PREFIX_ROUTER_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Most engine blocks remembered (bounds memory at roughly 100 bytes each).
    #[arg(long, env = "PREFIX_ROUTER_MAX_BLOCKS", default_value_t = 4_000_000)]
    pub max_blocks: usize,
}

impl ReporterArgs {
    /// The reporter's configuration, or what is wrong with the arguments.
    pub fn into_config(self) -> Result<ReporterConfig, String> {
        let url = self
            .advertise_url
            .or_else(|| self.engine_url.clone())
            .ok_or("--advertise-url (or --engine-url) is required: routers must know where the engine listens")?;
        let mut loras = HashMap::new();
        for spec in &self.loras {
            let (name, path) = spec
                .split_once('=')
                .filter(|(n, p)| !n.is_empty() && !p.is_empty())
                .ok_or_else(|| format!("--lora {spec:?}: expected NAME=PATH"))?;
            loras.insert(name.to_owned(), LoraKey::new(name, path));
        }
        if self.block_size == 0 {
            return Err("--block-size must be at least 1".into());
        }
        if self.family_blocks == 0 {
            return Err("--family-blocks must be at least 1".into());
        }
        Ok(ReporterConfig {
            kv_events: self.kv_events,
            replay: self.replay,
            topic: self.topic,
            engine_url: self.engine_url,
            scrape_interval: self.scrape_interval,
            fleet_url: self.fleet_url,
            token: self.internal_token,
            identity: WorkerIdentity {
                worker_id: self.worker_id,
                model: self.model,
                url,
                role: (self.role != WorkerRole::Both).then_some(self.role),
            },
            block_size: self.block_size,
            family_blocks: self.family_blocks,
            hash_seed: HashSeed::from_env_value(self.hash_seed),
            loras,
            max_blocks: self.max_blocks,
            metrics_listen: self.metrics_listen,
            flush_interval: self.flush_interval,
            sync_interval: self.sync_interval,
            drain_deadline: self.drain_deadline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        reporter: ReporterArgs,
    }

    fn config(extra: &[&str]) -> Result<ReporterConfig, String> {
        let mut argv = vec![
            "reporter",
            "--kv-events",
            "tcp://*:5557",
            "--fleet-url",
            "http://127.0.0.1:8080",
            "--worker-id",
            "gpu-0",
            "--model",
            "m",
            "--advertise-url",
            "http://10.0.0.5:8000",
        ];
        argv.extend(extra);
        Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .reporter
            .into_config()
    }

    #[test]
    fn the_role_goes_into_the_identity_and_both_sends_none() {
        let role = |extra: &[&str]| config(extra).map(|c| c.identity.role);
        assert_eq!(role(&[]), Ok(None));
        assert_eq!(role(&["--role", "both"]), Ok(None));
        assert_eq!(role(&["--role", "prefill"]), Ok(Some(WorkerRole::Prefill)));
        assert_eq!(role(&["--role", "decode"]), Ok(Some(WorkerRole::Decode)));
        let bad = role(&["--role", "prefil"]).unwrap_err();
        assert!(bad.contains("prefill, decode or both"), "{bad}");
    }
}
