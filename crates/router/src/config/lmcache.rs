//! LMCache as a state source (issue 31): the flags ([`LmCacheArgs`],
//! flattened into `serve`'s), their resolution over the file's keys and the
//! defaults, and what they resolve into ([`LmCacheSettings`]); the
//! `crate::lmcache` module runs them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};

use protocol::parse_duration;

use super::file::file_duration;

/// Prompts shorter than this are not looked up by default: one LMCache
/// chunk (256 tokens, its default `chunk_size`).
const DEFAULT_LOOKUP_MIN_TOKENS: u64 = 256;
/// The longest a request waits for the controller's lookup by default.
const DEFAULT_DEADLINE: Duration = Duration::from_millis(30);
/// How often the per-instance key counts are polled by default.
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
/// The longest deadline accepted: the lookup is on the request's path.
const MAX_DEADLINE: Duration = Duration::from_secs(1);

/// What the router reads from an LMCache controller, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LmCacheSettings {
    /// The controller's HTTP base URL (`http://host:port`).
    pub controller: String,
    /// LMCache instance id → worker id; an instance not named maps to the
    /// worker of the same id.
    pub instance_map: BTreeMap<String, String>,
    /// Prompts of at least this many tokens are looked up.
    pub lookup_min_tokens: u64,
    /// The longest a request waits for a lookup; past it, it is abandoned
    /// and the request routed without it.
    pub deadline: Duration,
    /// How often the per-instance key counts are polled.
    pub poll_interval: Duration,
}

impl LmCacheSettings {
    /// Settings for `controller` with the defaults (equal names, 256
    /// tokens, 30 ms, 5 s).
    pub fn new(controller: impl Into<String>) -> Self {
        LmCacheSettings {
            controller: controller.into(),
            instance_map: BTreeMap::new(),
            lookup_min_tokens: DEFAULT_LOOKUP_MIN_TOKENS,
            deadline: DEFAULT_DEADLINE,
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }

    /// The worker an LMCache instance id stands for.
    pub fn worker_of<'a>(&'a self, instance: &'a str) -> &'a str {
        self.instance_map
            .get(instance)
            .map_or(instance, String::as_str)
    }
}

/// Flags of `serve` about LMCache (flattened into [`super::ServeArgs`]).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct LmCacheArgs {
    /// The LMCache controller's HTTP address (`http://host:port`, as
    /// `python -m lmcache.v1.api_server --port`): its view of the KV
    /// chunks each instance's LMCache holds (CPU, disk) joins the
    /// cache-aware ranking [default: off].
    #[arg(long, env = "PREFIX_ROUTER_LMCACHE_CONTROLLER")]
    pub lmcache_controller: Option<String>,
    /// LMCache instance ids and the worker ids they stand for,
    /// `instance=worker,...`; an instance not named is the worker of the
    /// same id [default: equal names].
    #[arg(
        long,
        env = "PREFIX_ROUTER_LMCACHE_INSTANCE_MAP",
        value_delimiter = ','
    )]
    pub lmcache_instance_map: Vec<String>,
    /// Prompts of at least this many tokens are looked up in the
    /// controller (`POST /lookup`) [default: 256, one LMCache chunk].
    #[arg(long, env = "PREFIX_ROUTER_LMCACHE_LOOKUP_MIN_TOKENS")]
    pub lmcache_lookup_min_tokens: Option<u64>,
    /// The longest a request waits for the controller's lookup, at most
    /// 1s; past it the lookup is abandoned and the request routed without
    /// it [default: 30ms].
    #[arg(long, env = "PREFIX_ROUTER_LMCACHE_DEADLINE", value_parser = parse_duration)]
    pub lmcache_deadline: Option<Duration>,
    /// How often the instances' key counts are polled
    /// (`GET /controller/key-stats`) [default: 5s].
    #[arg(long, env = "PREFIX_ROUTER_LMCACHE_POLL_INTERVAL", value_parser = parse_duration)]
    pub lmcache_poll_interval: Option<Duration>,
}

/// The file's LMCache keys.
pub(super) struct FileKeys {
    pub(super) controller: Option<String>,
    pub(super) instance_map: Vec<String>,
    pub(super) lookup_min_tokens: Option<u64>,
    pub(super) deadline: Option<String>,
    pub(super) poll_interval: Option<String>,
}

