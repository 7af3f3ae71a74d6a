//! Configuration precedence: defaults < TOML file < PREFIX_ROUTER_* < flags.
//! One test function, because the environment is process-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use prefix_router::routing::PrefillPolicy;
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
response_cache_ttl = "30s"
response_cache_max_bytes = 1000000
async_threads = 3
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
        std::env::set_var("PREFIX_ROUTER_RESPONSE_CACHE_MAX_ENTRY_BYTES", "5000");
        std::env::set_var("PREFIX_ROUTER_ASYNC_THREADS", "2");
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
    assert_eq!(cfg.async_threads, 2, "env over file");
    assert_eq!(
        cfg.scrape_metrics_interval,
        Some(Duration::from_secs(3)),
        "env over file"
    );
    let cache = cfg
        .response_cache
        .clone()
        .expect("the file turns the cache on");
    assert_eq!(cache.ttl, Duration::from_secs(30), "from the file");
    assert_eq!(cache.max_bytes, 1_000_000, "from the file");
    assert_eq!(cache.max_entry_bytes, 5000, "env over default");
    let flagged = resolve(&[
        "--config",
        &path,
        "--scrape-metrics-interval",
        "250ms",
        "--response-cache-ttl",
        "45s",
        "--response-cache-max-entry-bytes",
        "6000",
        "--async-threads",
        "1",
    ])
    .unwrap();
    let cache = flagged.response_cache.clone().unwrap();
    assert_eq!(cache.ttl, Duration::from_secs(45), "flag over file");
    assert_eq!(cache.max_entry_bytes, 6000, "flag over env");
    assert_eq!(flagged.async_threads, 1, "flag over env");
    assert_eq!(
        flagged.scrape_metrics_interval,
        Some(Duration::from_millis(250)),
        "flag over env"
    );
    unsafe {
        std::env::remove_var("PREFIX_ROUTER_KEY_PREFIX");
        std::env::remove_var("PREFIX_ROUTER_WORKER_LEASE");
        std::env::remove_var("PREFIX_ROUTER_SCRAPE_METRICS_INTERVAL");
        std::env::remove_var("PREFIX_ROUTER_RESPONSE_CACHE_MAX_ENTRY_BYTES");
        std::env::remove_var("PREFIX_ROUTER_ASYNC_THREADS");
    }
    let from_file = resolve(&["--config", &path]).unwrap();
    assert_eq!(
        from_file.response_cache.clone().unwrap().max_entry_bytes,
        1_000_000,
        "no entry is larger than the budget"
    );
    assert_eq!(
        from_file.scrape_metrics_interval,
        Some(Duration::from_secs(2))
    );
    assert_eq!(from_file.async_threads, 3, "from the file");

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
    assert_eq!(
        open.response_cache, None,
        "the response cache is off by default"
    );
    let on = resolve(&["--internal-token", "t", "--response-cache-ttl", "1m"]).unwrap();
    let defaults = on.response_cache.unwrap();
    assert_eq!(
        (defaults.ttl, defaults.max_entry_bytes, defaults.max_bytes),
        (Duration::from_secs(60), 1 << 20, 64 << 20)
    );
    for bad in [
        &[
            "--response-cache-ttl",
            "10s",
            "--response-cache-max-entry-bytes",
            "0",
        ][..],
        &[
            "--response-cache-ttl",
            "10s",
            "--response-cache-max-bytes",
            "0",
        ],
        &["--response-cache-ttl", "soon"],
    ] {
        let argv: Vec<&str> = ["--internal-token", "t"]
            .iter()
            .chain(bad)
            .copied()
            .collect();
        assert!(resolve(&argv).is_err(), "{bad:?}");
    }
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
    // The prefill pick of disaggregated serving: cache-aware unless told.
    let t = ["--internal-token", "t"];
    let pick = |argv: &[&str]| resolve(&[&t[..], argv].concat()).map(|c| c.pd_prefill_policy);
    assert_eq!(pick(&[]).unwrap(), PrefillPolicy::CacheAware);
    let load = ["--pd-prefill-policy", "least_loaded"];
    assert_eq!(pick(&load).unwrap(), PrefillPolicy::LeastLoaded);
    let err = pick(&["--pd-prefill-policy", "round_robin"]).unwrap_err();
    assert!(
        format!("{err:#}").contains("expected cache_aware or least_loaded"),
        "{err:#}"
    );
    // The async threads: one per core unless told; never none.
    let threads = |argv: &[&str]| resolve(&[&t[..], argv].concat()).map(|c| c.async_threads);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(threads(&[]).unwrap(), cores);
    assert_eq!(threads(&["--async-threads", "1"]).unwrap(), 1);
    let err = threads(&["--async-threads", "0"]).unwrap_err();
    assert!(
        format!("{err:#}").contains("--async-threads must be positive"),
        "{err:#}"
    );
    // Every prompt goes to the tokenizing threads unless told otherwise.
    let inline = |argv: &[&str]| resolve(&[&t[..], argv].concat()).map(|c| c.tokenize_inline_bytes);
    assert_eq!(inline(&[]).unwrap(), 0);
    assert_eq!(inline(&["--tokenize-inline-bytes", "4096"]).unwrap(), 4096);
    // Router ids are unique per process start.
    let a = resolve(&["--internal-token", "t"]).unwrap().router_id;
    let b = resolve(&["--internal-token", "t"]).unwrap().router_id;
    assert_ne!(a, b);
}

/// LMCache's settings (issue 31) from the TOML file, a flag over its key,
/// and refused values.
#[test]
fn lmcache_keys_from_the_file_and_flags() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        r#"
internal_token = "t"
lmcache_controller = "http://127.0.0.1:9000/"
lmcache_instance_map = ["vllm-0=w0", "vllm-1=w1"]
lmcache_lookup_min_tokens = 512
lmcache_deadline = "20ms"
lmcache_poll_interval = "2s"
"#
    )
    .unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    let cfg = resolve(&["--config", &path, "--lmcache-deadline", "40ms"]).unwrap();
    let lm = cfg.lmcache.unwrap();
    assert_eq!(lm.controller, "http://127.0.0.1:9000");
    assert_eq!(lm.worker_of("vllm-1"), "w1");
    assert_eq!(lm.worker_of("other"), "other");
    assert_eq!(lm.lookup_min_tokens, 512);
    assert_eq!(lm.deadline, Duration::from_millis(40), "flag over file");
    assert_eq!(lm.poll_interval, Duration::from_secs(2));
    // Off without a controller; a bad map or deadline refuses to start.
    assert!(resolve(&["--config", &path, "--lmcache-instance-map", "x"]).is_err());
    assert!(resolve(&["--config", &path, "--lmcache-deadline", "5s"]).is_err());
    let none = resolve(&["--internal-token", "t"]).unwrap();
    assert!(none.lmcache.is_none());
}
