//! The command of one router replica, for each [`RouterKind`].

use std::path::{Path, PathBuf};

use super::kind::{LaunchContext, RouterKind, View};
use super::template::fill;
use fleet::RouterSpec;
use fleet::process::ProcSpec;

/// What every replica of a fleet shares.
#[derive(Debug, Clone)]
pub struct RouterCommon {
    /// The `prefix-router` binary.
    pub program: PathBuf,
    /// The internal bearer token (also given to the sims).
    pub token: String,
    /// Extra flags for every `prefix-router serve`.
    pub extra_args: Vec<String>,
    /// `PREFIX_ROUTER_LOG` of the routers.
    pub log_level: String,
}

/// The command of replica `ctx.index` of `kind`, logging into `log_dir`.
pub fn router_spec(
    kind: &RouterKind,
    common: &RouterCommon,
    ctx: &LaunchContext,
    log_dir: &Path,
) -> ProcSpec {
    let name = format!("router-{}", ctx.index);
    let log = log_dir.join(format!("{name}.log"));
    match kind {
        RouterKind::PrefixRouter { policy, view } => {
            let mut args: Vec<String> = vec![
                "--model".into(),
                ctx.model.clone(),
                "--tokenizer-dir".into(),
                ctx.tokenizer_dir.display().to_string(),
                "--policy".into(),
                policy.clone(),
                "--router-id".into(),
                name.clone(),
            ];
            match view {
                View::Shared => args.extend(["--key-prefix".into(), "lt".into()]),
                View::Isolated { claim_ttl } => {
                    args.extend([
                        "--key-prefix".into(),
                        format!("lt{}g{}", ctx.index, ctx.generation),
                        "--speculative-ttl".into(),
                        format!("{}ms", claim_ttl.as_millis()),
                    ]);
                    for (i, url) in ctx.worker_urls.iter().enumerate() {
                        args.extend(["--worker".into(), format!("sim-{i}={url}")]);
                    }
                }
            }
            args.extend(common.extra_args.iter().cloned());
            let listen = format!("{}:{}", ctx.host, ctx.port);
            let mut spec = RouterSpec::new(
                name,
                &common.program,
                listen,
                &ctx.valkey_url,
                &common.token,
                log,
            )
            .args(args);
            spec.log_level = common.log_level.clone();
            spec.proc_spec()
        }
        RouterKind::External(ext) => {
            let mut spec = ProcSpec::new(name, &ext.program, log).args(ext.render_args(ctx));
            spec.env.extend(ext.env.iter().cloned());
            spec
        }
    }
}

/// The companion process of replica `ctx.index`, if its kind has one
/// (logging into `companion-<index>.log`).
pub fn companion_spec(kind: &RouterKind, ctx: &LaunchContext, log_dir: &Path) -> Option<ProcSpec> {
    let RouterKind::External(ext) = kind else {
        return None;
    };
    let c = ext.companion.as_ref()?;
    let name = format!("companion-{}", ctx.index);
    let log = log_dir.join(format!("{name}.log"));
    let mut spec = ProcSpec::new(name, &c.program, log).args(fill(&c.args, ctx));
    spec.env.extend(c.env.iter().cloned());
    Some(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ctx() -> LaunchContext {
        LaunchContext {
            host: "127.0.0.1".into(),
            port: 9001,
            aux_port: 9002,
            index: 1,
            generation: 0,
            worker_urls: vec!["http://127.0.0.1:5".into(), "http://127.0.0.1:6".into()],
            model: "qwen3".into(),
            tokenizer_dir: "/tok".into(),
            valkey_url: "redis://127.0.0.1:7".into(),
            kv_events: Vec::new(),
            mesh_port: 9003,
            peers: Vec::new(),
        }
    }

    fn common() -> RouterCommon {
        RouterCommon {
            program: "/bin/prefix-router".into(),
            token: "t".into(),
            extra_args: vec![],
            log_level: "warn".into(),
        }
    }

    #[test]
    fn shared_view_has_one_namespace_and_no_static_workers() {
        let kind = RouterKind::PrefixRouter {
            policy: "round_robin".into(),
            view: View::Shared,
        };
        let s = router_spec(&kind, &common(), &ctx(), Path::new("/tmp"));
        let line = s.args.join(" ");
        assert!(line.contains("--listen 127.0.0.1:9001"));
        assert!(line.contains("--policy round_robin"));
        assert!(line.ends_with("--key-prefix lt"));
        assert!(!line.contains("--worker"));
    }

    #[test]
    fn isolated_view_has_its_own_namespace_and_static_workers() {
        let kind = RouterKind::PrefixRouter {
            policy: "cache_aware".into(),
            view: View::Isolated {
                claim_ttl: Duration::from_secs(600),
            },
        };
        let s = router_spec(&kind, &common(), &ctx(), Path::new("/tmp"));
        let line = s.args.join(" ");
        assert!(line.contains("--key-prefix lt1g0 "));
        assert!(line.contains("--speculative-ttl 600000ms"));
        assert!(line.contains("--worker sim-0=http://127.0.0.1:5"));
        assert!(line.contains("--worker sim-1=http://127.0.0.1:6"));
    }
}
