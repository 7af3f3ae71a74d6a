//! The plain peers' launcher command ([`command`], [`launcher_args`]) and
//! their `cache_aware` knobs ([`PeerOptions`]); the best modes extend
//! [`launcher_args`] (see `modes`).

use fleet::free_port;
use fleet::process::ProcSpec;

use super::{BIND_HOST, PeerInstall, PeerKind};

/// Per-replica settings. `Default` leaves every `cache_aware` knob at the
/// peer's own default (both peers: cache threshold 0.3, balance thresholds
/// 64 absolute and 1.5 relative; eviction every 60 s (sglang) / 120 s
/// (vllm); max tree size 2^26 (sglang) / 2^25 (vllm)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerOptions {
    /// `--prometheus-port` (bound on 127.0.0.1). Neither peer can disable
    /// its exporter, both default to 29000 and reject 0, and a replica whose
    /// port is taken dies at startup; so when `None`, [`command`] picks a
    /// free ephemeral port itself. Give each replica its own.
    pub metrics_port: Option<u16>,
    /// `--cache-threshold` (0.0–1.0): the prefix-match ratio above which the
    /// best-matching worker is chosen (below it: the least-loaded one).
    pub cache_threshold: Option<f64>,
    /// `--balance-abs-threshold`: load gap (in-flight requests counted by
    /// this replica) above which it routes to the least loaded worker…
    pub balance_abs_threshold: Option<u64>,
    /// `--balance-rel-threshold`: …when also max load > min load × this.
    pub balance_rel_threshold: Option<f64>,
    /// `--eviction-interval-secs`: period of the prefix tree's LRU eviction.
    pub eviction_interval_secs: Option<u64>,
    /// `--max-tree-size`: the prefix tree's size bound (characters).
    pub max_tree_size: Option<u64>,
    /// `--log-level`, verbatim (sglang: debug|info|warn|error; vllm:
    /// debug|info|warning|error|critical); `None`:
    /// [`PeerKind::default_log_level`].
    pub log_level: Option<String>,
    /// More arguments, appended last (e.g. `--disable-retries`).
    pub extra_args: Vec<String>,
}

/// The command that starts one replica of `install.kind` on
/// `127.0.0.1:port`, routing with `cache_aware` over `worker_urls`
/// (`http://127.0.0.1:PORT`, as many as the sims):
///
/// ```text
/// <venv>/bin/python -m sglang_router.launch_router   (or vllm_router.launch_router)
///   --host 127.0.0.1 --port PORT --worker-urls URL… --policy cache_aware
///   --prometheus-host 127.0.0.1 --prometheus-port METRICS
///   --worker-startup-check-interval 1 --log-level warn|warning
///   [--cache-threshold … --balance-abs-threshold … --balance-rel-threshold …
///    --eviction-interval-secs … --max-tree-size …] [extra_args…]
/// ```
///
/// `--worker-startup-check-interval 1` (default 30 s) only shortens the
/// wait when a worker is not up yet at start. The environment gets
/// `PYTHONUNBUFFERED=1` and `HF_HUB_OFFLINE=1` (HTTP workers need no
/// tokenizer; nothing should be fetched). The router is a single process
/// (Python launcher + the Rust router in-process), so killing its pid stops
/// it. The result is a [`ProcSpec`] (output discarded until the caller
/// sets its log): `fleet` starts it.
pub fn command(
    install: &PeerInstall,
    worker_urls: &[String],
    port: u16,
    extra: &PeerOptions,
) -> ProcSpec {
    // A free port can only fail to be found if the machine has none; the
    // peer's default (29000) is then the least bad choice.
    let metrics = extra
        .metrics_port
        .or_else(|| free_port().ok())
        .unwrap_or(29000);
    let mut cmd = ProcSpec::quiet(install.kind.package(), &install.python);
    for a in launcher_args(install.kind, extra) {
        if a == WORKER_URLS {
            cmd = cmd.args(worker_urls.iter().cloned());
        } else {
            cmd = cmd.arg(
                a.replace(PORT, &port.to_string())
                    .replace(AUX_PORT, &metrics.to_string()),
            );
        }
    }
    for (k, v) in ENV {
        cmd = cmd.env(k, v);
    }
    cmd
}

