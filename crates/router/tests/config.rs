//! Configuration precedence: defaults < TOML file < PREFIX_ROUTER_* < flags.
//! One test function, because the environment is process-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use prefix_router::{ServeArgs, ServeConfig};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn resolve(argv: &[&str]) -> anyhow::Result<ServeConfig> {
    let cli = Cli::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))?;
    ServeConfig::resolve(cli.serve)
}

#[test]
fn file_then_environment_then_flags() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        r#"
listen = "127.0.0.1:1111"
valkey = "valkey://127.0.0.1:7000"
key_prefix = "fromfile"
model = "file-model"
workers = ["a=http://127.0.0.1:9001"]
internal_token = "file-token"
speculative_ttl = "5s"
worker_lease = "20s"
scrape_metrics_interval = "2s"
"#
    )
    .unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    // SAFETY: this test binary has a single test, so no thread reads the
    // environment concurrently.
    unsafe {
        std::env::set_var("PREFIX_ROUTER_KEY_PREFIX", "fromenv");
        std::env::set_var("PREFIX_ROUTER_WORKER_LEASE", "30s");
        std::env::set_var("PREFIX_ROUTER_SCRAPE_METRICS_INTERVAL", "3s");
    }
    let cfg = resolve(&[
        "--config",
        &path,
        "--model",
        "cli-model",
        "--worker-lease",
        "40s",
    ])
    .unwrap();
    assert_eq!(cfg.listen.to_string(), "127.0.0.1:1111", "from the file");
    assert_eq!(cfg.valkey.url, "valkey://127.0.0.1:7000");
    assert_eq!(cfg.key_prefix, "fromenv", "env over file");
    assert_eq!(cfg.model.as_deref(), Some("cli-model"), "flag over file");
    assert_eq!(
        cfg.ttls.worker_lease,
        Duration::from_secs(40),
        "flag over env over file"
    );
    assert_eq!(cfg.ttls.speculative, Duration::from_secs(5));
    assert_eq!(cfg.ttls.confirmed, Duration::from_secs(600), "default");
    assert_eq!(cfg.workers[0].id, "a");
    assert_eq!(cfg.internal_token.as_deref(), Some("file-token"));
    assert_eq!(
        cfg.scrape_metrics_interval,
        Some(Duration::from_secs(3)),
        "env over file"
    );
    let flagged = resolve(&["--config", &path, "--scrape-metrics-interval", "250ms"]).unwrap();
    assert_eq!(
        flagged.scrape_metrics_interval,
        Some(Duration::from_millis(250)),
        "flag over env"
    );
    unsafe {
        std::env::remove_var("PREFIX_ROUTER_KEY_PREFIX");
        std::env::remove_var("PREFIX_ROUTER_WORKER_LEASE");
        std::env::remove_var("PREFIX_ROUTER_SCRAPE_METRICS_INTERVAL");
    }
    let from_file = resolve(&["--config", &path]).unwrap();
    assert_eq!(
        from_file.scrape_metrics_interval,
        Some(Duration::from_secs(2))
    );

    // No token anywhere: refused, unless explicitly allowed.
    let err = resolve(&[]).unwrap_err().to_string();
    assert!(err.contains("internal token"), "{err}");
    let open = resolve(&["--allow-unauthenticated-internal"]).unwrap();
    assert!(open.internal_token.is_none());
    assert_eq!(
        open.scrape_metrics_interval, None,
        "scraping is off by default"
    );
    assert!(open.models.is_empty());
    assert!(resolve(&["--internal-token", "t", "--scrape-metrics-interval", "0s"]).is_err());
    // Static workers need a model; unknown file keys and bad durations are errors.
    assert!(resolve(&["--internal-token", "t", "--worker", "http://127.0.0.1:1"]).is_err());
    assert!(resolve(&["--internal-token", "t", "--speculative-ttl", "soon"]).is_err());
    let mut typo = tempfile::NamedTempFile::new().unwrap();
    writeln!(typo, "lisen = \"127.0.0.1:1\"").unwrap();
    assert!(
        resolve(&[
            "--internal-token",
            "t",
            "--config",
            typo.path().to_str().unwrap()
        ])
        .is_err()
    );
    // Router ids are unique per process start.
    let a = resolve(&["--internal-token", "t"]).unwrap().router_id;
    let b = resolve(&["--internal-token", "t"]).unwrap().router_id;
    assert_ne!(a, b);
}
