//! Flags of `prefix-router inspect`.

use std::time::Duration;

use super::conn::parse_delay;
use protocol::parse_duration;

/// Flags of `prefix-router inspect`; the connection flags read the same
/// `PREFIX_ROUTER_*` variables as `serve`, so an operator's shell that runs
/// a router can inspect its state as is.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// Valkey URL: redis://, rediss://, valkey:// or valkeys://; user,
    /// password and TLS go in the URL (the password is never printed).
    #[arg(
        long,
        env = "PREFIX_ROUTER_VALKEY",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub valkey: String,
    /// Namespace of the fleet's keys.
    #[arg(long, env = "PREFIX_ROUTER_KEY_PREFIX", default_value = "pr")]
    pub key_prefix: String,
    /// Only this model (default: every model listed in `<ns>:models` or
    /// found among the keys).
    #[arg(long)]
    pub model: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Verify the state's invariants instead of summarising it; exit 1 on
    /// any violation.
    #[arg(long)]
    pub check: bool,
    /// With --check: how long to wait before re-reading each suspected
    /// violation atomically (a concurrent script may have been mid-way
    /// through what the scan saw); `0` re-reads at once.
    #[arg(long, default_value = "500ms", value_parser = parse_delay)]
    pub recheck_delay: Duration,
    /// With --check: violations printed in full (all are counted).
    #[arg(long, default_value_t = 20)]
    pub show: usize,
    /// With --check: speculative entries, worker leases and router leases
    /// ending further in the future than this are violations.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub ttl_horizon: Duration,
    /// Deadline of each read.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl InspectArgs {
    /// The flags' defaults for `valkey_url` (as a caller that does not
    /// parse a command line needs them).
    pub fn new(valkey_url: &str) -> Self {
        InspectArgs {
            valkey: valkey_url.to_owned(),
            key_prefix: "pr".into(),
            model: None,
            json: false,
            check: false,
            recheck_delay: Duration::from_millis(500),
            show: 20,
            ttl_horizon: Duration::from_secs(24 * 3600),
            timeout: Duration::from_secs(5),
        }
    }
}
