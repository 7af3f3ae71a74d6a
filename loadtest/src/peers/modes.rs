//! Each peer's command line as a fleet [`ExternalRouter`]: the plain
//! `cache_aware` launchers, and each project's best mode for exact,
//! multi-replica cache-aware routing (see `loadtest/peers/README.md`).

use std::path::Path;
use std::time::Duration;

use anyhow::bail;

use super::{BIND_HOST, ENV, PeerInstall, PeerKind, PeerOptions, READY_PATH, launcher_args};
use crate::topology::{Companion, ExternalRouter};

/// The block size the sims use and the peers are told (vLLM's default).
const BLOCK_SIZE: &str = "16";

/// The fleet router of `install.kind`. `loadtest` is this program (it runs
/// Dynamo's frontend: `loadtest dynamo-frontend`).
///
/// * `sglang-router`, `vllm-router`: [`launcher_args`] (`cache_aware`).
/// * `vllm-router-kv`: `--policy kv_aware`, one `--kv-event-source` and
///   `--kv-event-replay-source` per sim (the sims publish), the model and
///   block size given statically (required with static sources).
/// * `smg`: `cache_aware` with `--enable-mesh`, the replica's mesh port and
///   every other replica as a mesh peer (their trees are shared).
/// * `dynamo`: per replica, `python -m dynamo.select_service` (the
///   companion: HTTP on the replica's aux port, replica sync on its mesh
///   port, the other replicas as sync and indexer peers) and our frontend
///   on the replica's port. The service binds every interface and has no
///   option against it: see [`check_private_network`].
pub fn external_router(install: &PeerInstall, loadtest: &Path) -> anyhow::Result<ExternalRouter> {
    let kind = install.kind;
    let env: Vec<(String, String)> = ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let strings = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>();
    let mut router = ExternalRouter {
        name: kind.name().to_owned(),
        program: install.python.clone(),
        args: Vec::new(),
        env: env.clone(),
        health_path: READY_PATH.into(),
        startup_timeout: Duration::from_secs(60),
        kv_events: false,
        companion: None,
    };
    match kind {
        PeerKind::SglangRouter | PeerKind::VllmRouter => {
            router.args = launcher_args(kind, &PeerOptions::default());
        }
        PeerKind::VllmRouterKv => {
            router.kv_events = true;
            router.args = launcher_args(kind, &PeerOptions::default())
                .into_iter()
                .map(|a| {
                    if a == "cache_aware" {
                        "kv_aware".into()
                    } else {
                        a
                    }
                })
                .collect();
            router.args.extend(strings(&[
                "{kv_event_sources}",
                "{kv_event_replay_sources}",
                "--kv-event-model",
                "{model}",
                "--kv-event-block-size",
                BLOCK_SIZE,
            ]));
        }
        PeerKind::Smg => {
            router.args = launcher_args(kind, &PeerOptions::default());
            router.args.extend(strings(&[
                "--enable-mesh",
                "--mesh-server-name",
                "smg-{index}",
                "--mesh-host",
                BIND_HOST,
                "--mesh-port",
                "{mesh_port}",
                "--mesh-peer-urls",
                "{mesh_peers}",
            ]));
        }
        PeerKind::Dynamo => {
            router.kv_events = true;
            router.health_path = "/health".into();
            router.program = loadtest.to_owned();
            router.env = Vec::new();
            router.args = strings(&[
                "dynamo-frontend",
                "--listen",
                "{host}:{port}",
                "--selector",
                "http://{host}:{aux_port}",
                "--model",
                "{model}",
                "--tokenizer-dir",
                "{tokenizer_dir}",
                "--block-size",
                BLOCK_SIZE,
                "--worker",
                "{worker_kv_specs}",
            ]);
            let mut env = env;
            env.push(("DYN_LOG".into(), "warn".into()));
            router.companion = Some(Companion {
                program: install.python.clone(),
                args: strings(&[
                    "-m",
                    kind.launcher_module(),
                    "--port",
                    "{aux_port}",
                    "--replica-sync-port",
                    "{mesh_port}",
                    "--replica-sync-peers",
                    "{mesh_peers_tcp_csv}",
                    "--indexer-peers",
                    "{aux_peers_http_csv}",
                ]),
                env,
            });
        }
    }
    Ok(router)
}

/// Dynamo's selection service binds `0.0.0.0`/`tcp://*`: fails unless
/// this network namespace has no interface but `lo` (run the load test
/// under `unshare -n`), or `LOADTEST_DYNAMO_ANY_INTERFACE=1` accepts the
/// exposure.
pub fn check_private_network() -> anyhow::Result<()> {
    if std::env::var_os("LOADTEST_DYNAMO_ANY_INTERFACE").is_some_and(|v| v == "1") {
        return Ok(());
    }
    // /proc/self/net/dev lists this namespace's interfaces (/sys/class/net
    // shows the namespace that mounted sysfs).
    let dev = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    let others: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(str::trim))
        .filter(|n| !n.is_empty() && *n != "lo")
        .collect();
    if !others.is_empty() {
        bail!(
            "the dynamo peer's selection service binds every interface (no option against it), \
             and this network namespace has {}: run the load test in a private one, e.g. \
             `unshare -rn sh -c 'ip link set lo up && exec loadtest run …'` \
             (scripts/peers-bench.sh does), or set LOADTEST_DYNAMO_ANY_INTERFACE=1",
            others.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::tests::fake_install as install;

    #[test]
    fn best_modes_are_the_documented_command_lines() -> anyhow::Result<()> {
        let lt = Path::new("/bin/loadtest");
        let kv = external_router(&install(PeerKind::VllmRouterKv), lt)?;
        assert!(kv.kv_events && kv.companion.is_none());
        let line = kv.args.join(" ");
        assert!(line.contains("--policy kv_aware "));
        assert!(line.ends_with(
            "{kv_event_sources} {kv_event_replay_sources} --kv-event-model {model} \
             --kv-event-block-size 16"
        ));

        let smg = external_router(&install(PeerKind::Smg), lt)?;
        assert!(!smg.kv_events);
        let line = smg.args.join(" ");
        assert!(line.starts_with("-m smg.launch_router --host 127.0.0.1"));
        assert!(line.ends_with(
            "--enable-mesh --mesh-server-name smg-{index} --mesh-host 127.0.0.1 \
             --mesh-port {mesh_port} --mesh-peer-urls {mesh_peers}"
        ));

        let dynamo = external_router(&install(PeerKind::Dynamo), lt)?;
        assert_eq!(dynamo.program, lt);
        assert_eq!(dynamo.args[0], "dynamo-frontend");
        assert_eq!(dynamo.health_path, "/health");
        let c = dynamo.companion.expect("a companion");
        assert_eq!(
            c.args.join(" "),
            "-m dynamo.select_service --port {aux_port} --replica-sync-port {mesh_port} \
             --replica-sync-peers {mesh_peers_tcp_csv} --indexer-peers {aux_peers_http_csv}"
        );
        Ok(())
    }
}