/// The settings: flags over the file over the defaults; `None` (off)
/// without a controller.
pub(super) fn resolve(
    args: &LmCacheArgs,
    file: FileKeys,
) -> anyhow::Result<Option<LmCacheSettings>> {
    let Some(controller) = args.lmcache_controller.clone().or(file.controller) else {
        return Ok(None);
    };
    let controller = controller.trim_end_matches('/').to_owned();
    if !(controller.starts_with("http://") || controller.starts_with("https://")) {
        bail!("--lmcache-controller {controller:?}: expected an http:// or https:// URL");
    }
    let mut settings = LmCacheSettings::new(controller);
    let map = if args.lmcache_instance_map.is_empty() {
        file.instance_map
    } else {
        args.lmcache_instance_map.clone()
    };
    settings.instance_map = parse_instance_map(&map).context("--lmcache-instance-map")?;
    if let Some(n) = args.lmcache_lookup_min_tokens.or(file.lookup_min_tokens) {
        settings.lookup_min_tokens = n;
    }
    if let Some(d) = args
        .lmcache_deadline
        .or(file_duration(file.deadline, "lmcache_deadline")?)
    {
        if d.is_zero() || d > MAX_DEADLINE {
            bail!("--lmcache-deadline must be more than 0 and at most 1s, got {d:?}");
        }
        settings.deadline = d;
    }
    if let Some(d) = args
        .lmcache_poll_interval
        .or(file_duration(file.poll_interval, "lmcache_poll_interval")?)
    {
        if d.is_zero() {
            bail!("--lmcache-poll-interval must be more than 0");
        }
        settings.poll_interval = d;
    }
    Ok(Some(settings))
}

/// `instance=worker` pairs into a map; an entry without `=`, with an empty
/// side, or an instance named twice is an error.
pub fn parse_instance_map(entries: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let Some((instance, worker)) = entry.split_once('=') else {
            bail!("{entry:?}: expected instance=worker");
        };
        let (instance, worker) = (instance.trim(), worker.trim());
        if instance.is_empty() || worker.is_empty() {
            bail!("{entry:?}: expected instance=worker, both non-empty");
        }
        protocol::check_name("worker_id", worker).map_err(|e| anyhow::anyhow!("{entry:?}: {e}"))?;
        if map.insert(instance.to_owned(), worker.to_owned()).is_some() {
            bail!("instance {instance:?} is mapped twice");
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> FileKeys {
        FileKeys {
            controller: None,
            instance_map: Vec::new(),
            lookup_min_tokens: None,
            deadline: None,
            poll_interval: None,
        }
    }

    #[test]
    fn off_without_a_controller_and_defaults_with_one() {
        assert_eq!(resolve(&LmCacheArgs::default(), keys()).unwrap(), None);
        let args = LmCacheArgs {
            lmcache_controller: Some("http://127.0.0.1:9000/".into()),
            ..Default::default()
        };
        let s = resolve(&args, keys()).unwrap().unwrap();
        assert_eq!(s, LmCacheSettings::new("http://127.0.0.1:9000"));
        assert_eq!(s.worker_of("w1"), "w1");
    }

    #[test]
    fn flags_over_the_file_and_bad_values_refused() {
        let mut file = keys();
        file.controller = Some("http://c:1".into());
        file.instance_map = vec!["a=w0".into()];
        file.deadline = Some("10ms".into());
        let args = LmCacheArgs {
            lmcache_instance_map: vec!["vllm-1=w1".into(), " vllm-2 = w2 ".into()],
            lmcache_lookup_min_tokens: Some(512),
            ..Default::default()
        };
        let s = resolve(&args, file).unwrap().unwrap();
        assert_eq!(s.controller, "http://c:1");
        assert_eq!(s.worker_of("vllm-2"), "w2");
        assert_eq!(s.worker_of("a"), "a", "the flag's map replaces the file's");
        assert_eq!(s.lookup_min_tokens, 512);
        assert_eq!(s.deadline, Duration::from_millis(10));

        for bad in [
            LmCacheArgs {
                lmcache_controller: Some("c:1".into()),
                ..Default::default()
            },
            LmCacheArgs {
                lmcache_controller: Some("http://c:1".into()),
                lmcache_deadline: Some(Duration::from_secs(2)),
                ..Default::default()
            },
            LmCacheArgs {
                lmcache_controller: Some("http://c:1".into()),
                lmcache_deadline: Some(Duration::ZERO),
                ..Default::default()
            },
            LmCacheArgs {
                lmcache_controller: Some("http://c:1".into()),
                lmcache_poll_interval: Some(Duration::ZERO),
                ..Default::default()
            },
        ] {
            assert!(resolve(&bad, keys()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_instance_map_is_checked() {
        let ok = parse_instance_map(&["a=w0".into(), "".into(), "b = w1".into()]).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok["b"], "w1");
        for bad in [
            vec!["a".to_owned()],
            vec!["=w0".to_owned()],
            vec!["a=".to_owned()],
            vec!["a=w0".to_owned(), "a=w1".to_owned()],
            vec!["a=w 0".to_owned()],
        ] {
            assert!(parse_instance_map(&bad).is_err(), "{bad:?}");
        }
    }
}