/// Placeholder of [`launcher_args`] for the replica's port.
pub const PORT: &str = "{port}";
/// Placeholder for its metrics port, unless `PeerOptions::metrics_port` is set.
pub const AUX_PORT: &str = "{aux_port}";
/// Placeholder, as a whole argument, for one argument per worker URL.
pub const WORKER_URLS: &str = "{worker_urls}";
/// The environment every replica gets (see [`command`]).
pub const ENV: [(&str, &str); 2] = [("PYTHONUNBUFFERED", "1"), ("HF_HUB_OFFLINE", "1")];

/// The arguments of [`command`] after the interpreter, with the
/// placeholders [`PORT`], [`AUX_PORT`] and [`WORKER_URLS`] left in (the
/// load test's fleet fills in the same ones for each replica).
pub fn launcher_args(kind: PeerKind, extra: &PeerOptions) -> Vec<String> {
    let mut a: Vec<String> = [
        "-m",
        kind.launcher_module(),
        "--host",
        BIND_HOST,
        "--port",
        PORT,
    ]
    .map(String::from)
    .to_vec();
    let metrics = extra
        .metrics_port
        .map_or_else(|| AUX_PORT.to_owned(), |m| m.to_string());
    let level = extra
        .log_level
        .clone()
        .unwrap_or_else(|| kind.default_log_level().to_owned());
    a.extend(
        [
            "--worker-urls",
            WORKER_URLS,
            "--policy",
            "cache_aware",
            "--prometheus-host",
            BIND_HOST,
            "--prometheus-port",
            &metrics,
            "--worker-startup-check-interval",
            "1",
            "--log-level",
            &level,
        ]
        .map(String::from),
    );
    let knobs = [
        (
            "--cache-threshold",
            extra.cache_threshold.map(|v| v.to_string()),
        ),
        (
            "--balance-abs-threshold",
            extra.balance_abs_threshold.map(|v| v.to_string()),
        ),
        (
            "--balance-rel-threshold",
            extra.balance_rel_threshold.map(|v| v.to_string()),
        ),
        (
            "--eviction-interval-secs",
            extra.eviction_interval_secs.map(|v| v.to_string()),
        ),
        (
            "--max-tree-size",
            extra.max_tree_size.map(|v| v.to_string()),
        ),
    ];
    for (flag, value) in knobs {
        if let Some(v) = value {
            a.extend([flag.to_owned(), v]);
        }
    }
    a.extend(extra.extra_args.iter().cloned());
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::tests::fake_install;

    fn args(cmd: &ProcSpec) -> Vec<String> {
        cmd.args.clone()
    }

    #[test]
    fn command_is_the_documented_cli() {
        let urls = vec![
            "http://127.0.0.1:4001".to_owned(),
            "http://127.0.0.1:4002".to_owned(),
        ];
        let opts = PeerOptions {
            metrics_port: Some(5001),
            cache_threshold: Some(0.5),
            ..PeerOptions::default()
        };
        let cmd = command(&fake_install(PeerKind::SglangRouter), &urls, 5000, &opts);
        assert_eq!(cmd.program, std::path::Path::new("/venv/bin/python"));
        let a = args(&cmd).join(" ");
        assert!(a.starts_with(
            "-m sglang_router.launch_router --host 127.0.0.1 --port 5000 \
             --worker-urls http://127.0.0.1:4001 http://127.0.0.1:4002 --policy cache_aware \
             --prometheus-host 127.0.0.1 --prometheus-port 5001"
        ));
        assert!(a.contains("--log-level warn "));
        assert!(a.ends_with("--cache-threshold 0.5"));
        assert!(!a.contains("--balance"));

        let cmd = command(
            &fake_install(PeerKind::VllmRouter),
            &urls,
            5000,
            &PeerOptions::default(),
        );
        let a = args(&cmd);
        assert_eq!(a[1], "vllm_router.launch_router");
        let port_at = a.iter().position(|x| x == "--prometheus-port");
        let metrics = port_at.and_then(|i| a.get(i + 1)).map(|p| p.parse::<u16>());
        assert!(matches!(metrics, Some(Ok(p)) if p > 0), "{a:?}");
        assert!(a.join(" ").contains("--log-level warning"));
    }
}
